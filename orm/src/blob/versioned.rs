//! Types that evolve: the current struct and the frozen structs of its earlier versions,
//! linked by `From`/`TryFrom` steps. A read decodes a blob as the version it was written at
//! and walks the chain up to the current type; a write always uses the current version.
//!
//! [`Versioned`] is what the chain looks like to the rest of Cellar; the derive generates it
//! from the type's `blob(...)` attribute, and [`step`] and [`decode_version`] are the pieces
//! its `migrate` is made of.

use std::fmt;

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::{BlobError, BlobFormat, Codec, BLOB_MAGIC};

/// One earlier version of a type, as declared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoricVersion {
    /// Its schema version.
    pub version: u32,
    /// The codec it was written in: what a headerless legacy cell of it is read with.
    pub codec: Codec,
    /// The Rust type that holds it, for messages.
    pub type_name: &'static str,
}

/// A type stored as a versioned blob.
pub trait Versioned: Serialize + DeserializeOwned {
    /// The name its blobs are tagged with ([`super::type_tag`] of it).
    const TYPE_NAME: &'static str;
    /// How the current version is written.
    const FORMAT: BlobFormat;
    /// The earlier versions this code reads, oldest first.
    const HISTORY: &'static [HistoricVersion];
    /// The version a cell without a blob header holds (values written before the type was
    /// versioned, e.g. plain serde columns), if any.
    const LEGACY: Option<u32> = None;

    /// Decodes the payload of the earlier `version` (in `codec`) and migrates it up to the
    /// current version.
    ///
    /// # Errors
    /// [`VersionError::Unknown`] for a version not in [`Versioned::HISTORY`];
    /// [`VersionError::Decode`] and [`VersionError::Step`] from the chain.
    fn migrate(version: u32, codec: Codec, payload: &[u8]) -> Result<Self, VersionError>;
}

/// Why a stored value could not be read as the current version.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VersionError {
    /// The cell is not a readable blob (header, checksum, compression).
    #[error(transparent)]
    Blob(#[from] BlobError),
    /// Written by a newer version of the type than this code knows.
    #[error("{type_name} version {found} is newer than this code's version {current}")]
    Newer {
        /// The type.
        type_name: &'static str,
        /// The stored version.
        found: u32,
        /// The current version.
        current: u32,
    },
    /// A version older than the current one that the type does not declare.
    #[error("{type_name} version {found} is not one this code reads (it reads {known})")]
    Unknown {
        /// The type.
        type_name: &'static str,
        /// The stored version.
        found: u32,
        /// The versions it reads, e.g. `1, 2, 3`.
        known: String,
    },
    /// The payload does not decode as the version's type.
    #[error("{type_name} (version {version}) does not decode: {source}")]
    Decode {
        /// The version's Rust type.
        type_name: &'static str,
        /// Its version.
        version: u32,
        /// The codec's complaint.
        #[source]
        source: BlobError,
    },
    /// A `TryFrom` step of the chain refused the value.
    #[error("migrating version {from} to {to} failed: {reason}")]
    Step {
        /// The version migrated from.
        from: u32,
        /// The version migrated to.
        to: u32,
        /// The step's error.
        reason: String,
    },
}

/// A value read from a blob, and the version and codec it was stored in.
#[derive(Debug, Clone, PartialEq)]
pub struct Read<T> {
    /// The value, at the current version.
    pub value: T,
    /// The version it was stored at; `None` for a headerless legacy cell.
    pub stored_version: Option<u32>,
    /// The codec it was stored in.
    pub stored_codec: Codec,
}

impl<T: Versioned> Read<T> {
    /// True if the cell holds the current version in the current codec: rewriting it would
    /// change nothing that matters.
    pub fn is_current(&self) -> bool {
        self.stored_version == Some(T::FORMAT.schema_version) && self.stored_codec == T::FORMAT.codec
    }
}

/// A blob cell of `value` at the current version.
///
/// # Errors
/// As [`super::encode`].
pub fn write<T: Versioned>(value: &T) -> Result<Vec<u8>, BlobError> {
    super::encode(value, &T::FORMAT, super::type_tag(T::TYPE_NAME))
}

/// Reads a cell written at any version the type knows — or a headerless legacy cell — as
/// the current version.
///
/// # Errors
/// [`VersionError`] naming what is wrong and the versions involved.
pub fn read<T: Versioned>(cell: &[u8]) -> Result<Read<T>, VersionError> {
    if let (Some(legacy), false) = (T::LEGACY, cell.starts_with(&BLOB_MAGIC)) {
        let codec = known_codec::<T>(legacy)?;
        let value = migrate_from::<T>(legacy, codec, cell)?;
        return Ok(Read { value, stored_version: None, stored_codec: codec });
    }
    let (header, payload) = super::open(cell, super::type_tag(T::TYPE_NAME))?;
    let codec = header.codec()?;
    let value = migrate_from::<T>(header.schema_version, codec, &payload)?;
    Ok(Read { value, stored_version: Some(header.schema_version), stored_codec: codec })
}

/// The declared codec of an earlier version (of the current one: its format's).
fn known_codec<T: Versioned>(version: u32) -> Result<Codec, VersionError> {
    if version == T::FORMAT.schema_version {
        return Ok(T::FORMAT.codec);
    }
    T::HISTORY.iter().find(|h| h.version == version).map(|h| h.codec).ok_or_else(|| unknown_version::<T>(version))
}

fn migrate_from<T: Versioned>(version: u32, codec: Codec, payload: &[u8]) -> Result<T, VersionError> {
    let current = T::FORMAT.schema_version;
    if version == current {
        return decode_version(T::TYPE_NAME, version, codec, payload);
    }
    if version > current {
        return Err(VersionError::Newer { type_name: T::TYPE_NAME, found: version, current });
    }
    if !T::HISTORY.iter().any(|h| h.version == version) {
        return Err(unknown_version::<T>(version));
    }
    T::migrate(version, codec, payload)
}

/// The error for a stored version the type does not declare (for generated code too).
#[doc(hidden)]
pub fn unknown_version<T: Versioned>(found: u32) -> VersionError {
    let versions = T::HISTORY.iter().map(|h| h.version).chain([T::FORMAT.schema_version]);
    let known = versions.map(|v| v.to_string()).collect::<Vec<_>>().join(", ");
    VersionError::Unknown { type_name: T::TYPE_NAME, found, known }
}

/// Decodes the payload of `version`, held by the Rust type `V` (named `type_name`).
///
/// # Errors
/// [`VersionError::Decode`].
#[doc(hidden)]
pub fn decode_version<V: DeserializeOwned>(
    type_name: &'static str,
    version: u32,
    codec: Codec,
    payload: &[u8],
) -> Result<V, VersionError> {
    codec.decode(payload).map_err(|source| VersionError::Decode { type_name, version, source })
}

/// One step of the chain: version `from`'s value as version `to`'s, by `TryFrom` (which
/// every `From` implies).
///
/// # Errors
/// [`VersionError::Step`] with the conversion's error.
#[doc(hidden)]
pub fn step<A, B>(from: u32, to: u32, value: A) -> Result<B, VersionError>
where
    B: TryFrom<A>,
    B::Error: fmt::Display,
{
    B::try_from(value).map_err(|e| VersionError::Step { from, to, reason: e.to_string() })
}
