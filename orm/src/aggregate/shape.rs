//! The shape of an aggregate: its levels (one per child collection position, breadth first),
//! their record types and tables, checked at compile time by [`check_aggregate`] and walked
//! at run time by the strategies.
//!
//! Record types are numbered breadth first (root 1, its collections 2, 3, …, then theirs), so
//! the rows of every level up to a depth form one contiguous key range under `single_table`:
//! loading "the order and its locations" is one range scan. `record_type = N` on the root or
//! on a `children` field overrides a number.

use std::fmt;

use super::{AggregateSchema, ChildSchema, Strategy};
use crate::entity::{KeyField, Schema};
use crate::key::{KeyError, Modifier};

/// Deepest nesting an aggregate may have (the root is level 0).
pub const MAX_DEPTH: usize = 8;

/// Qualifiers starting with this byte are Cellar's own (generation, copies, blobs).
pub(crate) const INTERNAL: u8 = 0;

const fn count_at(children: &[ChildSchema], depth: usize) -> usize {
    if depth == 0 {
        return 0;
    }
    if depth == 1 {
        return children.len();
    }
    let mut n = 0;
    let mut i = 0;
    while i < children.len() {
        n += count_at(children[i].children, depth - 1);
        i += 1;
    }
    n
}

/// The `n`th collection position at `depth` (1 = the root's collections), in path order.
const fn nth_at(children: &'static [ChildSchema], depth: usize, mut n: usize) -> Option<&'static ChildSchema> {
    let mut i = 0;
    while i < children.len() {
        if depth == 1 {
            if n == 0 {
                return Some(&children[i]);
            }
            n -= 1;
        } else {
            let here = count_at(children[i].children, depth - 1);
            if n < here {
                return nth_at(children[i].children, depth - 1, n);
            }
            n -= here;
        }
        i += 1;
    }
    None
}

/// Positions before `depth` (the root counts as one).
const fn positions_before(children: &[ChildSchema], depth: usize) -> usize {
    let mut n = 1;
    let mut d = 1;
    while d < depth {
        n += count_at(children, d);
        d += 1;
    }
    n
}

/// The record type of the `n`th position at `depth`: declared, or its breadth-first number.
const fn record_type_at(agg: &AggregateSchema, depth: usize, n: usize) -> u16 {
    if depth == 0 {
        return match agg.root.record_type {
            Some(t) => t as u16,
            None => 1,
        };
    }
    match nth_at(agg.children, depth, n) {
        Some(ChildSchema { record_type: Some(t), .. }) => *t as u16,
        _ => (positions_before(agg.children, depth) + n + 1) as u16,
    }
}

const fn has_internal_qualifier(schema: &Schema) -> bool {
    let mut i = 0;
    while i < schema.columns.len() {
        let q = schema.columns[i].qualifier.as_bytes();
        if !q.is_empty() && q[0] == INTERNAL {
            return true;
        }
        i += 1;
    }
    false
}

/// Checks that an aggregate's tree fits its strategy, panicking with the reason if not.
/// Generated code calls it in a constant, so a misfit is a compile error.
#[doc(hidden)]
pub const fn check_aggregate(agg: &AggregateSchema) {
    if count_at(agg.children, MAX_DEPTH + 1) > 0 {
        panic!("an aggregate nests at most 8 levels below its root");
    }
    if has_internal_qualifier(agg.root) {
        panic!("qualifiers starting with a zero byte are reserved for Cellar");
    }
    let mut total = 1;
    let mut depth = 1;
    while depth <= MAX_DEPTH {
        let count = count_at(agg.children, depth);
        let mut n = 0;
        while n < count {
            if let Some(c) = nth_at(agg.children, depth, n) {
                if has_internal_qualifier(c.schema) {
                    panic!("qualifiers starting with a zero byte are reserved for Cellar");
                }
                if c.record_type.is_some() && !agg.strategy.typed_rows() {
                    panic!("record types apply to single_table and denormalized aggregates only");
                }
                if matches!(agg.strategy, Strategy::Denormalized) {
                    if depth == 1 && c.children.len() > 1 {
                        panic!("a denormalized aggregate collapses a middle level onto ONE child collection; this part has several (use single_table or normalized)");
                    }
                    if depth >= 2 && !c.children.is_empty() {
                        panic!("a denormalized aggregate holds three levels at most: root, a middle level collapsed onto its children, and those children (use single_table or normalized)");
                    }
                }
            }
            n += 1;
        }
        total += count;
        depth += 1;
    }
    if total > 255 {
        panic!("an aggregate has at most 255 collection positions (one record-type byte each)");
    }
    if !agg.strategy.typed_rows() {
        return;
    }
    // Every record type distinct.
    let mut d1 = 0;
    while d1 <= MAX_DEPTH {
        let c1 = if d1 == 0 { 1 } else { count_at(agg.children, d1) };
        let mut n1 = 0;
        while n1 < c1 {
            let t1 = record_type_at(agg, d1, n1);
            if t1 > 255 {
                panic!("record types are one byte: a breadth-first number passed 255");
            }
            let mut d2 = d1;
            while d2 <= MAX_DEPTH {
                let c2 = if d2 == 0 { 1 } else { count_at(agg.children, d2) };
                let mut n2 = if d2 == d1 { n1 + 1 } else { 0 };
                while n2 < c2 {
                    if record_type_at(agg, d2, n2) == t1 {
                        panic!("two levels of the aggregate have the same record type");
                    }
                    n2 += 1;
                }
                d2 += 1;
            }
            n1 += 1;
        }
        d1 += 1;
    }
}

/// One collection position of an aggregate (or the root).
#[derive(Debug, Clone)]
pub(crate) struct Level {
    /// The record-type byte under typed strategies.
    pub record_type: u8,
    /// The object's own row.
    pub schema: &'static Schema,
    /// Its collections.
    pub children: &'static [ChildSchema],
    /// The level holding the parent; `None` for the root.
    pub parent: Option<usize>,
    /// The collection index in the parent.
    pub collection: usize,
    /// Levels from the root to this one, root excluded.
    pub path: Vec<usize>,
    /// `field.field…` from the root, empty for the root.
    pub field_path: String,
    /// The table its rows live in.
    pub table: String,
    /// Levels of its collections, by collection index.
    pub child_levels: Vec<usize>,
}

/// The levels of an aggregate, breadth first; `levels[0]` is the root.
#[derive(Debug, Clone)]
pub(crate) struct Shape {
    pub strategy: Strategy,
    pub root: &'static Schema,
    pub levels: Vec<Level>,
    /// The versioned cell of a `blob` aggregate that declares one.
    pub blob: Option<super::BlobCodec>,
}

impl Shape {
    pub fn new(agg: &AggregateSchema) -> Shape {
        let root = Level {
            record_type: record_type_at(agg, 0, 0) as u8,
            schema: agg.root,
            children: agg.children,
            parent: None,
            collection: 0,
            path: Vec::new(),
            field_path: String::new(),
            table: agg.root.table.to_string(),
            child_levels: Vec::new(),
        };
        let mut levels = vec![root];
        let mut depth_start = 0;
        let mut depth = 1;
        // Breadth first: the positions at each depth in path order, as `record_type_at`
        // numbers them.
        while depth_start < levels.len() {
            let depth_end = levels.len();
            let mut n = 0;
            for parent in depth_start..depth_end {
                for (collection, child) in levels[parent].children.iter().enumerate() {
                    let index = levels.len();
                    let mut path = levels[parent].path.clone();
                    path.push(index);
                    let field_path = if levels[parent].field_path.is_empty() {
                        child.field.to_string()
                    } else {
                        format!("{}.{}", levels[parent].field_path, child.field)
                    };
                    let table = match agg.strategy {
                        Strategy::Normalized => format!("{}.{}", agg.root.table, field_path),
                        _ => agg.root.table.to_string(),
                    };
                    levels.push(Level {
                        record_type: record_type_at(agg, depth, n) as u8,
                        schema: child.schema,
                        children: child.children,
                        parent: Some(parent),
                        collection,
                        path,
                        field_path,
                        table,
                        child_levels: Vec::new(),
                    });
                    levels[parent].child_levels.push(index);
                    n += 1;
                }
            }
            depth_start = depth_end;
            depth += 1;
        }
        Shape { strategy: agg.strategy, root: agg.root, levels, blob: agg.blob }
    }

    /// The level whose rows carry `record_type`.
    pub fn level_of_type(&self, record_type: u8) -> Option<usize> {
        self.levels.iter().position(|l| l.record_type == record_type)
    }

    /// The default family of the root: where the aggregate's own cells (generation, blob,
    /// copied keys) live.
    pub fn family(&self) -> &'static str {
        default_family(self.root)
    }
}

