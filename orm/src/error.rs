//! Errors of the object mapper.

use crate::key::KeyError;

/// Result with the object mapper's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong mapping entities to rows and back.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The embedded engine failed.
    #[error(transparent)]
    Engine(#[from] cellar_engine::Error),
    /// A call to a remote store (Cloud Bigtable) failed: which call, on which table and row,
    /// with the status code and message the server (or the transport) gave.
    #[error("{rpc} on table `{table}`{}: {code}: {message}", row.as_ref().map(|r| format!(", row {r}")).unwrap_or_default())]
    Remote {
        /// The call (`MutateRows`, `ReadRows`, ..., or `connect`).
        rpc: &'static str,
        /// The table (empty for calls on no table).
        table: String,
        /// The row, printable, when one row is at fault.
        row: Option<String>,
        /// The gRPC status code (`Unavailable`, `NotFound`, ...).
        code: String,
        /// What the server or transport said.
        message: String,
    },
    /// A call that is not safe to repeat (a check-and-mutate, an increment) failed after it
    /// was sent, in a way that leaves open whether it applied: the connection broke or the
    /// deadline passed before the answer came. It was not retried. Read the row to learn what
    /// happened, or make the change again only if it is safe to apply twice.
    #[error("{rpc} on table `{table}`{}: may or may not have applied: {code}: {message}", row.as_ref().map(|r| format!(", row {r}")).unwrap_or_default())]
    Indeterminate {
        /// The call (`CheckAndMutateRow`, `ReadModifyWriteRow`).
        rpc: &'static str,
        /// The table.
        table: String,
        /// The row, printable.
        row: Option<String>,
        /// The gRPC status code (`Unavailable`, `DeadlineExceeded`, ...).
        code: String,
        /// What the server or transport said.
        message: String,
    },
    /// A store backend failed in a way not covered by another variant.
    #[error("store: {0}")]
    Store(String),
    /// An entity's key could not be encoded (a value that does not fit its part).
    #[error("key of {entity}: {source}")]
    Key {
        /// The entity type.
        entity: &'static str,
        /// What is wrong.
        #[source]
        source: KeyError,
    },
    /// A field value could not be encoded.
    #[error("{entity}.{field}: {reason}")]
    Encode {
        /// The entity type.
        entity: &'static str,
        /// The field.
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// A stored row does not decode as the entity: wrong record type, a missing required
    /// column, a malformed key or value.
    #[error("table `{table}`, row {row}{}: {reason}", column.as_ref().map(|c| format!(", column {c}")).unwrap_or_default())]
    Decode {
        /// The table.
        table: &'static str,
        /// The row key, printable (`\xNN` for other bytes).
        row: String,
        /// The column (`family:qualifier`), when one is at fault.
        column: Option<String>,
        /// What is wrong.
        reason: String,
    },
    /// A blob that cannot be written or read, outside a table (`cellar::orm::blob` called
    /// directly).
    #[error("blob: {0}")]
    BlobFormat(#[from] crate::blob::BlobError),
    /// A versioned blob cell that cannot be read as its type (damaged, newer, undeclared, or
    /// refused by a migration step).
    #[error("table `{table}`, row {row}, column {column}: {source}")]
    Blob {
        /// The table.
        table: String,
        /// The row key, printable.
        row: String,
        /// `family:qualifier`.
        column: String,
        /// What is wrong, with the versions involved.
        #[source]
        source: Box<crate::blob::VersionError>,
    },
    /// An optimistic write found a different version than the one it was based on.
    #[error("{entity} at row {row} was changed by another writer (expected version {expected})")]
    VersionConflict {
        /// The entity type.
        entity: &'static str,
        /// The row key, printable.
        row: String,
        /// The version the write expected to replace.
        expected: u64,
    },
    /// An existing table does not fit the entity.
    #[error("table `{table}` does not fit: {reason}")]
    SchemaMismatch {
        /// The table.
        table: String,
        /// What differs.
        reason: String,
    },
    /// The schema a release declares for a type cannot read or write what its table holds, as
    /// the schema catalog records it (see [`crate::catalog`]).
    #[error(
        "{entity} on table `{table}` is not compatible with version {version} of its schema in the catalog:\n  - {}",
        .differences.join("\n  - ")
    )]
    SchemaIncompatible {
        /// The type.
        entity: String,
        /// Its table.
        table: String,
        /// The catalog's current version.
        version: u64,
        /// Every incompatible difference, with the way forward.
        differences: Vec<String>,
    },
    /// The backend cannot do what was asked (see [`crate::store::Guarantees`]).
    #[error("the store cannot {0}")]
    Unsupported(String),
    /// A write, or a consistent read, kept losing races with writers of the same aggregate and
    /// gave up.
    #[error("{entity} at row {row}: gave up after {attempts} attempts, other writers kept changing it")]
    Contended {
        /// The aggregate type.
        entity: &'static str,
        /// The root row key, printable.
        row: String,
        /// Attempts made.
        attempts: u32,
    },
    /// A write would give a unique index's value to a second entity; nothing was written.
    #[error("{entity}: index `{index}` already holds value {value} for another entity")]
    UniqueViolation {
        /// The entity type.
        entity: &'static str,
        /// The index.
        index: &'static str,
        /// The value, printable (its index encoding).
        value: String,
    },
    /// Every uid of a kind of name is taken.
    #[error("kind `{kind}`: every id of {width} bytes is taken; store the kind as wider uids")]
    UidsExhausted {
        /// The kind of name.
        kind: String,
        /// Bytes per id.
        width: u8,
    },
    /// An index that cannot answer yet: declared on a table that already held rows, and not
    /// built since (run its backfill).
    #[error("{entity}: index `{index}` is not built yet: {reason}")]
    IndexNotReady {
        /// The entity type.
        entity: &'static str,
        /// The index.
        index: &'static str,
        /// Where its build stands.
        reason: String,
    },
    /// The mapping of a re-keying copy refused an entity of the source (see
    /// [`crate::copy::Copy::try_rekey`]).
    #[error("re-key of table `{table}`, row {row}: {reason}")]
    Rekey {
        /// The source table.
        table: &'static str,
        /// The source row key, printable.
        row: String,
        /// The mapping's message.
        reason: String,
    },
    /// A bad argument to a repository call (a malformed page cursor, a zero page size).
    #[error("invalid {arg}: {reason}")]
    InvalidArgument {
        /// The argument.
        arg: &'static str,
        /// What is wrong.
        reason: String,
    },
}
