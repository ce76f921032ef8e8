//! Golden fixtures: the exact bytes of blobs as earlier versions of a type were written — v1
//! in bincode, v2 in MessagePack, v3 in MessagePack with zstd, and JSON with LZ4 — and of an
//! aggregate blob in the header-1 layout the `blob` strategy wrote first. They are checked in
//! and must decode to the same values for as long as Cellar reads blobs.
//!
//! `CELLAR_WRITE_FIXTURES=1 cargo test --test orm_blob_fixtures` writes them again; only do
//! that for a new fixture, never to make an old one pass.

mod common;

use std::path::PathBuf;

use cellar::orm::blob::{self, BlobFormat, Codec, Compression};
use cellar::prelude::*;
use serde::{Deserialize, Serialize};

/// The order as first shipped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct OrderV1 {
    id: u64,
    customer: String,
    total_cents: i64,
}

/// Version 2 added the currency.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct OrderV2 {
    id: u64,
    customer: String,
    total_cents: i64,
    currency: String,
}

/// Version 3 keeps the lines instead of the total.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct OrderV3 {
    id: u64,
    customer: String,
    currency: String,
    lines: Vec<(String, u32, i64)>,
}

fn v1() -> OrderV1 {
    OrderV1 { id: 1001, customer: "Ada Lovelace".into(), total_cents: 4250 }
}

fn v2() -> OrderV2 {
    OrderV2 { id: 1002, customer: "Charles Babbage".into(), total_cents: 99_900, currency: "GBP".into() }
}

fn v3() -> OrderV3 {
    OrderV3 {
        id: 1003,
        customer: "Grace Hopper".into(),
        currency: "USD".into(),
        // Enough lines for zstd to have something to do.
        lines: (1..=40).map(|i| (format!("sku-{i:05}"), i, 100 * i64::from(i))).collect(),
    }
}

fn tag() -> u32 {
    blob::type_tag("Order")
}

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/blob").join(name)
}

/// The checked-in bytes of `name`; with `CELLAR_WRITE_FIXTURES` set, `fresh` is written first.
fn golden(name: &str, fresh: impl FnOnce() -> Vec<u8>) -> Vec<u8> {
    let path = fixture(name);
    if std::env::var_os("CELLAR_WRITE_FIXTURES").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, fresh()).unwrap();
    }
    std::fs::read(&path).unwrap_or_else(|e| panic!("fixture {}: {e}", path.display()))
}

#[test]
fn every_historical_order_version_still_decodes() {
    let cell =
        golden("order_v1_bincode.blob", || blob::encode(&v1(), &BlobFormat::new(1, Codec::Bincode), tag()).unwrap());
    let (header, order): (_, OrderV1) = blob::decode(&cell, tag()).unwrap();
    assert_eq!((header.schema_version, header.codec().unwrap(), order), (1, Codec::Bincode, v1()));

    let cell = golden("order_v2_msgpack.blob", || {
        blob::encode(&v2(), &BlobFormat::new(2, Codec::MessagePack), tag()).unwrap()
    });
    let (header, order): (_, OrderV2) = blob::decode(&cell, tag()).unwrap();
    assert_eq!((header.schema_version, header.codec().unwrap(), order), (2, Codec::MessagePack, v2()));

    let zstd = BlobFormat::new(3, Codec::MessagePack).compressed(Compression::Zstd(3), 256);
    let cell = golden("order_v3_msgpack_zstd.blob", || blob::encode(&v3(), &zstd, tag()).unwrap());
    let (header, order): (_, OrderV3) = blob::decode(&cell, tag()).unwrap();
    assert_eq!((header.schema_version, header.compression().unwrap().name(), order), (3, "zstd", v3()));

    let lz4 = BlobFormat::new(3, Codec::Json).compressed(Compression::Lz4, 256);
    let cell = golden("order_v3_json_lz4.blob", || blob::encode(&v3(), &lz4, tag()).unwrap());
    let (header, order): (_, OrderV3) = blob::decode(&cell, tag()).unwrap();
    assert_eq!((header.codec().unwrap(), header.compression().unwrap().name(), order), (Codec::Json, "lz4", v3()));
}

