//! Changing a table's family settings: `Db::alter` (settings of your choosing) and
//! `Db::alter_to` (an entity's declared ones), on every backend; compression and bloom filters
//! on the embedded engine, which keeps them, and on Bigtable, which ignores them.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use cellar::orm::store::{CellMutation, EmbeddedStore, ReadSpec, RowMutation};
use cellar::orm::Error;
use cellar::prelude::*;

mod common;

/// A note as first shipped: one version of each column.
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "notes")]
struct Note {
    #[cellar(key)]
    id: u64,
    #[cellar(column = "t")]
    text: String,
}

/// The same table, now keeping three versions.
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "notes", max_versions = 3)]
struct NoteWithHistory {
    #[cellar(key)]
    id: u64,
    #[cellar(column = "t")]
    text: String,
}

/// The same table, its cells expiring after an hour.
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "notes", ttl = 3600)]
struct ExpiringNote {
    #[cellar(key)]
    id: u64,
    #[cellar(column = "t")]
    text: String,
}

/// Family `d` of `table` as the store describes it: (max versions, TTL).
fn family_d(db: &Db, table: &str) -> (u32, Option<u64>) {
    let spec = db.store().describe(table).unwrap().expect("the table exists");
    let d = spec.families.iter().find(|f| f.name == "d").expect("family d");
    (d.max_versions, d.ttl_secs)
}

fn now_ms() -> u64 {
    u64::try_from(SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis()).unwrap()
}

on_every_backend! {
fn an_entity_keeping_more_versions_upgrades_its_table_with_alter_to(db: Db) {
    let notes = db.repo::<Note>().unwrap();
    notes.put(&Note { id: 1, text: "first".into() }).unwrap();

    // The old table does not fit, and the error says what to call.
    let Err(Error::SchemaMismatch { table, reason }) = db.repo::<NoteWithHistory>() else {
        panic!("a table keeping one version must not fit an entity declaring three");
    };
    assert_eq!(table, "notes");
    assert!(reason.contains("Db::alter_to::<Entity>()") && reason.contains("Db::alter(\"notes\")"), "{reason}");
    assert!(reason.contains("1 version") && reason.contains("3 versions"), "{reason}");

    let report = db.alter_to::<NoteWithHistory>().unwrap();
    assert_eq!(report.table, "notes");
    assert_eq!(report.families.len(), 1, "{report}");
    let d = &report.families[0];
    assert_eq!(d.family, "d");
    assert_eq!(d.before.map(|b| (b.max_versions, b.ttl_secs)), Some((1, None)));
    assert_eq!((d.after.max_versions, d.after.ttl_secs), (3, None));
    let shown = report.to_string();
    assert_eq!(shown, "table `notes`: family `d`: 1 version, no TTL → 3 versions, no TTL");
    assert_eq!(family_d(&db, "notes"), (3, None));

    // The entity fits now, and the family keeps three versions.
    let notes = db.repo::<NoteWithHistory>().unwrap();
    for text in ["second", "third", "fourth"] {
        std::thread::sleep(Duration::from_millis(3));
        notes.put(&NoteWithHistory { id: 1, text: text.into() }).unwrap();
    }
    let history = notes.history(1, 10).unwrap();
    assert_eq!(history.iter().map(|(_, n)| n.text.as_str()).collect::<Vec<_>>(), ["fourth", "third", "second"]);

    // Applied twice, nothing changes; the first entity no longer fits until it is upgraded back.
    assert!(db.alter_to::<NoteWithHistory>().unwrap().is_empty());
    assert!(matches!(db.repo::<Note>(), Err(Error::SchemaMismatch { .. })));
    let back = db.alter_to::<Note>().unwrap();
    assert_eq!(back.families[0].after.max_versions, 1);
    let notes = db.repo::<Note>().unwrap();
    assert_eq!(notes.history(1, 10).unwrap().len(), 1, "one version is read after lowering the limit");
}

fn a_ttl_is_set_then_removed(db: Db) {
    db.repo::<Note>().unwrap();
    // A cell written two hours ago, and one written now.
    let cell = |row: &'static [u8], timestamp| RowMutation {
        row: Bytes::from_static(row),
        mutations: vec![CellMutation::Put {
            family: Bytes::from_static(b"d"),
            qualifier: Bytes::from_static(b"raw"),
            value: Bytes::from_static(b"v"),
            timestamp: Some(timestamp),
        }],
    };
    db.store().mutate("notes", vec![cell(b"old", now_ms() - 2 * 3600 * 1000), cell(b"new", now_ms())]).unwrap();
    let rows = |db: &Db| {
        let keys = [Bytes::from_static(b"old"), Bytes::from_static(b"new")];
        db.store().read_rows("notes", &keys, &ReadSpec::default()).unwrap().iter().map(Option::is_some).collect::<Vec<_>>()
    };
    assert_eq!(rows(&db), [true, true]);

    // Set by the entity's attribute: the old cell expires, the new one does not.
    let report = db.alter_to::<ExpiringNote>().unwrap();
    assert_eq!(report.families[0].after.ttl_secs, Some(3600), "{report}");
    assert!(report.to_string().ends_with("family `d`: 1 version, no TTL → 1 version, TTL 3600 s"), "{report}");
    assert_eq!(family_d(&db, "notes"), (1, Some(3600)));
    assert_eq!(rows(&db), [false, true]);
    db.repo::<ExpiringNote>().unwrap();
    let Err(Error::SchemaMismatch { reason, .. }) = db.repo::<Note>() else { panic!("the TTL must not fit Note") };
    assert!(reason.contains("TTL 3600 s") && reason.contains("no TTL"), "{reason}");

    // Removed by hand.
    let report = db.alter("notes").family("d", |f| f.no_ttl()).run().unwrap();
    assert_eq!(report.families[0].before.and_then(|b| b.ttl_secs), Some(3600));
    assert_eq!(report.families[0].after.ttl_secs, None);
    assert_eq!(family_d(&db, "notes"), (1, None));
    // The expired cell reads again where nothing collected it: the engine (single process)
    // removes it only at compaction, while Bigtable's garbage collection may have run meanwhile.
    let now = rows(&db);
    assert!(now[1], "the new cell reads");
    if db.store().guarantees().single_process {
        assert!(now[0], "the expired cell reads again");
    }
    db.repo::<Note>().unwrap();

    // A duration is kept in whole seconds, rounded up.
    db.alter("notes").family("d", |f| f.ttl(Duration::from_millis(1500))).run().unwrap();
    assert_eq!(family_d(&db, "notes"), (1, Some(2)));
}

