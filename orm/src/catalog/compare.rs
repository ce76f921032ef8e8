//! The rules of schema evolution: what differs between the schema a catalog holds and the one a
//! release declares, and whether the declared one can read and write what the table holds.
//!
//! | change | verdict |
//! |---|---|
//! | field added as `Option`, counter, version or with `#[cellar(default)]` | compatible |
//! | field added without a default | incompatible: rows written before it would not read |
//! | field dropped | compatible: its cells stay, reads ignore them |
//! | column renamed with `rename_from`/`aliases` | compatible |
//! | column moved without naming the old qualifier | incompatible |
//! | integer widened within its signedness, `f32` → `f64` | compatible |
//! | `T` → `Option<T>` | compatible |
//! | `Option<T>` → `T` with a default | compatible; without one incompatible |
//! | any other change of a column's type or kind | incompatible: a new column and a migration, or a versioned blob |
//! | row key changed (parts, order, encodings, salt, record type) | incompatible: a new table and a re-keying copy |
//! | index added or redefined | compatible (built by its backfill) |
//! | index the catalog holds missing | incompatible: its writes would not maintain it (`Db::drop_index`) |
//! | family added, or its settings changed | compatible (settings change through `Db::alter`) |
//! | map-as-columns field added or dropped | compatible; its family, prefix or key type changed: incompatible |
//! | aggregate strategy changed | incompatible: a new table and a copy |
//! | aggregate part added or dropped | compatible; a part's key or record type changed: incompatible |

use super::describe::{ChildLayout, ColumnLayout, IndexLayout, KeyLayout, KeyPartLayout, TypeSchema};

/// One difference between the stored and the declared schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    /// Whether the declared schema can read and write what the table holds despite it.
    pub compatible: bool,
    /// What changed, and for an incompatible change the way forward.
    pub what: String,
}

fn ok(what: String) -> Difference {
    Difference { compatible: true, what }
}

fn refused(what: String) -> Difference {
    Difference { compatible: false, what }
}

/// Every difference from `stored` to `declared`, compatible ones included.
pub fn differences(stored: &TypeSchema, declared: &TypeSchema) -> Vec<Difference> {
    let mut out = Vec::new();
    compare_type(stored, declared, "", &mut out);
    out
}

fn compare_type(stored: &TypeSchema, declared: &TypeSchema, at: &str, out: &mut Vec<Difference>) {
    if stored.key != declared.key {
        // Two types of one name on one table look like one type whose key changed.
        let hint = if stored.key.record_type != declared.key.record_type {
            " (or two types named alike share the table: the catalog tells them apart by name, rename one)"
        } else {
            ""
        };
        out.push(refused(format!(
            "{at}row key changed from {} to {}: a key change is a new table; declare the new key on another table \
             and copy the entities into it with `copy_to(..).rekey(..)`{hint}",
            key_text(&stored.key),
            key_text(&declared.key)
        )));
    }
    compare_columns(stored, declared, at, out);
    compare_families(stored, declared, at, out);
    compare_indexes(stored, declared, at, out);
    compare_wide(stored, declared, at, out);
    match (&stored.aggregate, &declared.aggregate) {
        (Some(s), Some(d)) => {
            if s.strategy != d.strategy {
                out.push(refused(format!(
                    "strategy changed from {} to {}: the rows are laid out differently; declare the aggregate on new \
                     tables and copy it across",
                    s.strategy, d.strategy
                )));
            }
            if d.blob_version < s.blob_version {
                out.push(refused(format!(
                    "blob version went back from {} to {}: aggregates written at the newer version would not read",
                    version_text(s.blob_version),
                    version_text(d.blob_version)
                )));
            } else if s.blob_version != d.blob_version {
                out.push(ok(format!(
                    "blob version {} -> {} (older cells migrate on read)",
                    version_text(s.blob_version),
                    version_text(d.blob_version)
                )));
            }
            compare_children(&s.children, &d.children, at, out);
        }
        (None, None) => {}
        _ => out.push(refused(format!("{at}changed between an entity and an aggregate root: use a new table"))),
    }
}

fn version_text(v: Option<u32>) -> String {
    v.map_or("none".into(), |v| v.to_string())
}

