//! The tables of `single_table` and `denormalized` aggregates split only between aggregates:
//! whatever cut a split asks for — the mid key of a region, automatic or forced, or an explicit
//! row inside an aggregate — lands on an aggregate boundary, so every aggregate stays in one
//! region and its writes remain one atomic multi-row mutation.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use cellar::orm::store::SplitPolicy;
use cellar::orm::EmbeddedStore;
use cellar::prelude::*;

/// Declares the order aggregate with a variable-length leading key part (a terminated field of
/// the split policy) in a module per strategy.
macro_rules! big_orders {
    ($module:ident, $strategy:literal, $table:literal) => {
        mod $module {
            use cellar::prelude::*;

            pub const TABLE: &str = $table;

            #[derive(Aggregate, Debug, Clone, PartialEq)]
            #[cellar(table = $table, strategy = $strategy)]
            pub struct Order {
                #[cellar(partition)]
                pub customer: String,
                #[cellar(key)]
                pub order_no: u64,
                #[cellar(column = "s")]
                pub status: String,
                #[cellar(children)]
                pub ship_to: Vec<ShippingLocation>,
            }

            #[derive(Part, Debug, Clone, PartialEq)]
            pub struct ShippingLocation {
                #[cellar(key)]
                pub loc: u16,
                #[cellar(column = "c")]
                pub city: String,
                #[cellar(children)]
                pub items: Vec<LineItem>,
            }

            #[derive(Part, Debug, Clone, PartialEq)]
            pub struct LineItem {
                #[cellar(key)]
                pub line: u16,
                #[cellar(column = "k")]
                pub sku: String,
                #[cellar(column = "q")]
                pub qty: u32,
            }

            /// Order `i` at revision `rev`: 6 locations × 25 lines (line numbers unique in the
            /// order, as the denormalized strategy needs), customer names of varying length.
            pub fn order(i: u64, rev: u32) -> Order {
                let mut line = 0u16;
                Order {
                    customer: format!("customer-{}", "x".repeat((i % 5) as usize) + &i.to_string()),
                    order_no: i * 7,
                    status: format!("rev {rev}"),
                    ship_to: (1..=6)
                        .map(|loc| ShippingLocation {
                            loc,
                            city: format!("city {loc} rev {rev}"),
                            items: (0..25)
                                .map(|_| {
                                    line += 1;
                                    LineItem { line, sku: format!("sku-{line:04}-{}", "s".repeat(40)), qty: rev }
                                })
                                .collect(),
                        })
                        .collect(),
                }
            }
        }
    };
}

big_orders!(single_table, "single_table", "big_orders_s");
big_orders!(denormalized, "denormalized", "big_orders_d");

/// The aggregate prefix of a stored row key: the customer (escaped, ended by `00 01`) and the
/// 8-byte order number.
fn aggregate_of(row: &[u8]) -> &[u8] {
    let end = row.windows(2).position(|w| w == [0x00, 0x01]).expect("a terminated customer") + 2;
    &row[..end + 8]
}

/// Checks that no region boundary falls inside an aggregate's key range; returns the number of regions.
fn assert_aggregates_whole(engine: &Engine, table: &str) -> usize {
    let rows: Vec<Bytes> =
        engine.table(table).unwrap().scan(Scan::new()).unwrap().map(|r| r.unwrap().row).collect::<Vec<_>>();
    let regions = engine.regions(table).unwrap();
    for region in regions.iter().skip(1) {
        let start = &region.start_key[..];
        let after = rows.partition_point(|r| &r[..] < start);
        assert!(after > 0 && after < rows.len(), "boundary {start:?} has rows on both sides");
        // Neither neighbour's key range reaches across: rows added to either aggregate later
        // stay on its side too.
        let (before, next) = (aggregate_of(&rows[after - 1]), aggregate_of(&rows[after]));
        assert!(!start.starts_with(before), "region boundary {start:?} cuts aggregate {before:?}");
        assert!(next >= start, "region boundary {start:?} cuts aggregate {next:?}");
    }
    regions.len()
}

