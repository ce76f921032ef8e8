use cellar::prelude::*;

#[derive(Aggregate)]
#[cellar(table = "orders", strategy = "nested")]
struct Order {
    #[cellar(key)]
    id: u64,
}

// The rows of an aggregate must be found again by its key.
#[derive(Aggregate)]
#[cellar(table = "events", salt(buckets = 4, random))]
struct Log {
    #[cellar(key)]
    id: u64,
}

// No counters or versions, neither in the root nor in a part.
#[derive(Aggregate)]
#[cellar(table = "carts")]
struct Cart {
    #[cellar(key)]
    id: u64,
    #[cellar(version)]
    version: u64,
    #[cellar(children)]
    items: Vec<CartItem>,
}

#[derive(Part)]
struct CartItem {
    #[cellar(key)]
    sku: String,
    #[cellar(counter)]
    qty: i64,
}

// Record types exist only where rows carry them.
#[derive(Aggregate)]
#[cellar(table = "invoices", strategy = "normalized", record_type = 4)]
struct Invoice {
    #[cellar(key)]
    id: u64,
    #[cellar(children, record_type = 5)]
    lines: Vec<InvoiceLine>,
}

#[derive(Part)]
struct InvoiceLine {
    #[cellar(key)]
    n: u16,
}

fn main() {}
