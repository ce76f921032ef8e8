//! An order store three releases old, and the bulk migration that brings its orders to the
//! current version. The order document is a `blob` aggregate that declares its versions:
//!
//! - release 1 wrote version 1 in bincode: customer, order number, status and lines;
//! - release 2 wrote version 2 in MessagePack and added the currency, as the checkout form sent
//!   it (`eur`, `NOK `, ...); release 1 sold in euros only;
//! - the current code writes version 3 in MessagePack, zstd-compressed above 256 bytes: the
//!   lines are parts numbered from 1, and the currency is an upper-case code the store prices
//!   in. That step is a `TryFrom`: it refuses a currency it does not know.
//!
//! The table holds what years of releases leave behind: orders of both old versions (written
//! here straight into the store, as the old releases did), orders the current code wrote or
//! changed, and one cell damaged on disk. The example takes the census, reads old orders lazily
//! (they come back at version 3; their cells stay as they are), runs a dry run, then the
//! migration with a progress bar — plain progress lines when stdout is not a terminal — and the
//! census again.
//!
//! What is asserted: the census before and after, per format; a read of an old order returns
//! exactly what the `From`/`TryFrom` chain gives in memory and leaves its cell alone; the dry run
//! writes nothing; the migration rewrites every old cell, counts the damaged one as unreadable
//! and reports it by row, and reports progress every 1000 rows; afterwards every readable cell
//! holds version 3 in MessagePack, zstd-compressed where the payload is over 256 bytes, and
//! decodes to the order the chain gives, the damaged cell is as it was, and a second run
//! rewrites nothing.
//!
//! Run with `cargo run --release --example blob_migration`.

use std::collections::BTreeMap;
use std::io::IsTerminal;

use bytes::Bytes;
use cellar::orm::blob::{self, versioned, BlobFormat, Codec, VersionError};
use cellar::orm::migrate::{Census, Format, Progress, Report, JOBS_TABLE};
use cellar::orm::store::{CellMutation, ReadSpec, RowMutation, ScanSpec};
use cellar::orm::Result;
use cellar::prelude::*;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::{Deserialize, Serialize};

/// An order line as releases 1 and 2 stored it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct LineV1 {
    sku: String,
    qty: u32,
    price_cents: i64,
}

/// Version 1 (release 1, bincode).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct OrderV1 {
    customer: u64,
    order_no: u64,
    status: String,
    lines: Vec<LineV1>,
}

/// Version 2 (release 2, MessagePack): the currency, as the checkout form sent it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct OrderV2 {
    customer: u64,
    order_no: u64,
    status: String,
    currency: String,
    lines: Vec<LineV1>,
}

/// Version 3, the current one: one cell of table `orders`, MessagePack, zstd above 256 bytes.
#[derive(Aggregate, Versioned, Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cellar(
    table = "orders",
    strategy = "blob",
    blob(version = 3, codec = "msgpack", compress = "zstd", history(1 = OrderV1 via "bincode", 2 = OrderV2))
)]
struct Order {
    #[cellar(partition)]
    customer: u64,
    #[cellar(key)]
    order_no: u64,
    #[cellar(column = "s")]
    status: String,
    #[cellar(column = "c")]
    currency: String,
    #[cellar(children)]
    lines: Vec<Line>,
}

/// A line of the current order: a part of it, numbered from 1.
#[derive(Part, Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Line {
    #[cellar(key)]
    n: u16,
    #[cellar(column = "k")]
    sku: String,
    #[cellar(column = "q")]
    qty: u32,
    #[cellar(column = "p")]
    price_cents: i64,
}

impl From<OrderV1> for OrderV2 {
    /// Release 1 sold in euros only.
    fn from(v: OrderV1) -> Self {
        OrderV2 { customer: v.customer, order_no: v.order_no, status: v.status, currency: "EUR".into(), lines: v.lines }
    }
}

/// The currencies the store prices in.
const CURRENCIES: [&str; 5] = ["EUR", "NOK", "SEK", "DKK", "GBP"];

impl TryFrom<OrderV2> for Order {
    type Error = String;

