//! Aggregates in all four strategies: whole-aggregate and child-level operations give the
//! same answers whatever the strategy.

mod common;

use cellar::prelude::*;
use common::orders::for_each_strategy;

#[test]
fn put_get_delete_in_every_strategy() {
    for_each_strategy!(|m| {
        let db = Db::open_temporary().unwrap();
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
