//! Model-based test of aggregates: random sequences of edits — whole orders, locations and
//! lines added, replaced and removed, orders deleted, the database reopened — applied to all
//! four strategies and to an in-memory model must read back identically after every step, and
//! store exactly the rows the model implies (no orphans). On the embedded engine and on the
//! Bigtable emulator.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use cellar::orm::store::{BigtableOptions, BigtableStore};
use cellar::prelude::*;
use proptest::prelude::*;

/// A line item, location and order as the model keeps them (children by key).
#[derive(Debug, Clone, PartialEq)]
struct Line {
    sku: String,
    qty: u32,
    price: i64,
}

#[derive(Debug, Clone, PartialEq)]
struct Loc {
    city: String,
    items: BTreeMap<u16, Line>,
}

#[derive(Debug, Clone, PartialEq)]
struct Order {
    status: String,
    note: Option<String>,
    ship_to: BTreeMap<u16, Loc>,
}

type Model = BTreeMap<u64, Order>;

#[derive(Debug, Clone)]
enum Op {
    PutOrder(u64, Order),
    PutLocation(u64, u16, Loc),
    RemoveLocation(u64, u16),
    PutLine(u64, u16, u16, Line),
    RemoveLine(u64, u16, u16),
    ChangeCity(u64, u16, String),
    DeleteOrder(u64),
    Reopen,
}

fn line() -> impl Strategy<Value = Line> {
    ("[a-z]{0,6}", 0u32..5, -3i64..1000).prop_map(|(sku, qty, price)| Line { sku, qty, price })
}

fn loc() -> impl Strategy<Value = Loc> {
    ("[A-Z][a-z]{0,5}", prop::collection::btree_map(1u16..9, line(), 0..4))
        .prop_map(|(city, items)| Loc { city, items })
}

fn order() -> impl Strategy<Value = Order> {
    ("open|paid|sent", prop::option::of("[a-z ]{0,8}"), prop::collection::btree_map(1u16..4, loc(), 0..3))
        .prop_map(|(status, note, ship_to)| Order { status, note, ship_to })
}

fn op() -> impl Strategy<Value = Op> {
    let id = 0u64..3;
    let key = 1u16..4;
    prop_oneof![
        3 => (id.clone(), order()).prop_map(|(o, v)| Op::PutOrder(o, v)),
        2 => (id.clone(), key.clone(), loc()).prop_map(|(o, k, v)| Op::PutLocation(o, k, v)),
        1 => (id.clone(), key.clone()).prop_map(|(o, k)| Op::RemoveLocation(o, k)),
        3 => (id.clone(), key.clone(), 1u16..9, line()).prop_map(|(o, k, l, v)| Op::PutLine(o, k, l, v)),
        2 => (id.clone(), key.clone(), 1u16..9).prop_map(|(o, k, l)| Op::RemoveLine(o, k, l)),
        2 => (id.clone(), key, "[A-Z][a-z]{0,5}").prop_map(|(o, k, c)| Op::ChangeCity(o, k, c)),
        1 => id.prop_map(Op::DeleteOrder),
        1 => Just(Op::Reopen),
    ]
}

/// Line keys unique across an order (the denormalized layout's rule): a line already used
/// under another location moves to the next free number, in the model and in every store.
fn free_line(order: &Order, loc: u16, wanted: u16) -> u16 {
    let taken = |n: u16| order.ship_to.iter().any(|(k, l)| *k != loc && l.items.contains_key(&n));
    (wanted..).find(|&n| !taken(n)).unwrap_or(wanted)
}

fn unique_lines(mut order: Order) -> Order {
    let mut used = std::collections::BTreeSet::new();
    for loc in order.ship_to.values_mut() {
        let items = std::mem::take(&mut loc.items);
        for (mut n, l) in items {
            while !used.insert(n) {
                n += 1;
            }
            loc.items.insert(n, l);
        }
    }
    order
}