fn compare_children(stored: &[ChildLayout], declared: &[ChildLayout], at: &str, out: &mut Vec<Difference>) {
    for s in stored {
        match declared.iter().find(|d| d.field == s.field) {
            Some(d) => {
                if s.record_type != d.record_type {
                    out.push(refused(format!(
                        "{at}part `{}` changed record type {:?} -> {:?}: its rows' keys change; use a new table",
                        s.field, s.record_type, d.record_type
                    )));
                }
                let inner = format!("{at}{}.", s.field);
                compare_type(&s.part, &d.part, &inner, out);
                compare_children(&s.children, &d.children, &inner, out);
            }
            None => out.push(ok(format!("{at}dropped part collection `{}`: its rows are ignored", s.field))),
        }
    }
    for d in declared.iter().filter(|d| !stored.iter().any(|s| s.field == d.field)) {
        out.push(ok(format!("{at}added part collection `{}`", d.field)));
    }
}

fn key_text(key: &KeyLayout) -> String {
    let part = |p: &KeyPartLayout| {
        let mut s = format!("{}: {}", p.field, p.type_name);
        if p.modifier != "none" {
            s.push_str(&format!(" {}", p.modifier));
        }
        if p.form.starts_with("fixed") {
            s.push_str(&format!(" {}", p.form));
        }
        if let Some(uid) = &p.uid {
            s.push_str(&format!(" uid {uid}"));
        }
        s
    };
    let mut parts: Vec<String> = Vec::new();
    if key.salt != "none" {
        parts.push(format!("salt {}", key.salt));
    }
    parts.extend(key.partition.iter().map(part));
    if let Some(t) = key.record_type {
        parts.push(format!("record type {t}"));
    }
    parts.extend(key.key.iter().map(part));
    format!("({})", parts.join(", "))
}

/// `Option<T>` → `(true, "T")`, with module paths left out (`std::string::String` is `String`).
fn shape(type_name: &str) -> (bool, String) {
    let plain: String = type_name.chars().filter(|c| !c.is_whitespace()).collect();
    let plain = strip_paths(&plain);
    match plain.strip_prefix("Option<").and_then(|t| t.strip_suffix('>')) {
        Some(inner) => (true, inner.to_string()),
        None => (false, plain),
    }
}

fn strip_paths(t: &str) -> String {
    let mut out = String::new();
    let mut ident = String::new();
    let mut chars = t.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_alphanumeric() || c == '_' {
            ident.push(c);
        } else if c == ':' && chars.peek() == Some(&':') {
            chars.next();
            ident.clear();
        } else {
            out.push_str(&ident);
            ident.clear();
            out.push(c);
        }
    }
    out.push_str(&ident);
    out
}

const SIGNED: &[&str] = &["i8", "i16", "i32", "i64", "i128"];
const UNSIGNED: &[&str] = &["u8", "u16", "u32", "u64", "u128"];

/// True if cells written as `from` read as `to` (plain-value columns).
fn widens(from: &str, to: &str) -> bool {
    let rank = |chain: &[&str], t: &str| chain.iter().position(|c| *c == t);
    let within = |chain: &[&str]| matches!((rank(chain, from), rank(chain, to)), (Some(a), Some(b)) if a < b);
    within(SIGNED) || within(UNSIGNED) || (from == "f32" && to == "f64")
}

fn column_name(c: &ColumnLayout) -> String {
    format!("{}:{}", c.family, c.qualifier)
}

