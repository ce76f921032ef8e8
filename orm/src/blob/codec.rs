//! Payload codecs and compressions, by the ids the header stores.

use std::io::Read;

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::BlobError;

/// Largest payload a blob decompresses to: a corrupt or hostile length cannot make a read
/// allocate more.
pub const MAX_PAYLOAD: usize = 256 * 1024 * 1024;

/// How a value is serialized into a blob's payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Codec {
    /// Cellar's own tree of an aggregate's objects (the `blob` strategy); not a serde codec.
    NodeTree,
    /// MessagePack with named fields: self-describing, so a struct can gain optional fields
    /// and still read what an older version wrote.
    MessagePack,
    /// bincode 2, standard configuration: compact and positional — a changed struct needs a
    /// new schema version.
    Bincode,
    /// JSON, for blobs people read.
    Json,
}

impl Codec {
    /// The id stored in the header.
    pub const fn id(self) -> u8 {
        match self {
            Codec::NodeTree => 1,
            Codec::MessagePack => 2,
            Codec::Bincode => 3,
            Codec::Json => 4,
        }
    }

    /// The codec with this header id.
    pub const fn from_id(id: u8) -> Option<Codec> {
        match id {
            1 => Some(Codec::NodeTree),
            2 => Some(Codec::MessagePack),
            3 => Some(Codec::Bincode),
            4 => Some(Codec::Json),
            _ => None,
        }
    }

    /// The name used in attributes and messages: `node-tree`, `msgpack`, `bincode`, `json`.
    pub const fn name(self) -> &'static str {
        match self {
            Codec::NodeTree => "node-tree",
            Codec::MessagePack => "msgpack",
            Codec::Bincode => "bincode",
            Codec::Json => "json",
        }
    }

    /// The codec with this name.
    pub fn from_name(name: &str) -> Option<Codec> {
        [Codec::NodeTree, Codec::MessagePack, Codec::Bincode, Codec::Json].into_iter().find(|c| c.name() == name)
    }

    /// Serializes `value`.
    ///
    /// # Errors
    /// [`BlobError::Encode`], also for [`Codec::NodeTree`], which serde values cannot use.
    pub fn encode<T: Serialize>(self, value: &T) -> Result<Vec<u8>, BlobError> {
        let failed = |reason: String| BlobError::Encode { codec: self.name(), reason };
        match self {
            Codec::MessagePack => rmp_serde::to_vec_named(value).map_err(|e| failed(e.to_string())),
            Codec::Bincode => {
                bincode::serde::encode_to_vec(value, bincode::config::standard()).map_err(|e| failed(e.to_string()))
            }
            Codec::Json => serde_json::to_vec(value).map_err(|e| failed(e.to_string())),
            Codec::NodeTree => Err(failed("the node tree holds aggregates, not serde values".into())),
        }
    }

    /// Deserializes a payload this codec wrote; bytes left over are an error. A length prefix
    /// the payload cannot back (a string of 2^40 bytes) is an error before anything that size
    /// is allocated: no payload makes a decode allocate more than a small multiple of its
    /// own length.
    ///
    /// # Errors
    /// [`BlobError::Decode`], also for a payload above [`MAX_PAYLOAD`].
    pub fn decode<T: DeserializeOwned>(self, payload: &[u8]) -> Result<T, BlobError> {
        let failed = |reason: String| BlobError::Decode { codec: self.name(), reason };
        if payload.len() > MAX_PAYLOAD {
            return Err(failed(format!("{} bytes is more than a blob holds ({MAX_PAYLOAD})", payload.len())));
        }
        match self {
            Codec::MessagePack => {
                // rmp-serde reads a string or binary of a stated length only as far as the
                // payload goes, and serde preallocates sequences and maps cautiously: a hostile
                // length cannot allocate more than the payload holds.
                let mut input = payload;
                let value = rmp_serde::from_read(&mut input).map_err(|e| failed(e.to_string()))?;
                match input.len() {
                    0 => Ok(value),
                    n => Err(failed(format!("{n} bytes after the value"))),
                }
            }
            Codec::Bincode => {
                let (value, used) = bincode_decode(payload).map_err(|e| match e {
                    bincode::error::DecodeError::LimitExceeded => {
                        failed(format!("a length claims more than the payload's {} bytes hold", payload.len()))
                    }
                    e => failed(e.to_string()),
                })?;
                match payload.len() - used {
                    0 => Ok(value),
                    n => Err(failed(format!("{n} bytes after the value"))),
                }
            }
            // JSON states no lengths; serde_json allocates as it reads and limits nesting.
            Codec::Json => serde_json::from_slice(payload).map_err(|e| failed(e.to_string())),
            Codec::NodeTree => Err(failed("the node tree holds aggregates, not serde values".into())),
        }
    }
}

/// Bytes of limit a bincode decode may claim per payload byte. bincode counts a string's or
/// byte buffer's length against its limit before allocating it, and each number at its size
/// in memory: at most 16 bytes (an `i128` or `u128`) from one encoded byte. A payload that
/// decodes never claims more than this many times its length.
const BINCODE_CLAIM_PER_BYTE: usize = 16;

