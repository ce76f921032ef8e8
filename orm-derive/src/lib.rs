//! `#[derive(Entity)]` for Cellar: maps a struct onto rows of a wide-column table.
//!
//! `#[derive(Record)]` (`record.rs`) types the rows of a single-table design.
//!
//! For entities, three phases, three modules: `attr` parses `#[cellar(...)]` attributes, `check`
//! validates them, `expand` generates code. Errors from all phases are reported together,
//! each at the tokens at fault. Use it through the `cellar` facade (`cellar::Entity`); the
//! attributes are documented on [`macro@Entity`].

mod aggregate;
mod attr;
mod check;
mod expand;
mod record;
mod versioned;

use proc_macro::TokenStream;
use syn::{parse_macro_input, DeriveInput};

/// Derives `cellar::orm::Entity`, a typed key struct `<Name>Key` with prefix builders, a
/// counter constant per `#[cellar(counter)]` field and an index constant per secondary index.
///
/// A row key is `[salt or bucket][partition parts][record type][key parts]`; every other
/// field is a cell. Attributes go in `#[cellar(...)]`.
///
/// On the struct:
///
/// | attribute | meaning |
/// |---|---|
/// | `table = "name"` | the table (default: the struct name in snake_case) |
/// | `family = "f"` | the default family of fields (default `"d"`) |
/// | `record_type = N` | a type byte after the partition parts, for several entity types in one table |
/// | `salt(buckets = N)` | a leading byte `hash(partition parts, or the key) % N` |
/// | `salt(buckets = N, random)` | a random leading byte: for write-only logs read by scans |
/// | `bucket(field = "f", buckets = N)` | a leading byte `field % N` (timestamp bucketing) |
/// | `max_versions = N`, `ttl = SECONDS` | settings of the default family |
/// | `family_options(name = "f", max_versions = N, ttl = SECONDS)` | settings of another family |
/// | `index(name = "by_x", on(f, g(desc), ...), include(h, ...), unique)` | a secondary index on up to 4 fields (`desc` or `hash = "md5"` each), copying `include`d columns; `unique`: one entity per value |
/// | `crate = "path"` | the path generated code names Cellar by (default `::cellar`): for code that reaches it through a re-export or under another name; every derive takes it |
///
/// On fields:
///
/// | attribute | meaning |
/// |---|---|
/// | `partition` | a key part before the record type (what a single-table partition shares) |
/// | `key` | a key part after the record type |
/// | `desc` | descending order; `reverse_ts` on a timestamp (newest first) |
/// | `reversed` | a fixed-width number with its bytes reversed (spreads sequential ids) |
/// | `hash = "md5"` | the part's 16-byte MD5 in the key; the value is kept in a column |
/// | `fixed = N` | a string key part zero-padded to exactly N bytes |
/// | `family = "f"`, `column = "q"` | where a field is stored (default: default family, field name) |
/// | `counter` | an `i64` changed only by `Repository::increment` |
/// | `version` | a `u64` for optimistic writes (`Repository::save`) |
/// | `serde` | the value as MessagePack (any `Serialize + Deserialize` type) |
/// | `blob` | the value as a versioned blob (a `#[derive(Versioned)]` type): cells of earlier versions are migrated on read |
/// | `skip` | not stored; `Default` on read |
/// | `default`, `default = "path::to::fn"` | a row without the cell reads as `Default::default()` or `fn()` (for fields added after rows were written; also in index copies) |
/// | `rename_from = "q"`, `aliases = ["q", ...]` | earlier qualifiers of the column, in its family: reads take the newest cell of the column and these; writes put only the column (a `None` also deletes them) |
/// | `index = "by_x"`, `unique` | a secondary index on this field alone (`unique`: one entity per value) |
/// | `uid = "kind"`, `uid(kind = "kind", width = N)` | a `String` key part stored as a fixed-width uid of its name (3 bytes by default, 3 to 8): see `cellar::orm::uid` |
/// | `columns(family = "f", prefix = "p", desc, lazy)` | a `BTreeMap<K, V>` stored as one column per entry in a family of its own, the key encoded into the qualifier (after `prefix`; `desc`: largest first); `lazy`: left out of entity reads. Each gets a constant (`points` → `Sensor::POINTS`) for `Repository::wide` |
///
/// Each index is a constant on the entity (`by_city_name` → `Customer::BY_CITY_NAME`, an
/// `Index<Customer, (String, String)>`). Indexed fields are plain columns (an `Option` is not
/// indexed when `None`; `fixed = N` pads a string part); serde, blob and version fields can be
/// included but not indexed; key parts, skipped fields and counters neither.
///
/// Key parts take integers, floats, `bool`, `Timestamp`, `String` and `Vec<u8>`; plain cells
/// take those and `bytes::Bytes`, each also as `Option` (`None` = no cell).
#[proc_macro_derive(Entity, attributes(cellar))]
pub fn derive_entity(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    entity(&input).unwrap_or_else(syn::Error::into_compile_error).into()
}