fn compare_columns(stored: &TypeSchema, declared: &TypeSchema, at: &str, out: &mut Vec<Difference>) {
    let mut matched = vec![false; declared.columns.len()];
    for s in &stored.columns {
        let same = declared.columns.iter().position(|d| d.family == s.family && d.qualifier == s.qualifier);
        let renamed = || declared.columns.iter().position(|d| d.family == s.family && d.aliases.contains(&s.qualifier));
        match same.or_else(renamed) {
            Some(i) => {
                matched[i] = true;
                let d = &declared.columns[i];
                if d.qualifier != s.qualifier {
                    out.push(ok(format!(
                        "{at}renamed column {} -> {} (field `{}`)",
                        column_name(s),
                        column_name(d),
                        d.field
                    )));
                }
                compare_column(s, d, at, out);
            }
            None => match declared.columns.iter().position(|d| d.field == s.field) {
                Some(i) if !matched[i] => {
                    matched[i] = true;
                    let d = &declared.columns[i];
                    out.push(refused(format!(
                        "{at}field `{}` moved from column {} to {} without naming the old one: declare \
                         `rename_from = \"{}\"`{}",
                        s.field,
                        column_name(s),
                        column_name(d),
                        s.qualifier,
                        if s.family != d.family {
                            " in its old family, or move it with a migration (a rename stays in its family)"
                        } else {
                            ""
                        }
                    )));
                }
                _ => out.push(ok(format!(
                    "{at}dropped field `{}` ({}): its cells stay and reads ignore them (see `Db::census`)",
                    s.field,
                    column_name(s)
                ))),
            },
        }
    }
    for (d, _) in declared.columns.iter().zip(&matched).filter(|(_, m)| !**m) {
        let (optional, _) = shape(&d.type_name);
        let defaulted = optional || d.default.is_some() || matches!(d.kind.as_str(), "counter" | "version");
        if defaulted {
            out.push(ok(format!("{at}added field `{}` ({}, {})", d.field, d.type_name, column_name(d))));
        } else if d.kind == "hashed_key" {
            // Comes with a changed key, which is refused on its own.
        } else {
            out.push(refused(format!(
                "{at}added field `{}` ({}) has no default: rows written before it would not read; declare \
                 `#[cellar(default)]` or make it an `Option`",
                d.field, d.type_name
            )));
        }
    }
}

fn compare_column(s: &ColumnLayout, d: &ColumnLayout, at: &str, out: &mut Vec<Difference>) {
    let field = &d.field;
    if s.kind != d.kind {
        out.push(refused(format!(
            "{at}field `{field}` changed from a {} column to a {} column: its cells do not read as the new kind; add \
             a new column and migrate the values",
            s.kind, d.kind
        )));
        return;
    }
    if s.kind == "blob" {
        let (s_ty, d_ty) = (shape(&s.type_name).1, shape(&d.type_name).1);
        if s_ty != d_ty {
            out.push(refused(format!(
                "{at}blob field `{field}` changed type from {s_ty} to {d_ty}: a blob reads the versions of its own \
                 type; add the new type's versions to it, or add a new column and migrate"
            )));
        } else if d.blob_version < s.blob_version {
            out.push(refused(format!(
                "{at}blob field `{field}` went back from version {} to {}: cells written at the newer version \
                 would not read",
                version_text(s.blob_version),
                version_text(d.blob_version)
            )));
        } else if s.blob_version != d.blob_version {
            out.push(ok(format!(
                "{at}blob field `{field}` version {} -> {} (older cells migrate on read)",
                version_text(s.blob_version),
                version_text(d.blob_version)
            )));
        }
        return;
    }
    let ((s_opt, s_ty), (d_opt, d_ty)) = (shape(&s.type_name), shape(&d.type_name));
    if s_ty != d_ty {
        if s.kind == "value" && widens(&s_ty, &d_ty) {
            out.push(ok(format!("{at}widened field `{field}` from {s_ty} to {d_ty}")));
        } else {
            let how = if s.kind == "serde" {
                "MessagePack of one type does not read as another"
            } else {
                "a cell written as the old type does not read as the new one"
            };
            out.push(refused(format!(
                "{at}field `{field}` changed type from {} to {}: {how}; add a new column and migrate the values, or \
                 store the field as a versioned blob (`#[cellar(blob)]`)",
                s.type_name, d.type_name
            )));
            return;
        }
    }
    match (s_opt, d_opt) {
        (false, true) => out.push(ok(format!("{at}field `{field}` became optional"))),
        (true, false) if d.default.is_some() => {
            out.push(ok(format!("{at}field `{field}` became required, reading absent cells as its default")))
        }
        (true, false) => out.push(refused(format!(
            "{at}field `{field}` became required without a default: rows without its cell would not read; declare \
             `#[cellar(default)]`"
        ))),
        _ => {}
    }
    match (&s.default, &d.default) {
        (None, Some(def)) if !s_opt => out.push(ok(format!("{at}field `{field}` reads absent cells as {}", def.expr))),
        (Some(a), Some(b)) if a != b => {
            out.push(ok(format!("{at}field `{field}` default changed from {} to {}", a.expr, b.expr)))
        }
        (Some(_), None) if !d_opt => out.push(refused(format!(
            "{at}field `{field}` lost its default: rows without its cell would not read (check with `Db::census` \
             that none is left, or keep the default)"
        ))),
        _ => {}
    }
}

