//! Aggregates through the asynchronous API: every operation answers as its synchronous form
//! does, in every strategy and on every backend, at the same cost; a write dropped at any of its
//! await points leaves what a crash there would — the aggregate reads as one whole version
//! written, never a mix; and a writer whose future is dropped while one of its store calls is
//! still running counts as live until that call ends, so no reader finishes its intent under it.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use cellar::engine::{Engine, EngineOptions};
use cellar::orm::store::{EmbeddedStore, Store};
use cellar::prelude::*;
use common::hooked::{Call, Hooked};
use common::stepped::{poll_times, Stepped};
use common::versions::with_strategy;
use futures::StreamExt;

/// Runs `$body` once per strategy with `$m` naming the strategy's types and `$v` its versions.
macro_rules! each_strategy {
    (|$m:ident, $v:ident| $body:block) => {{
        each_strategy!(@ normalized, $m, $v, $body);
        each_strategy!(@ single_table, $m, $v, $body);
        each_strategy!(@ denormalized, $m, $v, $body);
        each_strategy!(@ blob, $m, $v, $body);
    }};
    (@ $strategy:ident, $m:ident, $v:ident, $body:block) => {{
        use common::orders::$strategy as $m;
        use common::versions::$strategy as $v;
        $body
    }};
}

/// A runtime of two workers, as a small service has.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

on_every_backend! {
fn async_aggregate_operations_answer_as_the_synchronous_ones(db: Db) {
    let rt = runtime();
    each_strategy!(|m, versions| {
        let orders = db.aggregates::<m::Order>().unwrap();
        let orders_async = orders.to_async();
        rt.block_on(async {
            for (customer, order_no) in [(1, 1), (1, 2), (1, 3), (2, 1), (3, 7)] {
                orders_async.put(&versions::version(customer, order_no, order_no + customer)).await.unwrap();
            }
            // Whole reads.
            for key in [(1, 1), (1, 3), (2, 1), (9, 9)] {
                assert_eq!(orders_async.get(key).await.unwrap(), orders.get(key).unwrap(), "get {key:?}");
                assert_eq!(orders_async.exists(key).await.unwrap(), orders.exists(key).unwrap(), "exists {key:?}");
                for depth in 1..=3 {
                    assert_eq!(
                        orders_async.get_to_depth(key, depth).await.unwrap(),
                        orders.get_to_depth(key, depth).unwrap(),
                        "get_to_depth {key:?} {depth}"
                    );
                }
            }
            let keys = [(3, 7), (9, 9), (1, 2)];
            let many = orders_async.get_many(keys).await.unwrap();
            assert_eq!(many, orders.get_many(keys).unwrap());
            assert_eq!(many.iter().map(Option::is_some).collect::<Vec<_>>(), [true, false, true]);
            let zero = orders_async.get_to_depth((1, 1), 0).await.unwrap_err();
            assert_eq!(zero.to_string(), orders.get_to_depth((1, 1), 0).unwrap_err().to_string());

            // Child collections, two levels down.
            let locations = orders_async.children((1, 1), m::Order::SHIP_TO);
            assert_eq!(locations.list().await.unwrap(), orders.children((1, 1), m::Order::SHIP_TO).list().unwrap());
            let location = m::ShippingLocation {
                loc: 9,
                line1: "9 Quay".into(),
                city: "Tromsø".into(),
                zip: "9008".into(),
                items: Vec::new(),
            };
            locations.put(&location).await.unwrap();
            assert_eq!(locations.get(9u16).await.unwrap(), Some(location.clone()));
            let lines = locations.child(9u16, m::ShippingLocation::ITEMS).unwrap();
            let line = m::LineItem { line: 900, sku: "sku-x".into(), qty: 3, price_cents: 120 };
            lines.put(&line).await.unwrap();
            assert_eq!(lines.list().await.unwrap(), Some(vec![line.clone()]));
            let sync_lines = orders.children((1, 1), m::Order::SHIP_TO).child(9u16, m::ShippingLocation::ITEMS).unwrap();
            assert_eq!(sync_lines.list().unwrap(), Some(vec![line]));
            assert!(lines.remove(900u16).await.unwrap());
            assert!(!lines.remove(900u16).await.unwrap());
            assert!(locations.remove(9u16).await.unwrap());
            assert_eq!(orders_async.get((1, 1)).await.unwrap(), Some(versions::version(1, 1, 2)));
            let nowhere = orders_async.children((8, 8), m::Order::SHIP_TO);
            let (a, b) = (nowhere.put(&location).await.unwrap_err(), orders.children((8, 8), m::Order::SHIP_TO).put(&location).unwrap_err());
            assert_eq!(a.to_string(), b.to_string());

            // Scans: every aggregate, a prefix, a range, reversed, limited, paged.
            let all = orders_async.scan().to_vec().await.unwrap();
            assert_eq!(all, orders.scan().to_vec().unwrap());
            assert_eq!(all.len(), 5);
            let streamed: Vec<m::Order> = orders_async.scan().stream().map(Result::unwrap).collect().await;
            assert_eq!(streamed, all);
            assert_eq!(
                orders_async.scan().prefix(m::OrderKey::customer(1)).to_vec().await.unwrap(),
                orders.scan().prefix(m::OrderKey::customer(1)).to_vec().unwrap()
            );
            assert_eq!(
                orders_async.scan().range(m::OrderKey::from((1, 2))..m::OrderKey::from((2, 1))).reverse().to_vec().await.unwrap(),
                orders.scan().range(m::OrderKey::from((1, 2))..m::OrderKey::from((2, 1))).reverse().to_vec().unwrap()
            );
            assert_eq!(
                orders_async.scan().reverse().limit(2).to_vec().await.unwrap(),
                orders.scan().reverse().limit(2).to_vec().unwrap()
            );
            let first = orders_async.scan().page(2).await.unwrap();
            assert_eq!(first.items, orders.scan().page(2).unwrap().items);
            let cursor = first.next.clone().unwrap();
            // A cursor of either API continues the other's scan.
            let rest = orders_async.scan().after(&cursor).page(10).await.unwrap();
            assert_eq!(rest.items, orders.scan().after(&cursor).page(10).unwrap().items);
            assert!(rest.next.is_none());
            assert_eq!([first.items, rest.items].concat(), all);

            orders_async.delete((1, 2)).await.unwrap();
            assert_eq!(orders.get((1, 2)).unwrap(), None);
            assert!(!orders_async.exists((1, 2)).await.unwrap());
        });
    });
}
}