/// Makes an op valid for every strategy, given the model, and applies it to the model.
/// Returns the op as every store should see it and whether it should succeed.
fn plan(model: &mut Model, op: Op) -> (Op, bool) {
    match op {
        Op::PutOrder(o, v) => {
            let v = unique_lines(v);
            model.insert(o, v.clone());
            (Op::PutOrder(o, v), true)
        }
        Op::PutLocation(o, k, mut v) => {
            let Some(order) = model.get_mut(&o) else { return (Op::PutLocation(o, k, v), false) };
            let mut probe = order.clone();
            probe.ship_to.remove(&k);
            v.items = v.items.into_iter().map(|(n, l)| (free_line(&probe, k, n), l)).collect();
            let mut fixed = probe.clone();
            fixed.ship_to.insert(k, v.clone());
            let fixed = unique_lines(fixed);
            let v = fixed.ship_to[&k].clone();
            order.ship_to.insert(k, v.clone());
            (Op::PutLocation(o, k, v), true)
        }
        Op::RemoveLocation(o, k) => {
            if let Some(order) = model.get_mut(&o) {
                order.ship_to.remove(&k);
            }
            (Op::RemoveLocation(o, k), true)
        }
        Op::PutLine(o, k, n, v) => {
            let Some(order) = model.get_mut(&o) else { return (Op::PutLine(o, k, n, v), false) };
            let n = free_line(order, k, n);
            let Some(loc) = order.ship_to.get_mut(&k) else { return (Op::PutLine(o, k, n, v), false) };
            loc.items.insert(n, v.clone());
            (Op::PutLine(o, k, n, v), true)
        }
        Op::RemoveLine(o, k, n) => {
            if let Some(loc) = model.get_mut(&o).and_then(|order| order.ship_to.get_mut(&k)) {
                loc.items.remove(&n);
            }
            (Op::RemoveLine(o, k, n), true)
        }
        Op::ChangeCity(o, k, c) => {
            match model.get_mut(&o).and_then(|order| order.ship_to.get_mut(&k)) {
                Some(loc) => loc.city = c.clone(),
                None => return (Op::ChangeCity(o, k, c), false),
            }
            (Op::ChangeCity(o, k, c), true)
        }
        Op::DeleteOrder(o) => {
            model.remove(&o);
            (Op::DeleteOrder(o), true)
        }
        Op::Reopen => (Op::Reopen, true),
    }
}

/// One strategy's repository, driven with model values.
trait Runner {
    fn apply(&self, op: &Op) -> bool;
    fn read_all(&self) -> Model;
    /// Rows stored in the strategy's tables, read from the store itself.
    fn stored_rows(&self, db: &Db) -> usize;
}

/// Rows the strategy `name` stores for the model: no orphans left by removed children or
/// shrunk orders, nothing missing.
fn expected_rows(name: &str, model: &Model) -> usize {
    model
        .values()
        .map(|o| match name {
            "blob" => 1,
            // Locations with lines are collapsed onto their lines.
            "denormalized" => {
                1 + o.ship_to.values().map(|l| if l.items.is_empty() { 1 } else { l.items.len() }).sum::<usize>()
            }
            _ => 1 + o.ship_to.values().map(|l| 1 + l.items.len()).sum::<usize>(),
        })
        .sum()
}

