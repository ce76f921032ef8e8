//! The four aggregate storage strategies — `normalized`, `single_table`, `denormalized`, `blob` —
//! compared on one aggregate, Order → ShippingLocation → LineItem, at 1×3, 3×10 and 10×50
//! locations × lines: round trips and bytes per operation (from [`Db::measure`]), stored bytes
//! per aggregate, and operations per second.
//!
//! `cargo bench --bench strategies` runs it in release, prints the tables, replaces the section
//! between `<!-- strategies:begin -->` and `<!-- strategies:end -->` in `benches/README.md` and
//! draws `benches/strategies.svg`; ops/s are the median of three rounds. `-- --quick` (or
//! `CELLAR_STRATEGIES_QUICK=1`) runs one round on a tenth of the aggregates and only prints;
//! `-- --no-write` only prints; `-- --only NAME` runs one strategy (for profiling). Run without
//! `--bench` (as `cargo test --benches` does) it is a smoke test: a few aggregates, nothing
//! written.

mod common;

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use cellar::orm::store::ScanSpec;
use cellar::prelude::*;
use plotters::prelude::*;

/// Declares `Order`, `ShippingLocation` and `LineItem` under one strategy (the shape of the
/// tests' order aggregate), and `run`, which measures every operation on them.
macro_rules! strategy {
    ($module:ident, $strategy:literal, [$($table:literal),+]) => {
        mod $module {
            use cellar::prelude::*;

            use super::{scan_tables, timed, Measured, Size};

            /// The tables the strategy stores the aggregate in.
            const TABLES: &[&str] = &[$($table),+];

            #[derive(Aggregate, Debug, Clone, PartialEq)]
            #[cellar(table = "orders", strategy = $strategy)]
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

            /// Aggregate `i`: fixed-width values, so every aggregate of a size costs the same.
            fn order(i: u64, size: Size) -> Order {
                let mut line = 0u16;
                Order {
                    customer: i % 97,
                    order_no: i,
                    status: "open".into(),
                    note: Some("leave at the door".into()),
                    ship_to: (1..=size.locations)
                        .map(|loc| ShippingLocation {
                            loc,
                            line1: format!("{loc:03} Harbour Street"),
                            city: format!("city-{loc:03}"),
                            zip: format!("{loc:05}"),
                            items: (0..size.lines)
                                .map(|_| {
                                    line += 1;
                                    LineItem {
                                        line,
                                        sku: format!("sku-{line:05}"),
                                        qty: 1,
                                        price_cents: 100 * i64::from(line),
                                    }
                                })
                                .collect(),
                        })
                        .collect(),
                }
            }

            /// Writes, reads, updates and deletes `n` aggregates of `size` in `db`, one
            /// operation at a time, each measured on its own.
            pub fn run(db: &Db, size: Size, n: u64) -> Measured {
                let orders = db.aggregates::<Order>().unwrap();
                let mut m = Measured::new($strategy, size);
                let mut aggregates: Vec<Order> = (0..n).map(|i| order(i, size)).collect();
                // The location and line that change: the middle location, its first line.
                let at = usize::from(size.locations / 2);

                for o in &aggregates {
                    timed(db, &mut m.put, || orders.put(o).unwrap());
                }
                m.stored = scan_tables(db, TABLES, n);

                for o in &aggregates {
                    let got = timed(db, &mut m.get, || orders.get((o.customer, o.order_no)).unwrap());
                    assert_eq!(got.as_ref(), Some(o), "{} get", $strategy);
                }

                for o in &mut aggregates {
                    let key = (o.customer, o.order_no);
                    let location = &mut o.ship_to[at];
                    location.items[0].qty += 1;
                    let (loc, item) = (location.loc, location.items[0].clone());
                    timed(db, &mut m.line_update, || {
                        let lines = orders.children(key, Order::SHIP_TO).child(loc, ShippingLocation::ITEMS).unwrap();
                        lines.put(&item).unwrap()
                    });
                }

                for o in &mut aggregates {
                    let key = (o.customer, o.order_no);
                    let location = &mut o.ship_to[at];
                    location.city = format!("moved-{:03}", location.loc);
                    let location = location.clone();
                    timed(db, &mut m.location_change, || orders.children(key, Order::SHIP_TO).put(&location).unwrap());
                }
                for o in aggregates.iter().step_by(aggregates.len().div_ceil(8).max(1)) {
                    assert_eq!(orders.get((o.customer, o.order_no)).unwrap().as_ref(), Some(o), "{} updates", $strategy);
                }

                for o in &aggregates {
                    timed(db, &mut m.delete, || orders.delete((o.customer, o.order_no)).unwrap());
                }
                assert!(scan_tables(db, TABLES, n).rows == 0.0, "{} left rows after deleting", $strategy);
                m
            }
        }
    };
}

