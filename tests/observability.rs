//! What Cellar reports as it works: a `tracing` span per repository call and per store call,
//! nested under the caller's span, with the figures the span names; retries as events; the
//! slow-call warning; and the latencies beside the costs. Read through a capturing subscriber
//! installed for this binary.

mod common;

use std::sync::Arc;
use std::time::Duration;

use cellar::orm::store::{BigtableOptions, BigtableStore, ReadSpec};
use cellar::orm::EmbeddedStore;
use cellar::prelude::*;
use common::capture::{Capture, EventRecord, SpanRecord};
use tracing::{Instrument, Level};

#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "obs_customers")]
struct Customer {
    #[cellar(key)]
    id: u64,
    #[cellar(column = "n")]
    name: String,
    #[cellar(column = "c")]
    city: String,
}

/// A cart whose lines have a table of their own: its writes take the intent protocol.
#[derive(Aggregate, Debug, Clone, PartialEq)]
#[cellar(table = "obs_carts", strategy = "normalized")]
struct Cart {
    #[cellar(key)]
    account: u32,
    #[cellar(column = "s")]
    status: String,
    #[cellar(children)]
    lines: Vec<CartLine>,
}

#[derive(Part, Debug, Clone, PartialEq)]
struct CartLine {
    #[cellar(key)]
    sku: u32,
    #[cellar(column = "q")]
    qty: u32,
}

/// Cart 7 at a status, with lines that differ by status: a change writes the lines' table.
fn cart(status: &str) -> Cart {
    let qty = status.len() as u32;
    Cart { account: 7, status: status.into(), lines: vec![CartLine { sku: 1, qty }, CartLine { sku: 2, qty: qty + 1 }] }
}

fn customer(id: u64) -> Customer {
    Customer { id, name: format!("customer {id}"), city: "Lyon".into() }
}

/// The spans of `capture` on the path from span `index` to the root, names only.
fn path(spans: &[SpanRecord], mut index: usize) -> Vec<&'static str> {
    let mut names = vec![spans[index].name];
    while let Some(parent) = spans[index].parent {
        names.push(spans[parent].name);
        index = parent;
    }
    names
}

fn store_spans(capture: &Capture) -> Vec<(usize, SpanRecord)> {
    capture.new_spans("store")
}

#[test]
fn a_five_entity_put_many_is_one_mutate_span_with_five_rows_under_the_repository_call_and_the_caller() {
    let capture = Capture::global();
    let _alone = capture.exclusive();
    let db = Db::open_temporary().unwrap();
    let customers = db.repo::<Customer>().unwrap();
    // Setup done: what follows is the test's own.
    capture.clear();

    let (_, costs) = db.measure(|| {
        tracing::info_span!("request", id = 7).in_scope(|| {
            customers.put_many(&(1..=5).map(customer).collect::<Vec<_>>()).unwrap();
        })
    });

    let stores = store_spans(capture);
    assert_eq!(stores.len() as u64, costs.round_trips() + costs.admin, "one span per store call: {stores:#?}");
    assert_eq!(stores.len(), 1, "{stores:#?}");
    let (index, mutate) = &stores[0];
    assert_eq!(mutate.field("op"), Some("mutate"));
    assert_eq!(mutate.field("table"), Some("obs_customers"));
    assert_eq!(mutate.field("rows"), Some("5"));
    assert_eq!(mutate.field("cells"), Some(costs.cells_written.to_string().as_str()));
    assert_eq!(mutate.field("bytes"), Some(costs.bytes_written.to_string().as_str()));
    assert_eq!(mutate.field("outcome"), Some("ok"));
    assert!(mutate.field("duration_us").is_some(), "{mutate:?}");
    assert!(mutate.closed);
    let spans = capture.spans();
    assert_eq!(path(&spans, *index), ["store", "repository", "request"]);
    let repository = &spans[mutate.parent.unwrap()];
    assert_eq!(repository.field("op"), Some("put_many"));
    assert_eq!(repository.field("entity"), Some("Customer"));
    assert_eq!(repository.field("table"), Some("obs_customers"));
    assert_eq!(repository.field("keys"), Some("5"));
    assert_eq!(repository.field("outcome"), Some("ok"));
}