    fn try_from(v: OrderV2) -> std::result::Result<Self, String> {
        let currency = v.currency.trim().to_ascii_uppercase();
        if !CURRENCIES.contains(&currency.as_str()) {
            return Err(format!("order {}: unknown currency `{}`", v.order_no, v.currency));
        }
        let lines = v
            .lines
            .into_iter()
            .enumerate()
            .map(|(i, l)| {
                let n = u16::try_from(i + 1).map_err(|_| format!("order {}: more than 65535 lines", v.order_no))?;
                Ok(Line { n, sku: l.sku, qty: l.qty, price_cents: l.price_cents })
            })
            .collect::<std::result::Result<_, String>>()?;
        Ok(Order { customer: v.customer, order_no: v.order_no, status: v.status, currency, lines })
    }
}

const TABLE: &str = "orders";
/// Orders 1 to 800 were written by release 1, up to 1600 by release 2, the rest by the
/// current code.
const RELEASE_1: std::ops::RangeInclusive<u64> = 1..=800;
const RELEASE_2: std::ops::RangeInclusive<u64> = 801..=1600;
const ORDERS: u64 = 2100;
/// Every 40th old order was refunded since, by the current code: it wrote them at version 3.
const REFUNDED_EVERY: u64 = 40;
/// The order whose cell a bad sector damaged.
const DAMAGED: u64 = 1217;
/// The catalog: sku and price in cents.
const CATALOG: [(&str, i64); 10] = [
    ("TEA-EARLGREY-250G", 895),
    ("TEA-SENCHA-100G", 1_125),
    ("MUG-STONEWARE-BLUE", 1_450),
    ("KETTLE-GOOSENECK-1L", 4_999),
    ("INFUSER-STEEL", 650),
    ("HONEY-HEATHER-350G", 1_290),
    ("BISCUITS-OAT-200G", 475),
    ("TEAPOT-CAST-IRON", 6_900),
    ("COZY-WOOL-GREY", 2_200),
    ("GIFT-CARD-50", 5_000),
];

/// A well-mixed number per order (splitmix64): the data is the same on every run.
fn mix(n: u64) -> u64 {
    let mut z = n.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn customer(n: u64) -> u64 {
    1_000 + mix(n) % 250
}

/// One to six lines.
fn lines(n: u64) -> Vec<LineV1> {
    let m = mix(n);
    (0..1 + m % 6)
        .map(|i| {
            let (sku, price_cents) = CATALOG[((m >> 8) + i * 3) as usize % CATALOG.len()];
            LineV1 { sku: sku.into(), qty: 1 + (m >> (16 + i)) as u32 % 3, price_cents }
        })
        .collect()
}

fn status(n: u64, choices: &[&str]) -> String {
    choices[(mix(n) >> 40) as usize % choices.len()].into()
}

/// Order `n` as release 1 wrote it.
fn v1(n: u64) -> OrderV1 {
    let status = status(n, &["delivered", "delivered", "delivered", "cancelled"]);
    OrderV1 { customer: customer(n), order_no: n, status, lines: lines(n) }
}

/// Order `n` as release 2 wrote it.
fn v2(n: u64) -> OrderV2 {
    let currency = ["eur", "EUR", "nok", "NOK ", "sek", "dkk"][(mix(n) >> 48) as usize % 6];
    let status = status(n, &["delivered", "delivered", "shipped", "cancelled"]);
    OrderV2 { customer: customer(n), order_no: n, status, currency: currency.into(), lines: lines(n) }
}

/// Order `n` as the current code placed it.
fn placed(n: u64) -> Order {
    let lines = (1..).zip(lines(n)).map(|(n, l)| Line { n, sku: l.sku, qty: l.qty, price_cents: l.price_cents });
    let currency = CURRENCIES[(mix(n) >> 48) as usize % CURRENCIES.len()];
    let status = status(n, &["placed", "paid", "paid", "shipped"]);
    Order { customer: customer(n), order_no: n, status, currency: currency.into(), lines: lines.collect() }
}

fn refunded(n: u64) -> bool {
    n <= *RELEASE_2.end() && n.is_multiple_of(REFUNDED_EVERY)
}

/// What order `n` is at version 3: the old versions through the same `From`/`TryFrom` chain
/// the reads use, in memory.
fn expected(n: u64) -> Order {
    let mut order = if RELEASE_1.contains(&n) {
        Order::try_from(OrderV2::from(v1(n))).expect("every v1 order converts")
    } else if RELEASE_2.contains(&n) {
        Order::try_from(v2(n)).expect("every v2 order converts")
    } else {
        placed(n)
    };
    if refunded(n) {
        order.status = "refunded".into();
    }
    order
}

fn row_key(n: u64) -> Bytes {
    [customer(n).to_be_bytes(), n.to_be_bytes()].concat().into()
}

fn order_no(key: &[u8]) -> u64 {
    u64::from_be_bytes(key[8..16].try_into().expect("a 16-byte order key"))
}

/// The row of order `n` as an old release stored it: the blob cell and the aggregate's
/// generation token.
fn old_row(n: u64, cell: Vec<u8>) -> RowMutation {
    let put = |qualifier: &'static [u8], value: Vec<u8>| CellMutation::Put {
        family: Bytes::from_static(b"d"),
        qualifier: Bytes::from_static(qualifier),
        value: value.into(),
        timestamp: None,
    };
    RowMutation { row: row_key(n), mutations: vec![put(b"b", cell), put(b"\x00g", mix(!n).to_be_bytes().to_vec())] }
}

