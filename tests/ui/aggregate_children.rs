use cellar::prelude::*;

#[derive(Part)]
struct LineItem {
    #[cellar(key)]
    line: u16,
}

#[derive(Aggregate)]
#[cellar(table = "orders")]
struct Order {
    #[cellar(key)]
    id: u64,
    // Not a Vec.
    #[cellar(children)]
    first: LineItem,
    // A collection is not a column, nor a key part.
    #[cellar(children, column = "l")]
    lines: Vec<LineItem>,
    #[cellar(children, key)]
    keyed: Vec<LineItem>,
    // A record type on a field names a collection's.
    #[cellar(record_type = 3)]
    note: String,
}

// Plain entities have no collections.
#[derive(Entity)]
#[cellar(table = "invoices")]
struct Invoice {
    #[cellar(key)]
    id: u64,
    #[cellar(children)]
    lines: Vec<LineItem>,
}

fn main() {}
