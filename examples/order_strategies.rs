//! One order — Order → ShippingLocation → LineItem — in each of the four aggregate storage
//! strategies, side by side. The Rust types are the same four times over; only the
//! `strategy = "..."` attribute (and the table name) differs:
//!
//! - `normalized`: a table per level, a child's key its parent's key followed by its own;
//! - `single_table`: one table, a record-type byte after the order's key, one scan reads it all;
//! - `denormalized`: one table, each line item row carrying a copy of its location's columns;
//! - `blob`: the whole order in one cell of one row.
//!
//! For each strategy the example prints the layout, then puts one order (two locations of three
//! lines each) and measures, with `Db::measure`, what each operation costs: reading the order
//! whole and to depth 2, putting it again unchanged, updating one line, changing one location's
//! city, adding a line, removing a location and deleting the order. It ends with a table of
//! round trips and bytes per strategy and operation.
//!
//! What is asserted: every read returns exactly the expected order, and every cost follows from
//! the strategy's rules and from what is stored. The store's tables are read directly before and
//! after each operation; a read must return every stored row of the aggregate once (the
//! normalized root row twice: it is read again to check that no write came in between), and a
//! write must carry exactly the difference between the two — no more rows, cells or bytes (plus
//! the intent a normalized write records on the root row first). Round trips by kind follow from
//! the strategy: one scan (single table, denormalized) or one get (blob) to read, one atomic
//! group mutation or check-and-mutate to write; under normalized a get, a scan per child table
//! and the get again to read, and a check-and-mutate, a batch per table and a check-and-mutate to
//! write.
//!
//! Run with `cargo run --release --example order_strategies`.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Add;

use cellar::orm::aggregate::Strategy;
use cellar::orm::store::ScanSpec;
use cellar::orm::{Costs, Result};
use cellar::prelude::*;

/// Declares `Order`, `ShippingLocation` and `LineItem` in a module of their own, stored with
/// `$strategy` in table `$table`.
macro_rules! order_types {
    ($module:ident, $strategy:literal, $table:literal) => {
        mod $module {
            use cellar::prelude::*;

            #[derive(Aggregate, Debug, Clone, PartialEq)]
            #[cellar(table = $table, strategy = $strategy)]
            pub struct Order {
                #[cellar(partition)]
                pub customer: u64,
                #[cellar(key)]
                pub order_no: u64,
                #[cellar(column = "s")]
                pub status: String,
                #[cellar(column = "n")]
                pub note: Option<String>,
                #[cellar(children)]
                pub ship_to: Vec<ShippingLocation>,
            }

            #[derive(Part, Debug, Clone, PartialEq)]
            pub struct ShippingLocation {
                #[cellar(key)]
                pub loc: u16,
                #[cellar(column = "l1")]
                pub line1: String,
                #[cellar(column = "c")]
                pub city: String,
                #[cellar(column = "z")]
                pub zip: String,
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
                #[cellar(column = "p")]
                pub price_cents: i64,
            }
        }
    };
}

order_types!(normalized, "normalized", "order_n");
order_types!(single_table, "single_table", "order_s");
order_types!(denormalized, "denormalized", "order_d");
order_types!(blob, "blob", "order_b");

const CUSTOMER: u64 = 42_017;
const ORDER_NO: u64 = 90_311;
/// The sample order's shipping locations: key, street, city, postcode.
const LOCATIONS: [(u16, &str, &str, &str); 2] =
    [(1, "12 Harbour Road", "Bergen", "5003"), (2, "Storgata 8", "Oslo", "0155")];
/// Its lines: location, line key (unique across the order), sku, quantity, unit price in cents.
const LINES: [(u16, u16, &str, u32, i64); 6] = [
    (1, 1, "TEA-EARLGREY-250G", 2, 895),
    (1, 2, "MUG-STONEWARE-BLUE", 1, 1_450),
    (1, 3, "KETTLE-GOOSENECK-1L", 1, 4_999),
    (2, 4, "TEA-SENCHA-100G", 3, 1_125),
    (2, 5, "INFUSER-STEEL", 2, 650),
    (2, 6, "GIFT-CARD-50", 1, 5_000),
];