/// Every stored order cell: order number → cell.
fn stored(db: &Db) -> Result<BTreeMap<u64, Bytes>> {
    let mut cells = BTreeMap::new();
    for row in db.store().scan(TABLE, &ScanSpec::default())? {
        let row = row?;
        let cell = row.cells.iter().find(|c| c.qualifier.as_ref() == b"b").expect("every order row has its blob");
        cells.insert(order_no(&row.key), cell.value.clone());
    }
    Ok(cells)
}

/// The stored cell of order `n`.
fn stored_cell(db: &Db, n: u64) -> Result<Bytes> {
    let row = db.store().read_rows(TABLE, &[row_key(n)], &ReadSpec::default())?.pop().flatten();
    Ok(Bytes::copy_from_slice(row.as_ref().and_then(|r| r.value("d", "b")).expect("the order's cell")))
}

/// `v1 bincode` for a cell.
fn format_of(cell: &[u8]) -> String {
    let header = blob::read_header(cell).expect("a blob header");
    format!("v{} {}", header.schema_version, header.codec().expect("a known codec").name())
}

fn census(formats: &[(u32, &'static str, u64)], unreadable: u64) -> Census {
    let formats = formats.iter().map(|&(v, codec, n)| (Format { codec, version: Some(v) }, n)).collect();
    Census { formats, unreadable }
}

fn describe(o: &Order) -> String {
    let lines: Vec<String> = o
        .lines
        .iter()
        .map(|l| format!("{}: {} x {} @ {}.{:02}", l.n, l.qty, l.sku, l.price_cents / 100, l.price_cents % 100))
        .collect();
    format!("customer {}, {}, {}, lines {}", o.customer, o.status, o.currency, lines.join("; "))
}

fn print_report(r: &Report) {
    println!(
        "  rows {}, rewritten {}, current {}, raced {}, failures {}",
        r.rows,
        r.rewritten,
        r.current,
        r.raced,
        r.failures.len()
    );
    for f in &r.failures {
        println!("  unreadable: row {}: {}", f.row, f.reason);
    }
}

pub(crate) fn main() -> Result<()> {
    let db = Db::open_temporary()?;
    let orders = db.aggregates::<Order>()?;
    let tag = blob::type_tag("Order");

    // Release 1, then release 2, wrote straight into the store.
    let v1_format = BlobFormat::new(1, Codec::Bincode);
    let v2_format = BlobFormat::new(2, Codec::MessagePack);
    let mut rows = Vec::new();
    for n in RELEASE_1 {
        rows.push(old_row(n, blob::encode(&v1(n), &v1_format, tag).expect("a v1 cell")));
    }
    for n in RELEASE_2 {
        let mut cell = blob::encode(&v2(n), &v2_format, tag).expect("a v2 cell");
        if n == DAMAGED {
            // One flipped bit in the middle of the payload.
            let at = blob::HEADER_LEN + (cell.len() - blob::HEADER_LEN) / 2;
            cell[at] ^= 0x10;
        }
        rows.push(old_row(n, cell));
    }
    for chunk in rows.chunks(500) {
        db.store().mutate(TABLE, chunk.to_vec())?;
    }
    // The current code: new orders, and refunds of old ones (read, changed, written back).
    for n in *RELEASE_2.end() + 1..=ORDERS {
        orders.put(&placed(n))?;
    }
    for n in (REFUNDED_EVERY..=*RELEASE_2.end()).step_by(REFUNDED_EVERY as usize) {
        let mut order = orders.get((customer(n), n))?.expect("the old order");
        order.status = "refunded".into();
        orders.put(&order)?;
    }
    let old_cells = stored(&db)?;
    assert_eq!(old_cells.len() as u64, ORDERS);

    let before = db.migrate::<Order>().census()?;
    println!("{ORDERS} orders; census: {before}");
    // Old orders the current code has not written since (less the damaged one), and the rest.
    let untouched = |range: std::ops::RangeInclusive<u64>| range.filter(|&n| !refunded(n)).count() as u64;
    let (v1s, v2s) = (untouched(RELEASE_1), untouched(RELEASE_2) - 1);
    let current = ORDERS - v1s - v2s - 1;
    assert_eq!(before, census(&[(1, "bincode", v1s), (2, "msgpack", v2s), (3, "msgpack", current)], 1));
    assert_eq!(before.to_string(), "v1 bincode: 780, v2 msgpack: 779, v3 msgpack: 540, unreadable: 1");

    // Old orders read lazily: at version 3, as the chain gives them; the cells stay as they are.
    println!("old orders, read lazily:");
    let short = |n: &u64| !refunded(*n) && lines(*n).len() <= 2;
    let first_v1 = RELEASE_1.clone().find(short).expect("a short v1 order");
    let first_v2 = RELEASE_2.clone().find(|n| short(n) && v2(*n).currency != v2(*n).currency.to_uppercase());
    let lazily = [first_v1, first_v2.expect("a short v2 order in lower case")];
    for n in lazily {
        let read = orders.get((customer(n), n))?.expect("the old order");
        let currency =
            if RELEASE_1.contains(&n) { "no currency".into() } else { format!("currency {:?}", v2(n).currency) };
        println!("  order {n} (stored {}, {currency}): {}", format_of(&old_cells[&n]), describe(&read));
        assert_eq!(read, expected(n), "order {n} reads as the chain converts it");
        assert_eq!(stored_cell(&db, n)?, old_cells[&n], "a read leaves the cell as it was");
    }
    let damaged = orders.get((customer(DAMAGED), DAMAGED)).expect_err("the damaged order does not read").to_string();
    println!("  order {DAMAGED} (damaged): {damaged}");
    assert!(damaged.contains("checksum mismatch"), "{damaged}");
    // A currency the store does not price in is refused by the TryFrom step, with its reason.
    let doubloons = OrderV2 { currency: "doubloons".into(), ..v2(1) };
    let cell = blob::encode(&doubloons, &v2_format, tag).expect("a v2 cell");
    let refused = versioned::read::<Order>(&cell).expect_err("an unknown currency is refused");
    println!("  a v2 order in doubloons: {refused}");
    assert!(matches!(refused, VersionError::Step { from: 2, to: 3, .. }));

    println!("dry run:");
    let (dry, costs) = db.measure(|| db.migrate::<Order>().dry_run().run());
    let dry = dry?;
    print_report(&dry);
    println!("  costs: {costs}");
    assert_eq!((dry.rows, dry.rewritten, dry.current, dry.raced), (ORDERS, v1s + v2s, current, 0));
    assert_eq!(dry.census, before);
    assert_eq!((costs.scans, costs.rows_written), (1, 0), "one scan; a dry run writes nothing");

    // The migration, with a progress bar on a terminal and a line per report elsewhere. (Under
    // the test harness stdout is captured, whatever it is: no bar there.)
    println!("migration:");
    let interactive = !cfg!(test) && std::io::stdout().is_terminal();
    let bar = if interactive {
        let style = ProgressStyle::with_template("  [{bar:40}] {pos}/{len} rows, {msg}")
            .expect("a valid template")
            .progress_chars("=> ");
        ProgressBar::with_draw_target(Some(ORDERS), ProgressDrawTarget::stdout()).with_style(style)
    } else {
        ProgressBar::hidden()
    };
    let mut reports = Vec::new();
    let migration = db.migrate::<Order>().on_progress(|p: &Progress| {
        let status = format!("{} rewritten, {} unreadable", p.rewritten, p.failed);
        if bar.is_hidden() {
            println!("  {:>4}/{ORDERS} rows, {status}", p.rows);
        }
        bar.set_position(p.rows);
        bar.set_message(status);
        reports.push(p.clone());
    });
    let (report, costs) = db.measure(|| migration.run());
    let report = report?;
    bar.finish();
    print_report(&report);
    println!("  costs: {costs}");
    println!("  (the mutates: a checkpoint in table {JOBS_TABLE} every 1000 rows, removed at the end)");
    // A batch of check-and-mutates (one per rewrite) for every 1000 rows.
    assert_eq!((costs.check_and_mutates, costs.mutates), (ORDERS.div_ceil(1000), ORDERS / 1000 + 1));
    let at: Vec<u64> = reports.iter().map(|p| p.rows).collect();
    assert_eq!(at, [1000, 2000, ORDERS], "a report every 1000 rows and at the end");
    assert!(reports.windows(2).all(|w| w[0].rewritten <= w[1].rewritten));
    let last = reports.last().expect("a final report");
    assert_eq!((last.rewritten, last.failed), (v1s + v2s, 1));
    assert_eq!((report.rows, report.rewritten, report.current, report.raced), (ORDERS, v1s + v2s, current, 0));
    assert_eq!((report.census.clone(), report.resumed_after.clone()), (before, None));
    assert_eq!(report.failures.len(), 1);
    assert_eq!(report.failures[0].row, cellar::engine::to_printable(&row_key(DAMAGED)));
    assert!(report.failures[0].reason.contains("checksum mismatch"), "{}", report.failures[0].reason);

    let after = db.migrate::<Order>().census()?;
    println!("census after: {after}");
    assert_eq!(after, census(&[(3, "msgpack", ORDERS - 1)], 1));

    // Every readable cell holds version 3 of the order the chain gives; the damaged one is as
    // it was.
    let cells = stored(&db)?;
    let mut zstd = 0;
    for (&n, cell) in &cells {
        if n == DAMAGED {
            assert_eq!(cell, &old_cells[&n], "the damaged cell is left as it was");
            continue;
        }
        let (header, payload) = blob::open(cell, tag).expect("a sound cell");
        assert_eq!(format_of(cell), "v3 msgpack", "order {n}");
        let compressed = header.compression().expect("a known compression") != blob::Compression::None;
        assert_eq!(compressed, payload.len() > 256, "order {n}: zstd above 256 bytes");
        zstd += u64::from(compressed);
        let order: Order = Codec::MessagePack.decode(&payload).expect("a v3 order");
        assert!(order == expected(n), "order {n} holds what the From/TryFrom chain gives");
    }
    println!("  {} cells at v3 msgpack, {zstd} of them zstd-compressed (payloads over 256 bytes)", ORDERS - 1);
    assert!(0 < zstd && zstd < ORDERS - 1);
    // The repository reads the same orders as before, now from version 3 cells.
    let sample: Vec<u64> = lazily.iter().copied().chain((50..=ORDERS).step_by(50)).filter(|&n| n != DAMAGED).collect();
    let read = orders.get_many(sample.iter().map(|&n| (customer(n), n)))?;
    let wanted: Vec<Option<Order>> = sample.iter().map(|&n| Some(expected(n))).collect();
    assert!(read == wanted, "the repository reads the orders the chain gives");

    println!("second run:");
    let (again, costs) = db.measure(|| db.migrate::<Order>().run());
    let again = again?;
    print_report(&again);
    println!("  costs: {costs}");
    assert_eq!(costs.check_and_mutates, 0);
    assert_eq!((again.rows, again.rewritten, again.current, again.raced), (ORDERS, 0, ORDERS - 1, 0));
    assert_eq!(again.failures, report.failures, "the damaged cell is reported again, nothing else");
    assert_eq!(stored(&db)?, cells, "a second run writes nothing");

    println!("blob_migration: ok");
    Ok(())
}