macro_rules! splits_keep_aggregates_whole {
    ($m:ident) => {{
        use $m::{order, Order, TABLE};
        let dir = tempfile::tempdir().unwrap();
        // Small memstores: the first region outgrows its split threshold (twice the flush size)
        // after a few aggregates.
        let options = EngineOptions::default().memstore_flush_bytes(64 * 1024);
        let engine = Engine::open(dir.path(), options).unwrap();
        let db = Db::with_store(Arc::new(EmbeddedStore::new(engine.clone())));
        let orders = db.aggregates::<Order>().unwrap();
        const N: u64 = 24;
        for i in 0..N {
            orders.put(&order(i, 1)).unwrap();
        }
        assert!(engine.wait_idle(Duration::from_secs(60)), "background work finishes");
        engine.flush(TABLE).unwrap();
        let automatic = assert_aggregates_whole(&engine, TABLE);
        assert!(automatic >= 2, "{}: the table split on its own", stringify!($m));
        // Mid-key splits of every region, three times over.
        for _ in 0..3 {
            engine.split(TABLE, None).unwrap();
            assert_aggregates_whole(&engine, TABLE);
        }
        // A cut asked for in the middle of one aggregate moves to a boundary.
        let inside = engine
            .table(TABLE)
            .unwrap()
            .scan(Scan::new().prefix(orders_prefix(&engine, TABLE, 11)))
            .unwrap()
            .nth(60)
            .unwrap()
            .unwrap()
            .row;
        engine.split(TABLE, Some(&inside)).unwrap();
        let regions = assert_aggregates_whole(&engine, TABLE);
        assert!(regions >= 8, "{}: forced splits cut the table: {regions} regions", stringify!($m));
        // Every aggregate is still whole and can be rewritten as one atomic mutation.
        for i in 0..N {
            assert_eq!(orders.get((order(i, 1).customer, i * 7)).unwrap(), Some(order(i, 1)));
            orders.put(&order(i, 2)).unwrap();
        }
        let all = orders.scan().to_vec().unwrap();
        assert_eq!(all.len(), N as usize);
        for a in &all {
            assert_eq!(*a, order(a.order_no / 7, 2));
        }
    }};
}

/// The key prefix of the `n`-th aggregate in key order.
fn orders_prefix(engine: &Engine, table: &str, n: usize) -> Vec<u8> {
    let mut prefixes: Vec<Vec<u8>> = engine
        .table(table)
        .unwrap()
        .scan(Scan::new())
        .unwrap()
        .map(|r| aggregate_of(&r.unwrap().row).to_vec())
        .collect();
    prefixes.dedup();
    prefixes[n].clone()
}

#[test]
fn single_table_splits_only_between_aggregates() {
    splits_keep_aggregates_whole!(single_table);
}

#[test]
fn denormalized_splits_only_between_aggregates() {
    splits_keep_aggregates_whole!(denormalized);
}

/// An entity stored in an aggregate's table (a record type of its own).
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "big_orders_s", record_type = 9)]
struct Note {
    #[cellar(partition)]
    customer: String,
    #[cellar(column = "t")]
    text: String,
}

#[test]
fn an_entity_sharing_the_table_keeps_the_aggregates_split_policy() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), EngineOptions::default()).unwrap();
    let db = Db::with_store(Arc::new(EmbeddedStore::new(engine.clone())));
    db.aggregates::<single_table::Order>().unwrap();
    let policy = engine.describe(single_table::TABLE).unwrap().split_policy;
    assert_ne!(policy, SplitPolicy::MidKey);
    let notes = db.repo::<Note>().unwrap();
    notes.put(&Note { customer: "ada".into(), text: "hi".into() }).unwrap();
    assert_eq!(engine.describe(single_table::TABLE).unwrap().split_policy, policy);
    // Opened the other way round, the aggregate still gets its policy.
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), EngineOptions::default()).unwrap();
    let db = Db::with_store(Arc::new(EmbeddedStore::new(engine.clone())));
    db.repo::<Note>().unwrap();
    db.aggregates::<single_table::Order>().unwrap();
    assert_eq!(engine.describe(single_table::TABLE).unwrap().split_policy, policy);
}
