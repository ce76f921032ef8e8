//! Phase two: check the parsed entity against the rules of the key language and the column
//! mapping, reporting every violation at the tokens that cause it.

use std::collections::BTreeMap;

use proc_macro2::Span;
use syn::spanned::Spanned;
use syn::Type;

use crate::attr::{sym, Ctx, EntityAttr, FieldAttr, IndexAttr, Kind, ModifierAttr, SaltAttr};

/// The last path segment of a type (`u64` for `std::primitive::u64`), if it is a path.
pub fn type_name(ty: &Type) -> Option<String> {
    match ty {
        Type::Path(p) => p.path.segments.last().map(|s| s.ident.to_string()),
        _ => None,
    }
}

/// True for `Option<...>`.
pub fn is_option(ty: &Type) -> bool {
    type_name(ty).as_deref() == Some("Option")
}

const INTEGERS: &[&str] = &["u8", "u16", "u32", "u64", "u128", "i8", "i16", "i32", "i64", "i128"];

/// The family and qualifier a stored field maps to.
pub fn column_of(entity: &EntityAttr, f: &FieldAttr) -> (String, String) {
    let family = f.family.as_ref().map_or_else(|| entity.family.clone(), |s| s.value.clone());
    let qualifier = f.column.as_ref().map_or_else(|| f.ident.to_string(), |s| s.value.clone());
    (family, qualifier)
}

/// The strategies `#[cellar(strategy = "...")]` takes.
pub const STRATEGIES: &[&str] = &["normalized", "single_table", "denormalized", "blob"];

/// The element type of `Vec<T>`.
pub fn vec_element(ty: &Type) -> Option<&Type> {
    type_argument(ty, "Vec")
}

/// `T` of `Option<T>`.
pub fn option_element(ty: &Type) -> Option<&Type> {
    type_argument(ty, "Option")
}

/// The one type argument of `wrapper<T>`.
fn type_argument<'t>(ty: &'t Type, wrapper: &str) -> Option<&'t Type> {
    let Type::Path(p) = ty else { return None };
    let last = p.path.segments.last().filter(|s| s.ident == wrapper)?;
    let syn::PathArguments::AngleBracketed(args) = &last.arguments else { return None };
    match args.args.first()? {
        syn::GenericArgument::Type(t) => Some(t),
        _ => None,
    }
}