on_every_backend! {
fn async_aggregate_calls_cost_what_synchronous_ones_do(db: Db) {
    let rt = runtime();
    each_strategy!(|m, versions| {
        let orders = db.aggregates::<m::Order>().unwrap();
        let orders_async = orders.to_async();
        orders.put(&versions::version(4, 1, 1)).unwrap();
        orders.put(&versions::version(4, 2, 1)).unwrap();
        let ((), sync_put) = db.measure(|| orders.put(&versions::version(4, 1, 2)).unwrap());
        let ((), async_put) = db.measure(|| rt.block_on(orders_async.put(&versions::version(4, 2, 2))).unwrap());
        assert_eq!(async_put, sync_put, "put");
        let (a, sync_get) = db.measure(|| orders.get((4, 1)).unwrap());
        let (b, async_get) = db.measure(|| rt.block_on(orders_async.get((4, 1))).unwrap());
        assert_eq!((a, sync_get), (b, async_get), "get");
        let (a, sync_scan) = db.measure(|| orders.scan().page(1).unwrap().items);
        let (b, async_scan) = db.measure(|| rt.block_on(orders_async.scan().page(1)).unwrap().items);
        assert_eq!((a, sync_scan), (b, async_scan), "a page of one");
    });
}
}

/// Drops a run of aggregate writes at each of its await points in turn, in strategy `s`, on a
/// store with the embedded engine's guarantees or (`shared`) Bigtable's, and checks what each
/// drop leaves: every order one whole version written, and the next writer goes through.
fn drop_at_every_await_point(s: u64, shared: bool) {
    let mut points = 0;
    for stop in 1.. {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(dir.path(), EngineOptions::default()).unwrap();
        let inner: Arc<dyn Store> = Arc::new(EmbeddedStore::new(engine));
        let stepped = if shared { Stepped::shared(inner) } else { Stepped::new(inner, true) };
        let db = Db::with_store(Arc::new(stepped));
        let context = format!("strategy {s}, shared {shared}, dropped at await point {stop}");
        let finished = with_strategy!(db, s, |orders, versions| {
            orders.put(&versions::version(1, 0, 1)).unwrap();
            orders.put(&versions::version(1, 1, 1)).unwrap();
            let orders_async = orders.to_async();
            let writes = async {
                orders_async.put(&versions::version(1, 0, 2)).await.unwrap();
                orders_async.put(&versions::version(1, 0, 3)).await.unwrap();
                orders_async.delete((1, 1)).await.unwrap();
                orders_async.put(&versions::version(1, 1, 4)).await.unwrap();
                orders_async.put(&versions::version(1, 0, 5)).await.unwrap();
            };
            let finished = poll_times(writes, stop);
            let whole = |k: u64| {
                let order = orders.get((1, k)).unwrap_or_else(|e| panic!("{context}: order {k} reads: {e}"));
                order.map(|o| versions::version_of(&o).unwrap_or_else(|| panic!("{context}: a torn order {o:?}")))
            };
            let (first, second) = (whole(0), whole(1));
            assert!(matches!(first, Some(1 | 2 | 3 | 5)), "{context}: order 0 is {first:?}");
            assert!(matches!(second, Some(1 | 4) | None), "{context}: order 1 is {second:?}");
            // Whatever was left, the next writers go through.
            runtime().block_on(async {
                orders_async.put(&versions::version(1, 0, 6)).await.unwrap();
                orders_async.put(&versions::version(1, 1, 7)).await.unwrap();
            });
            assert_eq!((whole(0), whole(1)), (Some(6), Some(7)), "{context}");
            finished
        });
        if finished {
            points = stop;
            break;
        }
    }
    assert!(points > 5, "the writes have await points to drop at: {points}");
    eprintln!("strategy {s}, shared {shared}: dropped at each of {points} await points");
}

