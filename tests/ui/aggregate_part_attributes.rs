use cellar::prelude::*;

// A part needs a key that tells it apart from its siblings.
#[derive(Part)]
struct LineItem {
    sku: String,
}

// Table, salt and strategy belong to the aggregate root.
#[derive(Part)]
#[cellar(table = "items", salt(buckets = 4), strategy = "blob")]
struct Shipment {
    #[cellar(key)]
    id: u16,
}

// So do partition parts: a part's key parts are `key`.
#[derive(Part)]
struct Parcel {
    #[cellar(partition)]
    region: String,
    #[cellar(key)]
    id: u16,
}

fn main() {}
