//! The engine's error type.
//!
//! Every fallible operation returns [`Result`]. Argument errors name the argument; corruption
//! errors name the file and byte offset so an operator can find the damage.

use std::path::PathBuf;

/// Result alias used throughout the engine.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in the engine.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system I/O call failed on `path`.
    #[error("I/O error on {path}: {source}")]
    Io {
        /// The file or directory being accessed.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A file's contents failed validation (checksum, magic, bounds, format).
    #[error("corrupt file {path} at offset {offset}: {reason}")]
    Corrupt {
        /// The damaged file.
        path: PathBuf,
        /// Byte offset of the damaged structure.
        offset: u64,
        /// What was wrong.
        reason: String,
    },
    /// A caller-supplied argument is invalid; nothing was changed.
    #[error("invalid argument `{arg}`: {reason}")]
    InvalidArgument {
        /// The argument's name.
        arg: &'static str,
        /// Why it was rejected.
        reason: String,
    },
    /// No table has this name.
    #[error("table `{0}` does not exist")]
    TableNotFound(String),
    /// A table with this name already exists.
    #[error("table `{0}` already exists")]
    TableExists(String),
    /// The table is disabled; reads and writes are refused until it is enabled.
    #[error("table `{0}` is disabled")]
    TableDisabled(String),
    /// The operation needs a disabled table (drop), but the table is enabled.
    #[error("table `{0}` is enabled; disable it first")]
    TableEnabled(String),
    /// The table has no family of this name.
    #[error("table `{table}` has no column family `{family}`")]
    FamilyNotFound {
        /// The table.
        table: String,
        /// The unknown family.
        family: String,
    },
    /// An increment targeted a cell whose value is not an 8-byte big-endian integer.
    #[error("cell {family}:{qualifier} of row {row} holds {len} bytes, not an 8-byte counter")]
    NotACounter {
        /// Printable form of the row key.
        row: String,
        /// The family.
        family: String,
        /// Printable form of the qualifier.
        qualifier: String,
        /// Length of the value found.
        len: usize,
    },
    /// An increment would overflow an i64.
    #[error("counter {family}:{qualifier} of row {row} would overflow")]
    CounterOverflow {
        /// Printable form of the row key.
        row: String,
        /// The family.
        family: String,
        /// Printable form of the qualifier.
        qualifier: String,
    },
    /// The write of a batch's rows to one region failed as a whole (for example on a log I/O
    /// error); none of those rows was applied.
    #[error("batch write failed: {0}")]
    BatchFailed(String),
    /// A write waited too long for background flushes or compactions to relieve its region;
    /// it was not applied. Retry later, or raise the limits in `EngineOptions`; if `cause`
    /// names a failure (a full disk, an I/O error), fix that first.
    #[error("region {region} is too busy: waited {waited_ms} ms for background work{}", .cause.as_deref().map(|c| format!(" ({c})")).unwrap_or_default())]
    RegionTooBusy {
        /// The region's id.
        region: u64,
        /// How long the write waited.
        waited_ms: u64,
        /// The latest failure of the background work the write waited for, if that work has
        /// failed since it last succeeded.
        cause: Option<String>,
    },
    /// The engine was closed, or a background failure made it refuse further writes.
    #[error("engine is closed: {0}")]
    Closed(String),
    /// A write to the write-ahead log or an fsync of it failed earlier: what it held may not be
    /// on disk, so the engine refuses writes until it is reopened; this write wrote nothing.
    /// Reads keep working. Reopening recovers exactly what the log holds; free disk space
    /// first if the disk was full.
    #[error("read-only until reopened: {0}")]
    ReadOnly(String),
    /// A [`crate::MultiRowMutation`] names rows of more than one region.
    #[error("table `{table}`: rows {first} and {other} lie in different regions; a multi-row mutation stays in one")]
    RowsSpanRegions {
        /// The table.
        table: String,
        /// The first row, printable.
        first: String,
        /// A row outside the first row's region, printable.
        other: String,
    },
}

impl Error {
    /// Wraps an I/O error with the path it concerns.
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { path: path.into(), source }
    }

    /// A corruption error for `path` at `offset`.
    pub(crate) fn corrupt(path: impl Into<PathBuf>, offset: u64, reason: impl Into<String>) -> Self {
        Error::Corrupt { path: path.into(), offset, reason: reason.into() }
    }

    /// An invalid-argument error.
    pub(crate) fn invalid(arg: &'static str, reason: impl Into<String>) -> Self {
        Error::InvalidArgument { arg, reason: reason.into() }
    }
}