#[test]
fn every_store_call_of_reads_and_scans_has_one_span_with_what_it_read() {
    let capture = Capture::global();
    let _alone = capture.exclusive();
    let db = Db::open_temporary().unwrap();
    let customers = db.repo::<Customer>().unwrap();
    customers.put_many(&(1..=5).map(customer).collect::<Vec<_>>()).unwrap();
    // Setup done: what follows is the test's own.
    capture.clear();

    let (_, costs) = db.measure(|| {
        assert_eq!(customers.get(3).unwrap(), Some(customer(3)));
        assert_eq!(customers.get_many([1, 9, 2]).unwrap().iter().flatten().count(), 2);
        assert_eq!(customers.scan().to_vec().unwrap().len(), 5);
        // An iterator's scan span ends with its stream.
        assert_eq!(customers.scan().limit(2).iter().unwrap().count(), 2);
    });

    let stores = store_spans(capture);
    assert_eq!(stores.len() as u64, costs.round_trips() + costs.admin, "{stores:#?}");
    let figures: Vec<(&str, &str)> =
        stores.iter().map(|(_, s)| (s.field("op").unwrap(), s.field("rows").unwrap_or("-"))).collect();
    assert_eq!(figures, [("read_rows", "1"), ("read_rows", "2"), ("scan", "5"), ("scan", "2")]);
    let rows: u64 = stores.iter().map(|(_, s)| s.field("rows").unwrap().parse::<u64>().unwrap()).sum();
    assert_eq!(rows, costs.rows_read);
    let spans = capture.spans();
    let ops: Vec<Option<&str>> =
        stores.iter().map(|(i, _)| spans[*i].parent.map(|p| spans[p].field("op").unwrap())).collect();
    assert_eq!(ops, [Some("get"), Some("get_many"), Some("scan"), None], "an iterator is no repository call");
}

#[test]
fn a_refused_or_failed_store_call_says_so_in_its_span() {
    let capture = Capture::global();
    let _alone = capture.exclusive();
    let db = Db::open_temporary().unwrap();
    db.repo::<Customer>().unwrap();
    // Setup done: what follows is the test's own.
    capture.clear();
    let store = db.store();
    let row = cellar::Bytes::from_static(b"k");
    let condition = cellar::orm::store::Condition::Equals {
        family: cellar::Bytes::from_static(b"d"),
        qualifier: cellar::Bytes::from_static(b"n"),
        value: cellar::Bytes::from_static(b"nobody"),
    };
    let put = cellar::orm::store::RowMutation {
        row: row.clone(),
        mutations: vec![cellar::orm::store::CellMutation::Put {
            family: cellar::Bytes::from_static(b"d"),
            qualifier: cellar::Bytes::from_static(b"n"),
            value: cellar::Bytes::from_static(b"x"),
            timestamp: None,
        }],
    };
    assert!(!store.check_and_mutate("obs_customers", condition, put).unwrap());
    let err = store.read_rows("no_such_table", &[row], &ReadSpec::default()).unwrap_err();

    let stores = store_spans(capture);
    assert_eq!(stores.len(), 2, "{stores:#?}");
    let (refused, failed) = (&stores[0].1, &stores[1].1);
    assert_eq!(
        (refused.field("op"), refused.field("outcome"), refused.field("rows")),
        (Some("check_and_mutate"), Some("not_applied"), Some("0"))
    );
    assert_eq!((failed.field("op"), failed.field("outcome")), (Some("read_rows"), Some("error")));
    assert_eq!(failed.field("error"), Some(err.to_string().as_str()));
}

#[test]
fn async_calls_nest_under_the_caller_span_as_sync_ones_do() {
    let capture = Capture::global();
    let _alone = capture.exclusive();
    let db = Db::open_temporary().unwrap();
    let customers = db.repo::<Customer>().unwrap().to_async();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    // Setup done: what follows is the test's own.
    capture.clear();

    runtime.block_on(
        async {
            customers.put_many(&(1..=5).map(customer).collect::<Vec<_>>()).await.unwrap();
            assert_eq!(customers.get(2).await.unwrap(), Some(customer(2)));
        }
        .instrument(tracing::info_span!("request")),
    );

    let stores = store_spans(capture);
    let spans = capture.spans();
    let seen: Vec<(&str, &str, Vec<&str>)> =
        stores.iter().map(|(i, s)| (s.field("op").unwrap(), s.field("rows").unwrap(), path(&spans, *i))).collect();
    assert_eq!(
        seen,
        [
            ("mutate", "5", vec!["store", "repository", "request"]),
            ("read_rows", "1", vec!["store", "repository", "request"]),
        ]
    );
    assert!(stores.iter().all(|(_, s)| s.closed && s.field("outcome") == Some("ok")), "{stores:#?}");
}

fn slow_warnings(capture: &Capture) -> Vec<EventRecord> {
    capture.events().into_iter().filter(|e| e.message == "slow store call").collect()
}