/// The operations, in the order they run, as the summary names them.
const OPS: [&str; 9] = ["put new", "get", "depth 2", "put same", "1 line", "1 city", "add line", "drop loc", "delete"];

/// The qualifier of the root row's generation cell (`\x00g` in the layouts).
const GENERATION: &[u8] = b"\x00g";

/// Every stored row of some tables: (table, row key) → cells as (family, qualifier, value).
type Snapshot = BTreeMap<(String, Vec<u8>), Vec<(Vec<u8>, Vec<u8>, Vec<u8>)>>;

/// Reads the tables directly from the store (outside any measurement).
fn snapshot(db: &Db, tables: &[&str]) -> Result<Snapshot> {
    let mut rows = Snapshot::new();
    for table in tables {
        for row in db.store().scan(table, &ScanSpec::default())? {
            let row = row?;
            let cells = row.cells.iter().map(|c| (c.family.to_vec(), c.qualifier.to_vec(), c.value.to_vec())).collect();
            rows.insert((table.to_string(), row.key.to_vec()), cells);
        }
    }
    Ok(rows)
}

/// Rows, cells and bytes, counted as [`Costs`] counts them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Volume {
    rows: u64,
    cells: u64,
    bytes: u64,
}

impl Add for Volume {
    type Output = Volume;

    fn add(self, o: Volume) -> Volume {
        Volume { rows: self.rows + o.rows, cells: self.cells + o.cells, bytes: self.bytes + o.bytes }
    }
}

type Cells = [(Vec<u8>, Vec<u8>, Vec<u8>)];

/// A put of a cell: row key + family + qualifier + value + 8 (the timestamp). Also what reading
/// the cell back costs.
fn put_bytes(key: &[u8], (family, qualifier, value): &(Vec<u8>, Vec<u8>, Vec<u8>)) -> u64 {
    (key.len() + family.len() + qualifier.len() + value.len() + 8) as u64
}

/// What reading these rows returns.
fn read_volume<'a>(rows: impl IntoIterator<Item = (&'a [u8], &'a Cells)>) -> Volume {
    rows.into_iter()
        .map(|(key, cells)| Volume {
            rows: 1,
            cells: cells.len() as u64,
            bytes: cells.iter().map(|c| put_bytes(key, c)).sum(),
        })
        .fold(Volume::default(), Add::add)
}

/// What a write of exactly the difference `before` → `after` carries — a row delete per row
/// that went (the key's bytes), a put per new or changed cell, a column delete per cell that
/// went (key + family + qualifier) — and the tables it touches.
fn difference(before: &Snapshot, after: &Snapshot) -> (Volume, BTreeSet<String>) {
    let mut volume = Volume::default();
    let mut tables = BTreeSet::new();
    for (table, key) in before.keys() {
        if !after.contains_key(&(table.clone(), key.clone())) {
            volume = volume + Volume { rows: 1, cells: 1, bytes: key.len() as u64 };
            tables.insert(table.clone());
        }
    }
    for ((table, key), cells) in after {
        let old = before.get(&(table.clone(), key.clone())).map(Vec::as_slice).unwrap_or_default();
        let puts = cells.iter().filter(|c| !old.contains(c));
        let deletes = old.iter().filter(|(f, q, _)| !cells.iter().any(|(f2, q2, _)| f == f2 && q == q2));
        let bytes: u64 = puts.clone().map(|c| put_bytes(key, c)).sum::<u64>()
            + deletes.clone().map(|(f, q, _)| (key.len() + f.len() + q.len()) as u64).sum::<u64>();
        let cells = (puts.count() + deletes.count()) as u64;
        if cells > 0 {
            volume = volume + Volume { rows: 1, cells, bytes };
            tables.insert(table.clone());
        }
    }
    (volume, tables)
}

