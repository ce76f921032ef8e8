//! Aggregates at their edges: parts with nothing but `None` columns, stored states an earlier
//! build could leave (a child row whose parent row is missing), and a TTL on the one strategy
//! that takes one (`blob`, whose aggregate is one cell and expires whole).
//!
//! Each test runs on every backend: the embedded engine and the Bigtable emulator.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use cellar::orm::store::{CellMutation, RowMutation, ScanSpec};
use cellar::orm::Error;
use cellar::prelude::*;

/// A bag of shelves of items, plus tags, every column an `Option`; one module per strategy.
macro_rules! sparse_types {
    ($module:ident, $strategy:literal, $table:literal) => {
        mod $module {
            use cellar::prelude::*;

            pub const TABLE: &str = $table;

            #[derive(Aggregate, Debug, Clone, PartialEq)]
            #[cellar(table = $table, strategy = $strategy)]
            pub struct Bag {
                #[cellar(key)]
                pub id: u64,
                #[cellar(column = "n")]
                pub note: Option<String>,
                #[cellar(children)]
                pub shelves: Vec<Shelf>,
                #[cellar(children)]
                pub tags: Vec<Tag>,
            }

            #[derive(Part, Debug, Clone, PartialEq)]
            pub struct Shelf {
                #[cellar(key)]
                pub shelf: u16,
                #[cellar(column = "l")]
                pub label: Option<String>,
                #[cellar(children)]
                pub items: Vec<Item>,
            }

            #[derive(Part, Debug, Clone, PartialEq)]
            pub struct Item {
                #[cellar(key)]
                pub item: u16,
                #[cellar(column = "q")]
                pub qty: Option<u32>,
            }

            #[derive(Part, Debug, Clone, PartialEq)]
            pub struct Tag {
                #[cellar(key)]
                pub tag: u16,
                #[cellar(column = "c")]
                pub color: Option<String>,
            }
        }
    };
}

sparse_types!(normalized, "normalized", "bags_n");
sparse_types!(single_table, "single_table", "bags_s");
sparse_types!(denormalized, "denormalized", "bags_d");
sparse_types!(blob, "blob", "bags_b");

macro_rules! for_each_sparse {
    (|$m:ident| $body:block) => {{
        {
            use normalized as $m;
            $body
        }
        {
            use single_table as $m;
            $body
        }
        {
            use denormalized as $m;
            $body
        }
        {
            use blob as $m;
            $body
        }
    }};
}

/// A bag whose root, a shelf with items, a shelf without, an item and a tag have every column
/// `None`, beside objects that have values.
macro_rules! sparse_bag {
    ($m:ident, $id:expr) => {
        $m::Bag {
            id: $id,
            note: None,
            shelves: vec![
                $m::Shelf {
                    shelf: 1,
                    label: None,
                    items: vec![$m::Item { item: 1, qty: None }, $m::Item { item: 2, qty: Some(3) }],
                },
                $m::Shelf { shelf: 2, label: None, items: vec![] },
                $m::Shelf { shelf: 3, label: Some("top".into()), items: vec![$m::Item { item: 3, qty: None }] },
            ],
            tags: vec![$m::Tag { tag: 1, color: None }, $m::Tag { tag: 2, color: Some("red".into()) }],
        }
    };
}

/// Every row of every table of a strategy's bag, as (table, row key).
/// The rows of `tables` that hold aggregate data (tombstones left on a shared store are not).
fn stored_rows(db: &Db, tables: &[String]) -> Vec<(String, Bytes)> {
    let mut rows = Vec::new();
    for table in tables {
        for row in db.store().scan(table, &ScanSpec::default()).unwrap() {
            let row = row.unwrap();
            if common::raw::holds_aggregate_data(&row) {
                rows.push((table.clone(), row.key));
            }
        }
    }
    rows
}