/// The first family the root declares (`d` if none): where an aggregate's own cells live.
pub(crate) fn default_family(root: &Schema) -> &'static str {
    root.families.first().map_or("d", |f| f.name)
}

/// Length of the part `field` at the front of `input`, without decoding it: fixed widths as
/// they are, escaped strings up to and including their terminator.
pub(crate) fn part_len(field: &KeyField, input: &[u8]) -> Result<usize, KeyError> {
    if let Some(w) = field.width {
        return if input.len() >= w { Ok(w) } else { Err(KeyError::Truncated { part: field.spec.name }) };
    }
    // Delimited variable-length parts end with `00 01`; inverted (`FF FE`) when descending.
    // Inside, the first byte of the pair is always followed by the escape byte, never by the
    // terminator's second byte.
    let (lead, end) = if field.spec.modifier == Modifier::Desc { (0xFF, 0xFE) } else { (0x00, 0x01) };
    input
        .windows(2)
        .position(|w| w[0] == lead && w[1] == end)
        .map(|i| i + 2)
        .ok_or(KeyError::Truncated { part: field.spec.name })
}

/// Length of an object's whole own key at the front of `input`.
pub(crate) fn key_len(schema: &Schema, input: &[u8]) -> Result<usize, KeyError> {
    let mut at = 0;
    for field in schema.partition.iter().chain(schema.key) {
        at += part_len(field, &input[at..])?;
    }
    Ok(at)
}