strategy!(normalized, "normalized", ["orders", "orders.ship_to", "orders.ship_to.items"]);
strategy!(single_table, "single_table", ["orders"]);
strategy!(denormalized, "denormalized", ["orders"]);
strategy!(blob, "blob", ["orders"]);

/// Measures `n` aggregates of one size in a database: a strategy module's `run`.
type RunFn = fn(&Db, Size, u64) -> Measured;

/// Strategies in table order, with the function measuring each.
const STRATEGIES: [(&str, RunFn); 4] = [
    ("normalized", normalized::run),
    ("single_table", single_table::run),
    ("denormalized", denormalized::run),
    ("blob", blob::run),
];

/// Locations per order × line items per location.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Size {
    locations: u16,
    lines: u16,
}

impl std::fmt::Display for Size {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}×{}", self.locations, self.lines)
    }
}

/// The sizes measured, with the number of aggregates a full run writes at each.
const SIZES: [(Size, u64); 3] = [
    (Size { locations: 1, lines: 3 }, 3000),
    (Size { locations: 3, lines: 10 }, 1000),
    (Size { locations: 10, lines: 50 }, 120),
];

/// Rounds of a full run; ops/s are the median over rounds.
const ROUNDS: usize = 3;

/// The operations, in column order.
const OPS: [&str; 5] = ["get", "put", "line update", "location change", "delete"];

/// Sums over the measured calls of one operation.
#[derive(Debug, Clone, Copy, Default)]
struct Tally {
    calls: u64,
    elapsed: Duration,
    round_trips: u64,
    bytes_read: u64,
    bytes_written: u64,
    rows_written: u64,
    /// Fewest and most round trips of a single call (a retried write would make them differ).
    min_round_trips: u64,
    max_round_trips: u64,
}

impl Tally {
    fn per_call(&self, total: u64) -> f64 {
        total as f64 / self.calls.max(1) as f64
    }

    fn ops_per_sec(&self) -> f64 {
        self.calls as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Round trips per call: an integer unless calls differed.
    fn trips(&self) -> String {
        if self.min_round_trips == self.max_round_trips {
            self.min_round_trips.to_string()
        } else {
            format!("{:.2}", self.per_call(self.round_trips))
        }
    }

    fn read(&self) -> String {
        bytes(self.per_call(self.bytes_read))
    }

    fn written(&self) -> String {
        bytes(self.per_call(self.bytes_written))
    }

    fn rows_written(&self) -> String {
        grouped(self.per_call(self.rows_written))
    }
}

/// Runs `f` as one measured call of an operation: wall time and store costs.
fn timed<T>(db: &Db, tally: &mut Tally, f: impl FnOnce() -> T) -> T {
    let start = Instant::now();
    let (value, costs) = db.measure(f);
    let elapsed = start.elapsed();
    let rt = costs.round_trips();
    if tally.calls == 0 {
        tally.min_round_trips = rt;
    }
    tally.calls += 1;
    tally.elapsed += elapsed;
    tally.round_trips += rt;
    tally.bytes_read += costs.bytes_read;
    tally.bytes_written += costs.bytes_written;
    tally.rows_written += costs.rows_written;
    tally.min_round_trips = tally.min_round_trips.min(rt);
    tally.max_round_trips = tally.max_round_trips.max(rt);
    value
}

/// What an aggregate occupies: every cell of every row of its tables, as a full scan returns
/// them and `Costs` counts their bytes, divided by the number of aggregates.
#[derive(Debug, Clone, Copy, Default)]
struct Stored {
    rows: f64,
    cells: f64,
    bytes: f64,
}

fn scan_tables(db: &Db, tables: &[&str], n: u64) -> Stored {
    let ((), costs) = db.measure(|| {
        for table in tables {
            for row in db.store().scan(table, &ScanSpec::default()).unwrap() {
                row.unwrap();
            }
        }
    });
    let per = |x: u64| x as f64 / n.max(1) as f64;
    Stored { rows: per(costs.rows_read), cells: per(costs.cells_read), bytes: per(costs.bytes_read) }
}

/// One strategy at one size.
#[derive(Debug, Clone)]
struct Measured {
    strategy: &'static str,
    size: Size,
    stored: Stored,
    get: Tally,
    put: Tally,
    line_update: Tally,
    location_change: Tally,
    delete: Tally,
    /// Ops/s per operation in [`OPS`] order: the median over rounds.
    rate: [f64; 5],
}

impl Measured {
    fn new(strategy: &'static str, size: Size) -> Measured {
        Measured {
            strategy,
            size,
            stored: Stored::default(),
            get: Tally::default(),
            put: Tally::default(),
            line_update: Tally::default(),
            location_change: Tally::default(),
            delete: Tally::default(),
            rate: [0.0; 5],
        }
    }

