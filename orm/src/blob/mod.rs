//! Versioned blobs: a value stored in one cell behind a header that says how to read it back —
//! the codec, the compression, the schema version of the value and a checksum — so that bytes
//! written by any earlier version of a type stay readable, and damage is an error, never a
//! wrong value.
//!
//! [`seal`] wraps a payload (compressed when it is larger than the format's threshold) and
//! [`open`] checks and unwraps it; [`encode`] and [`decode`] do the same for serde values
//! with a [`Codec`]; [`versioned`] reads a value written at any earlier version of its type and
//! migrates it to the current one. The `blob` aggregate strategy keeps its tree of objects in the same
//! envelope ([`Codec::NodeTree`]). The header's bytes are tabled in `header.rs` and in
//! `docs/aggregates.md`.

mod codec;
mod header;
pub mod versioned;

use serde::de::DeserializeOwned;
use serde::Serialize;

pub use codec::{Codec, Compression, MAX_PAYLOAD};
pub use header::{read_header, BlobHeader, BLOB_MAGIC, HEADER_LEN, HEADER_VERSION};
pub use versioned::{HistoricVersion, Read, VersionError, Versioned};

/// Why a blob could not be written or read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BlobError {
    /// Fewer bytes than a header.
    #[error("blob of {len} bytes is shorter than its {HEADER_LEN}-byte header")]
    TooShort {
        /// The cell's length.
        len: usize,
    },
    /// The cell does not start with [`BLOB_MAGIC`].
    #[error("not a Cellar blob (magic {found:02x?})")]
    BadMagic {
        /// The first four bytes.
        found: [u8; 4],
    },
    /// A header layout this build does not know.
    #[error("blob header version {version} is not supported (this build reads 1 to {HEADER_VERSION})")]
    HeaderVersion {
        /// The stored header version.
        version: u8,
    },
    /// The reserved header byte (7) is not 0, as every writer left it: the header is damaged
    /// (header version 1's checksum does not cover it).
    #[error("blob header's reserved byte is {found:#04x}, not 0: the header is damaged")]
    Reserved {
        /// The stored byte.
        found: u8,
    },
    /// A codec id this build does not know.
    #[error("blob codec {codec} is not known to this build")]
    UnknownCodec {
        /// The stored codec id.
        codec: u8,
    },
    /// Flag bits this build does not know (a compression it cannot undo).
    #[error("blob flags {flags:#04x} are not known to this build")]
    UnknownFlags {
        /// The stored flags.
        flags: u8,
    },
    /// The blob holds another type.
    #[error("the blob holds another type (type tag {found:#010x}, expected {expected:#010x})")]
    TypeMismatch {
        /// The tag of the type being read.
        expected: u32,
        /// The stored tag.
        found: u32,
    },
    /// The payload is not as long as the header says.
    #[error("blob payload is {actual} bytes, the header says {expected}")]
    Length {
        /// Length in the header.
        expected: u32,
        /// Bytes after the header.
        actual: usize,
    },
    /// The payload's checksum does not match the header's.
    #[error("blob payload checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    Checksum {
        /// Checksum in the header.
        stored: u32,
        /// Checksum of the bytes read.
        computed: u32,
    },
    /// The payload does not decompress.
    #[error("blob payload does not {compression}-decompress: {reason}")]
    Compression {
        /// `lz4` or `zstd`.
        compression: &'static str,
        /// What went wrong.
        reason: String,
    },
    /// The value does not serialize, or is too large for a blob.
    #[error("value does not encode as {codec}: {reason}")]
    Encode {
        /// The codec's name.
        codec: &'static str,
        /// What went wrong.
        reason: String,
    },
    /// The payload does not deserialize as the type read.
    #[error("blob payload does not decode as {codec}: {reason}")]
    Decode {
        /// The codec's name.
        codec: &'static str,
        /// What went wrong.
        reason: String,
    },
}

/// How blobs of one schema version are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlobFormat {
    /// The schema version the header records.
    pub schema_version: u32,
    /// The payload codec.
    pub codec: Codec,
    /// The compression of payloads larger than `compress_above` bytes.
    pub compression: Compression,
    /// Payloads up to this many bytes are stored uncompressed, where compression gains little.
    pub compress_above: usize,
}

impl BlobFormat {
    /// Version `schema_version` in `codec`, uncompressed.
    pub const fn new(schema_version: u32, codec: Codec) -> Self {
        BlobFormat { schema_version, codec, compression: Compression::None, compress_above: 0 }
    }

