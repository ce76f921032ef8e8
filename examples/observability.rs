//! What Cellar shows an operator: every repository call and every store call it makes is a
//! `tracing` span, nested under the caller's; slow calls log a warning; and `Db::stats` is a
//! snapshot of what the calls cost, how long they took and how the engine stands.
//!
//! A subscriber of the example's own prints a compact trace of one aggregate write (a cart and
//! its lines, in tables of their own: the write protocol's calls, one by one) and of one read
//! through a unique index; then a slow-call threshold catches a read; then the stats. Every
//! figure printed is asserted. Any `tracing` subscriber sees the same spans and events (with
//! `tracing-subscriber`'s `fmt`, `RUST_LOG=cellar_orm=debug` shows them); with the `metrics`
//! feature the same figures reach any `metrics` exporter (docs/observability.md).
//!
//! Run with `cargo run --release --example observability`.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cellar::orm::{Db, Result};
use cellar::prelude::*;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// An account, found by its email through a unique index.
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "obs_accounts")]
pub struct Account {
    /// The account number.
    #[cellar(key)]
    pub id: u32,
    /// The sign-in email: one account each.
    #[cellar(column = "e", index = "by_email", unique)]
    pub email: String,
    /// The name shown.
    #[cellar(column = "n")]
    pub name: String,
}

/// A cart and its lines, the lines in a table of their own.
#[derive(Aggregate, Debug, Clone, PartialEq)]
#[cellar(table = "obs_carts", strategy = "normalized")]
pub struct Cart {
    /// The account the cart belongs to.
    #[cellar(key)]
    pub account: u32,
    /// Open or checked out.
    #[cellar(column = "s")]
    pub status: String,
    /// What is in it.
    #[cellar(children)]
    pub lines: Vec<CartLine>,
}

/// One line of a cart.
#[derive(Part, Debug, Clone, PartialEq)]
pub struct CartLine {
    /// The product.
    #[cellar(key)]
    pub sku: u32,
    /// How many.
    #[cellar(column = "q")]
    pub qty: u32,
}

/// The spans and events the example's subscriber keeps, in the order they began.
#[derive(Default)]
struct Trace {
    lines: Vec<Line>,
    /// Open spans' ids to their line.
    open: BTreeMap<u64, usize>,
}

struct Line {
    depth: usize,
    name: &'static str,
    fields: BTreeMap<&'static str, String>,
}

struct Fields<'a>(&'a mut BTreeMap<&'static str, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name(), format!("{value:?}"));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name(), value.to_string());
    }
}

/// Keeps Cellar's spans and warnings as lines of a trace.
struct Tracer(Arc<Mutex<Trace>>);

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Tracer {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = BTreeMap::new();
        attrs.record(&mut Fields(&mut fields));
        let depth = ctx.span(id).map_or(0, |s| s.scope().count() - 1);
        let mut t = self.0.lock().unwrap();
        t.lines.push(Line { depth, name: attrs.metadata().name(), fields });
        let line = t.lines.len() - 1;
        t.open.insert(id.into_u64(), line);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _: Context<'_, S>) {
        let mut t = self.0.lock().unwrap();
        if let Some(&line) = t.open.get(&id.into_u64()) {
            values.record(&mut Fields(&mut t.lines[line].fields));
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        let depth = ctx.event_scope(event).map_or(0, |s| s.count());
        self.0.lock().unwrap().lines.push(Line { depth, name: "event", fields });
    }

    fn on_close(&self, id: Id, _: Context<'_, S>) {
        self.0.lock().unwrap().open.remove(&id.into_u64());
    }
}

impl Trace {
    /// The trace as text, one line per span or event, indented by nesting; durations left
    /// out (they differ from run to run).
    fn render(&self) -> String {
        let mut out = String::new();
        for line in &self.lines {
            let f = |k: &str| line.fields.get(k).map(String::as_str).unwrap_or("");
            let text = match line.name {
                "repository" => {
                    let index = line.fields.get("index").map(|i| format!(" by {i}")).unwrap_or_default();
                    format!("{} {}{index} [{}]", f("entity"), f("op"), f("outcome"))
                }
                "store" => {
                    format!("{} {}: {} rows, {} B [{}]", f("op"), f("table"), f("rows"), f("bytes"), f("outcome"))
                }
                "event" => format!("{}: {} {} {}", f("message"), f("op"), f("table"), f("row")),
                other => format!("{other} {}", f("id")),
            };
            out.push_str(&format!("{}{text}\n", "  ".repeat(line.depth)));
        }
        out
    }
}