fn tables_of(table: &str) -> Vec<String> {
    if table.ends_with("_n") {
        ["", ".shelves", ".shelves.items", ".tags"].iter().map(|t| format!("{table}{t}")).collect()
    } else {
        vec![table.to_string()]
    }
}

fn delete_row(db: &Db, table: &str, row: Vec<u8>) {
    let m = RowMutation { row: row.into(), mutations: vec![CellMutation::DeleteRow] };
    db.store().mutate(table, vec![m]).unwrap();
}

on_every_backend! {
fn parts_with_only_none_columns_round_trip_in_every_strategy(db: Db) {
    for_each_sparse!(|m| {
        let bags = db.aggregates::<m::Bag>().unwrap();
        let bag = sparse_bag!(m, 1);
        bags.put(&bag).unwrap();
        assert_eq!(bags.get(1).unwrap(), Some(bag.clone()), "{}", m::TABLE);
        assert_eq!(bags.scan().to_vec().unwrap(), std::slice::from_ref(&bag), "{}", m::TABLE);
        assert_eq!(bags.get_to_depth(1, 2).unwrap().unwrap().shelves.len(), 3, "{}", m::TABLE);
        let shelves = bags.children(1, m::Bag::SHELVES);
        assert_eq!(shelves.list().unwrap(), Some(bag.shelves.clone()), "{}", m::TABLE);
        assert_eq!(shelves.get(2u16).unwrap(), Some(bag.shelves[1].clone()), "{}", m::TABLE);
        // The same bag again changes nothing.
        let (_, costs) = db.measure(|| bags.put(&bag).unwrap());
        assert_eq!(costs.rows_written, 0, "{}", m::TABLE);

        // Values come and go on the same objects.
        let mut filled = bag.clone();
        filled.note = Some("n".into());
        filled.shelves[0].label = Some("low".into());
        filled.shelves[1].label = Some("mid".into());
        filled.shelves[0].items[0].qty = Some(1);
        filled.tags[0].color = Some("blue".into());
        bags.put(&filled).unwrap();
        assert_eq!(bags.get(1).unwrap(), Some(filled), "{}", m::TABLE);
        bags.put(&bag).unwrap();
        assert_eq!(bags.get(1).unwrap(), Some(bag.clone()), "{}", m::TABLE);

        // A child-level write of an all-`None` child, under an all-`None` parent.
        shelves.child(1u16, m::Shelf::ITEMS).unwrap().put(&m::Item { item: 9, qty: None }).unwrap();
        let mut more = bag.clone();
        more.shelves[0].items.push(m::Item { item: 9, qty: None });
        assert_eq!(bags.get(1).unwrap(), Some(more), "{}", m::TABLE);

        // A root with nothing at all.
        let empty = m::Bag { id: 2, note: None, shelves: vec![], tags: vec![] };
        bags.put(&empty).unwrap();
        assert_eq!(bags.get(2).unwrap(), Some(empty), "{}", m::TABLE);

        bags.delete(1).unwrap();
        bags.delete(2).unwrap();
        assert_eq!(bags.get(1).unwrap(), None, "{}", m::TABLE);
        assert_eq!(stored_rows(&db, &tables_of(m::TABLE)), [], "{}", m::TABLE);
    });
}
}

/// The rows an earlier build left for `sparse_bag!`'s shelf 1 (every column `None`, with
/// items): the item rows, and no row for the shelf. `shelf_row` is that row's table and key.
macro_rules! break_shelf {
    ($db:expr, $m:ident, $shelf_row:expr) => {{
        let bags = $db.aggregates::<$m::Bag>().unwrap();
        bags.put(&sparse_bag!($m, 1)).unwrap();
        let (table, row): (String, Vec<u8>) = $shelf_row;
        delete_row(&$db, &table, row);
        let err = bags.get(1).unwrap_err();
        assert!(matches!(err, Error::Decode { .. }), "{}: {err}", $m::TABLE);
        bags
    }};
}

