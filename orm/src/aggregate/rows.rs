//! The strategies proper: a tree of [`Node`]s to the rows it is stored as, and back.
//!
//! Rows are collected in a [`RowSet`] keyed by (table slot, row key): slot 0 is the root's
//! table; under `normalized` every level has its own table and its slot is its level index.
//! The aggregate's prefix `A` is the root's row key without a record-type byte; every other
//! row of the aggregate starts with it.

use std::collections::BTreeMap;

use bytes::Bytes;

use super::shape::{default_family, key_len, Shape, INTERNAL};
use super::{blob, Node, Strategy};
use crate::entity::Schema;
use crate::repo::printable;
use crate::store::{Row, StoredCell};
use crate::{Error, Result};

/// An aggregate's rows by (table slot, row key), in key order.
pub(crate) type RowSet = BTreeMap<(usize, Bytes), Vec<StoredCell>>;

/// Qualifier of the root's generation cell.
pub(crate) const GENERATION: &[u8] = &[INTERNAL, b'g'];
/// Qualifier of a denormalized row's copy of its collapsed parent's key.
const COPIED_KEY: &[u8] = &[INTERNAL, b'k'];
/// Prefix of a denormalized row's copies of its collapsed parent's cells.
const COPY_PREFIX: &[u8] = &[INTERNAL, b'^'];
/// Qualifier of a row's fence, on stores several processes share: the token of the write
/// that last changed the row (see `intent`). A row holding nothing else is a tombstone.
pub(crate) const FENCE: &[u8] = &[INTERNAL, b'w'];
/// Length of a deleted aggregate's generation: a token and one byte more, which no committed
/// (8 bytes) or pending (at least 34) generation has. The root row holding it alone is the
/// aggregate's tombstone (see `intent`).
pub(crate) const DELETED_LEN: usize = 9;
/// Qualifier of the blob cell.
pub(crate) const BLOB: &[u8] = b"b";
/// Qualifier of the empty marker cell of a part with nothing else to store, as entities have:
/// a row exists only through its cells, and no field maps to the empty qualifier.
const MARKER: &[u8] = b"";

/// The aggregate prefix of a root row key: the key without its record-type byte.
pub(crate) fn prefix_of(shape: &Shape, root_key: &[u8]) -> Bytes {
    let cut = usize::from(shape.strategy.typed_rows());
    Bytes::copy_from_slice(&root_key[..root_key.len().saturating_sub(cut)])
}

/// True for a generation that marks the aggregate deleted.
pub(crate) fn is_deleted_generation(value: &[u8]) -> bool {
    value.len() == DELETED_LEN
}

/// True for a row that holds nothing of the aggregate: only a fence (a deleted row), or only a
/// deleted generation (a deleted aggregate's root).
pub(crate) fn is_tombstone(cells: &[StoredCell]) -> bool {
    cells.iter().all(is_tombstone_cell)
}

/// A fence, or a deleted generation: the cells a tombstone holds.
fn is_tombstone_cell(c: &StoredCell) -> bool {
    c.qualifier == FENCE || (c.qualifier == GENERATION && is_deleted_generation(&c.value))
}

/// The rows as the aggregate they store: without fences and tombstones. Borrowed when there
/// are none (the embedded engine writes neither).
pub(crate) fn live(rows: &RowSet) -> std::borrow::Cow<'_, RowSet> {
    if !rows.values().flatten().any(is_tombstone_cell) {
        return std::borrow::Cow::Borrowed(rows);
    }
    let kept = rows
        .iter()
        .filter(|(_, cells)| !is_tombstone(cells))
        .map(|(key, cells)| (key.clone(), cells.iter().filter(|c| c.qualifier != FENCE).cloned().collect()))
        .collect();
    std::borrow::Cow::Owned(kept)
}

/// The fence of a stored row, if it has one.
pub(crate) fn fence_of(cells: &[StoredCell]) -> Option<Bytes> {
    cells.iter().find(|c| c.qualifier == FENCE).map(|c| c.value.clone())
}

/// Cellar's own cells: the generation, copies, and the marker.
fn is_internal(c: &StoredCell) -> bool {
    c.qualifier.first() == Some(&INTERNAL) || c.qualifier == MARKER
}

fn user_cells(cells: &[StoredCell]) -> Vec<StoredCell> {
    cells.iter().filter(|c| !is_internal(c)).cloned().collect()
}

fn concat(parts: &[&[u8]]) -> Bytes {
    Bytes::from(parts.concat())
}

fn decode_error(shape: &Shape, row: &[u8], reason: String) -> Error {
    Error::Decode { table: shape.root.table, row: printable(row), column: None, reason }
}

