//! Damaged files give documented errors, never panics or silently wrong data:
//! a flipped byte in an SSTable block, in the middle of the WAL, in the manifest, in an
//! SSTable footer, and a torn WAL tail (truncated away on recovery).

mod common;

use std::fs;
use std::path::{Path, PathBuf};

use cellar_engine::*;
use common::*;

fn files_with_ext(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    v.sort();
    v
}

fn flip(path: &Path, offset: usize) {
    let mut b = fs::read(path).unwrap();
    b[offset] ^= 0x5a;
    fs::write(path, b).unwrap();
}

fn setup(te: &TestEngine, rows: usize) -> Table {
    te.engine().create_table(TableDescriptor::new("t").family(FamilyDescriptor::new("f").block_size(1024))).unwrap();
    let t = te.table("t");
    for i in 0..rows {
        t.put(Put::new(format!("row{i:05}")).add("f", "q", format!("value{i}"))).unwrap();
    }
    t
}

#[test]
fn flipped_sstable_block_byte_is_a_corruption_error_naming_the_file() {
    let mut te = TestEngine::new(1000);
    drop(setup(&te, 500));
    te.engine().flush("t").unwrap();
    te.engine = None;
    let sst = files_with_ext(&te.dir.path().join("sst"), "sst").pop().unwrap();
    flip(&sst, 100);
    te.reopen();
    let t = te.table("t");
    let err = t.get(Get::new("row00001")).unwrap_err();
    match &err {
        Error::Corrupt { path, offset, reason } => {
            assert_eq!(path, &sst);
            assert_eq!(*offset, 0, "first data block starts at 0");
            assert!(reason.contains("checksum"), "{reason}");
        }
        other => panic!("expected corruption, got {other}"),
    }
    // Rows in undamaged blocks still read; a scan over the damage reports it and stops.
    assert_eq!(t.get(Get::new("row00400")).unwrap().value(b"f", b"q").unwrap().as_ref(), b"value400");
    let results: Vec<_> = t.scan(Scan::new()).unwrap().collect();
    assert!(matches!(results.last(), Some(Err(Error::Corrupt { .. }))));
    // A cursor reports it from the move that reaches it, and then stays at its end.
    let mut cursor = t.scan_cursor(Scan::new()).unwrap();
    let err = loop {
        match cursor.advance() {
            Ok(true) => continue,
            Ok(false) => panic!("the cursor ran past the damaged block"),
            Err(e) => break e,
        }
    };
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    assert!(cursor.row().is_none());
    assert!(!cursor.advance().unwrap(), "a failed cursor stays at its end");
}

#[test]
fn damaged_sstable_footer_fails_open_with_its_name() {
    let mut te = TestEngine::new(1000);
    drop(setup(&te, 50));
    te.engine().flush("t").unwrap();
    te.engine = None;
    let sst = files_with_ext(&te.dir.path().join("sst"), "sst").pop().unwrap();
    let len = fs::metadata(&sst).unwrap().len() as usize;
    flip(&sst, len - 20);
    let err = Engine::open(te.dir.path(), TestEngine::options(&te.clock)).unwrap_err();
    assert!(matches!(&err, Error::Corrupt { path, .. } if *path == sst), "{err}");
}

#[test]
fn flipped_byte_mid_wal_is_reported_not_skipped() {
    let mut te = TestEngine::replaying(1000);
    drop(setup(&te, 200));
    te.engine = None;
    let seg = files_with_ext(&te.dir.path().join("wal"), "log")
        .into_iter()
        .find(|p| fs::metadata(p).unwrap().len() > 1000)
        .unwrap();
    flip(&seg, 500);
    let opts = te.options_override.clone().unwrap();
    let err = Engine::open(te.dir.path(), opts).unwrap_err();
    match &err {
        Error::Corrupt { path, offset, reason } => {
            assert_eq!(path, &seg);
            assert!(*offset <= 500 && *offset > 12, "offset {offset}");
            assert!(reason.contains("middle of the log") || reason.contains("length"), "{reason}");
        }
        other => panic!("expected corruption, got {other}"),
    }
}

#[test]
fn torn_wal_tail_is_truncated_and_earlier_writes_survive() {
    let mut te = TestEngine::replaying(1000);
    drop(setup(&te, 100));
    te.engine = None;
    let seg = files_with_ext(&te.dir.path().join("wal"), "log")
        .into_iter()
        .find(|p| fs::metadata(p).unwrap().len() > 1000)
        .unwrap();
    // The segment is preallocated: its records end where the zeros after them begin (the last
    // record ends in its value, which is not zero).
    let data = fs::read(&seg).unwrap();
    let len = data.iter().rposition(|&b| b != 0).unwrap() as u64 + 1;
    assert!(len < data.len() as u64, "the segment is preallocated");
    // Cut the last record in half, then add zero padding as a power loss can leave.
    let f = fs::OpenOptions::new().write(true).open(&seg).unwrap();
    f.set_len(len - 10).unwrap();
    f.set_len(len + 4096).unwrap();
    drop(f);
    te.reopen();
    let t = te.table("t");
    assert_eq!(t.scan(Scan::new()).unwrap().count(), 99, "all but the torn last write");
    assert!(t.get(Get::new("row00099")).unwrap().is_empty());
    // The log keeps working after the repair, across another restart.
    t.put(Put::new("after").add("f", "q", "x")).unwrap();
    drop(t);
    te.reopen();
    assert_eq!(te.table("t").scan(Scan::new()).unwrap().count(), 100);
}