fn an_alter_changes_only_what_it_names_and_can_add_a_family(db: Db) {
    db.repo::<Note>().unwrap();
    db.alter("notes").family("d", |f| f.ttl(Duration::from_secs(60))).run().unwrap();
    // Versions only: the TTL stays.
    db.alter("notes").family("d", |f| f.max_versions(2)).run().unwrap();
    assert_eq!(family_d(&db, "notes"), (2, Some(60)));
    // A family named twice in one alter merges its changes.
    let report = db
        .alter("notes")
        .family("d", |f| f.max_versions(5))
        .family("x", |f| f.max_versions(4))
        .family("d", |f| f.no_ttl())
        .run()
        .unwrap();
    assert_eq!(report.families.len(), 2, "{report}");
    assert_eq!(family_d(&db, "notes"), (5, None));
    assert_eq!(report.families[1].before, None, "family x is created");
    assert!(report.to_string().contains("family `x`: created with 4 versions, no TTL"), "{report}");
    assert!(report.to_string().contains("family `d`: 2 versions, TTL 60 s → 5 versions, no TTL\n"), "{report}");
    let spec = db.store().describe("notes").unwrap().unwrap();
    let x = spec.families.iter().find(|f| f.name == "x").expect("family x");
    assert_eq!((x.max_versions, x.ttl_secs), (4, None));
    // Asking for what the families already keep changes nothing.
    assert!(db.alter("notes").family("d", |f| f.max_versions(5)).run().unwrap().is_empty());
}

fn an_alter_is_one_admin_call(db: Db) {
    db.repo::<Note>().unwrap();
    let (report, costs) = db.measure(|| db.alter("notes").family("d", |f| f.max_versions(2)).run());
    report.unwrap();
    assert_eq!(costs.admin, 1);
    assert_eq!(costs.round_trips(), 0);
}