/// Adds the row of one part, `schema` its own; a part with no cell gets the marker cell in its
/// default family, so that it is stored (and its children have their parent) however sparse.
fn insert(
    shape: &Shape,
    rows: &mut RowSet,
    slot: usize,
    key: Bytes,
    mut cells: Vec<StoredCell>,
    schema: &Schema,
) -> Result<()> {
    if cells.is_empty() {
        cells.push(StoredCell {
            family: Bytes::from_static(default_family(schema).as_bytes()),
            qualifier: Bytes::from_static(MARKER),
            timestamp: 0,
            value: Bytes::new(),
        });
    }
    if rows.insert((slot, key.clone()), cells).is_some() {
        return Err(Error::InvalidArgument {
            arg: "aggregate",
            reason: format!(
                "{} holds two {} with the same key (row {}); keys are unique within a collection",
                shape.root.entity,
                schema.entity,
                printable(&key)
            ),
        });
    }
    Ok(())
}

/// Puts every collection of the tree in key order, as reads return it.
///
/// # Errors
/// [`Error::InvalidArgument`] for two children with one key in a collection.
pub(crate) fn sort_children(shape: &Shape, level: usize, node: &mut Node) -> Result<()> {
    for (collection, children) in node.children.iter_mut().enumerate() {
        children.sort_by(|a, b| a.row.key.cmp(&b.row.key));
        let Some(&child_level) = shape.levels[level].child_levels.get(collection) else { continue };
        if let Some(pair) = children.windows(2).find(|w| w[0].row.key == w[1].row.key) {
            return Err(Error::InvalidArgument {
                arg: "aggregate",
                reason: format!(
                    "{} holds two {} with the key {}; keys are unique within a collection",
                    shape.root.entity,
                    shape.levels[child_level].schema.entity,
                    printable(&pair[0].row.key)
                ),
            });
        }
        for child in children {
            sort_children(shape, child_level, child)?;
        }
    }
    Ok(())
}

/// The rows `root` is stored as; its collections must be in key order
/// ([`sort_children`]).
///
/// # Errors
/// [`Error::InvalidArgument`] for children a strategy cannot tell apart.
pub(crate) fn to_rows(shape: &Shape, root: &Node) -> Result<RowSet> {
    let mut rows = RowSet::new();
    let prefix = prefix_of(shape, &root.row.key);
    match shape.strategy {
        Strategy::Blob => {
            let cell = StoredCell {
                family: Bytes::from_static(shape.family().as_bytes()),
                qualifier: Bytes::from_static(BLOB),
                timestamp: 0,
                value: match shape.blob {
                    Some(codec) => (codec.encode)(root),
                    None => blob::encode(root, shape.root.entity),
                }
                .map_err(|reason| Error::InvalidArgument { arg: "aggregate", reason })?
                .into(),
            };
            rows.insert((0, root.row.key.clone()), vec![cell]);
        }
        Strategy::SingleTable | Strategy::Normalized => {
            rows.insert((0, root.row.key.clone()), root.row.cells.clone());
            path_rows(shape, &prefix, 0, root, &[], &mut rows)?;
        }
        Strategy::Denormalized => {
            rows.insert((0, root.row.key.clone()), root.row.cells.clone());
            denormalized_rows(shape, &prefix, root, &mut rows)?;
        }
    }
    Ok(rows)
}

/// `single_table` and `normalized`: each object's row is the aggregate prefix, its record type
/// (single table only) and the keys along its path.
fn path_rows(shape: &Shape, prefix: &[u8], level: usize, node: &Node, path: &[u8], rows: &mut RowSet) -> Result<()> {
    for (collection, children) in node.children.iter().enumerate() {
        let Some(&child_level) = shape.levels[level].child_levels.get(collection) else { continue };
        let l = &shape.levels[child_level];
        for child in children {
            let child_path = [path, &child.row.key].concat();
            let (slot, key) = match shape.strategy {
                Strategy::Normalized => (child_level, concat(&[prefix, &child_path])),
                _ => (0, concat(&[prefix, &[l.record_type], &child_path])),
            };
            insert(shape, rows, slot, key, child.row.cells.clone(), l.schema)?;
            path_rows(shape, prefix, child_level, child, &child_path, rows)?;
        }
    }
    Ok(())
}