#[test]
fn a_normalized_write_dropped_at_any_await_point_is_a_crash_there() {
    drop_at_every_await_point(0, false);
}

#[test]
fn an_atomic_write_dropped_at_any_await_point_is_a_crash_there() {
    drop_at_every_await_point(1, false);
}

#[test]
fn a_write_dropped_at_any_await_point_on_a_shared_store_is_a_crash_there_in_every_strategy() {
    for s in 0..4 {
        drop_at_every_await_point(s, true);
    }
}

/// A writer's future is dropped while its store call — a row write of its intent, on
/// Cellar's blocking pool — is held. Readers must not finish the intent until that call has
/// ended: finished earlier, and followed by another write, the held row write would land over
/// the newer version.
#[test]
fn a_dropped_writer_stays_live_until_its_running_call_ends() {
    use common::orders::normalized::Order;
    use common::versions::normalized as versions;

    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), EngineOptions::default()).unwrap();
    let (held_tx, held_rx) = mpsc::channel::<()>();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let armed = Arc::new(AtomicBool::new(false));
    let hooked = {
        let (armed, disarm) = (armed.clone(), armed.clone());
        // The first row write to a child table once armed: a step of the intent's roll-forward.
        let when =
            move |call: Call, table: &str| call == Call::Mutate && table != "orders_n" && armed.load(Ordering::SeqCst);
        Hooked::new(EmbeddedStore::new(engine), when, move || {
            // Other calls go straight through while this one is held.
            disarm.store(false, Ordering::SeqCst);
            held_tx.send(()).unwrap();
            release_rx.recv().unwrap();
        })
    };
    let db = Db::with_store(Arc::new(hooked));
    let orders = db.aggregates::<Order>().unwrap();
    orders.put(&versions::version(1, 0, 1)).unwrap();
    let orders_async = orders.to_async();
    let rt = runtime();

    armed.store(true, Ordering::SeqCst);
    let writer = rt.spawn({
        let orders_async = orders_async.clone();
        async move { orders_async.put(&versions::version(1, 0, 2)).await }
    });
    held_rx.recv_timeout(Duration::from_secs(30)).expect("the writer's row write starts");
    writer.abort();
    assert!(rt.block_on(writer).unwrap_err().is_cancelled());

    // Readers, sync and async, meet the pending intent of a writer whose future is gone.
    let released = Arc::new(AtomicBool::new(false));
    let sync_reader = {
        let (orders, released) = (orders.clone(), released.clone());
        std::thread::spawn(move || {
            let order = orders.get((1, 0)).unwrap();
            (released.load(Ordering::SeqCst), order)
        })
    };
    let async_reader = rt.spawn({
        let (orders_async, released) = (orders_async.clone(), released.clone());
        async move {
            let order = orders_async.get((1, 0)).await.unwrap();
            (released.load(Ordering::SeqCst), order)
        }
    });
    std::thread::sleep(Duration::from_millis(300));
    released.store(true, Ordering::SeqCst);
    release_tx.send(()).unwrap();

    let (after_release, order) = sync_reader.join().unwrap();
    assert!(after_release, "a reader finished the intent while its writer's row write was still running");
    assert_eq!(order.as_ref().and_then(versions::version_of), Some(2));
    let (after_release, order) = rt.block_on(async_reader).unwrap();
    assert!(after_release, "an async reader finished the intent while its writer's row write was still running");
    assert_eq!(order.as_ref().and_then(versions::version_of), Some(2));

    // Later writes stand: nothing of the dropped writer lands after them.
    rt.block_on(orders_async.put(&versions::version(1, 0, 3))).unwrap();
    assert_eq!(orders.get((1, 0)).unwrap().as_ref().and_then(versions::version_of), Some(3));
}

#[test]
fn aggregate_futures_are_send_and_static_where_a_service_needs_them() {
    use common::orders::single_table::Order;
    fn send<T: Send>(_: &T) {}
    let db = Db::open_temporary().unwrap();
    let orders = db.aggregates::<Order>().unwrap().to_async();
    let order = common::versions::single_table::version(1, 1, 1);
    send(&orders.put(&order));
    send(&orders.get((1, 1)));
    send(&orders.get_many([(1, 1)]));
    send(&orders.get_to_depth((1, 1), 2));
    send(&orders.delete((1, 1)));
    let locations = orders.children((1, 1), Order::SHIP_TO);
    send(&locations.list());
    send(&locations.remove(1u16));
    send(&orders.scan().page(3));
    send(&orders.scan().to_vec());
    let stream = orders.scan().stream();
    send(&stream);
    fn owned<T: 'static>(_: T) {}
    owned(stream);
}