/// The aggregate's root row: the one with the generation cell.
fn root_row(rows: &Snapshot) -> Option<(&[u8], &Cells)> {
    rows.iter()
        .find(|(_, cells)| cells.iter().any(|(_, q, _)| q == GENERATION))
        .map(|((_, key), cells)| (key.as_slice(), cells.as_slice()))
}

/// Checks an operation's costs against the strategy's rules and the stored rows before and
/// after it (`depth`: a read limited to that many levels).
fn check(strategy: Strategy, tables: &[&str], c: &Costs, before: &Snapshot, after: &Snapshot, depth: Option<usize>) {
    let all = || before.iter().map(|((_, k), cells)| (k.as_slice(), cells.as_slice()));
    let root = root_row(before);
    // Every operation starts by reading the aggregate: (gets, scans, what they return).
    let (gets, scans, read) = match strategy {
        // No root row: nothing more to read.
        Strategy::Normalized if root.is_none() => (1, 0, Volume::default()),
        // The root row, a scan per child table, then the root row again: a write that came in
        // between would have changed its generation. A read of `depth` levels scans only their
        // tables (`order_n.ship_to` holds level 2).
        Strategy::Normalized => {
            let within = |table: &str| depth.is_none_or(|d| table.matches('.').count() < d);
            let scanned = tables[1..].iter().filter(|t| within(t)).count() as u64;
            let rows =
                before.iter().filter(|((t, _), _)| within(t)).map(|((_, k), cells)| (k.as_slice(), cells.as_slice()));
            (2, scanned, read_volume(rows) + read_volume(root))
        }
        // Record types are numbered breadth first (the order 1, locations 2, lines 3), so the
        // order and its locations are one key range: the rows up to record type `depth`.
        Strategy::SingleTable if depth.is_some() && root.is_some() => {
            let at = root.map_or(0, |(key, _)| key.len() - 1);
            let shallow = all().filter(|(key, _)| usize::from(key[at]) <= depth.unwrap_or(0));
            (0, 1, read_volume(shallow))
        }
        // One prefix scan; denormalized reads every row even for a shallow read.
        Strategy::SingleTable | Strategy::Denormalized => (0, 1, read_volume(all())),
        Strategy::Blob => (1, 0, read_volume(all())),
    };
    assert_eq!((c.gets, c.scans, c.admin, c.increments), (gets, scans, 0, 0), "{strategy:?}: read round trips");
    assert_eq!(
        Volume { rows: c.rows_read, cells: c.cells_read, bytes: c.bytes_read },
        read,
        "{strategy:?}: a read returns each stored row once"
    );
    // Then it writes exactly what changed, if anything did.
    let (written, touched) = difference(before, after);
    let child_tables_touched = touched.iter().filter(|t| t.as_str() != tables[0]).count() as u64;
    // (mutates, check-and-mutates, group mutates, and the intent: one row, one cell)
    let (mutates, check_and_mutates, groups, intent) = match strategy {
        _ if written.rows == 0 => (0, 0, 0, 0),
        // Every write puts a new generation on the root row, so one row changed is the root.
        _ if written.rows == 1 => (0, 1, 0, 0),
        // The intent on the root row, the other rows a batch per table, then the commit.
        Strategy::Normalized => (child_tables_touched, 2, 0, 1),
        Strategy::SingleTable | Strategy::Denormalized => (0, 0, 1, 0),
        Strategy::Blob => unreachable!("a blob is one row"),
    };
    assert_eq!(
        (c.mutates, c.check_and_mutates, c.group_mutates),
        (mutates, check_and_mutates, groups),
        "{strategy:?}: write round trips"
    );
    assert_eq!(
        (c.rows_written, c.cells_written),
        (written.rows + intent, written.cells + intent),
        "{strategy:?}: a write carries what changed"
    );
    if intent == 0 {
        assert_eq!(c.bytes_written, written.bytes, "{strategy:?}: bytes written are the difference");
    } else {
        assert!(c.bytes_written > written.bytes, "{strategy:?}: the difference plus the intent");
    }
}

