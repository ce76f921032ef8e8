//! The `blob` strategy's cell: a fixed header, then every object of the aggregate.
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | magic `CLBB` |
//! | 4 | 1 | header version (1) |
//! | 5 | 1 | codec (1 = Cellar node tree) |
//! | 6 | 1 | flags (0: uncompressed) |
//! | 7 | 1 | reserved (0) |
//! | 8 | 4 | schema version, big-endian (1) |
//! | 12 | 4 | entity type tag: CRC32C of the root type's name, big-endian |
//! | 16 | 4 | payload length, big-endian |
//! | 20 | 4 | CRC32C of the payload, big-endian |
//! | 24 | n | payload |
//!
//! The node-tree payload: a node is its own key, its cells and its collections —
//! `key:bytes  cells:varint (family:bytes qualifier:bytes value:bytes)*  collections:varint
//! (count:varint node*)*`, where `bytes` is a LEB128 length and the bytes. The root's key is
//! left empty: the row key holds it.

use bytes::Bytes;

use super::Node;
use crate::store::{Row, StoredCell};

/// The first four bytes of every blob cell.
pub const BLOB_MAGIC: [u8; 4] = *b"CLBB";
const HEADER_VERSION: u8 = 1;
const CODEC_NODE_TREE: u8 = 1;
const SCHEMA_VERSION: u32 = 1;
const HEADER_LEN: usize = 24;

/// A blob cell's header, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlobHeader {
    /// Header layout version.
    pub header_version: u8,
    /// Payload codec.
    pub codec: u8,
    /// Flags (compression).
    pub flags: u8,
    /// Version of the stored type's schema.
    pub schema_version: u32,
    /// CRC32C of the root type's name.
    pub type_tag: u32,
    /// Payload length in bytes.
    pub payload_len: u32,
    /// CRC32C of the payload.
    pub checksum: u32,
}

/// The tag a root type's blobs carry.
pub(crate) fn type_tag(name: &str) -> u32 {
    crc32c::crc32c(name.as_bytes())
}

/// Encodes a root node (and everything under it) as a blob cell value.
pub(crate) fn encode(root: &Node, type_name: &str) -> Vec<u8> {
    let mut payload = Vec::new();
    put_node(&mut payload, root, true);
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    out.extend_from_slice(&BLOB_MAGIC);
    out.extend_from_slice(&[HEADER_VERSION, CODEC_NODE_TREE, 0, 0]);
    out.extend_from_slice(&SCHEMA_VERSION.to_be_bytes());
    out.extend_from_slice(&type_tag(type_name).to_be_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(&crc32c::crc32c(&payload).to_be_bytes());
    out.extend_from_slice(&payload);
    out
}

/// Reads a blob's header.
///
/// # Errors
/// A reason for a cell that is not a blob of this format.
pub fn read_header(cell: &[u8]) -> Result<BlobHeader, String> {
    if cell.len() < HEADER_LEN {
        return Err(format!("blob of {} bytes is shorter than its {HEADER_LEN}-byte header", cell.len()));
    }
    if cell[..4] != BLOB_MAGIC {
        return Err(format!("not a Cellar blob (magic {:02x?})", &cell[..4]));
    }
    let be = |i: usize| u32::from_be_bytes([cell[i], cell[i + 1], cell[i + 2], cell[i + 3]]);
    Ok(BlobHeader {
        header_version: cell[4],
        codec: cell[5],
        flags: cell[6],
        schema_version: be(8),
        type_tag: be(12),
        payload_len: be(16),
        checksum: be(20),
    })
}

/// Decodes a blob cell into the root node of the aggregate stored at `row_key`.
///
/// # Errors
/// A reason naming what is wrong: magic, versions, codec, type, length or checksum, or a
/// malformed payload.
pub(crate) fn decode(cell: &[u8], row_key: Bytes, type_name: &str) -> Result<Node, String> {
    let h = read_header(cell)?;
    if h.header_version != HEADER_VERSION {
        return Err(format!(
            "blob header version {} is not supported (this build reads {HEADER_VERSION})",
            h.header_version
        ));
    }
    if h.codec != CODEC_NODE_TREE {
        return Err(format!("blob codec {} is not supported", h.codec));
    }
    if h.flags != 0 {
        return Err(format!("blob flags {:#04x} are not supported", h.flags));
    }
    if h.schema_version != SCHEMA_VERSION {
        let relation = if h.schema_version > SCHEMA_VERSION { "newer than" } else { "not readable by" };
        return Err(format!("blob schema version {} is {relation} this code ({SCHEMA_VERSION})", h.schema_version));
    }
    if h.type_tag != type_tag(type_name) {
        return Err(format!("the blob holds another type than {type_name} (type tag {:#010x})", h.type_tag));
    }
    let payload = &cell[HEADER_LEN..];
    if payload.len() != h.payload_len as usize {
        return Err(format!("blob payload is {} bytes, the header says {}", payload.len(), h.payload_len));
    }
    if crc32c::crc32c(payload) != h.checksum {
        return Err("blob payload checksum mismatch".into());
    }
    let mut input = payload;
    let mut root = get_node(&mut input, 0)?;
    if !input.is_empty() {
        return Err(format!("{} bytes after the blob's last object", input.len()));
    }
    root.row.key = row_key;
    Ok(root)
}

pub(super) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub(super) fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

fn put_node(out: &mut Vec<u8>, node: &Node, root: bool) {
    put_bytes(out, if root { &[] } else { &node.row.key });
    put_varint(out, node.row.cells.len() as u64);
    for c in &node.row.cells {
        put_bytes(out, &c.family);
        put_bytes(out, &c.qualifier);
        put_bytes(out, &c.value);
    }
    put_varint(out, node.children.len() as u64);
    for collection in &node.children {
        put_varint(out, collection.len() as u64);
        for child in collection {
            put_node(out, child, false);
        }
    }
}

pub(super) fn get_varint(input: &mut &[u8]) -> Result<u64, String> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let (&b, rest) = input.split_first().ok_or("blob payload ends inside a number")?;
        *input = rest;
        v |= u64::from(b & 0x7F) << shift;
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err("blob payload holds a number longer than 64 bits".into())
}

