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

    /// Deserializes a payload this codec wrote; bytes left over are an error.
    ///
    /// # Errors
    /// [`BlobError::Decode`].
    pub fn decode<T: DeserializeOwned>(self, payload: &[u8]) -> Result<T, BlobError> {
        let failed = |reason: String| BlobError::Decode { codec: self.name(), reason };
        match self {
            Codec::MessagePack => {
                let mut input = payload;
                let value = rmp_serde::from_read(&mut input).map_err(|e| failed(e.to_string()))?;
                match input.len() {
                    0 => Ok(value),
                    n => Err(failed(format!("{n} bytes after the value"))),
                }
            }
            Codec::Bincode => {
                let (value, used) = bincode::serde::decode_from_slice(payload, bincode::config::standard())
                    .map_err(|e| failed(e.to_string()))?;
                match payload.len() - used {
                    0 => Ok(value),
                    n => Err(failed(format!("{n} bytes after the value"))),
                }
            }
            Codec::Json => serde_json::from_slice(payload).map_err(|e| failed(e.to_string())),
            Codec::NodeTree => Err(failed("the node tree holds aggregates, not serde values".into())),
        }
    }
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
                let decoder = zstd::stream::read::Decoder::new(stored).map_err(|e| failed(e.to_string()))?;
                let mut out = Vec::new();
                decoder.take(MAX_PAYLOAD as u64 + 1).read_to_end(&mut out).map_err(|e| failed(e.to_string()))?;
                if out.len() > MAX_PAYLOAD {
                    return Err(failed(format!("decompresses to more than {MAX_PAYLOAD} bytes")));
                }
                Ok(out)
            }
        }
    }
}
