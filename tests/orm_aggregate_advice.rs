//! Aggregate advice: what each strategy costs, with sizes measured on the stored aggregates
//! (matching what reads of them cost), and the rules of thumb applied to every part's columns.

mod common;

use cellar::orm::advice::Rule;
use cellar::prelude::*;

/// Three orders of 2 locations × 3 lines, all the same size.
macro_rules! store_orders {
    ($m:ident, $orders:expr) => {{
        use common::orders::$m::*;
        for order_no in 1..=3u64 {
            let mut line = 0u16;
            $orders
                .put(&Order {
                    customer: 7,
                    order_no,
                    status: "open".into(),
                    note: None,
                    ship_to: (1..=2)
                        .map(|loc| ShippingLocation {
                            loc,
                            line1: format!("{loc} Quay"),
                            city: "Oslo".into(),
                            zip: "0150".into(),
                            items: (0..3)
                                .map(|_| {
                                    line += 1;
                                    LineItem { line, sku: format!("sku-{line}"), qty: 1, price_cents: 100 }
                                })
                                .collect(),
                        })
                        .collect(),
                })
                .unwrap();
        }
    }};
}

/// The strategy-cost advice, checked to be the only one for these well-designed types.
fn strategy_cost(advice: Vec<cellar::orm::Advice>) -> String {
    assert_eq!(advice.len(), 1, "{advice:?}");
    assert_eq!(advice[0].rule, Rule::StrategyCost);
    advice[0].to_string()
}

#[test]
fn blob_advice_gives_the_bytes_every_write_rewrites() {
    let db = Db::open_temporary().unwrap();
    let orders = db.aggregates::<common::orders::blob::Order>().unwrap();
    let empty = strategy_cost(orders.advice().unwrap());
    assert!(empty.starts_with("strategy blob: every write, even of one field of one child, rewrites the whole"));
    assert!(!empty.contains("on average") && !empty.contains("largest"), "no sizes without stored aggregates: {empty}");
    store_orders!(blob, orders);
    // One blob row per order: what a get reads is what every write rewrites.
    let (_, read) = db.measure(|| orders.get((7, 1)).unwrap());
    let size = format!("{} B", read.bytes_read);
    let advice = strategy_cost(orders.advice().unwrap());
    assert!(advice.contains(&format!("({size} on average over 3 stored), the largest stored is {size}")), "{advice}");
}

#[test]
fn single_table_advice_gives_the_rows_of_a_whole_read() {
    let db = Db::open_temporary().unwrap();
    let orders = db.aggregates::<common::orders::single_table::Order>().unwrap();
    store_orders!(single_table, orders);
    let (_, read) = db.measure(|| orders.get((7, 2)).unwrap());
    assert_eq!(read.rows_read, 9, "the order, 2 locations, 6 lines");
    let advice = strategy_cost(orders.advice().unwrap());
    assert!(advice.contains("a whole read is one prefix scan (9 rows on average over 3 stored)"), "{advice}");
    assert!(advice.ends_with(&format!("must fit a region, the largest stored is {} B", read.bytes_read)), "{advice}");
}

#[test]
fn normalized_advice_counts_a_scan_per_child_table() {
    let db = Db::open_temporary().unwrap();
    let orders = db.aggregates::<common::orders::normalized::Order>().unwrap();
    store_orders!(normalized, orders);
    let (_, read) = db.measure(|| orders.get((7, 3)).unwrap());
    // The intent protocol's reader checks the root's generation again after the scans.
    assert_eq!((read.gets, read.scans), (2, 2));
    let advice = strategy_cost(orders.advice().unwrap());
    let expected =
        "a whole read is two gets of the root (before and after) and 2 prefix scans, one per child table (9 rows";
    assert!(advice.contains(expected), "{advice}");
}

#[test]
fn denormalized_advice_counts_the_copies_a_location_change_rewrites() {
    let db = Db::open_temporary().unwrap();
    let orders = db.aggregates::<common::orders::denormalized::Order>().unwrap();
    store_orders!(denormalized, orders);
    let advice = strategy_cost(orders.advice().unwrap());
    // Locations with lines are collapsed onto them: the order row and its 6 line rows.
    assert!(advice.contains("one prefix scan (7 rows on average over 3 stored)"), "{advice}");
    assert!(
        advice.contains("changing one ShippingLocation rewrites its copies on every LineItem row (3.0 on average)"),
        "{advice}"
    );
    // And a location change does rewrite its three lines.
    let key = (7u64, 1u64);
    let locations = orders.children(key, common::orders::denormalized::Order::SHIP_TO);
    let mut first = locations.get(1u16).unwrap().unwrap();
    first.city = "Bergen".into();
    let ((), wrote) = db.measure(|| locations.put(&first).unwrap());
    assert_eq!(wrote.rows_written, 4, "three line rows and the root's generation: {wrote}");
}

mod wordy {
    use cellar::prelude::*;

    #[derive(Aggregate, Debug, Clone, PartialEq)]
    #[cellar(table = "wordy", strategy = "single_table")]
    pub struct Invoice {
        #[cellar(key)]
        pub id: u64,
        pub description_text: String,
        #[cellar(children)]
        pub lines: Vec<InvoiceLine>,
    }

    #[derive(Part, Debug, Clone, PartialEq)]
    pub struct InvoiceLine {
        #[cellar(key)]
        pub n: u16,
        pub description_text: String,
        #[cellar(column = "a")]
        pub amount: String,
    }
}

#[test]
fn parts_get_the_column_rules_of_thumb() {
    let db = Db::open_temporary().unwrap();
    let invoices = db.aggregates::<wordy::Invoice>().unwrap();
    let advice = invoices.advice().unwrap();
    let rules: Vec<(Rule, String)> = advice.iter().map(|a| (a.rule, a.subject.clone())).collect();
    assert_eq!(
        rules,
        [
            (Rule::LongQualifier, "column d:description_text".to_string()),
            (Rule::LongQualifier, "lines: column d:description_text".to_string()),
            (Rule::NumberAsString, "lines: column d:a".to_string()),
            (Rule::StrategyCost, "strategy single_table".to_string()),
        ]
    );
}