/// One strategy's run: prints and checks each operation, and keeps its costs.
struct Run<'a> {
    db: &'a Db,
    strategy: Strategy,
    tables: &'a [&'a str],
    costs: Vec<Costs>,
}

impl Run<'_> {
    /// Runs `f` as the next operation; returns its result and costs, and what was stored
    /// before and after.
    fn op<T>(&mut self, depth: Option<usize>, f: impl FnOnce() -> Result<T>) -> Result<(T, Costs, Snapshot, Snapshot)> {
        let before = snapshot(self.db, self.tables)?;
        let (value, costs) = self.db.measure(f);
        let value = value?;
        let after = snapshot(self.db, self.tables)?;
        let name = OPS[self.costs.len()];
        println!("  {name:<9} {costs}");
        check(self.strategy, self.tables, &costs, &before, &after, depth);
        self.costs.push(costs);
        Ok((value, costs, before, after))
    }
}

/// Puts, reads, changes and deletes the sample order in the strategy of module `$m`, whose
/// tables are `$tables` (the order's first); evaluates to the costs of the operations.
macro_rules! run_strategy {
    ($m:ident, $tables:expr) => {{
        use $m::{LineItem, Order, ShippingLocation};
        let db = Db::open_temporary()?;
        let orders = db.aggregates::<Order>()?;
        let strategy = <Order as cellar::orm::Aggregate>::AGGREGATE.strategy;
        let tables: &[&str] = &$tables;
        println!("== {} ==", strategy.name());
        let layout = orders.layout().to_string();
        print!("{layout}");
        assert!(layout.starts_with(&format!("aggregate Order ({})\n", strategy.name())));
        assert_eq!(layout.matches("  table ").count(), tables.len(), "one table, or one per level");
        assert!(tables.iter().all(|t| layout.contains(&format!("  table {t}\n"))));

        let line = |(_, line, sku, qty, price_cents): (u16, u16, &str, u32, i64)| LineItem {
            line,
            sku: sku.into(),
            qty,
            price_cents,
        };
        let mut expected = Order {
            customer: CUSTOMER,
            order_no: ORDER_NO,
            status: "paid".into(),
            note: Some("ring twice".into()),
            ship_to: LOCATIONS
                .iter()
                .map(|&(loc, line1, city, zip)| ShippingLocation {
                    loc,
                    line1: line1.into(),
                    city: city.into(),
                    zip: zip.into(),
                    items: LINES.iter().filter(|l| l.0 == loc).map(|&l| line(l)).collect(),
                })
                .collect(),
        };
        let key = (CUSTOMER, ORDER_NO);
        let locations = orders.children(key, Order::SHIP_TO);
        let lines_of_1 = locations.child(1u16, ShippingLocation::ITEMS)?;
        let mut run = Run { db: &db, strategy, tables, costs: Vec::new() };

        let ((), new, _, stored) = run.op(None, || orders.put(&expected))?;
        // Rows stored: the order, a row per location unless it is collapsed onto its lines,
        // a row per line — or one row in all.
        let rows = match strategy {
            Strategy::Normalized | Strategy::SingleTable => 1 + LOCATIONS.len() + LINES.len(),
            Strategy::Denormalized => 1 + LINES.len(),
            Strategy::Blob => 1,
        };
        assert_eq!(stored.len(), rows, "rows stored");
        assert_eq!(new.rows_written as usize, rows + usize::from(strategy == Strategy::Normalized));

        let (got, whole, ..) = run.op(None, || orders.get(key))?;
        assert_eq!(got.as_ref(), Some(&expected), "the whole order reads back");
        match strategy {
            Strategy::Normalized => assert_eq!((whole.gets, whole.scans), (2, 2)),
            Strategy::SingleTable | Strategy::Denormalized => assert_eq!((whole.round_trips(), whole.scans), (1, 1)),
            Strategy::Blob => assert_eq!((whole.round_trips(), whole.gets, whole.rows_read), (1, 1, 1)),
        }

        let (got, shallow, ..) = run.op(Some(2), || orders.get_to_depth(key, 2))?;
        let mut locations_only = expected.clone();
        locations_only.ship_to.iter_mut().for_each(|l| l.items.clear());
        assert_eq!(got, Some(locations_only), "depth 2: the order and its locations, no lines");
        match strategy {
            Strategy::SingleTable => {
                assert_eq!(shallow.rows_read as usize, 1 + LOCATIONS.len(), "single table: the lines are not read")
            }
            // The root row twice (before and after the scan), the locations' table, not the lines'.
            Strategy::Normalized => {
                assert_eq!((shallow.scans, shallow.rows_read as usize), (1, 2 + LOCATIONS.len()), "no line table")
            }
            _ => assert_eq!(shallow, whole, "the other strategies read it all and drop the lines"),
        }

        let ((), same, ..) = run.op(None, || orders.put(&expected))?;
        assert_eq!((same.rows_written, same.cells_written, same.bytes_written), (0, 0, 0), "nothing changed");

        // Line 2 (at location 1): one more mug.
        let mut mugs = expected.ship_to[0].items[1].clone();
        mugs.qty += 1;
        let ((), one_line, ..) = run.op(None, || lines_of_1.put(&mugs))?;
        expected.ship_to[0].items[1] = mugs;
        // The line's quantity cell and the root's generation.
        assert_eq!(one_line.cells_written, if strategy == Strategy::Normalized { 3 } else { 2 });
        assert_eq!(orders.get(key)?.as_ref(), Some(&expected));

        // Location 2 moves to another city: its lines come with it.
        let mut moved = expected.ship_to[1].clone();
        moved.city = "Lillestrøm".into();
        let ((), city, ..) = run.op(None, || locations.put(&moved))?;
        expected.ship_to[1] = moved;
        let lines_at_2 = expected.ship_to[1].items.len() as u64;
        match strategy {
            // The location's row and the root's generation (and under normalized the intent).
            Strategy::Normalized => assert_eq!(city.rows_written, 3),
            Strategy::SingleTable => assert_eq!(city.rows_written, 2),
            // Every line's copy of the city, and the root's generation.
            Strategy::Denormalized => {
                assert_eq!((city.rows_written, city.cells_written), (lines_at_2 + 1, lines_at_2 + 1))
            }
            Strategy::Blob => assert_eq!(city.rows_written, 1),
        }
        assert_eq!(orders.get(key)?.as_ref(), Some(&expected));

        let card = LineItem { line: 7, sku: "CARD-THANK-YOU".into(), qty: 1, price_cents: 0 };
        let ((), added, before, after) = run.op(None, || lines_of_1.put(&card))?;
        expected.ship_to[0].items.push(card);
        let new_rows: Vec<usize> =
            after.iter().filter(|(k, _)| !before.contains_key(k)).map(|(_, c)| c.len()).collect();
        match strategy {
            // One new row, and the root's generation (and under normalized the intent).
            Strategy::Normalized => assert_eq!((new_rows, added.rows_written), (vec![3], 3)),
            Strategy::SingleTable => assert_eq!((new_rows, added.rows_written), (vec![3], 2)),
            // Its three columns, its location's key and a copy of each of the location's three.
            Strategy::Denormalized => assert_eq!((new_rows, added.rows_written), (vec![3 + 1 + 3], 2)),
            Strategy::Blob => assert_eq!((new_rows, added.rows_written), (vec![], 1)),
        }
        assert_eq!(orders.get(key)?.as_ref(), Some(&expected));

        let (removed, dropped, ..) = run.op(None, || locations.remove(2u16))?;
        assert!(removed);
        expected.ship_to.remove(1);
        // Rows deleted: the location's row (none under denormalized), its lines, plus the root.
        match strategy {
            Strategy::Normalized => assert_eq!(dropped.rows_written, 1 + lines_at_2 + 2),
            Strategy::SingleTable => assert_eq!(dropped.rows_written, 1 + lines_at_2 + 1),
            Strategy::Denormalized => assert_eq!(dropped.rows_written, lines_at_2 + 1),
            Strategy::Blob => assert_eq!(dropped.rows_written, 1),
        }
        assert_eq!(orders.get(key)?.as_ref(), Some(&expected));

        let ((), deleted, before, after) = run.op(None, || orders.delete(key))?;
        assert!(after.is_empty(), "no row of the order is left in {tables:?}");
        assert_eq!(orders.get(key)?, None);
        assert!(!orders.exists(key)?);
        // A row delete per stored row, each costing its key.
        let keys: u64 = before.keys().map(|(_, k)| k.len() as u64).sum();
        if strategy != Strategy::Normalized {
            assert_eq!((deleted.rows_written, deleted.bytes_written), (before.len() as u64, keys));
        }
        if strategy == Strategy::Blob {
            // Every operation reads or writes the one row, in one round trip to read and one
            // more to write.
            for c in &run.costs {
                assert!(c.rows_read <= 1 && c.rows_written <= 1);
                assert_eq!(c.round_trips(), c.gets + c.check_and_mutates);
                assert!(c.gets == 1 && c.check_and_mutates <= 1);
            }
        }
        println!();
        run.costs
    }};
}

