//! A type's schema as the catalog stores it: plain data (names, types, encodings, qualifiers)
//! that a tool can read without the application's Rust types, built from the derive's static
//! [`Schema`] and [`AggregateSchema`].

use serde::{Deserialize, Serialize};

use crate::aggregate::{AggregateSchema, ChildSchema, Strategy};
use crate::entity::{ColumnKind, ColumnSpec, KeyField, Schema};
use crate::index::IndexSpec;
use crate::key::{Form, Modifier, Salt};
use crate::wide::WideSpec;

/// What kind of type a catalog entry describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TypeKind {
    /// A `#[derive(Entity)]` of its own (also a member of a `#[derive(Record)]` design).
    Entity,
    /// The root of a `#[derive(Aggregate)]`, with its parts.
    Aggregate,
}

/// One type's physical layout, as stored in the catalog.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TypeSchema {
    /// Entity or aggregate.
    pub kind: TypeKind,
    /// The Rust type name.
    pub name: String,
    /// The table of its (root) rows.
    pub table: String,
    /// The row key.
    pub key: KeyLayout,
    /// Families, the default first.
    pub families: Vec<FamilyLayout>,
    /// Fields stored in cells.
    pub columns: Vec<ColumnLayout>,
    /// Secondary indexes.
    #[serde(default)]
    pub indexes: Vec<IndexLayout>,
    /// Maps stored as columns of a family of their own.
    #[serde(default)]
    pub wide: Vec<WideLayout>,
    /// For an aggregate: its strategy and parts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aggregate: Option<AggregateLayout>,
}

/// A row key: `[salt][partition parts][record type][key parts]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyLayout {
    /// `none`, `hash/N`, `random/N` or `bucket(field)/N`.
    pub salt: String,
    /// Parts before the record type.
    pub partition: Vec<KeyPartLayout>,
    /// The record-type byte.
    pub record_type: Option<u8>,
    /// Parts after the record type.
    pub key: Vec<KeyPartLayout>,
}

/// One key part.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyPartLayout {
    /// The field.
    pub field: String,
    /// Its Rust type, as written.
    pub type_name: String,
    /// Its encoding, in words.
    pub encoding: String,
    /// `delimited`, `last` or `fixed/N`.
    pub form: String,
    /// `none`, `desc`, `reversed` or `md5`.
    pub modifier: String,
    /// Encoded width in bytes, if fixed.
    pub width: Option<usize>,
    /// Stored as the uid of a name of this kind (`kind/width`), if declared `uid`.
    // The stored name is the catalog format's, which predates the attribute's: keep it.
    #[serde(rename = "substitute", default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
}

/// A family and its settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FamilyLayout {
    /// Name.
    pub name: String,
    /// Versions kept per column.
    pub max_versions: u32,
    /// Time to live in seconds.
    pub ttl_secs: Option<u64>,
}

/// A field stored in a cell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ColumnLayout {
    /// The field.
    pub field: String,
    /// Family.
    pub family: String,
    /// Qualifier.
    pub qualifier: String,
    /// Its Rust type, as written.
    pub type_name: String,
    /// `value`, `serde`, `blob`, `counter`, `version` or `hashed_key`.
    pub kind: String,
    /// The cell's encoding, in words.
    pub encoding: String,
    /// Earlier qualifiers in the same family.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub aliases: Vec<String>,
    /// What a row without the cell reads as.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<DefaultLayout>,
    /// A versioned blob's current schema version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blob_version: Option<u32>,
}

/// A field's default. Two defaults are the same if their expressions are: a default that is
/// not a constant (a clock, a random id) encodes differently every time.
#[derive(Debug, Clone, Eq, Serialize, Deserialize)]
pub struct DefaultLayout {
    /// The expression, as written.
    pub expr: String,
    /// The default's cell, in hex (absent if it does not encode).
    pub cell_hex: Option<String>,
}

/// A secondary index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexLayout {
    /// Name.
    pub name: String,
    /// Its parts: field, type, form and modifier.
    pub parts: Vec<KeyPartLayout>,
    /// One entity per value.
    pub unique: bool,
    /// Fields copied into its rows.
    pub include: Vec<String>,
}

/// A map stored as columns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WideLayout {
    /// The field.
    pub field: String,
    /// Its family.
    pub family: String,
    /// Bytes every qualifier starts with, in hex.
    pub prefix_hex: String,
    /// The entry key's Rust type.
    pub key_type: String,
    /// The entry value's Rust type.
    #[serde(default)]
    pub value_type: String,
    /// Largest key first.
    pub desc: bool,
    /// Left out of entity reads.
    pub lazy: bool,
}

/// An aggregate's strategy and tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AggregateLayout {
    /// `normalized`, `single_table`, `denormalized` or `blob`.
    pub strategy: String,
    /// A versioned blob aggregate's current schema version.
    pub blob_version: Option<u32>,
    /// The root's collections.
    pub children: Vec<ChildLayout>,
}

/// A collection of parts inside an aggregate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChildLayout {
    /// The field holding the collection.
    pub field: String,
    /// The record type declared on it.
    pub record_type: Option<u8>,
    /// The part's own row.
    pub part: TypeSchema,
    /// The part's collections.
    pub children: Vec<ChildLayout>,
}