/// Decodes a bincode payload under a limit derived from its length: the smallest of a few
/// fixed limits (bincode takes its limit as a const generic) that is at least
/// [`BINCODE_CLAIM_PER_BYTE`] times the payload. Every value the payload can hold fits; a
/// length prefix past it is refused before its allocation, which without a limit aborts the
/// process (2^40 bytes) or panics (`u64::MAX`).
fn bincode_decode<T: DeserializeOwned>(payload: &[u8]) -> Result<(T, usize), bincode::error::DecodeError> {
    let claim = payload.len().saturating_mul(BINCODE_CLAIM_PER_BYTE);
    macro_rules! smallest_limit {
        ($($limit:expr),*) => {$(
            if claim <= $limit {
                let config = bincode::config::standard().with_limit::<{ $limit }>();
                return bincode::serde::decode_from_slice(payload, config);
            }
        )*};
    }
    // Steps of 4: the limit is at most 4 times the claim (and at least 4 KiB).
    smallest_limit!(1 << 12, 1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22, 1 << 24, 1 << 26, 1 << 28, 1 << 30);
    // `Codec::decode` refuses payloads above MAX_PAYLOAD, so this covers the rest.
    const LARGEST: usize = MAX_PAYLOAD.saturating_mul(BINCODE_CLAIM_PER_BYTE);
    bincode::serde::decode_from_slice(payload, bincode::config::standard().with_limit::<LARGEST>())
}

/// How a blob's payload is compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Compression {
    /// Stored as encoded.
    #[default]
    None,
    /// LZ4 block, its decompressed length in front: fast, modest ratio.
    Lz4,
    /// Zstandard frame at this level (1–22; 3 is a good default): slower, better ratio.
    Zstd(i32),
}

impl Compression {
    /// The flag bits in the header.
    pub(super) const fn bits(self) -> u8 {
        match self {
            Compression::None => 0,
            Compression::Lz4 => 1,
            Compression::Zstd(_) => 2,
        }
    }

    /// The compression these flag bits name (the level is not stored: decoding needs none).
    pub(super) const fn from_bits(bits: u8) -> Option<Compression> {
        match bits {
            0 => Some(Compression::None),
            1 => Some(Compression::Lz4),
            2 => Some(Compression::Zstd(0)),
            _ => None,
        }
    }

    /// The name used in attributes and messages: `none`, `lz4`, `zstd`.
    pub const fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Lz4 => "lz4",
            Compression::Zstd(_) => "zstd",
        }
    }

    pub(super) fn compress(self, payload: &[u8]) -> Result<Vec<u8>, BlobError> {
        match self {
            Compression::None => Ok(payload.to_vec()),
            Compression::Lz4 => Ok(lz4_flex::block::compress_prepend_size(payload)),
            Compression::Zstd(level) => zstd::bulk::compress(payload, level)
                .map_err(|e| BlobError::Compression { compression: "zstd", reason: e.to_string() }),
        }
    }

    /// Decompresses a stored payload, refusing more than [`MAX_PAYLOAD`] bytes.
    pub(super) fn decompress(self, stored: &[u8]) -> Result<Vec<u8>, BlobError> {
        let failed = |reason: String| BlobError::Compression { compression: self.name(), reason };
        match self {
            Compression::None => Ok(stored.to_vec()),
            Compression::Lz4 => {
                let Some(size) = stored.get(..4).map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]) as usize) else {
                    return Err(failed("the decompressed length is missing".into()));
                };
                // LZ4 expands at most 255-fold: a larger claim is corruption, not data.
                if size > MAX_PAYLOAD || size > stored.len().saturating_mul(255) {
                    return Err(failed(format!("claims {size} bytes decompressed from {}", stored.len())));
                }
                lz4_flex::block::decompress_size_prepended(stored).map_err(|e| failed(e.to_string()))
            }
            Compression::Zstd(_) => {
                // A frame states its decompressed size (Cellar's always do): one above the
                // maximum is refused before anything is decompressed.
                if let Ok(Some(size)) = zstd::zstd_safe::get_frame_content_size(stored) {
                    if size > MAX_PAYLOAD as u64 {
                        return Err(failed(format!("claims {size} bytes decompressed, more than {MAX_PAYLOAD}")));
                    }
                }
                let mut decoder = zstd::stream::read::Decoder::new(stored).map_err(|e| failed(e.to_string()))?;
                // The output grows with what the frame really produces, up to the maximum; an
                // allocation that fails on the way is an error, not an abort.
                let mut out = Vec::new();
                let mut chunk = vec![0u8; 64 * 1024];
                loop {
                    let n = match decoder.read(&mut chunk) {
                        Ok(0) => return Ok(out),
                        Ok(n) => n,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                        Err(e) => return Err(failed(e.to_string())),
                    };
                    if out.len() + n > MAX_PAYLOAD {
                        return Err(failed(format!("decompresses to more than {MAX_PAYLOAD} bytes")));
                    }
                    out.try_reserve(n).map_err(|e| failed(e.to_string()))?;
                    out.extend_from_slice(&chunk[..n]);
                }
            }
        }
    }
}
