//! The fixed 24-byte header in front of every blob cell.
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | magic `CLBB` |
//! | 4 | 1 | header version (2) |
//! | 5 | 1 | codec ([`Codec`]) |
//! | 6 | 1 | flags: bits 0–1 the payload's compression ([`Compression`]), the rest 0 |
//! | 7 | 1 | reserved (0) |
//! | 8 | 4 | schema version of the stored value, big-endian |
//! | 12 | 4 | type tag: CRC32C of the stored type's name, big-endian |
//! | 16 | 4 | length of the stored (possibly compressed) payload, big-endian |
//! | 20 | 4 | CRC32C of bytes 0–19 and the stored payload, big-endian |
//! | 24 | n | payload |
//!
//! Header version 1 is the same layout with the checksum over the payload alone; it is still
//! read. Version 2 covers the header too, so a damaged schema version or codec id is caught
//! rather than read as another version. A read refuses a reserved byte other than 0 in either
//! version (every writer left it 0; version 1's checksum does not cover it).

use super::{BlobError, Codec, Compression};

/// The first four bytes of every blob cell.
pub const BLOB_MAGIC: [u8; 4] = *b"CLBB";
/// The header layout this build writes (it reads this and every earlier one).
pub const HEADER_VERSION: u8 = 2;
/// Bytes before the payload.
pub const HEADER_LEN: usize = 24;
/// Flag bits that hold the compression; the others must be zero.
const COMPRESSION_BITS: u8 = 0b11;

/// A blob cell's header, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlobHeader {
    /// Header layout version.
    pub header_version: u8,
    /// Payload codec id ([`Codec::id`]).
    pub codec: u8,
    /// Flags (compression in bits 0–1).
    pub flags: u8,
    /// Version of the stored value's schema.
    pub schema_version: u32,
    /// CRC32C of the stored type's name.
    pub type_tag: u32,
    /// Stored payload length in bytes.
    pub payload_len: u32,
    /// CRC32C of the header's first 20 bytes and the stored payload (version 1: of the
    /// payload alone).
    pub checksum: u32,
}

impl BlobHeader {
    /// The payload codec, if this build knows it.
    ///
    /// # Errors
    /// [`BlobError::UnknownCodec`].
    pub fn codec(&self) -> Result<Codec, BlobError> {
        Codec::from_id(self.codec).ok_or(BlobError::UnknownCodec { codec: self.codec })
    }

    /// The payload's compression, if this build knows the flags.
    ///
    /// # Errors
    /// [`BlobError::UnknownFlags`].
    pub fn compression(&self) -> Result<Compression, BlobError> {
        if self.flags & !COMPRESSION_BITS != 0 {
            return Err(BlobError::UnknownFlags { flags: self.flags });
        }
        Compression::from_bits(self.flags & COMPRESSION_BITS).ok_or(BlobError::UnknownFlags { flags: self.flags })
    }

    /// Writes the header, with the checksum of its own bytes and `stored` (the version-2 rule).
    pub(super) fn write(&self, out: &mut Vec<u8>, stored: &[u8]) {
        let start = out.len();
        out.extend_from_slice(&BLOB_MAGIC);
        out.extend_from_slice(&[self.header_version, self.codec, self.flags, 0]);
        out.extend_from_slice(&self.schema_version.to_be_bytes());
        out.extend_from_slice(&self.type_tag.to_be_bytes());
        out.extend_from_slice(&self.payload_len.to_be_bytes());
        let checksum = checksum(&out[start..], stored);
        out.extend_from_slice(&checksum.to_be_bytes());
    }

    pub(super) fn flags_for(compression: Compression) -> u8 {
        compression.bits()
    }
}

/// The version-2 checksum: CRC32C of the header's first 20 bytes, then the stored payload.
pub(super) fn checksum(head: &[u8], stored: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&head[..20]), stored)
}

/// Reads a blob's header: checks only the length and the magic, so that a header of a newer
/// layout or an unknown codec can still be inspected.
///
/// # Errors
/// [`BlobError::TooShort`], [`BlobError::BadMagic`].
pub fn read_header(cell: &[u8]) -> Result<BlobHeader, BlobError> {
    let Some(head) = cell.get(..HEADER_LEN) else {
        return Err(BlobError::TooShort { len: cell.len() });
    };
    if head[..4] != BLOB_MAGIC {
        return Err(BlobError::BadMagic { found: [head[0], head[1], head[2], head[3]] });
    }
    let be = |i: usize| u32::from_be_bytes([head[i], head[i + 1], head[i + 2], head[i + 3]]);
    Ok(BlobHeader {
        header_version: head[4],
        codec: head[5],
        flags: head[6],
        schema_version: be(8),
        type_tag: be(12),
        payload_len: be(16),
        checksum: be(20),
    })
}
