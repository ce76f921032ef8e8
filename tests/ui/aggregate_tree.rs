use cellar::prelude::*;

// Denormalized collapses a middle level onto ONE child collection; Location has two.
#[derive(Aggregate)]
#[cellar(table = "orders", strategy = "denormalized")]
struct Order {
    #[cellar(key)]
    id: u64,
    #[cellar(children)]
    ship_to: Vec<Location>,
}

#[derive(Part)]
struct Location {
    #[cellar(key)]
    loc: u16,
    #[cellar(children)]
    items: Vec<Item>,
    #[cellar(children)]
    notes: Vec<Note>,
}

#[derive(Part)]
struct Item {
    #[cellar(key)]
    line: u16,
    #[cellar(column = "k")]
    sku: String,
}

#[derive(Part)]
struct Note {
    #[cellar(key)]
    n: u16,
    #[cellar(column = "t")]
    text: String,
}

// Denormalized holds three levels at most: Root -> A -> B -> C is four.
#[derive(Aggregate)]
#[cellar(table = "deep", strategy = "denormalized")]
struct Root {
    #[cellar(key)]
    id: u64,
    #[cellar(children)]
    a: Vec<A>,
}

#[derive(Part)]
struct A {
    #[cellar(key)]
    a: u16,
    #[cellar(children)]
    b: Vec<B>,
}

#[derive(Part)]
struct B {
    #[cellar(key)]
    b: u16,
    #[cellar(children)]
    c: Vec<C>,
}

#[derive(Part)]
struct C {
    #[cellar(key)]
    c: u16,
}

// Under single_table (the default), the root takes record type 2, which its first collection
// also gets by default (numbered breadth first after the root).
#[derive(Aggregate)]
#[cellar(table = "catalogs", record_type = 2)]
struct Catalog {
    #[cellar(key)]
    id: u64,
    #[cellar(children)]
    items: Vec<Item>,
}

// Two collections declared with the same record type.
#[derive(Aggregate)]
#[cellar(table = "baskets", strategy = "single_table")]
struct Basket {
    #[cellar(key)]
    id: u64,
    #[cellar(children, record_type = 5)]
    items: Vec<Item>,
    #[cellar(children, record_type = 5)]
    notes: Vec<Note>,
}

// Qualifiers starting with a zero byte are Cellar's own.
#[derive(Aggregate)]
#[cellar(table = "tickets")]
struct Ticket {
    #[cellar(key)]
    id: u64,
    #[cellar(children)]
    remarks: Vec<Remark>,
}

#[derive(Part)]
struct Remark {
    #[cellar(key)]
    n: u16,
    #[cellar(column = "\0x")]
    text: String,
}

// A record type deep in the tree of a strategy whose rows carry none.
#[derive(Aggregate)]
#[cellar(table = "shipments", strategy = "blob")]
struct Shipment {
    #[cellar(key)]
    id: u64,
    #[cellar(children)]
    parcels: Vec<Parcel>,
}

#[derive(Part)]
struct Parcel {
    #[cellar(key)]
    n: u16,
    #[cellar(children, record_type = 7)]
    contents: Vec<Item>,
}

fn main() {}