pub fn check(ctx: &mut Ctx, e: &EntityAttr) {
    if e.table.is_empty() && e.kind != Kind::Part {
        ctx.error(e.ident.span(), "table name must not be empty");
    }
    if !e.fields.iter().any(FieldAttr::is_key_part) {
        let msg = match e.kind {
            Kind::Entity => "an entity needs a row key: mark fields #[cellar(partition)] or #[cellar(key)]",
            Kind::Aggregate => "an aggregate root needs a key: mark fields #[cellar(partition)] or #[cellar(key)]",
            Kind::Part => "a part needs a key, unique among its siblings: mark fields #[cellar(key)]",
        };
        ctx.error(e.ident.span(), msg);
    }
    check_kind(ctx, e);
    check_indexes(ctx, e);
    check_wide(ctx, e);
    check_uid(ctx, e);
    let mut versions = 0;
    let mut columns: BTreeMap<(String, String), Span> = BTreeMap::new();
    let mut last_key_seen = false;
    for f in &e.fields {
        let ty = type_name(&f.ty).unwrap_or_default();
        let span = f.ident.span();
        if let Some(skip) = f.skip {
            let others = f.is_key_part()
                || f.counter.is_some()
                || f.version.is_some()
                || f.column.is_some()
                || f.default.is_some()
                || !f.aliases.is_empty();
            if others || f.family.is_some() || f.serde.is_some() || !f.modifiers.is_empty() {
                ctx.error(skip, "a skipped field takes no other attribute");
            }
            continue;
        }
        if f.partition.is_some() && f.key.is_some() {
            ctx.error(span, "a field is either a partition part or a key part, not both");
        }
        if f.partition.is_some() && last_key_seen {
            ctx.error(span, "partition parts come before key parts");
        }
        last_key_seen |= f.key.is_some();
        if f.is_key_part() {
            check_key_part(ctx, f, &ty);
        } else {
            for m in &f.modifiers {
                ctx.error(m.span, "key modifiers apply to #[cellar(partition)] or #[cellar(key)] fields");
            }
            match &f.fixed {
                Some(fixed) if e.indexes.iter().any(|i| i.parts.iter().any(|p| p.field == f.ident)) => {
                    // An optional string is indexed as the string.
                    let inner = option_element(&f.ty).and_then(type_name).unwrap_or_else(|| ty.clone());
                    check_fixed(ctx, fixed, &inner)
                }
                Some(fixed) => ctx.error(fixed.span, "`fixed` applies to key parts and indexed fields"),
                None => {}
            }
        }
        if let Some(c) = f.counter {
            if ty != "i64" {
                ctx.error(c, "a counter must be an `i64` (stored as an 8-byte big-endian cell)");
            }
            if f.serde.is_some() || f.version.is_some() || f.is_key_part() {
                ctx.error(c, "a counter cannot also be a key part, a version or serde-encoded");
            }
        }
        if let Some(v) = f.version {
            versions += 1;
            if ty != "u64" {
                ctx.error(v, "the version field must be a `u64`");
            }
            if versions > 1 {
                ctx.error(v, "an entity has at most one version field");
            }
        }
        if let Some(b) = f.blob {
            if f.serde.is_some() || f.counter.is_some() || f.version.is_some() || f.is_key_part() {
                ctx.error(b, "a blob field is a column of its own: not a key part, counter, version or serde");
            }
        }
        if f.is_key_part() && (f.family.is_some() || f.column.is_some() || f.serde.is_some()) && !f.is_hashed() {
            ctx.error(span, "a key part is stored in the row key, not in a column (except a hashed one)");
        }
        if f.is_stored() {
            let col = column_of(e, f);
            if col.1.is_empty() {
                ctx.error(span, "qualifier must not be empty");
            }
            if let Some(first) = columns.insert(col.clone(), span) {
                ctx.error(span, format!("duplicate column `{}:{}`", col.0, col.1));
                ctx.error(first, format!("`{}:{}` first mapped here", col.0, col.1));
            }
        }
        check_evolution(ctx, f);
    }
    check_aliases(ctx, e);
    for fam in e.families.iter().skip(1) {
        let span = fam.span.unwrap_or_else(|| e.ident.span());
        if fam.name.is_empty() {
            ctx.error(span, "family_options needs `name = \"...\"`");
        }
        let wide_family =
            |f: &FieldAttr| f.wide.as_ref().and_then(|w| w.value.family.as_ref()).is_some_and(|w| w.value == fam.name);
        if !e.fields.iter().any(|f| (f.is_stored() && column_of(e, f).0 == fam.name) || wide_family(f)) {
            ctx.error(span, format!("no field is stored in family `{}`", fam.name));
        }
    }
    if let Some(salt) = &e.salt {
        let buckets = match &salt.value {
            SaltAttr::Hash { buckets } | SaltAttr::Random { buckets } => *buckets,
            SaltAttr::Bucket { field, buckets } => {
                match e.fields.iter().find(|f| f.ident == field.value) {
                    Some(f) if f.is_key_part() => {}
                    Some(_) => ctx.error(field.span, "the bucket field must be a key part"),
                    None => ctx.error(field.span, format!("no field `{}`", field.value)),
                }
                *buckets
            }
        };
        if buckets == 0 {
            ctx.error(salt.span, "buckets must be 1 to 255");
        }
    }
}

/// `default` and `rename_from`/`aliases`: for plain, serde and blob columns only.
fn check_evolution(ctx: &mut Ctx, f: &FieldAttr) {
    if let Some(default) = &f.default {
        let why = if f.is_key_part() {
            Some("a key part is always in the row key: it takes no default")
        } else if f.counter.is_some() {
            Some("a counter reads a missing cell as 0 already")
        } else if f.version.is_some() {
            Some("a version field takes no default: its cell is the optimistic-concurrency check")
        } else if f.children.is_some() || f.wide.is_some() {
            Some("a collection reads as empty without rows or columns already")
        } else if is_option(&f.ty) {
            Some("an `Option` field reads a missing cell as `None` already; `default` is for required fields")
        } else {
            None
        };
        if let Some(why) = why {
            ctx.error(default.span, why);
        }
    }
    if let Some(alias) = f.aliases.first() {
        let why = if f.is_key_part() {
            Some("a key part is stored in the row key: renaming it is a change of key (a new table and a copy)")
        } else if f.counter.is_some() {
            Some("a counter cannot be renamed: increments of the new column would start again from zero")
        } else if f.version.is_some() {
            Some("a version field cannot be renamed: its cell is the optimistic-concurrency check")
        } else if f.children.is_some() || f.wide.is_some() {
            Some("`rename_from` and `aliases` apply to fields stored in one column")
        } else {
            None
        };
        if let Some(why) = why {
            ctx.error(alias.span, why);
        }
    }
}

