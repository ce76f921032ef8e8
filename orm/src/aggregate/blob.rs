//! The `blob` strategy's cell: every object of the aggregate as one node tree, in the
//! versioned blob envelope of [`crate::blob`] (codec [`Codec::NodeTree`], schema version 1).
//!
//! The node-tree payload: a node is its own key, its cells and its collections —
//! `key:bytes  cells:varint (family:bytes qualifier:bytes value:bytes)*  collections:varint
//! (count:varint node*)*`, where `bytes` is a LEB128 length and the bytes. The root's key is
//! left empty: the row key holds it.

use bytes::Bytes;

use super::Node;
use crate::blob::{self, BlobFormat, Codec};
use crate::store::{Row, StoredCell};

/// The node tree's schema version.
const SCHEMA_VERSION: u32 = 1;

/// Encodes a root node (and everything under it) as a blob cell value.
///
/// # Errors
/// A reason, for a tree larger than a blob holds.
pub(crate) fn encode(root: &Node, type_name: &str) -> Result<Vec<u8>, String> {
    let mut payload = Vec::new();
    put_node(&mut payload, root, true);
    let format = BlobFormat::new(SCHEMA_VERSION, Codec::NodeTree);
    blob::seal(&format, blob::type_tag(type_name), &payload).map_err(|e| e.to_string())
}

/// Decodes a blob cell into the root node of the aggregate stored at `row_key`.
///
/// # Errors
/// A reason naming what is wrong: magic, versions, codec, type, length or checksum, or a
/// malformed payload.
pub(crate) fn decode(cell: &[u8], row_key: Bytes, type_name: &str) -> Result<Node, String> {
    let (header, payload) = blob::open(cell, blob::type_tag(type_name)).map_err(|e| e.to_string())?;
    if header.codec != Codec::NodeTree.id() {
        return Err(format!("blob codec {} does not hold an aggregate's objects", header.codec));
    }
    if header.schema_version != SCHEMA_VERSION {
        let relation = if header.schema_version > SCHEMA_VERSION { "newer than" } else { "not readable by" };
        return Err(format!(
            "blob schema version {} is {relation} this code ({SCHEMA_VERSION})",
            header.schema_version
        ));
    }
    let mut input = payload.as_slice();
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
        let bytes = encode(&t, "Order").unwrap();
        assert_eq!(&bytes[..4], b"CLBB");
        assert_eq!(decode(&bytes, Bytes::from_static(b"root"), "Order").unwrap(), t);
    }

    #[test]
    fn damage_is_reported() {
        let bytes = encode(&tree(), "Order").unwrap();
        let key = || Bytes::from_static(b"root");
        assert!(decode(&bytes, key(), "Invoice").unwrap_err().contains("another type"));
        let mut flipped = bytes.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert!(decode(&flipped, key(), "Order").unwrap_err().contains("checksum"));
        assert!(decode(&bytes[..10], key(), "Order").unwrap_err().contains("shorter"));
        let payload = &bytes[blob::HEADER_LEN..];
        let newer = blob::seal(&BlobFormat::new(9, Codec::NodeTree), blob::type_tag("Order"), payload).unwrap();
        assert!(decode(&newer, key(), "Order").unwrap_err().contains("newer"));
        let serde = blob::seal(&BlobFormat::new(1, Codec::Json), blob::type_tag("Order"), b"{}").unwrap();
        assert!(decode(&serde, key(), "Order").unwrap_err().contains("does not hold an aggregate"));
        let mut magic = bytes;
        magic[0] = b'X';
        assert!(decode(&magic, key(), "Order").unwrap_err().contains("not a Cellar blob"));
    }
}