    /// Compresses payloads larger than `above` bytes.
    pub const fn compressed(mut self, compression: Compression, above: usize) -> Self {
        self.compression = compression;
        self.compress_above = above;
        self
    }
}

/// True if `cell` holds `format`'s schema version in its codec: nothing a rewrite at the
/// current version would change. Headerless and unreadable cells are not current.
pub fn is_current(cell: &[u8], format: &BlobFormat) -> bool {
    read_header(cell).is_ok_and(|h| h.schema_version == format.schema_version && h.codec == format.codec.id())
}

/// The tag that blobs of the type named `name` carry: CRC32C of the name.
pub fn type_tag(name: &str) -> u32 {
    crc32c::crc32c(name.as_bytes())
}

/// A cell holding `payload` behind a header: compressed as `format` says when it is larger
/// than the threshold (and only if that makes it smaller).
///
/// # Errors
/// [`BlobError::Encode`] for a payload above [`MAX_PAYLOAD`]; [`BlobError::Compression`].
pub fn seal(format: &BlobFormat, type_tag: u32, payload: &[u8]) -> Result<Vec<u8>, BlobError> {
    if payload.len() > MAX_PAYLOAD {
        return Err(BlobError::Encode {
            codec: format.codec.name(),
            reason: format!("{} bytes is more than a blob holds ({MAX_PAYLOAD})", payload.len()),
        });
    }
    let squeezed = match format.compression {
        Compression::None => None,
        _ if payload.len() <= format.compress_above => None,
        c => Some(c.compress(payload)?).filter(|s| s.len() < payload.len()),
    };
    let (compression, stored) = match &squeezed {
        Some(s) => (format.compression, s.as_slice()),
        None => (Compression::None, payload),
    };
    let header = BlobHeader {
        header_version: HEADER_VERSION,
        codec: format.codec.id(),
        flags: BlobHeader::flags_for(compression),
        schema_version: format.schema_version,
        type_tag,
        // At most MAX_PAYLOAD, checked above; compression only makes it smaller.
        payload_len: stored.len() as u32,
        checksum: 0,
    };
    let mut out = Vec::with_capacity(HEADER_LEN + stored.len());
    header.write(&mut out, stored);
    out.extend_from_slice(stored);
    Ok(out)
}

/// Checks a blob cell — magic, header version, codec, flags, reserved byte, type, length,
/// checksum — and returns its header and decompressed payload. Any schema version passes:
/// the caller decides what it can read.
///
/// # Errors
/// The [`BlobError`] naming the first thing wrong.
pub fn open(cell: &[u8], type_tag: u32) -> Result<(BlobHeader, Vec<u8>), BlobError> {
    let header = read_header(cell)?;
    if !(1..=HEADER_VERSION).contains(&header.header_version) {
        return Err(BlobError::HeaderVersion { version: header.header_version });
    }
    header.codec()?;
    let compression = header.compression()?;
    // Every writer left byte 7 zero; header version 1's checksum does not cover it, so a
    // damaged one is caught here or not at all.
    if cell[7] != 0 {
        return Err(BlobError::Reserved { found: cell[7] });
    }
    if header.type_tag != type_tag {
        return Err(BlobError::TypeMismatch { expected: type_tag, found: header.type_tag });
    }
    let stored = &cell[HEADER_LEN..];
    if stored.len() != header.payload_len as usize {
        return Err(BlobError::Length { expected: header.payload_len, actual: stored.len() });
    }
    let computed = match header.header_version {
        1 => crc32c::crc32c(stored),
        _ => header::checksum(cell, stored),
    };
    if computed != header.checksum {
        return Err(BlobError::Checksum { stored: header.checksum, computed });
    }
    Ok((header, compression.decompress(stored)?))
}

/// Serializes `value` as a blob cell of `format`.
///
/// # Errors
/// As [`Codec::encode`] and [`seal`].
pub fn encode<T: Serialize>(value: &T, format: &BlobFormat, type_tag: u32) -> Result<Vec<u8>, BlobError> {
    seal(format, type_tag, &format.codec.encode(value)?)
}

/// Reads a blob cell as a `T` with whatever codec it was written in; returns its header too
/// (its schema version says which version of the type it holds).
///
/// # Errors
/// As [`open`] and [`Codec::decode`].
pub fn decode<T: DeserializeOwned>(cell: &[u8], type_tag: u32) -> Result<(BlobHeader, T), BlobError> {
    let (header, payload) = open(cell, type_tag)?;
    let value = header.codec()?.decode(&payload)?;
    Ok((header, value))
}

#[cfg(test)]
mod tests;