fn bad_changes_and_missing_tables_are_refused(db: Db) {
    let missing = db.alter("missing").family("d", |f| f.max_versions(2)).run();
    assert!(matches!(&missing, Err(Error::InvalidArgument { arg: "table", reason }) if reason.contains("missing")),
        "{missing:?}");
    assert_eq!(db.store().describe("missing").unwrap(), None, "a failed alter creates nothing");

    db.repo::<Note>().unwrap();
    for (what, alter) in [
        ("zero versions", db.alter("notes").family("d", |f| f.max_versions(0))),
        ("a zero TTL", db.alter("notes").family("d", |f| f.ttl(Duration::ZERO))),
        // The first change is valid; nothing may be applied when the second is not.
        ("zero versions after a valid change", db.alter("notes").family("x", |f| f.max_versions(2)).family("d", |f| f.max_versions(0))),
    ] {
        let result = alter.run();
        assert!(matches!(result, Err(Error::InvalidArgument { arg: "family change", .. })), "{what}: {result:?}");
    }
    let spec = db.store().describe("notes").unwrap().unwrap();
    assert_eq!(spec.families.iter().map(|f| (f.name.as_str(), f.max_versions, f.ttl_secs)).collect::<Vec<_>>(),
        [("d", 1, None)]);
}

fn alter_to_without_a_table_changes_nothing(db: Db) {
    let report = db.alter_to::<NoteWithHistory>().unwrap();
    assert!(report.is_empty());
    assert_eq!(report.to_string(), "table `notes`: no changes");
    assert_eq!(db.store().describe("notes").unwrap(), None);
    // So calling it before `repo` suits a first start too.
    db.repo::<NoteWithHistory>().unwrap();
    assert_eq!(family_d(&db, "notes"), (3, None));
}
}

/// Compression and bloom filters change on the embedded engine, are what its describe shows,
/// and survive a reopen; the data stays readable from files written either way.
#[test]
fn compression_and_bloom_change_on_the_embedded_engine_and_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let open = || {
        let engine = Engine::open(dir.path(), EngineOptions::default()).unwrap();
        (engine.clone(), Db::with_store(Arc::new(EmbeddedStore::new(engine))))
    };
    let (engine, db) = open();
    db.repo::<Note>().unwrap().put(&Note { id: 1, text: "before".into() }).unwrap();
    engine.flush("notes").unwrap();
    let d = engine.describe("notes").unwrap().get_family(b"d").unwrap().clone();
    assert_eq!((d.compression, d.bloom), (Compression::None, BloomType::Row));

    let report =
        db.alter("notes").family("d", |f| f.compression(Compression::Lz4).bloom(BloomType::RowCol)).run().unwrap();
    assert_eq!(
        report.to_string(),
        "table `notes`: family `d`: 1 version, no TTL, compression None, bloom Row → 1 version, no TTL, compression \
         Lz4, bloom RowCol"
    );
    let d = engine.describe("notes").unwrap().get_family(b"d").unwrap().clone();
    assert_eq!((d.compression, d.bloom, d.max_versions, d.ttl_secs), (Compression::Lz4, BloomType::RowCol, 1, None));
    // Compression is no part of what an entity declares: it still fits.
    let notes = db.repo::<Note>().unwrap();
    notes.put(&Note { id: 2, text: "after".into() }).unwrap();
    engine.flush("notes").unwrap();
    drop((notes, db, engine));

    let (engine, db) = open();
    let d = engine.describe("notes").unwrap().get_family(b"d").unwrap().clone();
    assert_eq!((d.compression, d.bloom), (Compression::Lz4, BloomType::RowCol));
    let notes = db.repo::<Note>().unwrap();
    assert_eq!(notes.get(1).unwrap().map(|n| n.text), Some("before".into()));
    assert_eq!(notes.get(2).unwrap().map(|n| n.text), Some("after".into()));
    engine.major_compact("notes").unwrap();
    assert_eq!(notes.get(1).unwrap().map(|n| n.text), Some("before".into()));
}

/// Bigtable manages compression and bloom filters itself: a change naming them is accepted,
/// that part ignored, and the rest applied.
#[test]
fn bigtable_accepts_and_ignores_compression_and_bloom() {
    let Some(store) = common::backend::bigtable_store() else { return };
    let db = Db::with_store(Arc::new(store));
    db.repo::<Note>().unwrap();
    let report =
        db.alter("notes").family("d", |f| f.compression(Compression::Zstd).bloom(BloomType::RowCol)).run().unwrap();
    assert!(report.is_empty(), "{report}");
    let report = db
        .alter("notes")
        .family("d", |f| f.compression(Compression::Lz4).bloom(BloomType::None).max_versions(2))
        .run()
        .unwrap();
    assert_eq!(report.to_string(), "table `notes`: family `d`: 1 version, no TTL → 2 versions, no TTL");
    assert_eq!(family_d(&db, "notes"), (2, None));
}