#[test]
fn calls_past_the_slow_call_threshold_log_one_warning_each_with_the_call_table_row_and_cost() {
    let capture = Capture::global();
    let _alone = capture.exclusive();
    let db = Db::open_temporary().unwrap();
    let customers = db.repo::<Customer>().unwrap();
    customers.put(&customer(42)).unwrap();
    // Setup done: what follows is the test's own.
    capture.clear();

    customers.get(42).unwrap();
    assert!(slow_warnings(capture).is_empty(), "no threshold, no warning");

    // Every call takes a nanosecond or more.
    db.set_slow_call_threshold(Some(Duration::from_nanos(1)));
    assert_eq!(db.slow_call_threshold(), Some(Duration::from_nanos(1)));
    customers.get(42).unwrap();
    let warnings = slow_warnings(capture);
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    let w = &warnings[0];
    assert_eq!(w.level, Level::WARN);
    assert_eq!(w.field("op"), Some("read_rows"));
    assert_eq!(w.field("table"), Some("obs_customers"));
    assert!(w.field("row").is_some_and(|r| !r.is_empty()), "{w:?}");
    assert_eq!((w.field("rows"), w.field("cells")), (Some("1"), Some("2")));
    assert!(w.field("duration_ms").is_some());

    // A threshold no call reaches, then none.
    db.set_slow_call_threshold(Some(Duration::from_secs(3600)));
    customers.get(42).unwrap();
    db.set_slow_call_threshold(None);
    customers.get(42).unwrap();
    assert_eq!(slow_warnings(capture).len(), 1);
}

#[test]
fn latencies_count_every_store_call_by_kind_beside_the_costs() {
    // Alone: its spans would be other tests' strangers.
    let _alone = Capture::global().exclusive();
    let db = Db::open_temporary().unwrap();
    let customers = db.repo::<Customer>().unwrap();
    let (_, costs, latencies) = db.measure_timed(|| {
        customers.put_many(&(1..=20).map(customer).collect::<Vec<_>>()).unwrap();
        for id in 1..=20 {
            customers.get(id).unwrap();
        }
        customers.scan().to_vec().unwrap();
    });
    assert_eq!(latencies.gets.count(), costs.gets);
    assert_eq!((latencies.gets.count(), latencies.mutates.count(), latencies.scans.count()), (20, 1, 1));
    assert_eq!(latencies.check_and_mutates.count() + latencies.group_mutates.count(), 0);
    let gets = &latencies.gets;
    assert!(gets.quantile(0.5) <= gets.quantile(0.99) && gets.quantile(0.99) <= gets.max(), "{gets}");
    assert!(gets.mean() > Duration::ZERO && gets.max() > Duration::ZERO, "{gets}");
    let shown = latencies.to_string();
    assert!(shown.starts_with("get: 20 calls, mean "), "{shown}");
    assert!(shown.contains("\nscan: 1 call") && shown.contains("\nmutate: 1 call"), "{shown}");
    assert_eq!(db.latencies().gets.count(), 20, "the Db's own histograms hold them too");
    // Outside a measurement, calls are timed only while latencies are tracked.
    customers.get(1).unwrap();
    assert_eq!(db.latencies().gets.count(), 20);
    db.track_latencies(true);
    customers.get(1).unwrap();
    db.track_latencies(false);
    customers.get(1).unwrap();
    assert_eq!(db.latencies().gets.count(), 21);
}

#[test]
fn retries_through_a_cut_connection_are_events_in_the_store_call_span() {
    let Some(emulator) = common::backend::emulator() else { return };
    let capture = Capture::global();
    let _alone = capture.exclusive();
    let proxy = common::proxy::Proxy::start(&emulator.host);
    let options = BigtableOptions::new("p", common::backend::instance_name()).emulator(proxy.addr.clone());
    let db = Db::with_store(Arc::new(BigtableStore::connect(options).unwrap()));
    let customers = db.repo::<Customer>().unwrap();
    // Setup done: what follows is the test's own.
    capture.clear();

    // The server applies the batch; its answer never arrives, and the batch goes again.
    proxy.cut_after(0);
    tracing::info_span!("request").in_scope(|| customers.put_many(&(1..=5).map(customer).collect::<Vec<_>>()).unwrap());
    assert_eq!(proxy.cuts(), 1);

    let retries: Vec<EventRecord> = capture.events().into_iter().filter(|e| e.message == "retrying").collect();
    assert!(!retries.is_empty(), "{:#?}", capture.events());
    let spans = capture.spans();
    for retry in &retries {
        assert_eq!(retry.level, Level::INFO);
        assert!(retry.field("attempt").is_some() && retry.field("code").is_some(), "{retry:?}");
        let names: Vec<&str> = retry.scope.iter().map(|&i| spans[i].name).collect();
        assert_eq!(names[..3], ["store", "repository", "request"], "{retry:?}");
    }
    let stores = store_spans(capture);
    let mutate = stores.iter().find(|(_, s)| s.field("op") == Some("mutate")).expect("a mutate span");
    assert_eq!(mutate.1.field("attempts"), Some((retries.len() + 1).to_string().as_str()), "{mutate:?}");
    assert_eq!(mutate.1.field("outcome"), Some("ok"));
}

