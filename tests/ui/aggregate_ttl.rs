use cellar::prelude::*;

// Writes put only the cells that change: a TTL would expire the aggregate cell by cell.
#[derive(Aggregate)]
#[cellar(table = "orders", ttl = 2)]
struct Order {
    #[cellar(key)]
    id: u64,
    #[cellar(column = "s")]
    status: String,
}

#[derive(Aggregate)]
#[cellar(table = "carts", strategy = "normalized", family_options(name = "h", ttl = 60))]
struct Cart {
    #[cellar(key)]
    id: u64,
    #[cellar(family = "h", column = "s")]
    status: String,
    #[cellar(children)]
    lines: Vec<CartLine>,
}

#[derive(Part)]
struct CartLine {
    #[cellar(key)]
    n: u16,
}

#[derive(Aggregate)]
#[cellar(table = "baskets", strategy = "denormalized", ttl = 60)]
struct Basket {
    #[cellar(key)]
    id: u64,
}

// A blob aggregate is one cell in the root's default family: a TTL goes there.
#[derive(Aggregate)]
#[cellar(table = "notes", strategy = "blob", family_options(name = "x", ttl = 60))]
struct Note {
    #[cellar(key)]
    id: u64,
    #[cellar(family = "x", column = "t")]
    text: String,
}

// Allowed: a blob aggregate expires whole.
#[derive(Aggregate)]
#[cellar(table = "sessions", strategy = "blob", ttl = 60)]
struct Session {
    #[cellar(key)]
    id: u64,
}

fn main() {}
