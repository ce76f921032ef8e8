//! Aggregates in all four strategies: whole-aggregate and child-level operations give the
//! same answers whatever the strategy.
//!
//! Each test runs on every backend: the embedded engine and the Bigtable emulator.

mod common;

use cellar::prelude::*;
use common::orders::for_each_strategy;

on_every_backend! {
fn put_get_delete_in_every_strategy(db: Db) {
    for_each_strategy!(|m| {
        let orders = db.aggregates::<m::Order>().unwrap();
        let item = |line: u16, qty: u32| m::LineItem { line, sku: format!("sku-{line}"), qty, price_cents: 250 };
        let order = m::Order {
            customer: 7,
            order_no: 1,
            status: "open".into(),
            note: None,
            ship_to: vec![
                m::ShippingLocation {
                    loc: 1,
                    line1: "1 Main St".into(),
                    city: "Oslo".into(),
                    zip: "0150".into(),
                    items: vec![item(1, 2), item(2, 1)],
                },
                m::ShippingLocation {
                    loc: 2,
                    line1: "2 High St".into(),
                    city: "Bergen".into(),
                    zip: "5003".into(),
                    items: vec![item(3, 5)],
                },
            ],
        };
        orders.put(&order).unwrap();
        assert_eq!(orders.get((7, 1)).unwrap(), Some(order.clone()));
        assert!(orders.exists((7, 1)).unwrap());

        let mut smaller = order.clone();
        smaller.ship_to.pop();
        smaller.ship_to[0].items.pop();
        orders.put(&smaller).unwrap();
        assert_eq!(orders.get((7, 1)).unwrap(), Some(smaller.clone()));

        orders.delete((7, 1)).unwrap();
        assert_eq!(orders.get((7, 1)).unwrap(), None);
        assert!(!orders.exists((7, 1)).unwrap());
        println!("{}", orders.layout());
    });
}
}

macro_rules! sample {
    ($m:ident, $customer:expr, $order_no:expr, $locations:expr, $lines:expr) => {{
        let mut line = 0u16;
        $m::Order {
            customer: $customer,
            order_no: $order_no,
            status: format!("status-{}", $order_no),
            note: ($order_no % 2 == 0).then(|| "gift".to_string()),
            ship_to: (1..=$locations)
                .map(|loc: u16| $m::ShippingLocation {
                    loc,
                    line1: format!("{loc} Main St"),
                    city: format!("city-{loc}"),
                    zip: format!("{:04}", loc),
                    items: (0..$lines)
                        .map(|_| {
                            line += 1;
                            $m::LineItem {
                                line,
                                sku: format!("sku-{line}"),
                                qty: u32::from(line),
                                price_cents: 100 * i64::from(line),
                            }
                        })
                        .collect(),
                })
                .collect(),
        }
    }};
}

on_every_backend! {
fn child_level_writes_and_reads_in_every_strategy(db: Db) {
    for_each_strategy!(|m| {
        let orders = db.aggregates::<m::Order>().unwrap();
        let mut expected = sample!(m, 3, 9, 2u16, 2u16);
        orders.put(&expected).unwrap();

        // Replace one location (and its lines), add a new one, remove one line.
        let locations = orders.children((3, 9), m::Order::SHIP_TO);
        let mut moved = expected.ship_to[0].clone();
        moved.city = "Trondheim".into();
        moved.items.truncate(1);
        locations.put(&moved).unwrap();
        expected.ship_to[0] = moved;
        let added = m::ShippingLocation {
            loc: 7,
            line1: "7 Quay".into(),
            city: "Stavanger".into(),
            zip: "4006".into(),
            items: vec![],
        };
        locations.put(&added).unwrap();
        expected.ship_to.push(added.clone());
        let lines = locations.child(2u16, m::ShippingLocation::ITEMS).unwrap();
        assert!(lines.remove(4u16).unwrap());
        assert!(!lines.remove(4u16).unwrap(), "a second removal finds nothing");
        expected.ship_to[1].items.retain(|i| i.line != 4);
        let new_line = m::LineItem { line: 40, sku: "sku-40".into(), qty: 1, price_cents: 1 };
        locations.child(7u16, m::ShippingLocation::ITEMS).unwrap().put(&new_line).unwrap();
        expected.ship_to[2].items.push(new_line.clone());

        assert_eq!(orders.get((3, 9)).unwrap(), Some(expected.clone()));
        assert_eq!(locations.get(7u16).unwrap(), Some(expected.ship_to[2].clone()));
        assert_eq!(locations.list().unwrap().map(|l| l.len()), Some(3));
        assert_eq!(lines.list().unwrap(), Some(expected.ship_to[1].items.clone()));

        // One level only: the order with its locations, their lines left out.
        let shallow = orders.get_to_depth((3, 9), 2).unwrap().unwrap();
        assert_eq!(shallow.ship_to.len(), 3);
        assert!(shallow.ship_to.iter().all(|l| l.items.is_empty()));
        let root_only = orders.get_to_depth((3, 9), 1).unwrap().unwrap();
        assert!(root_only.ship_to.is_empty());
        assert_eq!(root_only.status, expected.status);

        // Children of a missing parent or aggregate are an error, reads say None.
        let err = locations.child(99u16, m::ShippingLocation::ITEMS).unwrap().put(&new_line).unwrap_err();
        assert!(matches!(err, cellar::orm::Error::InvalidArgument { arg: "parent", .. }), "{err}");
        let nowhere = orders.children((3, 10), m::Order::SHIP_TO);
        assert_eq!(nowhere.list().unwrap(), None);
        assert!(nowhere.put(&expected.ship_to[0]).is_err());
        assert_eq!(orders.get((3, 10)).unwrap(), None, "a failed child write creates nothing");
    });
}
}