/// Derives `cellar::orm::Record` for an enum with one `Variant(Entity)` per entity type of a
/// single-table design, `From` each member, and `cellar::orm::Member` for each member. The
/// members must share table, salt and partition parts and have distinct record types; a
/// mismatch is a compile error. `#[cellar(crate = "path")]` sets the path to Cellar, as on
/// [`macro@Entity`].
#[proc_macro_derive(Record, attributes(cellar))]
pub fn derive_record(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    record::derive(&input).unwrap_or_else(syn::Error::into_compile_error).into()
}

/// Derives `cellar::orm::aggregate::Aggregate` for the root of an object graph: its own row
/// as an entity (key struct `<Name>Key`, prefix builders), the `Part` impl over its
/// `#[cellar(children)]` collections, a `ChildField` constant per collection (`Order::SHIP_TO`)
/// and a compile-time check that the strategy can hold the tree.
///
/// Takes the struct attributes of [`macro@Entity`] (but no counters, versions or random
/// salts, and `ttl` only under `blob`, the one strategy that writes an aggregate whole and so
/// expires it whole) and
/// `strategy = "normalized" | "single_table" | "denormalized" | "blob"` (default
/// `single_table`). Every key part — `partition` or `key` — is part of the aggregate's key
/// prefix, which every row of the aggregate starts with. `record_type = N` overrides the root's
/// record type (default 1; typed strategies only).
///
/// On fields, besides the attributes of entities: `children` marks a `Vec<T>` of a
/// `#[derive(Part)]` type; `children, record_type = N` overrides its record type (default:
/// numbered breadth first after the root).
#[proc_macro_derive(Aggregate, attributes(cellar))]
pub fn derive_aggregate(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    derive(&input, attr::Kind::Aggregate).unwrap_or_else(syn::Error::into_compile_error).into()
}

/// Derives `cellar::orm::aggregate::Part` for an object inside an aggregate: `#[cellar(key)]`
/// fields identify it among its siblings, other fields are its columns, `#[cellar(children)]`
/// fields hold nested collections. Table, salt and family options are the root's to set.
#[proc_macro_derive(Part, attributes(cellar))]
pub fn derive_part(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    derive(&input, attr::Kind::Part).unwrap_or_else(syn::Error::into_compile_error).into()
}

/// Derives `cellar::orm::blob::Versioned`: the type is stored as a versioned blob, and values
/// written by its earlier versions are read through a chain of conversions.
///
/// ```text
/// #[derive(Versioned, Serialize, Deserialize)]
/// #[cellar(blob(version = 3, codec = "msgpack", compress = "zstd",
///               history(1 = OrderV1 via "bincode", 2 = OrderV2)))]
/// struct Order { ... }
/// ```
///
/// | key | meaning |
/// |---|---|
/// | `version = N` | the version this code writes (required) |
/// | `codec = "..."` | `msgpack` (default), `bincode` or `json` |
/// | `compress = "..."`, `compress_above = BYTES` | `lz4` or `zstd` above a size (default 256) |
/// | `history(N = Type via "codec", ...)` | the earlier versions, each held by a frozen type; `via` names the codec it was written in (default `msgpack`) |
/// | `legacy = N` | headerless cells (written before the type was versioned) hold version N |
/// | `tag = "Name"` | the name blobs are tagged with (default: the type's name) |
///
/// Each version converts into the next with `From` or `TryFrom` (`OrderV2: From<OrderV1>`,
/// `Order: TryFrom<OrderV2>`); a missing conversion is a compile error at its history entry.
///
/// Beside `blob(...)`, `#[cellar(crate = "path")]` sets the path to Cellar, as on
/// [`macro@Entity`].
#[proc_macro_derive(Versioned, attributes(cellar))]
pub fn derive_versioned(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    versioned::derive(&input).unwrap_or_else(syn::Error::into_compile_error).into()
}

