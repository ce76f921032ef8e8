//! Pins the on-disk formats: data directories written by each SSTable format version
//! (manifest, SSTables with every compression codec and bloom kind, and a WAL holding unflushed
//! writes) are checked in under `tests/fixtures/format-v<N>` and must keep opening with the
//! same contents. Version 2 changed the bloom filters' layout; version 3 stores a key tail
//! (timestamp, type, sequence) once for the cells of one put, which its fixture's rows of
//! several columns exercise; version 4 flags in the index the blocks whose last row ends in
//! them, which its fixture's rows larger than a block (cut between their cells) exercise.
//!
//! Write the current version's directory (only when deliberately changing a format, with a new
//! version number, keeping the older directories):
//! `CELLAR_WRITE_FIXTURES=1 cargo test -p cellar-engine --test engine_format_fixtures`.

use std::path::{Path, PathBuf};

use cellar_engine::*;

/// The format version this build writes.
const CURRENT: u32 = 4;

fn fixture_dir(version: u32) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/format-v{version}"))
}

/// Cells written one per put, in every fixture: (row, family, timestamp, value).
fn single_cells() -> Vec<(String, String, u64, String)> {
    let mut v = Vec::new();
    for (fam, n) in [("lz4", 30), ("none", 30), ("zstd", 30)] {
        for i in 0..n {
            v.push((format!("row{i:03}"), fam.to_string(), 1000 + i as u64, format!("{fam}-value-{i}")));
        }
    }
    v
}

/// A row written by one put: row, family, timestamp, and (qualifier, value) per column.
type MultiColumnPut = (String, String, u64, Vec<(String, String)>);

/// Rows of four columns in one family, each row one put, in fixtures from version 3 on.
fn wide_rows(version: u32) -> Vec<MultiColumnPut> {
    if version < 3 {
        return Vec::new();
    }
    let families = ["none", "zstd"];
    (0..40u64)
        .map(|i| {
            let columns = (0..4).map(|q| (format!("q{q}"), format!("wide-{i}-{q}"))).collect();
            (format!("multi{i:02}"), families[i as usize % 2].to_string(), 5000 + i, columns)
        })
        .collect()
}

/// Rows of 24 columns of 60 bytes in family `none` (1 KiB blocks), each row one put, in
/// fixtures from version 4 on: each spans two blocks or more.
fn big_rows(version: u32) -> Vec<MultiColumnPut> {
    if version < 4 {
        return Vec::new();
    }
    (0..6u64)
        .map(|i| {
            let columns = (0..24).map(|q| (format!("c{q:02}"), format!("big-{i}-{q:02}-{:0>48}", i))).collect();
            (format!("big{i}"), "none".to_string(), 7000 + i, columns)
        })
        .collect()
}

/// Every cell the fixture of `version` holds, sorted.
fn expected(version: u32) -> Vec<(String, String, u64, String)> {
    let mut v = single_cells();
    for (row, fam, ts, columns) in wide_rows(version).into_iter().chain(big_rows(version)) {
        v.extend(columns.into_iter().map(|(_, value)| (row.clone(), fam.clone(), ts, value)));
    }
    v.sort();
    v
}

fn write_fixture(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir);
    let engine = Engine::open(dir, EngineOptions::default().flush_on_close(false)).unwrap();
    engine
        .create_table(
            TableDescriptor::new("fixture")
                .family(FamilyDescriptor::new("none").bloom(BloomType::None).block_size(1024))
                .family(
                    FamilyDescriptor::new("lz4").compression(Compression::Lz4).bloom(BloomType::Row).block_size(1024),
                )
                .family(
                    FamilyDescriptor::new("zstd")
                        .compression(Compression::Zstd)
                        .bloom(BloomType::RowCol)
                        .max_versions(2),
                ),
        )
        .unwrap();
    let t = engine.table("fixture").unwrap();
    // Before the flush below, so they reach an SSTable.
    for (row, fam, ts, columns) in wide_rows(CURRENT).into_iter().chain(big_rows(CURRENT)) {
        let put = columns.into_iter().fold(Put::new(row), |p, (q, value)| p.add_at(fam.clone(), q, ts, value));
        t.put(put).unwrap();
    }
    let mut cells = single_cells();
    cells.sort();
    for (row, fam, ts, value) in cells {
        t.put(Put::new(row.clone()).add_at(fam, "q", ts, value)).unwrap();
        if row == "row019" {
            engine.flush("fixture").unwrap();
        }
    }
    t.delete(Delete::new("row999").add_family_at("none", 5)).unwrap();
    drop(t);
    drop(engine);
    std::fs::remove_file(dir.join("LOCK")).unwrap();
}

#[test]
fn format_v1_fixture_still_opens() {
    assert_fixture_opens(1);
}

#[test]
fn format_v2_fixture_still_opens() {
    assert_fixture_opens(2);
}

#[test]
fn format_v3_fixture_still_opens() {
    assert_fixture_opens(3);
}

#[test]
fn format_v4_fixture_still_opens() {
    if std::env::var_os("CELLAR_WRITE_FIXTURES").is_some() {
        write_fixture(&fixture_dir(CURRENT));
    }
    assert_fixture_opens(4);
}

fn assert_fixture_opens(version: u32) {
    let tmp = tempfile::tempdir().unwrap();
    copy_dir(&fixture_dir(version), tmp.path());
    let engine = Engine::open(tmp.path(), EngineOptions::default()).unwrap();
    let t = engine.table("fixture").unwrap();
    let mut got = Vec::new();
    for r in t.scan(Scan::new()).unwrap() {
        for c in r.unwrap().cells {
            got.push((
                String::from_utf8(c.row.to_vec()).unwrap(),
                String::from_utf8(c.family.to_vec()).unwrap(),
                c.timestamp,
                String::from_utf8(c.value.to_vec()).unwrap(),
            ));
        }
    }
    got.sort();
    assert_eq!(got, expected(version));
    let raw: usize = t.scan(Scan::new().raw(true).start("row999")).unwrap().map(|r| r.unwrap().cells.len()).sum();
    assert_eq!(raw, 1, "the delete marker in the log replays");
    assert!(t.get(Get::new("row005").column("zstd", "q")).unwrap().value(b"zstd", b"q").is_some());
    // Point reads of every row find all its cells, those of rows cut between blocks too.
    for (row, fam, _, columns) in wide_rows(version).into_iter().chain(big_rows(version)) {
        let got = t.get(Get::new(row.clone()).family(fam)).unwrap();
        let values: Vec<String> = got.cells.iter().map(|c| String::from_utf8(c.value.to_vec()).unwrap()).collect();
        assert_eq!(values, columns.into_iter().map(|(_, v)| v).collect::<Vec<_>>(), "{row}");
    }
    assert_eq!(engine.describe("fixture").unwrap().get_family(b"zstd").unwrap().max_versions, 2);
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}
