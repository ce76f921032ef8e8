//! Version chains of blob values, declared with `#[derive(Versioned)]`: a cell written at any
//! version a type declares reads as the current version through its `From`/`TryFrom` steps,
//! in whatever codec it was written; what cannot be read — a newer version, an undeclared one,
//! a refused step, a headerless cell of a type without a legacy version — is an error naming
//! the versions.

mod common;

use std::path::PathBuf;

use cellar::orm::blob::versioned;
use cellar::orm::blob::{self, BlobFormat, Codec, Compression, HistoricVersion, VersionError, Versioned};
use common::blob_orders::document::{Order, OrderV1, OrderV2};
use common::blob_orders::note::{Note, NoteV1};
use proptest::prelude::*;

fn fixture(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/blob").join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("fixture {}: {e}", path.display()))
}

fn in_memory(v1: OrderV1) -> Result<Order, String> {
    Order::try_from(OrderV2::from(v1))
}

#[test]
fn the_checked_in_versions_read_as_the_current_order() {
    let v1 = versioned::read::<Order>(&fixture("order_v1_bincode.blob")).unwrap();
    let expected = Order {
        id: 1001,
        customer: "Ada Lovelace".into(),
        currency: "EUR".into(),
        lines: vec![("total".into(), 1, 4250)],
    };
    assert_eq!((v1.value, v1.stored_version, v1.stored_codec), (expected, Some(1), Codec::Bincode));

    let v2 = versioned::read::<Order>(&fixture("order_v2_msgpack.blob")).unwrap();
    assert_eq!((v2.value.currency.as_str(), v2.value.lines.len(), v2.stored_version), ("GBP", 1, Some(2)));
    assert!(!v2.is_current());

    let v3 = versioned::read::<Order>(&fixture("order_v3_msgpack_zstd.blob")).unwrap();
    assert_eq!((v3.value.lines.len(), v3.stored_version), (40, Some(3)));
    assert!(v3.is_current(), "version 3 in MessagePack is what a write produces");
    // The same version in another codec reads too, and is worth rewriting.
    let json = versioned::read::<Order>(&fixture("order_v3_json_lz4.blob")).unwrap();
    assert_eq!(json.value, v3.value);
    assert!(!json.is_current());
    // Written now, it is the current version in the current codec.
    let again = versioned::read::<Order>(&versioned::write(&json.value).unwrap()).unwrap();
    assert!(again.is_current());
    assert_eq!(again.value, v3.value);
}

#[test]
fn what_cannot_be_read_names_the_versions() {
    let tag = blob::type_tag("Order");
    let newer = blob::encode(&1u8, &BlobFormat::new(4, Codec::MessagePack), tag).unwrap();
    let err = versioned::read::<Order>(&newer).unwrap_err();
    assert_eq!(err, VersionError::Newer { type_name: "Order", found: 4, current: 3 });
    assert_eq!(err.to_string(), "Order version 4 is newer than this code's version 3");

    let undeclared = blob::encode(&1u8, &BlobFormat::new(0, Codec::MessagePack), tag).unwrap();
    let err = versioned::read::<Order>(&undeclared).unwrap_err();
    assert_eq!(err.to_string(), "Order version 0 is not one this code reads (it reads 1, 2, 3)");

    let bad = OrderV2 { id: 9, customer: "x".into(), total_cents: 1, currency: "euro".into() };
    let cell = blob::encode(&bad, &BlobFormat::new(2, Codec::MessagePack), tag).unwrap();
    let err = versioned::read::<Order>(&cell).unwrap_err();
    assert_eq!(err.to_string(), "migrating version 2 to 3 failed: order 9 has currency \"euro\", not an ISO code");

    // Version 1 says bincode, but a field is missing: the payload does not decode as OrderV1.
    let short = blob::encode(&(1u64,), &BlobFormat::new(1, Codec::Bincode), tag).unwrap();
    let err = versioned::read::<Order>(&short).unwrap_err();
    assert!(matches!(err, VersionError::Decode { type_name: "OrderV1", version: 1, .. }), "{err}");

    // Not a blob at all, and the type declares no legacy version.
    let err = versioned::read::<Order>(b"\x93\x01\xa1x\x05").unwrap_err();
    assert!(matches!(err, VersionError::Blob(blob::BlobError::TooShort { .. })), "{err}");
}

#[test]
fn headerless_cells_read_as_the_declared_legacy_version() {
    // What a `#[cellar(serde)]` column holds: MessagePack, no header.
    let legacy = cellar::orm::value::to_msgpack(&NoteV1 { text: "call back".into() }).unwrap();
    let read = versioned::read::<Note>(&legacy).unwrap();
    assert_eq!(read.value, Note { text: "call back".into(), pinned: false });
    assert_eq!((read.stored_version, read.is_current()), (None, false));
    let current = versioned::read::<Note>(&versioned::write(&read.value).unwrap()).unwrap();
    assert!(current.is_current());
}

fn any_v1() -> impl Strategy<Value = OrderV1> {
    (any::<u64>(), ".{0,16}", any::<i64>()).prop_map(|(id, customer, total_cents)| OrderV1 {
        id,
        customer,
        total_cents,
    })
}

fn any_v2() -> impl Strategy<Value = OrderV2> {
    // Currencies of every length: the 2 -> 3 step refuses all but three-letter codes.
    (any::<u64>(), ".{0,16}", any::<i64>(), "[A-Z]{0,5}").prop_map(|(id, customer, total_cents, currency)| OrderV2 {
        id,
        customer,
        total_cents,
        currency,
    })
}

proptest! {
    /// Any version-1 value, written as version 1 was, reads as the in-memory chain makes it.
    #[test]
    fn the_chain_on_disk_is_the_chain_in_memory(v1 in any_v1()) {
        let cell = blob::encode(&v1, &BlobFormat::new(1, Codec::Bincode), blob::type_tag("Order")).unwrap();
        let read = versioned::read::<Order>(&cell).unwrap();
        prop_assert_eq!(Ok(read.value), in_memory(v1));
    }

    /// Any version-2 value reads as its `TryFrom` step makes it — or is refused with the
    /// step's error, exactly when the step refuses it in memory.
    #[test]
    fn version_two_values_read_or_fail_as_their_step_does(v2 in any_v2()) {
        let cell = blob::encode(&v2, &BlobFormat::new(2, Codec::MessagePack), blob::type_tag("Order")).unwrap();
        let on_disk = versioned::read::<Order>(&cell).map(|r| r.value).map_err(|e| e.to_string());
        let in_memory = Order::try_from(v2).map_err(|reason| format!("migrating version 2 to 3 failed: {reason}"));
        prop_assert_eq!(on_disk, in_memory);
    }
}

#[test]
fn the_derive_declares_the_format_and_the_history() {
    assert_eq!(<Order as Versioned>::TYPE_NAME, "Order");
    assert_eq!(Order::FORMAT, BlobFormat::new(3, Codec::MessagePack).compressed(Compression::Zstd(3), 256));
    assert_eq!(
        Order::HISTORY,
        [
            HistoricVersion { version: 1, codec: Codec::Bincode, type_name: "OrderV1" },
            HistoricVersion { version: 2, codec: Codec::MessagePack, type_name: "OrderV2" },
        ]
    );
    assert_eq!((Order::LEGACY, Note::LEGACY), (None, Some(1)));
}
