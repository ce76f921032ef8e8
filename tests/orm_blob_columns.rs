//! Entity fields stored as versioned blobs (`#[cellar(blob)]` on a `Versioned` type): written
//! at the current version, read at any version the type declares — including cells written
//! before the field was versioned, as a plain `#[cellar(serde)]` column — and a cell that
//! cannot be read is an error naming the column and the versions.
//!
//! Each test runs on every backend: the embedded engine and the Bigtable emulator.

mod common;

use std::path::PathBuf;

use bytes::Bytes;
use cellar::orm::blob::{self, BlobFormat, Codec};
use cellar::prelude::*;
use common::blob_orders::document::Order;
use common::blob_orders::note::{Note, NoteV1};

/// An archive row holding an order document and, optionally, its predecessor.
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "archive")]
struct Archived {
    #[cellar(key)]
    id: u64,
    #[cellar(blob, column = "o")]
    order: Order,
    #[cellar(blob, column = "p")]
    previous: Option<Order>,
}

fn sample(id: u64) -> Order {
    Order { id, customer: "Ada".into(), currency: "NOK".into(), lines: vec![("tea".into(), 2, 450)] }
}

fn put_cell(db: &Db, table: &str, row: Vec<u8>, qualifier: &'static [u8], value: Vec<u8>) {
    common::raw::put_cells(db, table, row, &[(qualifier, value)]);
}

on_every_backend! {
fn blob_columns_are_written_current_and_read_from_any_version(db: Db) {
    let archive = db.repo::<Archived>().unwrap();
    let row = Archived { id: 1, order: sample(1), previous: None };
    archive.put(&row).unwrap();
    assert_eq!(archive.get(1).unwrap(), Some(row));
    // The cell is a blob of the current version; `None` wrote no cell.
    let stored = db.store().scan("archive", &Default::default()).unwrap().next().unwrap().unwrap();
    assert_eq!(stored.cells.len(), 1);
    let header = blob::read_header(&stored.cells[0].value).unwrap();
    assert_eq!((header.schema_version, header.codec().unwrap()), (3, Codec::MessagePack));

    // A version-1 order, as it was checked in, read through the chain.
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/blob/order_v1_bincode.blob");
    put_cell(&db, "archive", 2u64.to_be_bytes().to_vec(), b"o", std::fs::read(fixture).unwrap());
    let old = archive.get(2).unwrap().unwrap();
    assert_eq!(old.order.lines, [("total".to_string(), 1, 4250)]);
    assert_eq!(old.order.currency, "EUR");
}
}

on_every_backend! {
fn an_unreadable_blob_names_the_column_and_the_versions(db: Db) {
    let archive = db.repo::<Archived>().unwrap();
    let newer = blob::encode(&sample(3), &BlobFormat::new(4, Codec::MessagePack), blob::type_tag("Order")).unwrap();
    put_cell(&db, "archive", 3u64.to_be_bytes().to_vec(), b"o", newer);
    let err = archive.get(3).unwrap_err().to_string();
    assert_eq!(
        err,
        "table `archive`, row \\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x03, column d:o: field `order` (Order): \
         Order version 4 is newer than this code's version 3"
    );
}
}

#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "notes")]
struct StickyBefore {
    #[cellar(key)]
    id: u64,
    #[cellar(serde, column = "n")]
    note: NoteV1,
}

#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "notes")]
struct Sticky {
    #[cellar(key)]
    id: u64,
    #[cellar(blob, column = "n")]
    note: Note,
}

on_every_backend! {
fn serde_columns_migrate_as_a_declared_legacy_version(db: Db) {
    db.repo::<StickyBefore>().unwrap().put(&StickyBefore { id: 1, note: NoteV1 { text: "call Ada".into() } }).unwrap();
    let notes = db.repo::<Sticky>().unwrap();
    let read = notes.get(1).unwrap().unwrap();
    assert_eq!(read.note, Note { text: "call Ada".into(), pinned: false });
    notes.put(&read).unwrap();
    let stored = db.store().scan("notes", &Default::default()).unwrap().next().unwrap().unwrap();
    assert_eq!(blob::read_header(&stored.cells[0].value).unwrap().schema_version, 2, "rewritten as a blob");
    assert_eq!(notes.get(1).unwrap(), Some(read));
}
}

on_every_backend! {
fn reads_write_old_blobs_back_at_the_current_version_when_asked(db: Db) {
    let plain = db.repo::<Archived>().unwrap();
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/blob/order_v1_bincode.blob");
    let v1 = std::fs::read(fixture).unwrap();
    put_cell(&db, "archive", 5u64.to_be_bytes().to_vec(), b"o", v1.clone());
    put_cell(&db, "archive", 6u64.to_be_bytes().to_vec(), b"o", v1);
    let stored_version = |id: u64| {
        let row = db.store().read_rows("archive", &[Bytes::copy_from_slice(&id.to_be_bytes())], &Default::default());
        let row = row.unwrap().into_iter().next().flatten().unwrap();
        blob::read_header(&row.cells[0].value).unwrap().schema_version
    };
    // Without write-back a read leaves the cell as it is.
    let read = plain.get(5).unwrap().unwrap();
    assert_eq!(stored_version(5), 1);
    // With it, get and get_many rewrite what they read, and the value does not change.
    let archive = db.repo::<Archived>().unwrap().with_write_back();
    assert_eq!(archive.get(5).unwrap(), Some(read.clone()));
    assert_eq!(stored_version(5), 3);
    archive.get_many([6u64]).unwrap();
    assert_eq!(stored_version(6), 3);
    assert_eq!(plain.get(5).unwrap(), Some(read));
    // A current cell is not rewritten: the read costs no write.
    let ((), costs) = db.measure(|| {
        archive.get(5).unwrap();
    });
    assert_eq!(costs.check_and_mutates, 0);
}
}

on_every_backend! {
fn a_scan_can_set_unreadable_rows_aside_and_go_on(db: Db) {
    let archive = db.repo::<Archived>().unwrap();
    for id in 1..=4 {
        archive.put(&Archived { id, order: sample(id), previous: None }).unwrap();
    }
    let newer = blob::encode(&sample(3), &BlobFormat::new(4, Codec::MessagePack), blob::type_tag("Order")).unwrap();
    put_cell(&db, "archive", 3u64.to_be_bytes().to_vec(), b"o", newer);
    // By default the scan stops at the row it cannot read.
    let err = archive.scan().to_vec().unwrap_err().to_string();
    assert!(err.contains("newer than this code's version 3"), "{err}");
    // Asked to, it returns the others and reports the row.
    let mut iter = archive.scan().skip_unreadable().iter().unwrap();
    let ids: Vec<u64> = iter.by_ref().map(|a| a.unwrap().id).collect();
    assert_eq!(ids, [1, 2, 4]);
    let skipped = iter.skipped();
    assert_eq!(skipped.len(), 1);
    assert_eq!(skipped[0].row, "\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x03");
    assert!(skipped[0].error.to_string().contains("column d:o"), "{}", skipped[0].error);
    // A limit counts what is returned.
    let limited: Vec<u64> = archive.scan().skip_unreadable().limit(3).iter().unwrap().map(|a| a.unwrap().id).collect();
    assert_eq!(limited, [1, 2, 4]);
}
}
