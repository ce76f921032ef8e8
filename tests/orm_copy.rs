//! Copying tables between databases: from the embedded engine into every backend, every
//! version with its timestamp, indexes answering at the destination without a backfill, and a
//! copy that fails part-way resuming after its last finished batch.

mod common;

use std::sync::Arc;

use cellar::orm::store::{ReadSpec, Row, ScanSpec, Store};
use cellar::orm::Error;
use cellar::prelude::*;
use common::faulty::Faulty;
use common::people::{person, Person};

#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "prices", max_versions = 3)]
struct Price {
    #[cellar(key)]
    sku: u32,
    #[cellar(column = "c")]
    cents: i64,
}

/// Every row of `table` with all its versions.
fn dump(store: &dyn Store, table: &str) -> Vec<Row> {
    let scan = ScanSpec {
        read: ReadSpec { max_versions: u32::MAX, time_range: None, ..ReadSpec::default() },
        ..ScanSpec::default()
    };
    store.scan(table, &scan).unwrap().map(|r| r.unwrap()).collect()
}

fn source() -> Db {
    let db = Db::open_temporary().unwrap();
    let people = db.repo::<Person>().unwrap();
    for id in 0..250u32 {
        let tag = (id % 2 == 0).then_some((id % 4) as u8);
        people.put(&person(id, id as u8, (id % 3) as u8, 20 + (id % 4) as u8, tag)).unwrap();
    }
    let prices = db.repo::<Price>().unwrap();
    for (version, cents) in [100, 120, 90].into_iter().enumerate() {
        for sku in 0..10 {
            prices.put(&Price { sku, cents: cents + i64::from(sku) }).unwrap();
        }
        // Versions a millisecond apart at least, so each keeps its own timestamp.
        std::thread::sleep(std::time::Duration::from_millis(2 + version as u64));
    }
    db
}

on_every_backend! {
fn a_copy_brings_every_version_and_the_indexes_answer_without_a_backfill(db: Db) {
    let from = source();
    let mut reported = Vec::new();
    let report = from
        .copy_to(&db)
        .entity::<Person>()
        .entity::<Price>()
        .batch_rows(100)
        .on_progress(|p| reported.push((p.table.clone(), p.rows)))
        .run()
        .unwrap();
    let tables: Vec<&str> = report.tables.iter().map(|t| t.table.as_str()).collect();
    assert_eq!(tables, ["people", "people_idx", "cellar_indexes", "prices"]);
    assert_eq!(report.tables[0].rows, 250);
    assert_eq!(report.tables[3].cells, 30, "three versions of ten prices");
    // The schema catalog came along: the destination knows what the tables hold.
    assert_eq!(db.schema_history::<Person>().unwrap(), from.schema_history::<Person>().unwrap());
    assert_eq!(db.schema_history::<Price>().unwrap().len(), 1);
    assert!(reported.contains(&("people".to_string(), 100)) && reported.contains(&("people".to_string(), 250)));
    for table in tables {
        assert_eq!(dump(db.store().as_ref(), table), dump(from.store().as_ref(), table), "{table}");
    }
    let people = db.repo::<Person>().unwrap();
    assert_eq!(people.index(Person::BY_EMAIL).get("p7@example.com".to_string()).unwrap().map(|p| p.id), Some(7));
    let prices = db.repo::<Price>().unwrap();
    let history: Vec<i64> = prices.history(3, 3).unwrap().into_iter().map(|(_, p)| p.cents).collect();
    assert_eq!(history, [93, 123, 103]);
    println!("{report}");
}
}

on_every_backend! {
fn a_failed_copy_resumes_after_its_last_batch(db: Db) {
    let from = source();
    // Mutating calls: the first batch, its checkpoint, then the second batch fails.
    let failing = Db::with_store(Arc::new(Faulty::new(db.store().clone(), 3, false)));
    let err = from.copy_to(&failing).table("people").batch_rows(100).run().unwrap_err();
    assert!(err.to_string().contains("injected failure of mutating call 3"), "{err}");

    let report = from.copy_to(&db).table("people").batch_rows(100).run().unwrap();
    let people = &report.tables[0];
    assert!(people.resumed_after.is_some(), "{report}");
    assert_eq!(people.rows, 150, "the first batch of 100 was finished and is not copied again");
    assert_eq!(dump(db.store().as_ref(), "people"), dump(from.store().as_ref(), "people"));

    // Done: the checkpoint is gone, and a next copy starts over.
    let again = from.copy_to(&db).table("people").run().unwrap();
    assert_eq!((again.tables[0].rows, again.tables[0].resumed_after.clone()), (250, None));
    let err = from.copy_to(&db).table("nowhere").run().unwrap_err();
    assert!(matches!(&err, Error::InvalidArgument { reason, .. } if reason.contains("nowhere")), "{err}");
}
}
