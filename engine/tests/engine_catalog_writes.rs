//! Catalog writes run beside flushes. A background flush hands its catalog write (which waits
//! for the log's fsync, seconds on a busy disk) to a thread of its own, so a slow one holds up
//! neither the next flushes nor the writers waiting for their memory; the files are listed,
//! and the log trimmed, once it ends. A failed one is made by the next flush's.

use std::ffi::OsString;
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use cellar_engine::fs::{FileSystem, OsFs, ReadFile, WriteFile};
use cellar_engine::*;
use parking_lot::{Condvar, Mutex};

/// The operating system's file system, except that installing a manifest waits while the
/// gate is shut (every catalog write hangs there, as it would on a slow fsync) and fails while
/// failures are asked for.
#[derive(Debug, Default)]
struct GatedFs {
    shut: Mutex<bool>,
    opened: Condvar,
    /// Manifests installed.
    installed: Mutex<usize>,
    /// Installs to fail before the next one goes through.
    failures: Mutex<usize>,
}

impl GatedFs {
    fn set_shut(&self, shut: bool) {
        *self.shut.lock() = shut;
        self.opened.notify_all();
    }

    fn installed(&self) -> usize {
        *self.installed.lock()
    }
}

impl FileSystem for GatedFs {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        OsFs.create_dir_all(dir)
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<OsString>> {
        OsFs.list(dir)
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        OsFs.read(path)
    }
    fn open(&self, path: &Path) -> io::Result<Arc<dyn ReadFile>> {
        OsFs.open(path)
    }
    fn create_new(&self, path: &Path) -> io::Result<Arc<dyn WriteFile>> {
        OsFs.create_new(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        if to.file_name().is_some_and(|n| n == "MANIFEST") {
            let mut shut = self.shut.lock();
            while *shut {
                self.opened.wait(&mut shut);
            }
            let mut failures = self.failures.lock();
            if *failures > 0 {
                *failures -= 1;
                return Err(io::Error::other("injected: the manifest could not be installed"));
            }
            *self.installed.lock() += 1;
        }
        OsFs.rename(from, to)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        OsFs.remove(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        OsFs.sync_dir(dir)
    }
    fn lock(&self, path: &Path) -> io::Result<Box<dyn std::any::Any + Send + Sync>> {
        OsFs.lock(path)
    }
}

/// Opens the gate when dropped: a failing test must not leave the engine's threads hanging.
struct OpenOnDrop(Arc<GatedFs>);

impl Drop for OpenOnDrop {
    fn drop(&mut self) {
        self.0.set_shut(false);
    }
}

fn row(i: u32) -> String {
    format!("row{:05}", (i * 7919) % 100_000)
}

/// Small memstores and log segments over `fs`, compactions off.
fn options(fs: Arc<GatedFs>) -> EngineOptions {
    EngineOptions::default()
        .fs(fs)
        .memstore_flush_bytes(64 * 1024)
        .global_memstore_bytes(256 * 1024)
        .wal_segment_bytes(256 * 1024)
        .background_threads(2)
        .auto_compact(false)
        // A write that cannot get memory fails rather than hanging the test.
        .write_stall_timeout(Duration::from_secs(10))
}

/// An engine on `fs` in `dir` with table `t`, and its options.
fn open(dir: &Path, fs: &Arc<GatedFs>) -> (Engine, Table, EngineOptions) {
    let opts = options(fs.clone());
    let engine = Engine::open(dir, opts.clone()).unwrap();
    engine.create_table(TableDescriptor::new("t").family(FamilyDescriptor::new("f"))).unwrap();
    let table = engine.table("t").unwrap();
    (engine, table, opts)
}

/// Puts rows `from..to`, each a 1000-byte value.
fn put_rows(table: &Table, from: u32, to: u32) {
    for i in from..to {
        table.put(Put::new(row(i)).add("f", "q", vec![b'v'; 1000])).unwrap();
    }
}

/// Reopens the directory on the operating system's file system and checks that rows `0..rows`
/// are there.
fn reopen_and_check(dir: &Path, opts: EngineOptions, rows: u32) {
    let engine = Engine::open(dir, opts.fs(Arc::new(OsFs))).unwrap();
    let table = engine.table("t").unwrap();
    for i in 0..rows {
        let got = table.get(Get::new(row(i))).unwrap();
        assert_eq!(got.value(b"f", b"q").map(|v| v.len()), Some(1000), "{}", row(i));
    }
}

#[test]
fn flushes_and_writers_go_on_while_a_catalog_write_hangs() {
    let dir = tempfile::tempdir().unwrap();
    let fs = Arc::new(GatedFs::default());
    let (engine, table, opts) = open(dir.path(), &fs);
    let before = fs.installed();
    let _open_on_exit = OpenOnDrop(fs.clone());

    // With every catalog write hanging, write eight times the memstore budget: the memory
    // comes back only through flushes, many of them after the first catalog write began.
    fs.set_shut(true);
    let rows = 2000;
    put_rows(&table, 0, rows);
    // In files, not in memstores: the flushes went on. (Counting files would not do: past
    // the blocking count, the writes have them compacted.)
    let in_files: u64 = engine.regions("t").unwrap().iter().map(|r| r.file_bytes).sum();
    assert!(
        in_files >= u64::from(rows) * 1000 * 3 / 4,
        "flushes went on while the catalog write hung: {in_files} bytes in files"
    );
    assert_eq!(fs.installed(), before, "no catalog write got through the gate");
    assert!(!engine.wait_idle(Duration::from_millis(200)), "a hanging catalog write is background work under way");
    let kept = engine.wal_segments();
    assert!(kept >= 4, "the log is trimmed only after a catalog write: {kept} segments");

    // Once catalog writes go through, the files are listed: after a reopen that replays no log
    // (it was trimmed), every row is there.
    fs.set_shut(false);
    assert!(engine.wait_idle(Duration::from_secs(30)));
    assert!(fs.installed() > before);
    let segments = engine.wal_segments();
    drop((table, engine));
    reopen_and_check(dir.path(), opts, rows);
    assert!(segments <= 2, "the log was trimmed after the catalog writes: {segments} segments");
}

#[test]
fn a_failed_catalog_write_is_made_by_the_next_flush() {
    let dir = tempfile::tempdir().unwrap();
    let fs = Arc::new(GatedFs::default());
    let (engine, table, opts) = open(dir.path(), &fs);
    let before = fs.installed();

    // Every catalog write fails while the first flushes go through: the writes succeed, and the
    // log keeps what the manifest on disk does not cover.
    *fs.failures.lock() = usize::MAX;
    put_rows(&table, 0, 500);
    assert!(engine.wait_idle(Duration::from_secs(30)), "a failed catalog write leaves no work running");
    assert_eq!(fs.installed(), before);
    let kept = engine.wal_segments();
    assert!(kept >= 2, "the log is kept while no catalog write succeeds: {kept} segments");

    // The next flush asks again, and its catalog write lists every file.
    *fs.failures.lock() = 0;
    put_rows(&table, 500, 1000);
    assert!(engine.wait_idle(Duration::from_secs(30)));
    assert!(fs.installed() > before);
    let segments = engine.wal_segments();
    assert!(segments < kept, "the log is trimmed once a catalog write succeeds: {segments} of {kept} segments");
    drop((table, engine));
    reopen_and_check(dir.path(), opts, 1000);
}
