//! Cost accounting end to end: what repository operations cost in round trips, rows, cells
//! and bytes, as [`Db::costs`] and [`Db::measure`] report them. The byte counts are worked out
//! by hand from the rules on `Costs`: a cell read or put is row key + family + qualifier +
//! value + 8 (timestamp) bytes; a column delete is row key + family + qualifier; a row delete
//! is the row key.

use cellar::orm::Error;
use cellar::prelude::*;

/// Row key: the `u64` id, 8 bytes big-endian (no salt, no record type). Every column is in the
/// default family `d` (1 byte) under a one-byte qualifier.
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "items")]
struct Item {
    #[cellar(key)]
    id: u64,
    /// UTF-8, as many bytes as characters here.
    #[cellar(column = "n")]
    name: String,
    /// 8 bytes.
    #[cellar(column = "q")]
    qty: i64,
    /// 1 byte.
    #[cellar(column = "f")]
    flag: bool,
}

/// An optional column (a `None` is a column delete), a counter and an optimistic version.
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "accounts")]
struct Account {
    #[cellar(key)]
    id: u64,
    #[cellar(column = "c")]
    city: Option<String>,
    #[cellar(counter, column = "oc")]
    orders: i64,
    /// 8 bytes.
    #[cellar(version, column = "v")]
    version: u64,
}

/// An item whose name has two characters for ids below 10: 65 bytes a row.
fn item(id: u64) -> Item {
    Item { id, name: format!("i{id}"), qty: 5, flag: true }
}

/// Bytes of one put or one cell read: row key 8 + family 1 + qualifier 1 + value + timestamp 8.
const fn cell_bytes(value: u64) -> u64 {
    8 + 1 + 1 + value + 8
}

/// Bytes of `item(id)` for `id < 10`, written or read: name 2, qty 8, flag 1.
const ITEM_BYTES: u64 = cell_bytes(2) + cell_bytes(8) + cell_bytes(1);

#[test]
fn a_new_db_has_cost_nothing_and_each_repo_call_is_one_admin_call() {
    let db = Db::open_temporary().unwrap();
    assert_eq!(db.costs(), Costs::default());
    let _items = db.repo::<Item>().unwrap();
    let _again = db.repo::<Item>().unwrap();
    assert_eq!(db.costs(), Costs { admin: 2, ..Costs::default() });
    assert_eq!(db.costs().round_trips(), 0);
}

#[test]
fn a_put_of_three_columns_is_one_mutate_of_one_row_and_three_cells() {
    let db = Db::open_temporary().unwrap();
    let items = db.repo::<Item>().unwrap();
    let ada = Item { id: 1, name: "Ada".into(), qty: 5, flag: true };
    let ((), costs) = db.measure(|| items.put(&ada).unwrap());
    assert_eq!(
        costs,
        Costs {
            mutates: 1,
            rows_written: 1,
            cells_written: 3,
            // name "Ada" 3, qty 8, flag 1
            bytes_written: cell_bytes(3) + cell_bytes(8) + cell_bytes(1),
            ..Costs::default()
        }
    );
    assert_eq!(costs.bytes_written, 66);
    assert_eq!(costs.round_trips(), 1);
}

#[test]
fn a_get_is_one_round_trip_reading_the_row_and_its_cells() {
    let db = Db::open_temporary().unwrap();
    let items = db.repo::<Item>().unwrap();
    let ada = Item { id: 1, name: "Ada".into(), qty: 5, flag: true };
    items.put(&ada).unwrap();
    let (got, costs) = db.measure(|| items.get(1).unwrap());
    assert_eq!(got, Some(ada));
    assert_eq!(costs, Costs { gets: 1, rows_read: 1, cells_read: 3, bytes_read: 66, ..Costs::default() });
    // The row as the store returns it agrees with the formula: 8-byte key, three cells.
    let key = bytes::Bytes::copy_from_slice(&1u64.to_be_bytes());
    let row = db.store().read_rows("items", &[key], &Default::default()).unwrap().remove(0).unwrap();
    let by_formula: usize =
        row.cells.iter().map(|c| row.key.len() + c.family.len() + c.qualifier.len() + c.value.len() + 8).sum();
    assert_eq!(by_formula, 66);
}