on_every_backend! {
fn scans_by_prefix_range_and_pages_in_every_strategy(db: Db) {
    for_each_strategy!(|m| {
        let orders = db.aggregates::<m::Order>().unwrap();
        let mut all = Vec::new();
        for customer in 1..=3u64 {
            for order_no in 1..=4u64 {
                let o = sample!(m, customer, order_no, 2u16, 3u16);
                orders.put(&o).unwrap();
                all.push(o);
            }
        }
        assert_eq!(orders.scan().to_vec().unwrap(), all);
        let of_two: Vec<_> = all.iter().filter(|o| o.customer == 2).cloned().collect();
        assert_eq!(orders.scan().prefix(m::OrderKey::customer(2)).to_vec().unwrap(), of_two);
        let mut reversed = of_two.clone();
        reversed.reverse();
        assert_eq!(orders.scan().prefix(m::OrderKey::customer(2)).reverse().to_vec().unwrap(), reversed);
        assert_eq!(orders.scan().prefix(m::OrderKey::customer(2)).limit(3).to_vec().unwrap(), of_two[..3]);
        let range: Vec<_> =
            orders.scan().range(m::OrderKey::from((1, 3))..=m::OrderKey::from((2, 2))).to_vec().unwrap();
        assert_eq!(range, all[2..6]);
        let exclusive = orders.scan().range(m::OrderKey::from((1, 3))..m::OrderKey::from((2, 2))).to_vec().unwrap();
        assert_eq!(exclusive, all[2..5]);
        let one = orders.scan().prefix(m::OrderKey::from((3, 4))).to_vec().unwrap();
        assert_eq!(one, all[11..]);

        for reverse in [false, true] {
            let mut seen = Vec::new();
            let mut cursor: Option<Cursor> = None;
            loop {
                let mut q = orders.scan();
                if reverse {
                    q = q.reverse();
                }
                if let Some(c) = &cursor {
                    q = q.after(&c.to_string().parse().unwrap());
                }
                let page = q.page(5).unwrap();
                seen.extend(page.items);
                match page.next {
                    Some(c) => cursor = Some(c),
                    None => break,
                }
            }
            let mut expected = all.clone();
            if reverse {
                expected.reverse();
            }
            assert_eq!(seen, expected, "paging reverse={reverse}");
        }
        assert_eq!(
            orders.get_many([(1, 1), (9, 9), (3, 4)]).unwrap(),
            vec![Some(all[0].clone()), None, Some(all[11].clone())]
        );
    });
}
}

on_every_backend! {
fn unchanged_writes_write_nothing_and_duplicate_keys_are_refused(db: Db) {
    for_each_strategy!(|m| {
        let orders = db.aggregates::<m::Order>().unwrap();
        let order = sample!(m, 1, 1, 2u16, 2u16);
        orders.put(&order).unwrap();
        let mut twice = order.clone();
        twice.ship_to.push(twice.ship_to[0].clone());
        let err = orders.put(&twice).unwrap_err();
        assert!(matches!(err, cellar::orm::Error::InvalidArgument { .. }), "{err}");
        assert_eq!(orders.get((1, 1)).unwrap(), Some(order.clone()), "a refused write changes nothing");
    });
}
}