fn settings_text(f: &super::describe::FamilyLayout) -> String {
    let versions = if f.max_versions == 1 { "1 version".to_string() } else { format!("{} versions", f.max_versions) };
    match f.ttl_secs {
        Some(ttl) => format!("{versions}, TTL {ttl} s"),
        None => format!("{versions}, no TTL"),
    }
}

fn compare_families(stored: &TypeSchema, declared: &TypeSchema, at: &str, out: &mut Vec<Difference>) {
    for d in &declared.families {
        match stored.families.iter().find(|s| s.name == d.name) {
            None => out.push(ok(format!("{at}added family `{}`", d.name))),
            Some(s) if s != d => {
                out.push(ok(format!("{at}family `{}`: {} -> {}", d.name, settings_text(s), settings_text(d))))
            }
            Some(_) => {}
        }
    }
    for s in stored.families.iter().filter(|s| !declared.families.iter().any(|d| d.name == s.name)) {
        out.push(ok(format!("{at}family `{}` no longer used: its cells stay", s.name)));
    }
}

fn compare_indexes(stored: &TypeSchema, declared: &TypeSchema, at: &str, out: &mut Vec<Difference>) {
    for s in &stored.indexes {
        match declared.indexes.iter().find(|d| d.name == s.name) {
            None => out.push(refused(format!("{at}{}", lacks_index(&s.name)))),
            Some(d) if index_signature(declared, d) != index_signature(stored, s) => {
                out.push(ok(format!("{at}redefined index `{}` (its backfill rebuilds the entries)", s.name)))
            }
            Some(_) => {}
        }
    }
    for d in declared.indexes.iter().filter(|d| !stored.indexes.iter().any(|s| s.name == d.name)) {
        out.push(ok(format!("{at}added index `{}` (pending until its backfill if the table has rows)", d.name)));
    }
}

/// Why an older release — its schema an earlier version of the history — may not run beside
/// the current one: empty if it may. It reads what it can (section "Older releases" of the
/// module docs of [`super`]), but it may not write without an index added or redefined since,
/// nor read a column a newer release renamed without reading the new qualifier: it would read
/// values as they were before the newer release's writes.
pub(crate) fn older_release(current: &TypeSchema, declared: &TypeSchema) -> Vec<String> {
    let mut refused = Vec::new();
    for index in &current.indexes {
        match declared.indexes.iter().find(|d| d.name == index.name) {
            None => refused.push(lacks_index(&index.name)),
            Some(d) if index_signature(declared, d) != index_signature(current, index) => refused.push(format!(
                "declares index `{}` as it was before a newer release redefined it: its writes would keep entries \
                 of the old definition; deploy the newer definition",
                index.name
            )),
            Some(_) => {}
        }
    }
    for c in current.columns.iter().filter(|c| !c.aliases.is_empty()) {
        let stale = declared.columns.iter().find(|d| {
            d.family == c.family
                && d.qualifier != c.qualifier
                && c.aliases.contains(&d.qualifier)
                && !d.aliases.contains(&c.qualifier)
        });
        if let Some(d) = stale {
            refused.push(format!(
                "reads field `{}` from {}, which a newer release moved to {}: it would read values as they were \
                 before the newer release's writes; first deploy a release that reads both (`column = \"{}\", \
                 aliases = [\"{}\"]`)",
                d.field,
                column_name(d),
                column_name(c),
                d.qualifier,
                c.qualifier
            ));
        }
    }
    refused
}