/// An aggregate's physical layout, printable: every table and row shape under its strategy.
#[derive(Debug, Clone)]
pub struct AggregateLayout {
    pub(crate) shape: Shape,
    pub(crate) name: &'static str,
}

fn key_names(schema: &Schema) -> String {
    schema.partition.iter().chain(schema.key).map(|k| k.spec.name).collect::<Vec<_>>().join(",")
}

fn columns(schema: &Schema) -> String {
    schema.columns.iter().map(|c| format!("{}:{}", c.family, c.qualifier)).collect::<Vec<_>>().join(" ")
}

impl fmt::Display for AggregateLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shape = &self.shape;
        let root = &shape.levels[0];
        let salt = if shape.root.salt.is_some() { "[salt]" } else { "" };
        let root_key = format!("{salt}[{}]", key_names(shape.root));
        writeln!(f, "aggregate {} ({})", self.name, shape.strategy.name())?;
        let path_keys = |l: &Level| -> String {
            l.path.iter().map(|&i| format!("[{}]", key_names(shape.levels[i].schema))).collect::<String>()
        };
        let family = shape.family();
        match shape.strategy {
            Strategy::Blob => {
                writeln!(f, "  table {}", root.table)?;
                writeln!(f, "    {root_key}  {family}:b = header + every object, {family}:\\x00g generation")?;
            }
            Strategy::Normalized => {
                for l in &shape.levels {
                    writeln!(f, "  table {}", l.table)?;
                    let gen = if l.parent.is_none() { format!(" {family}:\\x00g generation") } else { String::new() };
                    writeln!(f, "    {root_key}{}  {}  {}{gen}", path_keys(l), l.schema.entity, columns(l.schema))?;
                }
            }
            Strategy::SingleTable | Strategy::Denormalized => {
                writeln!(f, "  table {}", root.table)?;
                for l in &shape.levels {
                    let collapsed = shape.strategy == Strategy::Denormalized && l.parent.is_some();
                    let (keys, note) = match (collapsed, l.parent) {
                        (true, Some(0)) if !l.children.is_empty() => (
                            format!("[{}]", key_names(l.schema)),
                            " (only while it has no children; else copied onto them)".to_string(),
                        ),
                        (true, Some(p)) if p != 0 => (
                            format!("[{}]", key_names(l.schema)),
                            format!(
                                " + copies of {} as \\x00^qualifier, its key as \\x00k",
                                shape.levels[p].schema.entity
                            ),
                        ),
                        _ => (path_keys(l), String::new()),
                    };
                    let gen = if l.parent.is_none() { format!(" {family}:\\x00g generation") } else { String::new() };
                    writeln!(
                        f,
                        "    {root_key}[{}]{keys}  {}  {}{gen}{note}",
                        l.record_type,
                        l.schema.entity,
                        columns(l.schema)
                    )?;
                }
            }
        }
        Ok(())
    }
}