#[test]
fn damaged_manifest_fails_open() {
    let mut te = TestEngine::new(1000);
    drop(setup(&te, 5));
    te.engine = None;
    let manifest = te.dir.path().join("MANIFEST");
    let len = fs::metadata(&manifest).unwrap().len() as usize;
    flip(&manifest, len - 2);
    let err = Engine::open(te.dir.path(), TestEngine::options(&te.clock)).unwrap_err();
    assert!(matches!(&err, Error::Corrupt { path, .. } if *path == manifest), "{err}");
}

#[test]
fn garbage_instead_of_an_sstable_is_an_error() {
    let mut te = TestEngine::new(1000);
    drop(setup(&te, 5));
    te.engine().flush("t").unwrap();
    te.engine = None;
    let sst = files_with_ext(&te.dir.path().join("sst"), "sst").pop().unwrap();
    fs::write(&sst, b"short").unwrap();
    assert!(matches!(Engine::open(te.dir.path(), TestEngine::options(&te.clock)), Err(Error::Corrupt { .. })));
}

mod random_damage {
    use super::*;
    use proptest::prelude::*;
    use std::sync::OnceLock;

    fn expected_value(i: usize) -> String {
        format!("value{i}")
    }

    /// A data directory with flushed files of every codec and unflushed log records.
    fn template() -> &'static Path {
        static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
        DIR.get_or_init(|| {
            let dir = tempfile::tempdir().unwrap();
            // Keep the last hundred rows in the log only, so damage there is exercised too.
            let opts = EngineOptions::default().flush_on_close(false);
            let e = Engine::open(dir.path(), opts).unwrap();
            let fam = |n: &str, c| FamilyDescriptor::new(n).compression(c).block_size(1024).bloom(BloomType::RowCol);
            let desc = TableDescriptor::new("t")
                .family(fam("a", Compression::None))
                .family(fam("b", Compression::Lz4))
                .family(fam("c", Compression::Zstd));
            e.create_table(desc).unwrap();
            let t = e.table("t").unwrap();
            for i in 0..300 {
                let v = expected_value(i);
                t.put(
                    Put::new(format!("row{i:04}")).add("a", "q", v.clone()).add("b", "q", v.clone()).add("c", "q", v),
                )
                .unwrap();
                if i == 199 {
                    e.flush("t").unwrap();
                }
            }
            drop(t);
            drop(e);
            std::fs::remove_file(dir.path().join("LOCK")).unwrap();
            dir
        })
        .path()
    }

    fn all_files(dir: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for sub in ["", "sst", "wal"] {
            for e in fs::read_dir(dir.join(sub)).unwrap() {
                let p = e.unwrap().path();
                if p.is_file() {
                    out.push(p);
                }
            }
        }
        out.sort();
        out
    }

    fn copy(from: &Path, to: &Path) {
        for sub in ["sst", "wal"] {
            fs::create_dir_all(to.join(sub)).unwrap();
        }
        for f in all_files(from) {
            fs::copy(&f, to.join(f.strip_prefix(from).unwrap())).unwrap();
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        #[test]
        fn damage_never_panics_or_returns_wrong_data(file_pick in any::<prop::sample::Index>(), flips in prop::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 1..4)) {
            let dir = tempfile::tempdir().unwrap();
            copy(template(), dir.path());
            let files = all_files(dir.path());
            let target = file_pick.get(&files);
            let mut bytes = fs::read(target).unwrap();
            for (at, mask) in &flips {
                let i = at.index(bytes.len());
                bytes[i] ^= mask;
            }
            fs::write(target, &bytes).unwrap();

            let Ok(engine) = Engine::open(dir.path(), EngineOptions::default()) else { return Ok(()) };
            let Ok(t) = engine.table("t") else { return Ok(()) };
            for r in t.scan(Scan::new()).unwrap() {
                let Ok(r) = r else { break };
                let row = String::from_utf8(r.row.to_vec()).unwrap();
                let i: usize = row[3..].parse().unwrap();
                let want = expected_value(i);
                for c in &r.cells {
                    prop_assert_eq!(c.value.as_ref(), want.as_bytes(), "wrong value in {} after damaging {}", row, target.display());
                }
            }
            for i in [0usize, 150, 250, 299] {
                if let Ok(r) = t.get(Get::new(format!("row{i:04}"))) {
                    let want = expected_value(i);
                    for c in &r.cells {
                        prop_assert_eq!(c.value.as_ref(), want.as_bytes());
                    }
                }
            }
        }
    }
}