/// Every alias names a qualifier no other column of its family uses, and is not the column's
/// own.
fn check_aliases(ctx: &mut Ctx, e: &EntityAttr) {
    let stored: Vec<(&FieldAttr, (String, String))> =
        e.fields.iter().filter(|f| f.is_stored()).map(|f| (f, column_of(e, f))).collect();
    let mut seen: BTreeMap<(String, String), String> = BTreeMap::new();
    for (f, (family, qualifier)) in &stored {
        for alias in &f.aliases {
            if alias.value.is_empty() {
                ctx.error(alias.span, "an earlier qualifier must not be empty");
            } else if &alias.value == qualifier {
                ctx.error(alias.span, format!("`{}` is the column's own qualifier", alias.value));
            } else if let Some((other, _)) = stored.iter().find(|(_, c)| c.0 == *family && c.1 == alias.value) {
                ctx.error(alias.span, format!("`{family}:{}` is the column of field `{}`", alias.value, other.ident));
            } else if let Some(other) = seen.insert((family.clone(), alias.value.clone()), f.ident.to_string()) {
                ctx.error(
                    alias.span,
                    format!("`{family}:{}` is already an earlier qualifier of field `{other}`", alias.value),
                );
            }
        }
    }
}

/// What only aggregates and parts take, and what they may not.
fn check_kind(ctx: &mut Ctx, e: &EntityAttr) {
    match e.kind {
        Kind::Entity => {
            if let Some(s) = &e.strategy {
                ctx.error(s.span, "`strategy` applies to #[derive(Aggregate)] roots");
            }
            if let Some(b) = e.versioned_blob {
                ctx.error(
                    b,
                    "`blob(...)` on an entity: mark the field #[cellar(blob)] and derive Versioned on its type",
                );
            }
        }
        Kind::Part => {
            for a in e.root_only.iter().filter(|a| a.value != sym::FAMILY) {
                ctx.error(a.span, format!("`{}` is set on the aggregate root, not on a part", a.value));
            }
        }
        Kind::Aggregate => {
            let blob_strategy = e.strategy.as_ref().is_some_and(|s| s.value == "blob");
            if let Some(b) = e.versioned_blob.filter(|_| !blob_strategy) {
                ctx.error(b, "`blob(...)` versions a `blob` aggregate: set strategy = \"blob\"");
            }
            if let Some(s) = e.strategy.as_ref().filter(|s| !STRATEGIES.contains(&s.value.as_str())) {
                ctx.error(s.span, format!("unknown strategy `{}`; one of: {}", s.value, STRATEGIES.join(", ")));
            }
            if let Some(salt) = e.salt.as_ref().filter(|s| matches!(s.value, SaltAttr::Random { .. })) {
                ctx.error(salt.span, "an aggregate cannot take a random salt: its rows must be found again");
            }
            check_aggregate_ttl(ctx, e);
            // Only typed strategies put record-type bytes in their rows; elsewhere one would be ignored.
            let untyped = e.strategy.as_ref().filter(|s| matches!(s.value.as_str(), "normalized" | "blob"));
            if let Some(s) = untyped {
                let what = format!("record types apply to single_table and denormalized aggregates, not `{}`", s.value);
                if e.record_type.is_some() {
                    ctx.error(s.span, format!("{what}: remove `record_type`"));
                }
                for rt in e.fields.iter().filter_map(|f| f.record_type.as_ref()) {
                    ctx.error(rt.span, what.clone());
                }
            }
        }
    }
    for f in &e.fields {
        if let Some(rt) = &f.record_type {
            if f.children.is_none() {
                ctx.error(rt.span, "`record_type` on a field names the record type of a `children` collection");
            }
        }
        if let Some(c) = f.children {
            if e.kind == Kind::Entity {
                ctx.error(c, "`children` applies to #[derive(Aggregate)] and #[derive(Part)] types");
            }
            if vec_element(&f.ty).is_none() {
                ctx.error(f.ty.span(), "a `children` field is a `Vec` of a #[derive(Part)] type");
            }
            if f.has_cell_attributes() {
                ctx.error(c, "a `children` field takes no other attribute but `record_type`");
            }
        }
        if e.kind == Kind::Entity {
            continue;
        }
        if let Some(p) = f.partition.filter(|_| e.kind == Kind::Part) {
            ctx.error(p, "a part's key parts are #[cellar(key)]; partition parts belong to the aggregate root");
        }
        if let Some(s) = f.counter.or(f.version) {
            ctx.error(s, "aggregates do not take counters or version fields");
        }
    }
}