/// `denormalized`: the root's leaf collections as in `single_table`; a middle level's objects
/// are copied onto each of their children's rows (`[A][T_child][child key]`), or stored as
/// their own row `[A][T_middle][key]` while they have no children.
fn denormalized_rows(shape: &Shape, prefix: &[u8], root: &Node, rows: &mut RowSet) -> Result<()> {
    let family = Bytes::from_static(shape.family().as_bytes());
    for (collection, middles) in root.children.iter().enumerate() {
        let Some(&level) = shape.levels[0].child_levels.get(collection) else { continue };
        let l = &shape.levels[level];
        let leaf = l.child_levels.first().map(|&i| &shape.levels[i]);
        for middle in middles {
            let own_key = concat(&[prefix, &[l.record_type], &middle.row.key]);
            let children = middle.children.first().map(Vec::as_slice).unwrap_or_default();
            let Some(leaf) = leaf.filter(|_| !children.is_empty()) else {
                insert(shape, rows, 0, own_key, middle.row.cells.clone(), l.schema)?;
                continue;
            };
            for child in children {
                let mut cells = child.row.cells.clone();
                cells.push(StoredCell {
                    family: family.clone(),
                    qualifier: Bytes::from_static(COPIED_KEY),
                    timestamp: 0,
                    value: middle.row.key.clone(),
                });
                cells.extend(middle.row.cells.iter().map(|c| StoredCell {
                    family: c.family.clone(),
                    qualifier: concat(&[COPY_PREFIX, &c.qualifier]),
                    timestamp: 0,
                    value: c.value.clone(),
                }));
                let key = concat(&[prefix, &[leaf.record_type], &child.row.key]);
                if rows.contains_key(&(0, key.clone())) {
                    return Err(Error::InvalidArgument {
                        arg: "aggregate",
                        reason: format!(
                            "denormalized {}: two {} have the key of row {}; the children of a collapsed level need keys unique across the aggregate",
                            shape.root.entity,
                            leaf.schema.entity,
                            printable(&key)
                        ),
                    });
                }
                rows.insert((0, key), cells);
            }
        }
    }
    Ok(())
}

/// Each level's rows: full key, the path after the record type, cells.
type LevelRows<'a> = Vec<Vec<(&'a Bytes, &'a [u8], &'a Vec<StoredCell>)>>;

/// Rebuilds the aggregate with prefix `prefix` from its rows; `None` without a root row.
///
/// # Errors
/// [`Error::Decode`] for rows that do not fit the shape (an unknown record type, a child
/// without its parent, a damaged blob, copies that disagree).
pub(crate) fn from_rows(shape: &Shape, prefix: &[u8], rows: &RowSet) -> Result<Option<Node>> {
    let rows = &*live(rows);
    let root_key = match shape.strategy {
        Strategy::SingleTable | Strategy::Denormalized => concat(&[prefix, &[shape.levels[0].record_type]]),
        _ => Bytes::copy_from_slice(prefix),
    };
    let Some(root_cells) = rows.get(&(0, root_key.clone())) else {
        return match rows.keys().next() {
            Some((_, key)) => {
                Err(decode_error(shape, key, format!("a row of {} without its root row", shape.root.entity)))
            }
            None => Ok(None),
        };
    };
    if shape.strategy == Strategy::Blob {
        let cell = root_cells
            .iter()
            .find(|c| c.qualifier == BLOB)
            .ok_or_else(|| decode_error(shape, &root_key, "the aggregate's row has no blob cell".into()))?;
        let node = match shape.blob {
            // The key fields come from the row key, as under every strategy.
            Some(codec) => (codec.decode)(&cell.value).map(|decoded| {
                let mut node = decoded.node;
                node.row.key = root_key.clone();
                node
            }),
            None => blob::decode(&cell.value, root_key.clone(), shape.root.entity),
        };
        return node.map(Some).map_err(|reason| Error::Decode {
            table: shape.root.table,
            row: printable(&root_key),
            column: Some(format!("{}:b", shape.family())),
            reason,
        });
    }
    let mut root = Node {
        row: Row { key: root_key.clone(), cells: user_cells(root_cells) },
        children: vec![Vec::new(); shape.levels[0].child_levels.len()],
    };
    // Rows of each level, in key order; levels are processed breadth first so every parent
    // is in place before its children arrive.
    let mut by_level: LevelRows<'_> = vec![Vec::new(); shape.levels.len()];
    for ((slot, key), cells) in rows {
        if *key == root_key && *slot == 0 {
            continue;
        }
        let rest = key.strip_prefix(prefix).ok_or_else(|| {
            decode_error(shape, key, format!("row is not under the aggregate prefix {}", printable(prefix)))
        })?;
        let (level, path) = match shape.strategy {
            Strategy::Normalized => (*slot, rest),
            _ => {
                let (&t, path) =
                    rest.split_first().ok_or_else(|| decode_error(shape, key, "row has no record type".into()))?;
                let level = shape.level_of_type(t).ok_or_else(|| {
                    decode_error(shape, key, format!("record type {t} is not a level of {}", shape.root.entity))
                })?;
                (level, path)
            }
        };
        by_level[level].push((key, path, cells));
    }
    if shape.strategy == Strategy::Denormalized {
        attach_denormalized(shape, &mut root, by_level)?;
    } else {
        for (level, level_rows) in by_level.into_iter().enumerate().skip(1) {
            for (key, path, cells) in level_rows {
                attach(shape, &mut root, level, key, path, user_cells(cells))?;
            }
        }
    }
    Ok(Some(root))
}