    /// The operations in [`OPS`] order.
    fn ops(&self) -> [&Tally; 5] {
        [&self.get, &self.put, &self.line_update, &self.location_change, &self.delete]
    }
}

/// How the bench was asked to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// `cargo bench`: every aggregate, three rounds, README and chart written.
    Full,
    /// A tenth of the aggregates, one round, nothing written.
    Quick,
    /// Not run by `cargo bench` (`cargo test --benches`): a few aggregates, nothing written.
    Smoke,
}

/// The 1-minute load average: other work on the machine while the bench runs.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".into())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let has = |flag: &str| args.iter().any(|a| a == flag);
    let quick_env = std::env::var("CELLAR_STRATEGIES_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
    let mode = if !has("--bench") {
        Mode::Smoke
    } else if has("--quick") || quick_env {
        Mode::Quick
    } else {
        Mode::Full
    };
    // `--only NAME`: one strategy (for profiling); prints its ops/s only.
    let only = args.iter().position(|a| a == "--only").and_then(|i| args.get(i + 1)).cloned();
    let write = mode == Mode::Full && !has("--no-write") && only.is_none();
    let rounds = if mode == Mode::Full { ROUNDS } else { 1 };

    let started = Instant::now();
    let load_before = load_average();
    // rounds[r][i]: round r of the i-th (size, strategy) pair.
    let mut all: Vec<Vec<Measured>> = Vec::new();
    for round in 0..rounds {
        let mut results = Vec::new();
        for (size, full) in SIZES {
            let n = match mode {
                Mode::Full => full,
                Mode::Quick => (full / 10).max(10),
                Mode::Smoke => 3,
            };
            // Strategies take turns at each size, each in a fresh database.
            for (name, run) in STRATEGIES {
                if only.as_ref().is_some_and(|o| o != name) {
                    continue;
                }
                let dir = tempfile::tempdir().unwrap();
                let db = Db::open(dir.path()).unwrap();
                let t = Instant::now();
                let m = run(&db, size, n);
                drop(db);
                eprintln!("round {} {name:>12} {size:>5}: {n} aggregates in {:.1?}", round + 1, t.elapsed());
                results.push(m);
            }
        }
        all.push(results);
    }
    let load_after = load_average();
    eprintln!("measured in {:.1?}", started.elapsed());

    // Costs from the first round (they do not change between rounds); ops/s the median.
    let mut results = all[0].clone();
    for (i, m) in results.iter_mut().enumerate() {
        for op in 0..OPS.len() {
            let mut rates: Vec<f64> = all.iter().map(|round| round[i].ops()[op].ops_per_sec()).collect();
            rates.sort_by(f64::total_cmp);
            m.rate[op] = rates[rates.len() / 2];
        }
    }

    if only.is_some() {
        for m in &results {
            let ops: Vec<String> = OPS.iter().zip(m.rate).map(|(op, r)| format!("{op} {r:.0}")).collect();
            println!("{} {}: {} ops/s", m.strategy, m.size, ops.join(", "));
        }
        return;
    }
    let run = Run { mode, rounds, load: (load_before, load_after), elapsed: started.elapsed() };
    let section = section(&results, &run);
    println!("{section}");
    if write {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let readme = root.join("benches/README.md");
        common::write_section("strategies", &section);
        let svg = root.join("benches/strategies.svg");
        chart(&svg, &results);
        eprintln!("wrote {} and {}", readme.display(), svg.display());
    }
}