/// The key and value types of `BTreeMap<K, V>`.
pub fn map_types(ty: &Type) -> Option<(&Type, &Type)> {
    let Type::Path(p) = ty else { return None };
    let last = p.path.segments.last().filter(|s| s.ident == "BTreeMap")?;
    let syn::PathArguments::AngleBracketed(args) = &last.arguments else { return None };
    let mut types = args.args.iter().filter_map(|a| match a {
        syn::GenericArgument::Type(t) => Some(t),
        _ => None,
    });
    Some((types.next()?, types.next()?))
}

/// The constant a wide field or counter gets on the entity's impl.
pub fn field_const(f: &FieldAttr) -> String {
    f.ident.to_string().to_uppercase()
}

/// Wide fields: a `BTreeMap` on an entity, alone in a family of its own.
fn check_wide(ctx: &mut Ctx, e: &EntityAttr) {
    let mut families: BTreeMap<String, Span> = BTreeMap::new();
    for f in &e.fields {
        let Some(wide) = &f.wide else { continue };
        let span = wide.span;
        if e.kind != Kind::Entity {
            ctx.error(span, "`columns(...)` applies to #[derive(Entity)] fields; aggregates store parts as rows");
        }
        if map_types(&f.ty).is_none() {
            ctx.error(f.ty.span(), "a `columns(...)` field is a `BTreeMap<K, V>` (K a key-part type, V a column type)");
        }
        let others = f.children.is_some() || f.index.is_some() || f.fixed.is_some() || f.uid.is_some();
        if f.has_cell_attributes() || others {
            ctx.error(
                span,
                "a `columns(...)` field takes no other attribute (its options go inside: family, prefix, desc, lazy)",
            );
        }
        let Some(family) = &wide.value.family else { continue };
        if family.value.is_empty() {
            ctx.error(family.span, "family must not be empty");
        }
        if family.value == e.family {
            ctx.error(
                family.span,
                format!("`{}` is the default family: a map's entries need a family of their own", family.value),
            );
        }
        if let Some(other) = e.fields.iter().find(|o| o.is_stored() && column_of(e, o).0 == family.value) {
            ctx.error(
                family.span,
                format!(
                    "family `{}` also holds `{}`: a map's entries need a family of their own",
                    family.value, other.ident
                ),
            );
        }
        if let Some(first) = families.insert(family.value.clone(), family.span) {
            ctx.error(family.span, format!("family `{}` holds another map already", family.value));
            ctx.error(first, format!("family `{}` first used here", family.value));
        }
        let konst = field_const(f);
        if let Some(c) = e.fields.iter().find(|c| c.counter.is_some() && field_const(c) == konst) {
            ctx.error(span, format!("the constant `{konst}` is also the counter `{}`'s", c.ident));
        }
        if let Some(i) = e.indexes.iter().find(|i| i.name.value.to_uppercase() == konst) {
            ctx.error(span, format!("the constant `{konst}` is also the index `{}`'s", i.name.value));
        }
    }
}

/// Key parts stored as uids: `String` key parts of an entity, uids of 3 to 8 bytes.
fn check_uid(ctx: &mut Ctx, e: &EntityAttr) {
    for f in &e.fields {
        let Some(uid) = &f.uid else { continue };
        let span = uid.span;
        if e.kind != Kind::Entity {
            ctx.error(span, "`uid` applies to #[derive(Entity)] key parts");
        }
        if !f.is_key_part() {
            ctx.error(span, "`uid` applies to key parts: mark the field #[cellar(key)] or #[cellar(partition)]");
        }
        if type_name(&f.ty).as_deref() != Some("String") {
            ctx.error(f.ty.span(), "a key part stored as a uid is a `String`");
        }
        if !f.modifiers.is_empty() || f.fixed.is_some() {
            ctx.error(span, "a key part stored as a uid takes no modifier or `fixed`: its uid has a width of its own");
        }
        if !(3..=8).contains(&uid.value.width) {
            ctx.error(span, format!("uid width {}: uids take 3 to 8 bytes", uid.value.width));
        }
        if let Some(index) = e.indexes.first() {
            ctx.error(
                span,
                format!(
                    "key parts stored as uids and secondary indexes do not combine yet (index `{}`): index \
                     rows would need the uids resolved",
                    index.name.value
                ),
            );
        }
        if uid.value.kind.is_empty() || uid.value.kind.contains('\0') {
            ctx.error(span, "the kind of names must not be empty or hold a zero byte");
        }
    }
}