#[test]
fn uncompressed_encodings_are_byte_for_byte_stable() {
    // The codecs' output is part of the format: the same value encodes to the same bytes.
    assert_eq!(
        blob::encode(&v1(), &BlobFormat::new(1, Codec::Bincode), tag()).unwrap(),
        fixture_bytes("order_v1_bincode.blob")
    );
    assert_eq!(
        blob::encode(&v2(), &BlobFormat::new(2, Codec::MessagePack), tag()).unwrap(),
        fixture_bytes("order_v2_msgpack.blob")
    );
}

fn fixture_bytes(name: &str) -> Vec<u8> {
    std::fs::read(fixture(name)).unwrap()
}

/// An aggregate blob as the first `blob` strategy wrote it: header version 1, whose checksum
/// covers the payload alone.
fn header_v1(mut cell: Vec<u8>) -> Vec<u8> {
    cell[4] = 1;
    let checksum = crc32c::crc32c(&cell[blob::HEADER_LEN..]);
    cell[20..24].copy_from_slice(&checksum.to_be_bytes());
    cell
}

#[test]
fn aggregate_blobs_of_the_first_layout_still_read() {
    use common::versions::blob::version;
    let order = version(7, 9, 4);
    let db = Db::open_temporary().unwrap();
    let orders = db.aggregates::<common::orders::blob::Order>().unwrap();
    let cell = golden("aggregate_order_header_v1.blob", || {
        orders.put(&order).unwrap();
        let row = db.store().scan("orders_b", &Default::default()).unwrap().next().unwrap().unwrap();
        let cell = row.cells.iter().find(|c| c.qualifier.as_ref() == b"b").unwrap();
        header_v1(cell.value.to_vec())
    });
    assert_eq!(blob::read_header(&cell).unwrap().header_version, 1);
    // Stored under the order's key as that build did: the blob and a generation token.
    let fresh = Db::open_temporary().unwrap();
    let orders = fresh.aggregates::<common::orders::blob::Order>().unwrap();
    let key = [7u64.to_be_bytes(), 9u64.to_be_bytes()].concat();
    common::raw::put_blob_row(&fresh, "orders_b", key, cell);
    assert_eq!(orders.get((7, 9)).unwrap(), Some(order.clone()));
    // A write upgrades it to the current layout.
    let mut changed = order;
    changed.status = "v5".into();
    orders.put(&changed).unwrap();
    let stored = fresh.store().scan("orders_b", &Default::default()).unwrap().next().unwrap().unwrap();
    let cell = stored.cells.iter().find(|c| c.qualifier.as_ref() == b"b").unwrap();
    assert_eq!(blob::read_header(&cell.value).unwrap().header_version, blob::HEADER_VERSION);
}

#[test]
fn no_damaged_byte_of_a_first_layout_blob_is_read_as_a_value() {
    // Header version 1's checksum covers the payload alone: byte 7 (reserved, 0 from every
    // writer) is the read's own check, the codec and schema version the aggregate's.
    let cell = fixture_bytes("aggregate_order_header_v1.blob");
    assert_eq!((cell[4], cell[7]), (1, 0));
    for found in [1u8, 0x80, 0xFF] {
        let mut damaged = cell.clone();
        damaged[7] = found;
        let err = blob::open(&damaged, tag()).unwrap_err();
        assert_eq!(err, blob::BlobError::Reserved { found });
        assert!(err.to_string().contains("reserved byte is"), "{err}");
    }
    let db = Db::open_temporary().unwrap();
    let orders = db.aggregates::<common::orders::blob::Order>().unwrap();
    let key = [7u64.to_be_bytes(), 9u64.to_be_bytes()].concat();
    common::raw::put_blob_row(&db, "orders_b", key.clone(), cell.clone());
    assert!(orders.get((7, 9)).unwrap().is_some());
    for at in 0..cell.len() {
        for flip in [1u8, 2, 4, 8, 16, 32, 64, 128, 0xFF] {
            let mut damaged = cell.clone();
            damaged[at] ^= flip;
            common::raw::put_blob_row(&db, "orders_b", key.clone(), damaged);
            let read = orders.get((7, 9));
            assert!(read.is_err(), "byte {at} ^ {flip:#04x} read as a value: {read:?}");
        }
    }
}