/// How a run went, for the README.
struct Run {
    mode: Mode,
    rounds: usize,
    /// 1-minute load average before and after.
    load: (String, String),
    elapsed: Duration,
}

/// `1 234 567`: digits grouped by spaces, as the rest of the README writes them.
fn grouped(n: f64) -> String {
    let digits = format!("{:.0}", n.max(0.0));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(' ');
        }
        out.push(c);
    }
    out
}

/// Bytes as `Costs` prints them: bytes below 1 KiB, else KiB or MiB with one decimal.
fn bytes(n: f64) -> String {
    if n < 1024.0 {
        format!("{n:.0} B")
    } else if n < 1024.0 * 1024.0 {
        format!("{:.1} KiB", n / 1024.0)
    } else {
        format!("{:.1} MiB", n / (1024.0 * 1024.0))
    }
}

/// Wraps a paragraph at 95 columns, as the rest of the README is wrapped, ending it with a
/// newline; a list item (`- `) continues indented by two spaces.
fn wrap(text: &str) -> String {
    const WIDTH: usize = 95;
    let indent = if text.starts_with("- ") { "  " } else { "" };
    let mut out = String::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > WIDTH {
            out.push_str(&line);
            out.push('\n');
            line = indent.to_string();
        } else if !line.is_empty() && line != indent {
            line.push(' ');
        }
        line.push_str(word);
    }
    out.push_str(&line);
    out.push('\n');
    out
}

/// Installed memory from `/proc/meminfo`, in GiB.
fn memory() -> String {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("MemTotal:"))?;
            let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(format!("{:.0} GiB", kib / (1024.0 * 1024.0)))
        })
        .unwrap_or_else(|| "? GiB".into())
}

/// Today's date (UTC), `YYYY-MM-DD`.
fn today() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    // Days since 1970-01-01 to a civil date (proleptic Gregorian).
    let z = (secs / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

fn find<'a>(results: &'a [Measured], strategy: &str, size: Size) -> &'a Measured {
    results.iter().find(|m| m.strategy == strategy && m.size == size).expect("every strategy ran at every size")
}

/// The strategies with the highest (or lowest) ops/s for operation `op` at `size`.
fn ranked(results: &[Measured], size: Size, op: usize, highest: bool) -> &'static str {
    let at_size = results.iter().filter(|m| m.size == size);
    let pick = if highest {
        at_size.max_by(|x, y| x.rate[op].total_cmp(&y.rate[op]))
    } else {
        at_size.min_by(|x, y| x.rate[op].total_cmp(&y.rate[op]))
    };
    pick.map_or("", |m| m.strategy)
}