fn check_key_part(ctx: &mut Ctx, f: &FieldAttr, ty: &str) {
    if is_option(&f.ty) {
        ctx.error(f.ty.span(), "a key part cannot be optional");
    }
    if f.counter.is_some() || f.version.is_some() {
        ctx.error(f.ident.span(), "a key part cannot be a counter or a version");
    }
    if f.modifiers.len() > 1 {
        ctx.error(f.modifiers[1].span, "a key part takes one modifier (desc, reverse_ts, reversed or hash)");
    }
    for m in &f.modifiers {
        match m.value {
            ModifierAttr::ReverseTs if !matches!(ty, "u64" | "Timestamp") => {
                ctx.error(m.span, "`reverse_ts` applies to `u64` or `Timestamp` key parts")
            }
            ModifierAttr::Reversed if !INTEGERS.contains(&ty) => {
                ctx.error(m.span, "`reversed` applies to integer key parts")
            }
            _ => {}
        }
    }
    if let Some(fixed) = &f.fixed {
        check_fixed(ctx, fixed, ty);
    }
}

fn check_fixed(ctx: &mut Ctx, fixed: &crate::attr::Spanned<u16>, ty: &str) {
    if ty != "String" {
        ctx.error(fixed.span, "`fixed = N` applies to `String` key parts and indexed fields");
    }
    if fixed.value == 0 {
        ctx.error(fixed.span, "`fixed` width must be at least 1");
    }
}

/// The most fields an index takes (the index value tuples go up to four).
pub const MAX_INDEX_PARTS: usize = 4;

/// Secondary indexes: declared on entities, over stored columns (value fields and hashed key
/// parts), under distinct names.
fn check_indexes(ctx: &mut Ctx, e: &EntityAttr) {
    for f in &e.fields {
        if let Some(u) = f.unique.filter(|_| f.index.is_none()) {
            ctx.error(u, "`unique` on a field goes with `index = \"...\"` on the same field");
        }
    }
    if e.kind != Kind::Entity {
        for index in &e.indexes {
            ctx.error(index.span, "indexes are declared on entities (#[derive(Entity)])");
        }
        return;
    }
    let mut names: BTreeMap<&str, Span> = BTreeMap::new();
    for index in &e.indexes {
        let name = index.name.value.as_str();
        let name_span = index.name.span;
        if !is_index_name(name) {
            ctx.error(
                name_span,
                format!("index name `{name}`: a lowercase letter, then lowercase letters, digits or `_`"),
            );
        }
        if let Some(first) = names.insert(name, name_span) {
            ctx.error(name_span, format!("duplicate index name `{name}`"));
            ctx.error(first, format!("index `{name}` first declared here"));
        }
        // The index's constant sits next to the counters' in the entity's impl.
        let konst = name.to_uppercase();
        if let Some(c) = e.fields.iter().find(|f| f.counter.is_some() && f.ident.to_string().to_uppercase() == konst) {
            ctx.error(name_span, format!("index `{name}`: its constant `{konst}` is also the counter `{}`'s", c.ident));
        }
        check_index_fields(ctx, e, index);
    }
    // Every indexed write checks and moves the row's write token, and a delete keeps it as the
    // row's tombstone: a TTL on its family would expire it, and a row that existed could read
    // as absent again to a write planned long before.
    let default = e.families.iter().find(|f| f.name == e.family);
    if let (Some(index), Some(ttl)) = (e.indexes.first(), default.and_then(|f| f.ttl)) {
        let span = default.and_then(|f| f.ttl_span).unwrap_or(index.span);
        ctx.error(
            span,
            format!(
                "an entity with indexes keeps its write token in its default family `{}`, which cannot take a TTL \
                 ({ttl} s): put the columns that expire in a family of their own",
                e.family
            ),
        );
    }
}