#[test]
fn a_missing_row_is_a_round_trip_that_reads_nothing() {
    let db = Db::open_temporary().unwrap();
    let items = db.repo::<Item>().unwrap();
    items.put(&item(1)).unwrap();
    let (got, costs) = db.measure(|| items.get(99).unwrap());
    assert_eq!(got, None);
    assert_eq!(costs, Costs { gets: 1, ..Costs::default() });
    let (exists, costs) = db.measure(|| items.exists(99).unwrap());
    assert!(!exists);
    assert_eq!(costs, Costs { gets: 1, ..Costs::default() });
}

#[test]
fn get_many_of_three_keys_is_one_round_trip() {
    let db = Db::open_temporary().unwrap();
    let items = db.repo::<Item>().unwrap();
    items.put_many(&[item(1), item(2), item(3)]).unwrap();
    let (got, costs) = db.measure(|| items.get_many([3u64, 1, 2]).unwrap());
    assert_eq!(got, [Some(item(3)), Some(item(1)), Some(item(2))]);
    assert_eq!(costs, Costs { gets: 1, rows_read: 3, cells_read: 9, bytes_read: 3 * ITEM_BYTES, ..Costs::default() });
    // A missing key costs no extra round trip and reads nothing.
    let (got, costs) = db.measure(|| items.get_many([1u64, 9, 2]).unwrap());
    assert_eq!(got, [Some(item(1)), None, Some(item(2))]);
    assert_eq!(costs, Costs { gets: 1, rows_read: 2, cells_read: 6, bytes_read: 2 * ITEM_BYTES, ..Costs::default() });
}

#[test]
fn a_scan_of_five_entities_is_one_round_trip_reading_five_rows() {
    let db = Db::open_temporary().unwrap();
    let items = db.repo::<Item>().unwrap();
    let five: Vec<Item> = (1..=5).map(item).collect();
    let ((), costs) = db.measure(|| items.put_many(&five).unwrap());
    assert_eq!(
        costs,
        Costs { mutates: 1, rows_written: 5, cells_written: 15, bytes_written: 5 * ITEM_BYTES, ..Costs::default() }
    );
    let (all, costs) = db.measure(|| items.scan().to_vec().unwrap());
    assert_eq!(all, five);
    assert_eq!(costs, Costs { scans: 1, rows_read: 5, cells_read: 15, bytes_read: 5 * ITEM_BYTES, ..Costs::default() });
    // A limited scan reads no more rows than it returns.
    let (two, costs) = db.measure(|| items.scan().limit(2).to_vec().unwrap());
    assert_eq!(two, five[..2]);
    assert_eq!((costs.scans, costs.rows_read), (1, 2));
}

#[test]
fn deletes_counters_and_conditional_writes_follow_the_rules() {
    let db = Db::open_temporary().unwrap();
    let accounts = db.repo::<Account>().unwrap();
    // A `None` field is a column delete: key 8 + family 1 + qualifier 1, no value, no timestamp.
    let mut acc = Account { id: 7, city: None, orders: 0, version: 0 };
    let ((), costs) = db.measure(|| accounts.save(&mut acc).unwrap());
    assert_eq!((costs.check_and_mutates, costs.rows_written), (1, 1));
    assert_eq!(costs.round_trips(), 1);
    // The column delete, the version field as the entity holds it and the next version (two
    // puts of the same column: the write carries both, so both count): a delete of 8 + 1 + 1
    // bytes and two 8-byte puts.
    let version_put = cell_bytes(8);
    assert_eq!((costs.cells_written, costs.bytes_written), (3, 8 + 1 + 1 + 2 * version_put));
    // A stale save does not apply: a round trip, nothing written.
    let mut stale = Account { id: 7, city: Some("Oslo".into()), orders: 0, version: 0 };
    let (result, costs) = db.measure(|| accounts.save(&mut stale));
    assert!(matches!(result, Err(Error::VersionConflict { .. })));
    assert_eq!(costs, Costs { check_and_mutates: 1, ..Costs::default() });
    // An applied save writes what it carried: the city "Oslo" (4) and the two version puts.
    acc.city = Some("Oslo".into());
    let ((), costs) = db.measure(|| accounts.save(&mut acc).unwrap());
    assert_eq!(
        costs,
        Costs {
            check_and_mutates: 1,
            rows_written: 1,
            cells_written: 3,
            bytes_written: cell_bytes(4) + 2 * version_put,
            ..Costs::default()
        }
    );
    // An increment reads and writes one cell: key 8 + family 1 + qualifier "oc" 2 + counter 8
    // + timestamp 8.
    let (n, costs) = db.measure(|| accounts.increment(7, Account::ORDERS, 3).unwrap());
    assert_eq!(n, 3);
    let counter = Costs {
        rows_read: 1,
        cells_read: 1,
        bytes_read: 27,
        rows_written: 1,
        cells_written: 1,
        bytes_written: 27,
        increments: 1,
        ..Costs::default()
    };
    assert_eq!(costs, counter);
    // A delete is one row delete: the 8-byte key.
    let ((), costs) = db.measure(|| accounts.delete(7).unwrap());
    assert_eq!(costs, Costs { mutates: 1, rows_written: 1, cells_written: 1, bytes_written: 8, ..Costs::default() });
}

