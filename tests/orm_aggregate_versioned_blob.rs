//! A `blob` aggregate that declares its versions: the cell holds the aggregate as a versioned
//! serde value (codec, schema version in the header), cells of earlier versions read through
//! the chain, and the repository API — child-level writes included — works as for any blob.
//!
//! Each test runs on every backend: the embedded engine and the Bigtable emulator.

mod common;

use bytes::Bytes;
use cellar::orm::blob::{self, BlobFormat, Codec};
use cellar::prelude::*;
use common::blob_orders::aggregate::{Line, Order, OrderV1};

fn order() -> Order {
    Order {
        customer: 7,
        order_no: 1,
        status: "open".into(),
        lines: vec![Line { n: 1, sku: "tea".into() }, Line { n: 2, sku: "jam".into() }],
    }
}

fn blob_cell(db: &Db) -> Bytes {
    let row = db.store().scan("vorders", &Default::default()).unwrap().next().unwrap().unwrap();
    row.cells.iter().find(|c| c.qualifier.as_ref() == b"b").unwrap().value.clone()
}

on_every_backend! {
fn the_cell_is_the_versioned_value(db: Db) {
    let orders = db.aggregates::<Order>().unwrap();
    orders.put(&order()).unwrap();
    assert_eq!(orders.get((7, 1)).unwrap(), Some(order()));
    let header = blob::read_header(&blob_cell(&db)).unwrap();
    assert_eq!((header.codec().unwrap(), header.schema_version), (Codec::MessagePack, 2));
    // Child-level writes still address one line.
    let lines = orders.children((7, 1), Order::LINES);
    lines.put(&Line { n: 3, sku: "bread".into() }).unwrap();
    assert!(lines.remove(1u16).unwrap());
    let got = orders.get((7, 1)).unwrap().unwrap();
    assert_eq!(got.lines, [Line { n: 2, sku: "jam".into() }, Line { n: 3, sku: "bread".into() }]);
}
}

on_every_backend! {
fn a_cell_of_the_first_version_reads_through_the_chain(db: Db) {
    let orders = db.aggregates::<Order>().unwrap();
    let v1 = OrderV1 { customer: 7, order_no: 2, skus: vec!["salt".into(), "pepper".into()] };
    let cell = blob::encode(&v1, &BlobFormat::new(1, Codec::Bincode), blob::type_tag("Order")).unwrap();
    let key = [7u64.to_be_bytes(), 2u64.to_be_bytes()].concat();
    common::raw::put_blob_row(&db, "vorders", key, cell);
    let read = orders.get((7, 2)).unwrap().unwrap();
    assert_eq!(read, Order::from(v1));
    // The next write stores it at the current version.
    orders.put(&read).unwrap();
    assert_eq!(blob::read_header(&blob_cell(&db)).unwrap().schema_version, 2);
}
}

on_every_backend! {
fn reads_write_an_old_blob_back_when_asked(db: Db) {
    let orders = db.aggregates::<Order>().unwrap().with_write_back();
    let v1 = OrderV1 { customer: 7, order_no: 3, skus: vec!["oats".into()] };
    let cell = blob::encode(&v1, &BlobFormat::new(1, Codec::Bincode), blob::type_tag("Order")).unwrap();
    let key = [7u64.to_be_bytes(), 3u64.to_be_bytes()].concat();
    common::raw::put_blob_row(&db, "vorders", key, cell);
    assert_eq!(orders.get((7, 3)).unwrap(), Some(Order::from(v1.clone())));
    let header = blob::read_header(&blob_cell(&db)).unwrap();
    assert_eq!((header.schema_version, header.codec().unwrap()), (2, Codec::MessagePack));
    assert_eq!(orders.get((7, 3)).unwrap(), Some(Order::from(v1)));
}
}

on_every_backend! {
fn an_aggregate_scan_can_set_unreadable_ones_aside(db: Db) {
    let orders = db.aggregates::<Order>().unwrap();
    for order_no in 1..=3 {
        orders.put(&Order { order_no, ..order() }).unwrap();
    }
    // Order 2's blob says version 9.
    let newer = blob::encode(&order(), &BlobFormat::new(9, Codec::MessagePack), blob::type_tag("Order")).unwrap();
    let key = [7u64.to_be_bytes(), 2u64.to_be_bytes()].concat();
    common::raw::put_cells(&db, "vorders", key, &[(b"b", newer)]);
    assert!(orders.scan().to_vec().is_err());
    let mut iter = orders.scan().skip_unreadable().iter().unwrap();
    let found: Vec<u64> = iter.by_ref().map(|o| o.unwrap().order_no).collect();
    assert_eq!(found, [1, 3]);
    assert_eq!(iter.skipped().len(), 1);
    assert!(iter.skipped()[0].error.to_string().contains("version 9 is newer"), "{}", iter.skipped()[0].error);
}
}