fn is_index_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

fn check_index_fields(ctx: &mut Ctx, e: &EntityAttr, index: &IndexAttr) {
    let name = &index.name.value;
    if index.parts.is_empty() {
        ctx.error(index.span, format!("index `{name}`: `on(...)` names no field"));
    }
    if let Some(extra) = index.parts.get(MAX_INDEX_PARTS) {
        ctx.error(extra.field.span(), format!("index `{name}`: at most {MAX_INDEX_PARTS} fields in `on(...)`"));
    }
    let mut seen: Vec<&syn::Ident> = Vec::new();
    let on = index.parts.iter().map(|p| (&p.field, true));
    for (ident, in_on) in on.chain(index.include.iter().map(|i| (i, false))) {
        let span = ident.span();
        let Some(f) = e.fields.iter().find(|f| f.ident == *ident) else {
            ctx.error(span, format!("index `{name}`: no field `{ident}`"));
            continue;
        };
        if seen.contains(&ident) {
            ctx.error(span, format!("index `{name}`: `{ident}` is named twice (its column is copied once)"));
        }
        seen.push(ident);
        if let Some(why) = not_indexable(f, in_on) {
            ctx.error(span, format!("index `{name}`: `{ident}` {why}"));
        } else if let Some(ttl) = ttl_of(e, f) {
            ctx.error(
                span,
                format!(
                    "index `{name}`: `{ident}` lives in a family with a {ttl} s TTL: its cells expire without a \
                     write, and the index would keep answering for them"
                ),
            );
        }
    }
}

/// A TTL expires cells one by one, by the time each was written. Only a `blob` aggregate is
/// written whole every time (one cell beside its generation, put together), so only it expires
/// whole; the other strategies write the cells that changed, and a TTL would tear them apart:
/// a read after some expired would see a version never written, or miss required columns.
fn check_aggregate_ttl(ctx: &mut Ctx, e: &EntityAttr) {
    let strategy = e.strategy.as_ref().map_or("single_table", |s| s.value.as_str());
    for fam in &e.families {
        let (Some(ttl), Some(span)) = (fam.ttl, fam.ttl_span) else { continue };
        if strategy != "blob" {
            ctx.error(
                span,
                format!(
                    "a `{strategy}` aggregate cannot take a TTL: its writes put only the cells that change, so a {ttl} s \
                     TTL would expire an aggregate cell by cell, into versions never written; only `blob` \
                     aggregates, written whole into one cell, take one"
                ),
            );
        } else if fam.name != e.family {
            ctx.error(
                span,
                format!(
                    "a `blob` aggregate is one cell in the root's default family `{}`: set `ttl` on the root, \
                     not on family `{}`",
                    e.family, fam.name
                ),
            );
        }
    }
}

/// The TTL of the family a stored field's column lives in, if it has one.
fn ttl_of(e: &EntityAttr, f: &FieldAttr) -> Option<u64> {
    let family = column_of(e, f).0;
    e.families.iter().find(|fam| fam.name == family).and_then(|fam| fam.ttl)
}

/// Why a field cannot be an index part (`in_on`) or an included column.
fn not_indexable(f: &FieldAttr, in_on: bool) -> Option<&'static str> {
    // A hashed key part keeps its value in a column (the row key holds its digest): it can be
    // indexed and included like any column. Other key parts are only in the row key.
    Some(if f.is_key_part() && !f.is_hashed() {
        "is a key part, in the row key rather than a column (only hashed key parts keep their value in a \
         column): scan by key prefix instead"
    } else if f.skip.is_some() {
        "is skipped: it is not stored"
    } else if f.wide.is_some() {
        "is a map stored as columns: it has no single value to index or copy"
    } else if f.children.is_some() {
        "is a `children` collection, not a column"
    } else if f.counter.is_some() {
        "is a counter: counters change by increment without a read, so they cannot be indexed or included"
    } else if !in_on {
        // Included columns are copied as raw cells: any other encoding will do.
        return None;
    } else if f.version.is_some() {
        "is the version field: it changes on every write (it can be included, not indexed)"
    } else if f.serde.is_some() {
        "is serde-encoded: its value has no key encoding (it can be included, not indexed)"
    } else if f.blob.is_some() {
        "is a blob: its value has no key encoding (it can be included, not indexed)"
    } else {
        return None;
    })
}