/// An index's definition with the columns its parts and copies read.
fn index_signature<'s>(schema: &'s TypeSchema, index: &'s IndexLayout) -> (&'s IndexLayout, Vec<Option<String>>) {
    let column = |field: &str| schema.columns.iter().find(|c| c.field == field).map(column_name);
    let fields = index.parts.iter().map(|p| p.field.as_str()).chain(index.include.iter().map(String::as_str));
    (index, fields.map(column).collect())
}

/// Columns `declared` adds (or reads through an alias) at a qualifier an earlier version used
/// for a field of another type: the old cells are still in the rows and would read as the new
/// type. `history` is every version, oldest first; `current` the newest.
pub(crate) fn reused_qualifiers(
    history: &[&TypeSchema],
    current: &TypeSchema,
    declared: &TypeSchema,
) -> Vec<Difference> {
    let mut out = Vec::new();
    for d in &declared.columns {
        for qualifier in std::iter::once(&d.qualifier).chain(&d.aliases) {
            // A qualifier the current version maps is compared with it by `differences`.
            if current.columns.iter().any(|c| c.family == d.family && c.qualifier == *qualifier) {
                continue;
            }
            let earlier = history.iter().enumerate().rev().find_map(|(i, v)| {
                v.columns.iter().find(|c| c.family == d.family && c.qualifier == *qualifier).map(|c| (i + 1, c))
            });
            if let Some((version, old)) = earlier.filter(|(_, old)| !reads_as(old, d)) {
                out.push(refused(format!(
                    "field `{}` ({}) reads {}:{qualifier}, which held field `{}` ({}) in version {version}: those \
                     cells are still in the rows and would read as the new type; choose another qualifier",
                    d.field, d.type_name, d.family, old.field, old.type_name
                )));
            }
        }
    }
    out
}

/// True if cells written for column `old` read as column `new`.
fn reads_as(old: &ColumnLayout, new: &ColumnLayout) -> bool {
    let ((_, old_ty), (_, new_ty)) = (shape(&old.type_name), shape(&new.type_name));
    old.kind == new.kind
        && (old_ty == new_ty || old.kind == "blob" || (old.kind == "value" && widens(&old_ty, &new_ty)))
}

/// Why a release without index `name`, which the catalog holds, is refused.
pub(crate) fn lacks_index(name: &str) -> String {
    format!(
        "lacks index `{name}`, which the catalog holds: this release's writes would not maintain it; declare it, or \
         drop it first with `Db::drop_index`"
    )
}

fn compare_wide(stored: &TypeSchema, declared: &TypeSchema, at: &str, out: &mut Vec<Difference>) {
    for s in &stored.wide {
        match declared.wide.iter().find(|d| d.field == s.field) {
            None => out.push(ok(format!("{at}dropped map field `{}`: its columns stay", s.field))),
            Some(d)
                if (&d.family, &d.prefix_hex, &d.key_type, &d.value_type, d.desc)
                    != (&s.family, &s.prefix_hex, &s.key_type, &s.value_type, s.desc) =>
            {
                out.push(refused(format!(
                    "{at}map field `{}` changed its family, prefix, key or value type: its entries would not read; \
                     use a new field and migrate the entries",
                    s.field
                )))
            }
            Some(d) if d.lazy != s.lazy => {
                out.push(ok(format!("{at}map field `{}` lazy: {} -> {}", s.field, s.lazy, d.lazy)))
            }
            Some(_) => {}
        }
    }
    for d in declared.wide.iter().filter(|d| !stored.wide.iter().any(|s| s.field == d.field)) {
        out.push(ok(format!("{at}added map field `{}`", d.field)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widening_stays_within_signedness() {
        assert!(widens("i32", "i64") && widens("u8", "u64") && widens("f32", "f64") && widens("i8", "i128"));
        assert!(!widens("u32", "i64") && !widens("i64", "i32") && !widens("f64", "f32") && !widens("i32", "f32"));
    }

    #[test]
    fn type_shapes_ignore_paths_and_spaces() {
        assert_eq!(shape("Option < std::string::String >"), (true, "String".into()));
        assert_eq!(shape("Vec<u8>"), (false, "Vec<u8>".into()));
        assert_eq!(shape("::std::collections::BTreeMap<String,u64>"), (false, "BTreeMap<String,u64>".into()));
    }
}