pub(crate) fn main() -> Result<()> {
    let results = [
        ("normalized", run_strategy!(normalized, ["order_n", "order_n.ship_to", "order_n.ship_to.items"])),
        ("single_table", run_strategy!(single_table, ["order_s"])),
        ("denormalized", run_strategy!(denormalized, ["order_d"])),
        ("blob", run_strategy!(blob, ["order_b"])),
    ];

    // A few comparisons the strategies are chosen on.
    let cost = |strategy: &str, op: &str| {
        let (_, costs) = results.iter().find(|(s, _)| *s == strategy).expect("a strategy");
        costs[OPS.iter().position(|o| *o == op).expect("an operation")]
    };
    // A line update writes one cell of one row (and the generation) in a table of rows, but the
    // whole order in a blob.
    assert!(cost("blob", "1 line").bytes_written > 2 * cost("single_table", "1 line").bytes_written);
    // The city is stored once per line under denormalized, once elsewhere.
    assert!(cost("denormalized", "1 city").rows_written > cost("single_table", "1 city").rows_written);
    // single_table and normalized read fewer rows for fewer levels; the others read it all.
    for strategy in ["single_table", "normalized"] {
        assert!(cost(strategy, "depth 2").bytes_read < cost(strategy, "get").bytes_read);
    }
    for strategy in ["denormalized", "blob"] {
        assert_eq!(cost(strategy, "depth 2").bytes_read, cost(strategy, "get").bytes_read);
    }

    println!("round trips / bytes read (get, depth 2) or written (the rest):");
    print!("{:<13}", "");
    OPS.iter().for_each(|op| print!("{op:>11}"));
    println!();
    for (strategy, costs) in &results {
        print!("{strategy:<13}");
        for (i, c) in costs.iter().enumerate() {
            let bytes = if matches!(OPS[i], "get" | "depth 2") { c.bytes_read } else { c.bytes_written };
            print!("{:>11}", format!("{}/{bytes}", c.round_trips()));
        }
        println!();
    }
    println!("order_strategies: ok");
    Ok(())
}