pub(super) fn get_len(input: &mut &[u8]) -> Result<usize, String> {
    let n = get_varint(input)?;
    usize::try_from(n).ok().filter(|&n| n <= input.len()).ok_or_else(|| "blob payload is truncated".to_string())
}

pub(super) fn get_bytes(input: &mut &[u8]) -> Result<Bytes, String> {
    let n = get_len(input)?;
    let (head, rest) = input.split_at(n);
    *input = rest;
    Ok(Bytes::copy_from_slice(head))
}

fn get_node(input: &mut &[u8], depth: usize) -> Result<Node, String> {
    if depth > super::shape::MAX_DEPTH {
        return Err("blob payload nests deeper than an aggregate can".into());
    }
    let key = get_bytes(input)?;
    // Every count is bounded by the bytes left, so a corrupt count cannot allocate much.
    let n_cells = get_len(input)?;
    let mut cells = Vec::with_capacity(n_cells);
    for _ in 0..n_cells {
        let family = get_bytes(input)?;
        let qualifier = get_bytes(input)?;
        let value = get_bytes(input)?;
        cells.push(StoredCell { family, qualifier, timestamp: 0, value });
    }
    let n_collections = get_len(input)?;
    let mut children = Vec::with_capacity(n_collections);
    for _ in 0..n_collections {
        let n = get_len(input)?;
        let mut collection = Vec::with_capacity(n);
        for _ in 0..n {
            collection.push(get_node(input, depth + 1)?);
        }
        children.push(collection);
    }
    Ok(Node { row: Row { key, cells }, children })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(q: &str, v: &[u8]) -> StoredCell {
        StoredCell {
            family: Bytes::from_static(b"d"),
            qualifier: Bytes::copy_from_slice(q.as_bytes()),
            timestamp: 0,
            value: Bytes::copy_from_slice(v),
        }
    }

    fn tree() -> Node {
        let line =
            |k: u8| Node { row: Row { key: Bytes::from(vec![0, k]), cells: vec![cell("q", &[k])] }, children: vec![] };
        let loc = Node {
            row: Row { key: Bytes::from_static(&[0, 1]), cells: vec![cell("city", b"Oslo")] },
            children: vec![vec![line(1), line(2)]],
        };
        Node {
            row: Row { key: Bytes::from_static(b"root"), cells: vec![cell("s", b"open")] },
            children: vec![vec![loc]],
        }
    }

    #[test]
    fn blobs_round_trip() {
        let t = tree();
        let bytes = encode(&t, "Order");
        assert_eq!(&bytes[..4], b"CLBB");
        assert_eq!(decode(&bytes, Bytes::from_static(b"root"), "Order").unwrap(), t);
    }

    #[test]
    fn damage_is_reported() {
        let bytes = encode(&tree(), "Order");
        let key = || Bytes::from_static(b"root");
        assert!(decode(&bytes, key(), "Invoice").unwrap_err().contains("another type"));
        let mut flipped = bytes.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert!(decode(&flipped, key(), "Order").unwrap_err().contains("checksum"));
        assert!(decode(&bytes[..10], key(), "Order").unwrap_err().contains("shorter"));
        let mut newer = bytes.clone();
        newer[11] = 9;
        assert!(decode(&newer, key(), "Order").unwrap_err().contains("newer"));
        let mut magic = bytes;
        magic[0] = b'X';
        assert!(decode(&magic, key(), "Order").unwrap_err().contains("not a Cellar blob"));
    }
}
