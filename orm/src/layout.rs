//! [`Layout`]: an entity's physical layout in words — table, row-key parts with their
//! encodings and widths, record type, families and qualifiers — for documentation, reviews and
//! debugging a key design.

use std::fmt;

use crate::entity::{ColumnKind, KeyField, Schema};
use crate::key::{Form, Modifier, Salt};

/// Prints an entity's layout; get one with [`crate::Entity::layout`] or [`Schema::layout`].
#[derive(Debug, Clone, Copy)]
pub struct Layout {
    schema: Schema,
}

impl Schema {
    /// The layout, printable.
    pub const fn layout(&self) -> Layout {
        Layout { schema: *self }
    }

    /// The key's width in bytes if every part has a fixed width, else the fixed part's width.
    fn key_width(&self) -> (usize, bool) {
        let parts = self.partition.iter().chain(self.key);
        let fixed = usize::from(self.salt.is_some())
            + usize::from(self.record_type.is_some())
            + parts.clone().filter_map(|p| p.width).sum::<usize>();
        (fixed, parts.clone().any(|p| p.width.is_none()))
    }
}

/// One line of the row-key table: name, width, description.
struct KeyLine {
    name: String,
    width: String,
    what: String,
}

fn width(n: Option<usize>) -> String {
    match n {
        Some(1) => "1 byte".into(),
        Some(n) => format!("{n} bytes"),
        None => "variable".into(),
    }
}

fn describe_part(schema: &Schema, part: &KeyField, partition: bool) -> KeyLine {
    let spec = &part.spec;
    let mut what = format!("{}: ", part.type_name);
    if spec.modifier == Modifier::Md5 {
        what.push_str("MD5 of its encoding");
        if let Some(col) = schema.column(spec.name) {
            what.push_str(&format!(", value kept in {}:{}", col.family, col.qualifier));
        }
    } else {
        what.push_str(part.encoding);
        match spec.effective_form(part.width.is_some()) {
            Form::Delimited if part.width.is_none() => what.push_str(", escaped, 00 01-terminated"),
            Form::Last if part.width.is_none() => what.push_str(", raw (last part)"),
            Form::Fixed(n) => what.push_str(&format!(", zero-padded to {n} bytes")),
            _ => {}
        }
        match spec.modifier {
            Modifier::Desc if part.type_name.ends_with("Timestamp") => what.push_str(", reversed (newest first)"),
            Modifier::Desc => what.push_str(", descending (bytes inverted)"),
            Modifier::Reversed => what.push_str(", byte order reversed"),
            Modifier::None | Modifier::Md5 => {}
        }
    }
    if partition {
        what.push_str("  [partition]");
    }
    KeyLine { name: spec.name.into(), width: width(part.width), what }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.schema;
        writeln!(f, "{} -> table `{}`", s.entity, s.table)?;
        let (fixed, variable) = s.key_width();
        let size = if variable { format!("{fixed} bytes + variable") } else { format!("{fixed} bytes") };
        writeln!(f, "row key ({size}):")?;
        let mut lines = Vec::new();
        let salt = match s.salt {
            Salt::None => None,
            Salt::Hash { buckets } if s.partition.is_empty() => Some(format!("hash of the key mod {buckets}")),
            Salt::Hash { buckets } => Some(format!("hash of the partition parts mod {buckets}")),
            Salt::Random { buckets } => Some(format!("random bucket of {buckets}")),
            Salt::Bucket { field, buckets } => Some(format!("`{field}` mod {buckets}")),
        };
        if let Some(what) = salt {
            let name = if matches!(s.salt, Salt::Bucket { .. }) { "bucket" } else { "salt" };
            lines.push(KeyLine { name: name.into(), width: width(Some(1)), what });
        }
        lines.extend(s.partition.iter().map(|p| describe_part(s, p, true)));
        if let Some(rt) = s.record_type {
            lines.push(KeyLine { name: "record type".into(), width: width(Some(1)), what: format!("0x{rt:02x}") });
        }
        lines.extend(s.key.iter().map(|p| describe_part(s, p, false)));
        let name_w = lines.iter().map(|l| l.name.len()).max().unwrap_or(0);
        let width_w = lines.iter().map(|l| l.width.len()).max().unwrap_or(0);
        for l in &lines {
            writeln!(f, "  {:name_w$}  {:width_w$}  {}", l.name, l.width, l.what)?;
        }
        writeln!(f, "families:")?;
        let fam_w = s.families.iter().map(|fam| fam.name.len()).max().unwrap_or(0);
        for fam in s.families {
            let ttl = fam.ttl_secs.map_or("none".to_string(), |t| format!("{t} s"));
            writeln!(f, "  {:fam_w$}  max versions {}, TTL {ttl}", fam.name, fam.max_versions)?;
        }
        writeln!(f, "columns:")?;
        let names: Vec<String> = s.columns.iter().map(|c| format!("{}:{}", c.family, c.qualifier)).collect();
        let col_w = names.iter().map(String::len).max().unwrap_or(0);
        let field_w = s.columns.iter().map(|c| c.field.len() + c.type_name.len() + 2).max().unwrap_or(0);
        for (c, name) in s.columns.iter().zip(&names) {
            let field = format!("{}: {}", c.field, c.type_name);
            let role = match c.kind {
                ColumnKind::Value | ColumnKind::Serde | ColumnKind::Blob => "",
                ColumnKind::Counter => ", counter (changed by increments only)",
                ColumnKind::Version => ", version (optimistic writes)",
                ColumnKind::HashedKey => ", original of a hashed key part",
            };
            writeln!(f, "  {name:col_w$}  {field:field_w$}  {}{role}", c.encoding)?;
        }
        if !s.wide.is_empty() {
            writeln!(f, "maps stored as columns (one qualifier per entry):")?;
            let field_w = s.wide.iter().map(|w| w.field.len()).max().unwrap_or(0);
            for w in s.wide {
                let prefix = if w.prefix.is_empty() {
                    String::new()
                } else {
                    format!("\"{}\" + ", cellar_engine::to_printable(w.prefix))
                };
                let order = if w.key.modifier == Modifier::Desc { "largest first" } else { "smallest first" };
                let read = if w.lazy { "lazy: read on demand" } else { "read with the entity" };
                writeln!(f, "  {:field_w$}  {}:{prefix}key, {order}, {read}", w.field, w.family)?;
            }
        }
        if !s.indexes.is_empty() {
            writeln!(f, "indexes (table `{}`):", crate::index::index_table(s.table))?;
            for index in s.indexes {
                let parts: Vec<String> = index
                    .parts
                    .iter()
                    .map(|p| match p.spec.modifier {
                        Modifier::Desc => format!("{} desc", p.field),
                        Modifier::Md5 => format!("{} md5", p.field),
                        _ => p.field.to_string(),
                    })
                    .collect();
                let mut line = format!("  {}  on ({})", index.name, parts.join(", "));
                if !index.include.is_empty() {
                    let include: Vec<&str> = index.include.iter().map(|&c| s.columns[c].field).collect();
                    line.push_str(&format!(", includes ({})", include.join(", ")));
                }
                if index.unique {
                    line.push_str(", unique");
                }
                writeln!(f, "{line}")?;
            }
        }
        Ok(())
    }
}