/// Runs `f` with the example's subscriber on this thread; returns its result and the trace.
fn traced<T>(f: impl FnOnce() -> T) -> (T, String) {
    let trace = Arc::new(Mutex::new(Trace::default()));
    let subscriber = tracing_subscriber::registry().with(Tracer(trace.clone()));
    let value = tracing::subscriber::with_default(subscriber, f);
    let text = trace.lock().unwrap().render();
    (value, text)
}

fn cart(account: u32, lines: u32) -> Cart {
    Cart {
        account,
        status: "open".into(),
        lines: (1..=lines).map(|sku| CartLine { sku: 100 + sku, qty: sku }).collect(),
    }
}

/// Runs the example on `db`.
pub fn run(db: &Db) -> Result<()> {
    // Latency histograms for the stats below (off by default: two clock reads per call).
    db.track_latencies(true);
    let accounts = db.repo::<Account>()?;
    let carts = db.aggregates::<Cart>()?;
    for id in 1..=50 {
        accounts.put(&Account { id, email: format!("user{id}@example.com"), name: format!("User {id}") })?;
    }

    // One aggregate write and one indexed read, each inside a request's span.
    let (written, write_trace) = traced(|| tracing::info_span!("request", id = 1).in_scope(|| carts.put(&cart(7, 3))));
    written?;
    println!("trace of a cart write:\n{write_trace}");
    assert_eq!(
        write_trace,
        "request 1\n\
         \x20 Cart put [ok]\n\
         \x20   read_rows obs_carts: 0 rows, 0 B [ok]\n\
         \x20   check_and_mutate obs_carts: 1 rows, 137 B [ok]\n\
         \x20   mutate obs_carts.lines: 3 rows, 66 B [ok]\n\
         \x20   check_and_mutate obs_carts: 1 rows, 41 B [ok]\n"
    );
    let (found, read_trace) = traced(|| {
        tracing::info_span!("request", id = 2)
            .in_scope(|| accounts.index(Account::BY_EMAIL).get("user42@example.com".to_string()))
    });
    assert_eq!(found?.map(|a| a.id), Some(42));
    println!("trace of a read by email:\n{read_trace}");
    assert_eq!(
        read_trace,
        "request 2\n\
         \x20 Account index_get by by_email [ok]\n\
         \x20   read_rows obs_accounts_idx: 1 rows, 150 B [ok]\n\
         \x20   read_rows obs_accounts: 1 rows, 76 B [ok]\n"
    );

    // Calls that take a microsecond or more log a warning each: here, every call.
    db.set_slow_call_threshold(Some(Duration::from_micros(1)));
    let (read, slow_trace) = traced(|| accounts.get(9));
    db.set_slow_call_threshold(None);
    assert_eq!(read?.map(|a| a.id), Some(9));
    println!("a slow call:\n{slow_trace}");
    assert_eq!(
        slow_trace,
        "Account get [ok]\n\
         \x20 read_rows obs_accounts: 1 rows, 74 B [ok]\n\
         \x20   slow store call: read_rows obs_accounts \\x00\\x00\\x00\\x09\n"
    );

    // The snapshot an application can print or serve.
    let stats = db.stats();
    println!("stats:\n{stats}");
    assert_eq!(stats.costs, db.costs());
    assert_eq!(stats.latencies.gets.count(), stats.costs.gets);
    assert_eq!(stats.latencies.mutates.count(), stats.costs.mutates);
    assert!(stats.latencies.gets.quantile(0.99) <= stats.latencies.gets.max());
    let engine = stats.engine.as_ref().expect("an embedded database reports its engine");
    let tables: Vec<&str> = engine.tables.iter().map(|t| t.name.as_str()).collect();
    for table in ["obs_accounts", "obs_accounts_idx", "obs_carts", "obs_carts.lines"] {
        assert!(tables.contains(&table), "{table} in {tables:?}");
    }
    assert!(engine.memstore_bytes > 0 && engine.read_only.is_none() && engine.background_failures.is_empty());
    let shown = stats.to_string();
    assert!(shown.starts_with("costs: ") && shown.contains("\nget: ") && shown.contains("memstore"), "{shown}");
    Ok(())
}

/// Runs the example on a temporary embedded database.
pub fn main() -> Result<()> {
    run(&Db::open_temporary()?)?;
    println!("observability: ok");
    Ok(())
}
