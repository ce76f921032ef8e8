//! The four durability levels: what each guarantees after a restart.

use std::time::Duration;

use cellar_engine::*;

fn wal_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir.join("wal")).unwrap().map(|e| e.unwrap().metadata().unwrap().len()).sum()
}

fn create(engine: &Engine, durability: Durability) -> Table {
    engine.create_table(TableDescriptor::new("t").family(FamilyDescriptor::new("f")).durability(durability)).unwrap();
    engine.table("t").unwrap()
}

#[test]
fn fsync_wal_group_commits_concurrent_writers() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), EngineOptions::default()).unwrap();
    let t = create(&engine, Durability::FsyncWal);
    std::thread::scope(|s| {
        for w in 0..8 {
            let t = t.clone();
            s.spawn(move || {
                for i in 0..40 {
                    t.put(Put::new(format!("w{w}-{i:03}")).add("f", "q", "v")).unwrap();
                }
            });
        }
    });
    drop(t);
    drop(engine);
    let engine = Engine::open(dir.path(), EngineOptions::default()).unwrap();
    assert_eq!(engine.table("t").unwrap().scan(Scan::new()).unwrap().count(), 320);
}

#[test]
fn async_wal_reaches_the_os_shortly_after_the_write() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), EngineOptions::default()).unwrap();
    let t = create(&engine, Durability::AsyncWal);
    let before = wal_bytes(dir.path());
    t.put(Put::new("r").add("f", "q", vec![1u8; 500])).unwrap();
    assert_eq!(wal_bytes(dir.path()), before, "an AsyncWal write is buffered, not written at once");
    std::thread::sleep(Duration::from_millis(400));
    assert!(wal_bytes(dir.path()) > before + 500, "the background flusher wrote it out");
}

#[test]
fn per_write_durability_overrides_the_table_default() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), EngineOptions::default()).unwrap();
    let t = create(&engine, Durability::SkipWal);
    let before = wal_bytes(dir.path());
    t.put(Put::new("skipped").add("f", "q", "v")).unwrap();
    assert_eq!(wal_bytes(dir.path()), before, "SkipWal writes nothing to the log");
    t.put(Put::new("logged").add("f", "q", "v").durability(Durability::SyncWal)).unwrap();
    assert!(wal_bytes(dir.path()) > before);
    assert_eq!(t.scan(Scan::new()).unwrap().count(), 2, "both are readable while the engine runs");
}

#[test]
fn skip_wal_data_survives_once_flushed_and_sequences_never_go_backwards() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), EngineOptions::default()).unwrap();
    let t = create(&engine, Durability::SkipWal);
    for filler in ["b", "c", "d"] {
        t.put(Put::new(filler).add("f", "q", "v")).unwrap();
    }
    t.put(Put::new("a").add_at("f", "q", 5, "old")).unwrap();
    engine.flush("t").unwrap();
    drop(t);
    drop(engine);
    let engine = Engine::open(dir.path(), EngineOptions::default()).unwrap();
    let t = engine.table("t").unwrap();
    // A later write at the same timestamp must win over the flushed one: it needs a larger
    // sequence number than anything in the files, even though the log held none of them.
    t.put(Put::new("a").add_at("f", "q", 5, "new").durability(Durability::SyncWal)).unwrap();
    assert_eq!(t.get(Get::new("a")).unwrap().value(b"f", b"q").unwrap().as_ref(), b"new");
}