/// Places one row's object in the tree, under the parents its path names.
fn attach(
    shape: &Shape,
    root: &mut Node,
    level: usize,
    key: &[u8],
    mut path: &[u8],
    cells: Vec<StoredCell>,
) -> Result<()> {
    let l = &shape.levels[level];
    let mut node = root;
    for &step in &l.path {
        let s = &shape.levels[step];
        let len = key_len(s.schema, path).map_err(|e| decode_error(shape, key, format!("{}: {e}", s.schema.entity)))?;
        let (own, rest) = path.split_at(len);
        path = rest;
        let collection = node
            .children
            .get_mut(s.collection)
            .ok_or_else(|| decode_error(shape, key, "row does not fit the aggregate's shape".into()))?;
        if step == level {
            if !path.is_empty() {
                return Err(decode_error(
                    shape,
                    key,
                    format!("{} bytes after the key of {}", path.len(), s.schema.entity),
                ));
            }
            let children = vec![Vec::new(); s.child_levels.len()];
            collection.push(Node { row: Row { key: Bytes::copy_from_slice(own), cells }, children });
            return Ok(());
        }
        let found = collection.binary_search_by(|n| n.row.key.as_ref().cmp(own)).map_err(|_| {
            decode_error(shape, key, format!("a {} whose {} is missing", l.schema.entity, s.schema.entity))
        })?;
        node = &mut collection[found];
    }
    Err(decode_error(shape, key, "row does not fit the aggregate's shape".into()))
}

/// `denormalized`: regroups each child row under a middle object rebuilt from its copies.
fn attach_denormalized(shape: &Shape, root: &mut Node, by_level: LevelRows<'_>) -> Result<()> {
    // Middle objects by level and key: their cells and children, from rows of their own or
    // from copies.
    let mut middles: BTreeMap<(usize, Bytes), (Vec<StoredCell>, Vec<Node>)> = BTreeMap::new();
    for (level, level_rows) in by_level.into_iter().enumerate().skip(1) {
        let l = &shape.levels[level];
        let parent = l.parent.unwrap_or(0);
        for (key, path, cells) in level_rows {
            let own = Node {
                row: Row { key: Bytes::copy_from_slice(path), cells: user_cells(cells) },
                children: vec![Vec::new(); l.child_levels.len()],
            };
            if parent == 0 && l.child_levels.is_empty() {
                root.children[l.collection].push(own);
            } else if parent == 0 {
                // A middle object without children, stored as its own row.
                middles.insert((level, own.row.key.clone()), (own.row.cells, Vec::new()));
            } else {
                let middle_key = cells
                    .iter()
                    .find(|c| c.qualifier == COPIED_KEY)
                    .map(|c| c.value.clone())
                    .ok_or_else(|| decode_error(shape, key, "row has no copy of its parent's key".into()))?;
                let copies: Vec<StoredCell> = cells
                    .iter()
                    .filter_map(|c| {
                        c.qualifier.strip_prefix(COPY_PREFIX).map(|q| StoredCell {
                            family: c.family.clone(),
                            qualifier: Bytes::copy_from_slice(q),
                            timestamp: c.timestamp,
                            value: c.value.clone(),
                        })
                    })
                    .collect();
                let entry = middles.entry((parent, middle_key)).or_insert_with(|| (copies.clone(), Vec::new()));
                if !same_cells(&entry.0, &copies) {
                    return Err(decode_error(
                        shape,
                        key,
                        format!("copies of one {} disagree", shape.levels[parent].schema.entity),
                    ));
                }
                entry.1.push(own);
            }
        }
    }
    for ((level, key), (cells, children)) in middles {
        let l = &shape.levels[level];
        let mut node = Node { row: Row { key, cells }, children: vec![Vec::new(); l.child_levels.len()] };
        if let Some(first) = node.children.first_mut() {
            *first = children;
        }
        root.children[l.collection].push(node);
    }
    Ok(())
}

/// Same family, qualifier and value, in any order; timestamps ignored.
fn same_cells(a: &[StoredCell], b: &[StoredCell]) -> bool {
    let key = |c: &StoredCell| (c.family.clone(), c.qualifier.clone(), c.value.clone());
    let mut a: Vec<_> = a.iter().map(key).collect();
    let mut b: Vec<_> = b.iter().map(key).collect();
    a.sort();
    b.sort();
    a == b
}
