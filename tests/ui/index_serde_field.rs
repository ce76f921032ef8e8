use cellar::prelude::*;

// A serde or blob column has no key encoding: it can be included, not indexed.
#[derive(Entity)]
#[cellar(table = "crm", index(name = "by_tags", on(tags), include(notes, version)))]
struct Customer {
    #[cellar(key)]
    id: u64,
    #[cellar(serde, column = "t")]
    tags: Vec<String>,
    #[cellar(serde, column = "n")]
    notes: Vec<String>,
    #[cellar(version)]
    version: u64,
}

// The version field changes on every write.
#[derive(Entity)]
#[cellar(table = "crm", index(name = "by_version", on(version)))]
struct Account {
    #[cellar(key)]
    id: u64,
    #[cellar(version)]
    version: u64,
}

fn main() {}