on_every_backend! {
fn put_and_delete_mend_an_aggregate_whose_part_row_is_missing(db: Db) {
    let id = 1u64.to_be_bytes();
    let shelf = 1u16.to_be_bytes();
    for strategy in ["single_table", "normalized"] {
        macro_rules! check {
            ($m:ident, $shelf_row:expr) => {{
                let bags = break_shelf!(db, $m, $shelf_row);
                // A corrected version overwrites it, the orphans gone with what it replaces.
                let mut fixed = sparse_bag!($m, 1);
                fixed.shelves[0].label = Some("fixed".into());
                fixed.shelves[0].items.truncate(1);
                bags.put(&fixed).unwrap();
                assert_eq!(bags.get(1).unwrap(), Some(fixed.clone()), "{strategy}");
                assert_eq!(bags.scan().to_vec().unwrap(), [fixed], "{strategy}");

                // And a delete removes every row of it.
                let bags = break_shelf!(db, $m, $shelf_row);
                bags.delete(1).unwrap();
                assert_eq!(bags.get(1).unwrap(), None, "{strategy}");
                assert_eq!(stored_rows(&db, &tables_of($m::TABLE)), [], "{strategy}");
            }};
        }
        match strategy {
            "single_table" => check!(single_table, (single_table::TABLE.into(), [&id[..], &[2], &shelf].concat())),
            _ => check!(normalized, (format!("{}.shelves", normalized::TABLE), [&id[..], &shelf].concat())),
        }
    }
}
}

on_every_backend! {
fn put_and_delete_mend_an_aggregate_whose_root_row_is_missing(db: Db) {
    // Through the intent protocol (no atomic row groups) the root row is read first, and an
    // aggregate without it is not there at all: only one-scan reads see the rows under it.
    if !db.store().guarantees().atomic_row_groups {
        return;
    }
    let id = 1u64.to_be_bytes();
    for strategy in ["single_table", "denormalized"] {
        macro_rules! check {
            ($m:ident) => {{
                let root_row = || ($m::TABLE.to_string(), [&id[..], &[1]].concat());
                let bags = break_shelf!(db, $m, root_row());
                let fixed = sparse_bag!($m, 1);
                bags.put(&fixed).unwrap();
                assert_eq!(bags.get(1).unwrap(), Some(fixed), "{strategy}");

                let bags = break_shelf!(db, $m, root_row());
                bags.delete(1).unwrap();
                assert_eq!(stored_rows(&db, &tables_of($m::TABLE)), [], "{strategy}");
            }};
        }
        match strategy {
            "single_table" => check!(single_table),
            _ => check!(denormalized),
        }
    }
}
}

/// A `blob` aggregate whose cells live 2 s.
#[derive(Aggregate, Debug, Clone, PartialEq)]
#[cellar(table = "carts", strategy = "blob", ttl = 2)]
struct Cart {
    #[cellar(key)]
    id: u64,
    #[cellar(column = "s")]
    status: Option<String>,
    #[cellar(children)]
    lines: Vec<CartLine>,
}

#[derive(Part, Debug, Clone, PartialEq)]
struct CartLine {
    #[cellar(key)]
    n: u16,
    #[cellar(column = "k")]
    sku: Option<String>,
}

fn cart(status: &str) -> Cart {
    Cart { id: 1, status: Some(status.into()), lines: vec![CartLine { n: 1, sku: Some("tea".into()) }] }
}

fn sleep_until(start: Instant, after: Duration) {
    if let Some(left) = after.checked_sub(start.elapsed()) {
        std::thread::sleep(left);
    }
}