macro_rules! runner {
    ($name:ident, $m:ident) => {
        struct $name(AggregateRepository<common::orders::$m::Order>);

        impl $name {
            fn customer(o: u64) -> u64 {
                o % 2 + 1
            }
            fn to_line(n: u16, l: &Line) -> common::orders::$m::LineItem {
                common::orders::$m::LineItem { line: n, sku: l.sku.clone(), qty: l.qty, price_cents: l.price }
            }
            fn to_loc(k: u16, l: &Loc) -> common::orders::$m::ShippingLocation {
                common::orders::$m::ShippingLocation {
                    loc: k,
                    line1: format!("{k} Main St"),
                    city: l.city.clone(),
                    zip: format!("{k:04}"),
                    items: l.items.iter().map(|(n, i)| Self::to_line(*n, i)).collect(),
                }
            }
            fn key(o: u64) -> (u64, u64) {
                (Self::customer(o), o)
            }
        }

        impl Runner for $name {
            fn apply(&self, op: &Op) -> bool {
                use common::orders::$m as m;
                let r = match op {
                    Op::PutOrder(o, v) => self.0.put(&m::Order {
                        customer: Self::customer(*o),
                        order_no: *o,
                        status: v.status.clone(),
                        note: v.note.clone(),
                        ship_to: v.ship_to.iter().map(|(k, l)| Self::to_loc(*k, l)).collect(),
                    }),
                    Op::PutLocation(o, k, l) => {
                        self.0.children(Self::key(*o), m::Order::SHIP_TO).put(&Self::to_loc(*k, l))
                    }
                    Op::RemoveLocation(o, k) => {
                        self.0.children(Self::key(*o), m::Order::SHIP_TO).remove(*k).map(|_| ())
                    }
                    Op::PutLine(o, k, n, l) => self
                        .0
                        .children(Self::key(*o), m::Order::SHIP_TO)
                        .child(*k, m::ShippingLocation::ITEMS)
                        .and_then(|c| c.put(&Self::to_line(*n, l))),
                    Op::RemoveLine(o, k, n) => self
                        .0
                        .children(Self::key(*o), m::Order::SHIP_TO)
                        .child(*k, m::ShippingLocation::ITEMS)
                        .and_then(|c| c.remove(*n))
                        .map(|_| ()),
                    Op::ChangeCity(o, k, c) => {
                        let locations = self.0.children(Self::key(*o), m::Order::SHIP_TO);
                        match locations.get(*k).unwrap() {
                            Some(mut loc) => {
                                loc.city = c.clone();
                                locations.put(&loc)
                            }
                            None => return false,
                        }
                    }
                    Op::DeleteOrder(o) => self.0.delete(Self::key(*o)),
                    Op::Reopen => Ok(()),
                };
                match r {
                    Ok(()) => true,
                    Err(cellar::orm::Error::InvalidArgument { arg: "parent", .. }) => false,
                    Err(e) => panic!("{} {op:?}: {e}", stringify!($m)),
                }
            }

            fn read_all(&self) -> Model {
                let scanned = self.0.scan().to_vec().unwrap();
                let mut model = Model::new();
                for o in scanned {
                    assert_eq!(self.0.get((o.customer, o.order_no)).unwrap().as_ref(), Some(&o), "get and scan agree");
                    let order = Order {
                        status: o.status,
                        note: o.note,
                        ship_to: o
                            .ship_to
                            .into_iter()
                            .map(|l| {
                                let items = l
                                    .items
                                    .into_iter()
                                    .map(|i| (i.line, Line { sku: i.sku, qty: i.qty, price: i.price_cents }))
                                    .collect();
                                (l.loc, Loc { city: l.city, items })
                            })
                            .collect(),
                    };
                    model.insert(o.order_no, order);
                }
                model
            }

            fn stored_rows(&self, db: &Db) -> usize {
                let text = self.0.layout().to_string();
                let tables = text.lines().filter_map(|l| l.trim().strip_prefix("table "));
                // Tombstones a delete leaves on a shared store hold no data.
                let data = |t: &str| {
                    let rows = db.store().scan(t, &Default::default()).unwrap();
                    rows.filter(|r| common::raw::holds_aggregate_data(r.as_ref().unwrap())).count()
                };
                tables.map(data).sum()
            }
        }
    };
}

runner!(Normalized, normalized);
runner!(SingleTable, single_table);
runner!(Denormalized, denormalized);
runner!(Blob, blob);

fn runners(db: &Db) -> Vec<(&'static str, Box<dyn Runner>)> {
    vec![
        ("normalized", Box::new(Normalized(db.aggregates().unwrap()))),
        ("single_table", Box::new(SingleTable(db.aggregates().unwrap()))),
        ("denormalized", Box::new(Denormalized(db.aggregates().unwrap()))),
        ("blob", Box::new(Blob(db.aggregates().unwrap()))),
    ]
}

/// Runs `ops` on the databases `open` returns, a new one (on the same data) at each reopen.
fn matches_the_model(ops: Vec<Op>, open: impl Fn() -> Db) -> Result<(), TestCaseError> {
    let mut db = open();
    let mut stores = runners(&db);
    let mut model = Model::new();
    for op in ops {
        let (op, ok) = plan(&mut model, op);
        if let Op::Reopen = op {
            drop(stores);
            drop(db);
            db = open();
            stores = runners(&db);
        }
        for (name, store) in &stores {
            prop_assert_eq!(store.apply(&op), ok, "{} applying {:?}", name, op);
            prop_assert_eq!(&store.read_all(), &model, "{} after {:?}", name, op);
            prop_assert_eq!(store.stored_rows(&db), expected_rows(name, &model), "{} rows after {:?}", name, op);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn every_strategy_matches_the_model(ops in prop::collection::vec(op(), 1..30)) {
        let dir = tempfile::tempdir().unwrap();
        matches_the_model(ops, || Db::open(dir.path()).unwrap())?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// The same on Bigtable, where the `single_table` and `denormalized` strategies write
    /// through their intent protocol; a reopen is a new connection to the same instance.
    #[test]
    fn every_strategy_matches_the_model_on_bigtable(ops in prop::collection::vec(op(), 1..30)) {
        let Some(emulator) = common::backend::emulator() else { return Ok(()) };
        let options = BigtableOptions::new("cellar", common::backend::instance_name()).emulator(emulator.host.clone());
        matches_the_model(ops, || Db::with_store(Arc::new(BigtableStore::connect(options.clone()).unwrap())))?;
    }
}