impl PartialEq for DefaultLayout {
    fn eq(&self, other: &Self) -> bool {
        self.expr == other.expr
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn form(form: Form) -> String {
    match form {
        Form::Delimited => "delimited".into(),
        Form::Last => "last".into(),
        Form::Fixed(n) => format!("fixed/{n}"),
    }
}

fn modifier(modifier: Modifier) -> String {
    match modifier {
        Modifier::None => "none",
        Modifier::Desc => "desc",
        Modifier::Reversed => "reversed",
        Modifier::Md5 => "md5",
    }
    .into()
}

fn salt(salt: Salt) -> String {
    match salt {
        Salt::None => "none".into(),
        Salt::Hash { buckets } => format!("hash/{buckets}"),
        Salt::Random { buckets } => format!("random/{buckets}"),
        Salt::Bucket { field, buckets } => format!("bucket({field})/{buckets}"),
    }
}

fn key_part(part: &KeyField) -> KeyPartLayout {
    KeyPartLayout {
        field: part.spec.name.into(),
        type_name: part.type_name.into(),
        encoding: part.encoding.into(),
        form: form(part.spec.form),
        modifier: modifier(part.spec.modifier),
        width: part.width,
        uid: part.uid.map(|s| format!("{}/{}", s.kind, s.width)),
    }
}

fn kind(kind: ColumnKind) -> String {
    match kind {
        ColumnKind::Value => "value",
        ColumnKind::Serde => "serde",
        ColumnKind::Blob => "blob",
        ColumnKind::Counter => "counter",
        ColumnKind::Version => "version",
        ColumnKind::HashedKey => "hashed_key",
    }
    .into()
}

fn column(c: &ColumnSpec) -> ColumnLayout {
    ColumnLayout {
        field: c.field.into(),
        family: c.family.into(),
        qualifier: c.qualifier.into(),
        type_name: c.type_name.into(),
        kind: kind(c.kind),
        encoding: c.encoding.into(),
        aliases: c.aliases.iter().map(|a| a.to_string()).collect(),
        default: c.default.map(|d| DefaultLayout { expr: d.expr.into(), cell_hex: (d.cell)().map(|c| hex(&c)) }),
        blob_version: c.current_blob.map(|f| f.schema_version),
    }
}

fn index(schema: &Schema, index: &IndexSpec) -> IndexLayout {
    IndexLayout {
        name: index.name.into(),
        parts: index
            .parts
            .iter()
            .map(|p| KeyPartLayout {
                field: p.field.into(),
                type_name: p.type_name.into(),
                encoding: String::new(),
                form: form(p.spec.form),
                modifier: modifier(p.spec.modifier),
                width: None,
                uid: None,
            })
            .collect(),
        unique: index.unique,
        include: index.include.iter().filter_map(|&c| schema.columns.get(c)).map(|c| c.field.to_string()).collect(),
    }
}

fn wide(w: &WideSpec) -> WideLayout {
    WideLayout {
        field: w.field.into(),
        family: w.family.into(),
        prefix_hex: hex(w.prefix),
        key_type: w.key_type.into(),
        value_type: w.value_type.into(),
        desc: w.key.modifier == Modifier::Desc,
        lazy: w.lazy,
    }
}

/// The catalog's description of entity schema `schema`.
pub fn entity(schema: &Schema) -> TypeSchema {
    TypeSchema {
        kind: TypeKind::Entity,
        name: schema.entity.into(),
        table: schema.table.into(),
        key: KeyLayout {
            salt: salt(schema.salt),
            partition: schema.partition.iter().map(key_part).collect(),
            record_type: schema.record_type,
            key: schema.key.iter().map(key_part).collect(),
        },
        families: schema
            .families
            .iter()
            .map(|f| FamilyLayout { name: f.name.into(), max_versions: f.max_versions, ttl_secs: f.ttl_secs })
            .collect(),
        columns: schema.columns.iter().map(column).collect(),
        indexes: schema.indexes.iter().map(|i| index(schema, i)).collect(),
        wide: schema.wide.iter().map(wide).collect(),
        aggregate: None,
    }
}

fn child(c: &ChildSchema) -> ChildLayout {
    ChildLayout {
        field: c.field.into(),
        record_type: c.record_type,
        part: entity(c.schema),
        children: c.children.iter().map(child).collect(),
    }
}

/// The catalog's description of aggregate `aggregate`: the root's row, its strategy and tree.
pub fn aggregate(aggregate: &AggregateSchema) -> TypeSchema {
    let strategy = match aggregate.strategy {
        Strategy::Normalized => "normalized",
        Strategy::SingleTable => "single_table",
        Strategy::Denormalized => "denormalized",
        Strategy::Blob => "blob",
    };
    TypeSchema {
        kind: TypeKind::Aggregate,
        aggregate: Some(AggregateLayout {
            strategy: strategy.into(),
            blob_version: aggregate.blob.map(|b| b.format.schema_version),
            children: aggregate.children.iter().map(child).collect(),
        }),
        ..entity(aggregate.root)
    }
}
