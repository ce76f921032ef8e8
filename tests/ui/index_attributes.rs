use cellar::prelude::*;

// Malformed declarations: no parts, too many, a bad name, key parts and skipped fields,
// `unique` without an index, unknown options and modifiers.
#[derive(Entity)]
#[cellar(
    table = "t",
    index(name = "empty", on()),
    index(name = "wide", on(a, b, c, d, e)),
    index(name = "ByName", on(a)),
    index(name = "keyed", on(id, s)),
    index(name = "odd", on(a(reversed), b(desc, hash = "md5")), sorted),
    index(on(a))
)]
struct Wide {
    #[cellar(key)]
    id: u64,
    #[cellar(column = "a", unique)]
    a: String,
    #[cellar(column = "b")]
    b: String,
    #[cellar(column = "c")]
    c: String,
    #[cellar(column = "d")]
    d: String,
    #[cellar(column = "e", fixed = 4)]
    e: String,
    #[cellar(skip)]
    s: String,
}

// Indexes belong to entities, not to aggregates or their parts.
#[derive(Aggregate)]
#[cellar(table = "orders", index(name = "by_state", on(state)))]
struct Order {
    #[cellar(key)]
    id: u64,
    #[cellar(column = "s")]
    state: String,
}

#[derive(Part)]
struct Line {
    #[cellar(key)]
    n: u16,
    #[cellar(column = "k", index = "by_sku")]
    sku: String,
}

fn main() {}