/// `a`, `a and b`, `a, b and c`.
fn listed(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

/// Operations grouped by the strategy `rank` names for each: "`blob` for get and put, …".
fn by_strategy(results: &[Measured], size: Size, highest: bool) -> String {
    let mut groups: Vec<(&str, Vec<String>)> = Vec::new();
    for (op, name) in OPS.iter().enumerate() {
        let s = ranked(results, size, op, highest);
        match groups.iter_mut().find(|(g, _)| *g == s) {
            Some((_, ops)) => ops.push(name.to_string()),
            None => groups.push((s, vec![name.to_string()])),
        }
    }
    let parts: Vec<String> = groups.iter().map(|(s, ops)| format!("`{s}` at {}", listed(ops))).collect();
    parts.join("; ")
}

/// The README section: command, machine, both tables, the chart, and what they say.
fn section(results: &[Measured], run: &Run) -> String {
    let mut s = String::new();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let counts: Vec<String> = SIZES.iter().map(|(size, n)| format!("{} at {size}", grouped(*n as f64))).collect();
    s.push_str("## Aggregate storage strategies\n\n");
    if run.mode != Mode::Full {
        s.push_str(&wrap(&format!(
            "**{:?} run: fewer aggregates and one round; figures are indicative only.**",
            run.mode
        )));
        s.push('\n');
    }
    s.push_str(&wrap(&format!(
        "`cargo bench --bench strategies` (`benches/strategies.rs`; the run rewrites this section \
         and `strategies.svg`). Latest run {}: a {cores}-core {} VM with {}, release build, \
         `Db::open` on a temporary directory with default engine options (SyncWal); 1-minute load \
         average {} before and {} after (above about 1, other work was sharing the cores), {:.0} s \
         in all.",
        today(),
        common::cpu_model(),
        memory(),
        run.load.0,
        run.load.1,
        run.elapsed.as_secs_f64(),
    )));
    s.push('\n');
    s.push_str(&wrap(
        "One aggregate, Order → ShippingLocation → LineItem (the tests' order shape: 2 columns on \
         the order, 3 on each location, 3 on each line), in each of the four strategies at 1×3, \
         3×10 and 10×50 locations × lines. Per strategy and size: a fresh database, distinct \
         aggregates, each operation applied once to every aggregate, one call at a time on one \
         thread, strategies taking turns.",
    ));
    s.push('\n');
    s.push_str(&wrap(&format!(
        "- **get**: `orders.get(key)`, the whole aggregate; **put**: `orders.put(&order)` of a new \
         aggregate; **line update**: one line item's `qty` changed through \
         `orders.children(key, Order::SHIP_TO).child(loc, ShippingLocation::ITEMS)?.put(&line)`; \
         **location change**: one location's `city` changed through \
         `orders.children(key, Order::SHIP_TO).put(&location)` (its lines restated unchanged); \
         **delete**: `orders.delete(key)`. Aggregates per run: {}.",
        counts.join(", ")
    )));
    s.push_str(&wrap(
        "- **Round trips** and **bytes read / written** are per call, from `Db::measure` (the rules \
         on `Costs`: a cell counts row key + family + qualifier + value + 8 timestamp bytes, a column \
         delete the same without value and timestamp, a row delete its key). Every aggregate of a \
         size costs the same.",
    ));
    s.push_str(&wrap(
        "- **Stored** is what one aggregate occupies: every cell of its rows in every table of the \
         strategy (the generation cell included), counted as bytes read are, from a full scan of \
         the tables after the puts, divided by the number of aggregates.",
    ));
    s.push_str(&wrap(&format!(
        "- **ops/s** is calls divided by their summed wall time, the median of {} round{}; \
         throughput on this shared VM drifts by up to ±20 % between runs, so compare strategies \
         within one run.",
        run.rounds,
        if run.rounds == 1 { "" } else { "s" }
    )));
    s.push('\n');
    s.push_str("Round trips · bytes read / bytes written, per call:\n\n");
    let _ = writeln!(s, "| size | strategy | stored (rows · cells · bytes) | {} |", OPS.join(" | "));
    let _ = writeln!(s, "|---|---|---:|{}", "---:|".repeat(OPS.len()));
    for m in results {
        let cells: Vec<String> =
            m.ops().iter().map(|t| format!("{} · {} / {}", t.trips(), t.read(), t.written())).collect();
        let _ = writeln!(
            s,
            "| {} | {} | {} · {} · {} | {} |",
            m.size,
            m.strategy,
            grouped(m.stored.rows),
            grouped(m.stored.cells),
            bytes(m.stored.bytes),
            cells.join(" | ")
        );
    }
    s.push_str("\nOperations per second (the fastest strategy at each size in bold):\n\n");
    let _ = writeln!(s, "| size | strategy | {} |", OPS.join(" | "));
    let _ = writeln!(s, "|---|---|{}", "---:|".repeat(OPS.len()));
    for m in results {
        let cells: Vec<String> = (0..OPS.len())
            .map(|op| {
                let v = grouped(m.rate[op]);
                if ranked(results, m.size, op, true) == m.strategy {
                    format!("**{v}**")
                } else {
                    v
                }
            })
            .collect();
        let _ = writeln!(s, "| {} | {} | {} |", m.size, m.strategy, cells.join(" | "));
    }
    s.push_str("\n![ops/s per operation and strategy at each size, log scale](strategies.svg)\n\n");
    for paragraph in reading(results) {
        s.push_str(&wrap(&paragraph));
        s.push('\n');
    }
    s
}

/// What the tables say, with the figures of the largest aggregate.
fn reading(results: &[Measured]) -> Vec<String> {
    let (big, _) = SIZES[SIZES.len() - 1];
    let (small, _) = SIZES[0];
    let [n, s, d, b] = ["normalized", "single_table", "denormalized", "blob"].map(|name| find(results, name, big));
    let ops = |m: &Measured, op: usize| grouped(m.rate[op]);
    let mut out = Vec::new();
    out.push(format!(
        "**Reading the table** (figures at {big}). **Stored**: `blob` takes {} — one row of two \
         cells, the keys and column names written once inside the blob rather than once per cell; \
         `normalized` {} and `single_table` {} ({} rows of three cells, `single_table` with a \
         record-type byte in every key); `denormalized` {} in {} cells, since every line row \
         carries a copy of its location's columns and key. **Get**: `blob` is one get of one row \
         ({} round trip, {} read) and `single_table` and `denormalized` one prefix scan ({} round \
         trip, {} and {} read); `normalized` cannot read three tables atomically, so a consistent \
         read takes {} round trips (the root row, a scan per child table, the root again to check \
         that its generation did not move) and reads the root twice ({}).",
        bytes(b.stored.bytes),
        bytes(n.stored.bytes),
        bytes(s.stored.bytes),
        grouped(s.stored.rows),
        bytes(d.stored.bytes),
        grouped(d.stored.cells),
        b.get.trips(),
        b.get.read(),
        s.get.trips(),
        s.get.read(),
        d.get.read(),
        n.get.trips(),
        n.get.read(),
    ));
    out.push(format!(
        "**Writes** are read-modify-writes: each reads the aggregate as a get does (a put of a new \
         aggregate finds nothing to read), then writes only the cells that changed in one atomic \
         call conditioned on the root's generation — {} round trips for the one-table strategies. \
         A **line update** writes {} under `single_table` and {} under `denormalized` (the line's \
         cell and the new generation) but {} under `blob`, which rewrites the whole blob for one \
         changed number. A **location change** is where `denormalized` pays for its copies: {} \
         over {} rows (every line of the location, and the root) against {} over {} rows under \
         `single_table`. `normalized` writes through the intent protocol — the pending mutations \
         go into the root's generation cell, are applied one batch per table, then committed — so \
         a put takes {} round trips and writes {} (the rows, and the intent listing them, against \
         {} for `single_table`), a line update {} round trips and a delete {}. A **delete** removes \
         every row: {} written for `single_table`'s {} rows, {} for `blob`'s one.",
        s.put.trips(),
        s.line_update.written(),
        d.line_update.written(),
        b.line_update.written(),
        d.location_change.written(),
        d.location_change.rows_written(),
        s.location_change.written(),
        s.location_change.rows_written(),
        n.put.trips(),
        n.put.written(),
        s.put.written(),
        n.line_update.trips(),
        n.delete.trips(),
        s.delete.written(),
        grouped(s.stored.rows),
        b.delete.written(),
    ));
    let mut throughput = format!(
        "**Throughput** at {big}: fastest {}; slowest {}. At {small}: fastest {}.",
        by_strategy(results, big, true),
        by_strategy(results, big, false),
        by_strategy(results, small, true),
    );
    // On an embedded store a round trip is a function call, not a network hop: say so when the
    // figures show it (the one-row blob ahead of the one-scan single_table on reads).
    if b.rate[0] > s.rate[0] {
        let _ = write!(
            throughput,
            " On the embedded engine a round trip is a function call, so time follows the rows and \
             cells a call reads, diffs and writes more than its round trips or bytes: `blob` reads \
             one row ({} gets/s) where `single_table` reads {} in the same single round trip ({} \
             gets/s).",
            ops(b, 0),
            grouped(s.stored.rows),
            ops(s, 0),
        );
        if b.rate[2] > s.rate[2] {
            let _ = write!(
                throughput,
                " Even the line update, where `blob` writes {} against {}, runs at {} against {} \
                 ops/s.",
                b.line_update.written(),
                s.line_update.written(),
                ops(b, 2),
                ops(s, 2),
            );
        }
    }
    let _ = write!(
        throughput,
        " `denormalized` carries {:.1}× `single_table`'s cells ({} against {}) and runs its get at \
         {} against {} ops/s. Over a network each round trip adds a latency, which would weigh \
         against `normalized`'s {}–{} round trips per operation where the others take 1–2.",
        d.stored.cells / s.stored.cells.max(1.0),
        grouped(d.stored.cells),
        grouped(s.stored.cells),
        ops(d, 0),
        ops(s, 0),
        n.get.trips(),
        n.delete.trips(),
    );
    out.push(throughput);
    out
}

/// Grouped bars of ops/s per operation, one panel per size, strategies side by side; log scale.
fn chart(path: &Path, results: &[Measured]) {
    const COLORS: [RGBColor; 4] = [
        RGBColor(0x4e, 0x79, 0xa7),
        RGBColor(0xf2, 0x8e, 0x2b),
        RGBColor(0x59, 0xa1, 0x4f),
        RGBColor(0xe1, 0x57, 0x59),
    ];
    let rates: Vec<f64> = results.iter().flat_map(|m| m.rate).collect();
    let lo = rates.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = rates.iter().copied().fold(0.0, f64::max);
    // Whole decades, with room below the shortest bar and above the tallest for the legend.
    let (lo, hi) = (10f64.powf((lo / 2.0).log10().floor()), 10f64.powf((hi * 10.0).log10().ceil()));

    let root = SVGBackend::new(path, (960, 1080)).into_drawing_area();
    root.fill(&WHITE).unwrap();
    let panels = root.split_evenly((SIZES.len(), 1));
    for (panel, (size, _)) in panels.iter().zip(SIZES) {
        let mut chart = ChartBuilder::on(panel)
            .caption(
                format!(
                    "{} location{} × {} line items each: operations per second",
                    size.locations,
                    if size.locations == 1 { "" } else { "s" },
                    size.lines
                ),
                ("sans-serif", 18),
            )
            .margin(10)
            .x_label_area_size(28)
            .y_label_area_size(60)
            .build_cartesian_2d(-0.5f64..(OPS.len() as f64 - 0.5), (lo..hi).log_scale())
            .unwrap();
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(OPS.len())
            .x_label_formatter(&|x| {
                let i = x.round();
                if (x - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < OPS.len() {
                    OPS[i as usize].to_string()
                } else {
                    String::new()
                }
            })
            .y_desc("ops/s (log scale)")
            .y_label_formatter(&|y| {
                if *y >= 1e6 {
                    format!("{:.0}M", y / 1e6)
                } else if *y >= 1e3 {
                    format!("{:.0}k", y / 1e3)
                } else {
                    format!("{y:.0}")
                }
            })
            .label_style(("sans-serif", 13))
            .draw()
            .unwrap();
        let width = 0.8 / STRATEGIES.len() as f64;
        for (k, ((name, _), color)) in STRATEGIES.iter().zip(COLORS).enumerate() {
            let m = find(results, name, size);
            let bars = m.rate.into_iter().enumerate().map(move |(i, rate)| {
                let x0 = i as f64 - 0.4 + k as f64 * width;
                Rectangle::new([(x0, lo), (x0 + width * 0.9, rate.max(lo))], color.filled())
            });
            chart
                .draw_series(bars)
                .unwrap()
                .label(*name)
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 13))
            .draw()
            .unwrap();
    }
    root.present().unwrap();
}