on_every_backend! {
fn a_blob_aggregate_with_a_ttl_expires_whole(db: Db) {
    let carts = db.aggregates::<Cart>().unwrap();
    let start = Instant::now();
    carts.put(&cart("open")).unwrap();
    sleep_until(start, Duration::from_millis(1100));
    let changed = Instant::now();
    carts.put(&cart("paid")).unwrap();
    // Past the first write's TTL: the second version, whole.
    sleep_until(start, Duration::from_millis(2500));
    if changed.elapsed() < Duration::from_millis(1900) {
        assert_eq!(carts.get(1).unwrap(), Some(cart("paid")));
    }
    // Past the second write's TTL: nothing.
    sleep_until(changed, Duration::from_millis(2300));
    assert_eq!(carts.get(1).unwrap(), None);
    assert!(!carts.exists(1).unwrap());
    carts.put(&cart("new")).unwrap();
    assert_eq!(carts.get(1).unwrap(), Some(cart("new")));
}
}

on_every_backend! {
fn a_blob_write_puts_the_blob_with_its_generation(db: Db) {
    let carts = db.aggregates::<Cart>().unwrap();
    carts.put(&cart("open")).unwrap();
    // A cell beside the blob, as another program might leave: a put of the same cart removes
    // it, and must rewrite the blob with the new generation so that both expire together.
    let row = db.store().scan("carts", &ScanSpec::default()).unwrap().next().unwrap().unwrap();
    common::raw::put_cells(&db, "carts", row.key.to_vec(), &[(b"x", b"stray".to_vec())]);
    let start = Instant::now();
    std::thread::sleep(Duration::from_millis(1100));
    let rewritten = Instant::now();
    carts.put(&cart("open")).unwrap();
    let row = db.store().scan("carts", &ScanSpec::default()).unwrap().next().unwrap().unwrap();
    let written = |q: &[u8]| row.cells.iter().find(|c| c.qualifier.as_ref() == q).map(|c| c.timestamp);
    assert_eq!(written(b"b"), written(b"\x00g"));
    assert_eq!(written(b"x"), None);
    sleep_until(start, Duration::from_millis(2500));
    if rewritten.elapsed() < Duration::from_millis(1900) {
        assert_eq!(carts.get(1).unwrap(), Some(cart("open")));
    }
}
}

on_every_backend! {
/// An intent that does not decode (its pending state damaged) cannot be rolled forward: reads
/// report it, and a put or a delete of the aggregate still replaces it.
fn put_and_delete_replace_an_aggregate_whose_intent_is_damaged(db: Db) {
    use common::versions::normalized::{version, version_of};
    let orders = db.aggregates::<common::orders::normalized::Order>().unwrap();
    orders.put(&version(1, 1, 1)).unwrap();
    // A pending state (longer than a token) whose intent breaks off after its owner.
    let damage = || {
        let root = db.store().scan("orders_n", &ScanSpec::default()).unwrap().next().unwrap().unwrap();
        let damaged = CellMutation::Put {
            family: Bytes::from_static(b"d"),
            qualifier: Bytes::from_static(b"\x00g"),
            value: Bytes::from(vec![0xFF; 40]),
            timestamp: None,
        };
        db.store().mutate("orders_n", vec![RowMutation { row: root.key, mutations: vec![damaged] }]).unwrap();
    };
    damage();
    assert!(matches!(orders.get((1, 1)), Err(Error::Decode { .. })), "a damaged intent is reported");
    // Even a put of what the rows already hold replaces it.
    orders.put(&version(1, 1, 1)).unwrap();
    assert_eq!(orders.get((1, 1)).unwrap().as_ref().and_then(version_of), Some(1));
    damage();
    orders.put(&version(1, 1, 2)).unwrap();
    assert_eq!(orders.get((1, 1)).unwrap().as_ref().and_then(version_of), Some(2));
    damage();
    orders.delete((1, 1)).unwrap();
    assert_eq!(orders.get((1, 1)).unwrap(), None);
    orders.put(&version(1, 1, 3)).unwrap();
    assert_eq!(orders.get((1, 1)).unwrap().as_ref().and_then(version_of), Some(3));
}
}