fn entity(input: &DeriveInput) -> syn::Result<proc_macro2::TokenStream> {
    derive(input, attr::Kind::Entity)
}

fn derive(input: &DeriveInput, kind: attr::Kind) -> syn::Result<proc_macro2::TokenStream> {
    let mut ctx = attr::Ctx::default();
    let parsed = attr::parse(&mut ctx, input, kind);
    if let Some(e) = &parsed {
        check::check(&mut ctx, e);
    }
    ctx.finish()?;
    // Parsing succeeded whenever no error was recorded.
    let mut e = parsed.ok_or_else(|| syn::Error::new_spanned(&input.ident, "cannot derive Entity"))?;
    if kind == attr::Kind::Entity {
        return Ok(expand::expand(&e));
    }
    aggregate::as_entity(&mut e);
    let row = expand::expand(&e);
    let part = aggregate::expand(&e);
    Ok(quote::quote!(#row #part))
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    fn expand(input: proc_macro2::TokenStream) -> syn::Result<String> {
        entity(&syn::parse2(input).unwrap()).map(|t| t.to_string())
    }

    #[test]
    fn the_table_defaults_to_the_struct_name_in_snake_case() {
        let out = expand(quote! {
            struct LogEvent { #[cellar(key)] id: u64 }
        })
        .unwrap();
        assert!(out.contains("table : \"log_event\""), "{out}");
        assert!(out.contains("struct LogEventKey"), "{out}");
    }

    #[test]
    fn every_mistake_is_reported_in_one_pass() {
        let err = expand(quote! {
            struct Bad {
                #[cellar(key, fixed = 4)] id: u64,
                #[cellar(counter)] hits: u32,
                #[cellar(colum = "x")] name: String,
            }
        })
        .unwrap_err();
        let messages: Vec<String> = err.into_iter().map(|e| e.to_string()).collect();
        assert_eq!(messages.len(), 3, "{messages:#?}");
    }

    #[test]
    fn a_part_followed_by_a_record_type_is_delimited_and_the_last_key_part_raw() {
        let out = expand(quote! {
            #[cellar(table = "t", record_type = 1)]
            struct Customer { #[cellar(partition)] name: String }
        })
        .unwrap();
        assert!(out.contains("Form :: Delimited"), "{out}");
        assert!(!out.contains("Form :: Last"), "{out}");
        let out = expand(quote! {
            #[cellar(table = "t")]
            struct Tag { #[cellar(partition)] owner: String, #[cellar(key)] name: String }
        })
        .unwrap();
        assert!(out.contains("Form :: Delimited") && out.contains("Form :: Last"), "{out}");
    }

    #[test]
    fn indexes_fill_the_schema_and_get_a_constant_each() {
        let out = expand(quote! {
            struct Plain { #[cellar(key)] id: u64 }
        })
        .unwrap();
        assert!(out.contains("indexes : & []"), "{out}");
        let out = expand(quote! {
            #[cellar(index(name = "by_city_name", on(city, name(desc))))]
            struct Customer {
                #[cellar(key)] id: u64,
                name: String,
                #[cellar(index = "by_city")] city: Option<String>,
            }
        })
        .unwrap();
        assert!(
            out.contains("const BY_CITY_NAME : :: cellar :: orm :: index :: Index < Customer , (String , String ,) >")
        );
        assert!(out.contains("const BY_CITY : :: cellar :: orm :: index :: Index < Customer , String >"), "{out}");
        assert!(out.contains("encode_optional :: < String >"), "{out}");
        assert!(out.contains("fn key_from_row"), "{out}");
    }

    #[test]
    fn record_enums_need_newtype_variants() {
        let input: DeriveInput = syn::parse2(quote! { enum R { A(u8, u8) } }).unwrap();
        assert!(record::derive(&input).unwrap_err().to_string().contains("Variant(Entity)"));
        let input: DeriveInput = syn::parse2(quote! { enum R { A(A), B(B) } }).unwrap();
        let out = record::derive(&input).unwrap().to_string();
        assert!(out.contains("check_members"), "{out}");
    }
}