#[test]
fn a_failed_aggregate_write_finished_by_a_reader_is_a_warning_in_the_readers_call() {
    let capture = Capture::global();
    let _alone = capture.exclusive();
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), EngineOptions::default()).unwrap();
    // Without atomic commits, as on Bigtable: every change goes through an intent.
    let faulty =
        Arc::new(common::faulty::Faulty::new(Arc::new(EmbeddedStore::new(engine)), 0, false).without_commits());
    let db = Db::with_store(faulty.clone());
    let carts = db.aggregates::<Cart>().unwrap();
    carts.put(&cart("open")).unwrap();
    // The next write records its intent, then fails writing the lines: its writer is gone.
    let calls = faulty.calls.load(std::sync::atomic::Ordering::SeqCst);
    faulty.fail_at.store(calls + 2, std::sync::atomic::Ordering::SeqCst);
    assert!(carts.put(&cart("checked out")).is_err());
    // Setup done: what follows is the test's own.
    capture.clear();

    let read = tracing::info_span!("request").in_scope(|| carts.get(7u32).unwrap());
    assert_eq!(read, Some(cart("checked out")), "the reader finished the write");

    let events = capture.events();
    let spans = capture.spans();
    let taken: Vec<&EventRecord> =
        events.iter().filter(|e| e.message == "abandoned aggregate write taken over").collect();
    assert_eq!(taken.len(), 1, "{events:#?}");
    assert_eq!((taken[0].level, taken[0].field("entity")), (Level::WARN, Some("Cart")));
    let scope: Vec<&str> = taken[0].scope.iter().map(|&i| spans[i].name).collect();
    assert_eq!(scope, ["repository", "request"]);
    assert_eq!(spans[taken[0].scope[0]].field("op"), Some("get"));
    let rolled = events.iter().filter(|e| e.message == "abandoned aggregate write rolled forward").count();
    assert_eq!(rolled, 1, "{events:#?}");
    // A read of a whole aggregate finds nothing to take over.
    capture.clear();
    assert_eq!(carts.get(7u32).unwrap(), Some(cart("checked out")));
    assert!(capture.events().iter().all(|e| !e.message.contains("abandoned")), "{:#?}", capture.events());
}

#[test]
fn an_async_call_dropped_before_its_answer_is_reported_as_cancelled() {
    let capture = Capture::global();
    let _alone = capture.exclusive();
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), EngineOptions::default()).unwrap();
    // Each async store call stops once before it runs: the read below is dropped there.
    let stepped = common::stepped::Stepped::new(Arc::new(EmbeddedStore::new(engine)), true);
    let db = Db::with_store(Arc::new(stepped));
    let customers = db.repo::<Customer>().unwrap();
    customers.put(&customer(1)).unwrap();
    let customers = customers.to_async();
    db.track_latencies(true);
    // Setup done: what follows is the test's own.
    capture.clear();

    // One poll: the read is under way when its caller gives up (a timeout, a `select!`).
    assert!(!common::stepped::poll_times(customers.get(1), 1), "the read needs a second poll");

    let stores = store_spans(capture);
    assert_eq!(stores.len(), 1, "{stores:#?}");
    let read = &stores[0].1;
    assert_eq!((read.field("op"), read.field("outcome")), (Some("read_rows"), Some("cancelled")));
    assert!(read.field("duration_us").is_some() && read.closed, "{read:?}");
    let spans = capture.spans();
    let repository = &spans[read.parent.expect("under the repository call")];
    assert_eq!((repository.field("op"), repository.field("outcome")), (Some("get"), Some("cancelled")));
    assert_eq!(db.latencies().gets.count(), 1, "timed all the same");
    // Polled to its end, the same read answers.
    assert!(common::stepped::poll_times(customers.get(1), 3));
}
