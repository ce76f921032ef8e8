use cellar::prelude::*;

// `blob(...)` versions the cell of a `blob` aggregate; other strategies have no such cell.
#[derive(Aggregate)]
#[cellar(table = "orders", strategy = "single_table", blob(version = 2, history(1 = Old)))]
struct Order {
    #[cellar(key)]
    id: u64,
}

// On an entity, the field is versioned, not the struct.
#[derive(Entity)]
#[cellar(table = "archive", blob(version = 2))]
struct Archived {
    #[cellar(key)]
    id: u64,
    #[cellar(blob, serde)]
    doc: Vec<u8>,
}

fn main() {}