#[test]
fn a_put_of_a_versioned_entity_reads_its_version_in_the_same_round_trip() {
    let db = Db::open_temporary().unwrap();
    let accounts = db.repo::<Account>().unwrap();
    let acc = Account { id: 7, city: Some("Oslo".into()), orders: 0, version: 0 };
    // The version read and the write are one call on the embedded engine: the city "Oslo"
    // (4), the version field as the entity holds it and the next version (8 each).
    let written = Costs {
        group_mutates: 1,
        rows_written: 1,
        cells_written: 3,
        bytes_written: cell_bytes(4) + 2 * cell_bytes(8),
        ..Costs::default()
    };
    let ((), costs) = db.measure(|| accounts.put(&acc).unwrap());
    assert_eq!(costs, written);
    // Over a stored account it reads the version cell alone.
    let ((), costs) = db.measure(|| accounts.put(&acc).unwrap());
    assert_eq!(costs, Costs { rows_read: 1, cells_read: 1, bytes_read: cell_bytes(8), ..written });
    assert_eq!(costs.round_trips(), 1);
    assert_eq!(accounts.get(7).unwrap().unwrap().version, 2);
}

#[test]
fn measure_returns_only_the_closures_costs_and_costs_accumulate() {
    let db = Db::open_temporary().unwrap();
    let items = db.repo::<Item>().unwrap();
    items.put(&item(1)).unwrap();
    items.get(1).unwrap();
    let before = db.costs();
    assert_eq!((before.admin, before.mutates, before.gets), (1, 1, 1));
    let (got, measured) = db.measure(|| items.get_many([1u64, 2]).unwrap());
    assert_eq!(got, [Some(item(1)), None]);
    assert_eq!(measured, Costs { gets: 1, rows_read: 1, cells_read: 3, bytes_read: ITEM_BYTES, ..Costs::default() });
    assert_eq!(db.costs() - before, measured);
    // Clones of the Db, and the repositories they hand out, share the counters.
    let clone = db.clone();
    let ((), measured) = db.measure(|| clone.repo::<Item>().unwrap().put(&item(2)).unwrap());
    assert_eq!((measured.admin, measured.mutates, measured.rows_written), (1, 1, 1));
    assert_eq!(clone.costs(), db.costs());
    // Scan rows count when they are pulled, not when the scan starts.
    let store = db.store();
    let (stream, measured) = db.measure(|| store.scan("items", &Default::default()).unwrap());
    assert_eq!((measured.scans, measured.rows_read), (1, 0));
    let (n, measured) = db.measure(|| stream.count());
    assert_eq!(n, 2);
    assert_eq!((measured.round_trips(), measured.rows_read, measured.bytes_read), (0, 2, 2 * ITEM_BYTES));
}

#[test]
fn costs_display_as_one_stable_line() {
    let db = Db::open_temporary().unwrap();
    let items = db.repo::<Item>().unwrap();
    let ((), costs) = db.measure(|| {
        items.put_many(&[item(1), item(2), item(3), item(4)]).unwrap();
        items.get(1).unwrap();
        items.scan().to_vec().unwrap();
    });
    assert_eq!(
        costs.to_string(),
        "3 round trips (1 get, 1 scan, 1 mutate), 5 rows / 15 cells / 325 B read, 4 rows / 12 cells / 260 B written"
    );
    let (_, costs) = db.measure(|| db.repo::<Item>().unwrap().get(1).unwrap());
    assert_eq!(
        costs.to_string(),
        "1 round trip (1 get) + 1 admin call, 1 row / 3 cells / 65 B read, 0 rows / 0 cells / 0 B written"
    );
    let many = Costs { scans: 2, bytes_read: 1234, bytes_written: 5 * 1024 * 1024, ..Costs::default() };
    assert_eq!(
        many.to_string(),
        "2 round trips (2 scans), 0 rows / 0 cells / 1.2 KiB read, 0 rows / 0 cells / 5.0 MiB written"
    );
}
