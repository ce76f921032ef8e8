//! The reference guide's KEEP_DELETED_CELLS walk-through, through the API.

mod common;

use cellar_engine::*;
use common::*;

fn raw_scan(t: &Table) -> Vec<(String, u64, String)> {
    t.scan(Scan::new().raw(true).max_versions(1000)).unwrap().flat_map(|r| cells(&r.unwrap())).collect()
}

fn walkthrough(keep: bool) -> [Vec<(String, u64, String)>; 3] {
    let te = TestEngine::new(1_000_000);
    let fam = FamilyDescriptor::new("e").max_versions(2147483647).keep_deleted_cells(keep);
    te.engine().create_table(TableDescriptor::new("test").family(fam)).unwrap();
    let t = te.table("test");
    for ts in [10, 12, 14] {
        t.put(Put::new("r1").add_at("e", "c1", ts, "value")).unwrap();
    }
    t.delete(Delete::new("r1").add_columns_at("e", "c1", 11)).unwrap();
    let before = raw_scan(&t);
    te.engine().flush("test").unwrap();
    let flushed = raw_scan(&t);
    te.engine().major_compact("test").unwrap();
    let compacted = raw_scan(&t);
    [before, flushed, compacted]
}

fn c(ts: u64, v: &str) -> (String, u64, String) {
    ("e:c1".to_string(), ts, v.to_string())
}

#[test]
fn without_keep_deleted_cells_flush_drops_masked_and_major_drops_markers() {
    let [before, flushed, compacted] = walkthrough(false);
    assert_eq!(before, vec![c(14, "value"), c(12, "value"), c(11, "DeleteColumn"), c(10, "value")]);
    assert_eq!(flushed, vec![c(14, "value"), c(12, "value"), c(11, "DeleteColumn")]);
    assert_eq!(compacted, vec![c(14, "value"), c(12, "value")]);
}

#[test]
fn with_keep_deleted_cells_everything_survives() {
    let all = vec![c(14, "value"), c(12, "value"), c(11, "DeleteColumn"), c(10, "value")];
    let [before, flushed, compacted] = walkthrough(true);
    assert_eq!(before, all);
    assert_eq!(flushed, all);
    assert_eq!(compacted, all);
}

#[test]
fn keep_deleted_cells_allows_time_range_reads_below_the_marker() {
    let te = TestEngine::new(1_000_000);
    let fam = FamilyDescriptor::new("e").max_versions(10).keep_deleted_cells(true);
    te.engine().create_table(TableDescriptor::new("t").family(fam)).unwrap();
    let t = te.table("t");
    t.put(Put::new("r").add_at("e", "c", 10, "old")).unwrap();
    t.delete(Delete::new("r").add_columns_at("e", "c", 11)).unwrap();
    assert!(t.get(Get::new("r")).unwrap().is_empty());
    let below = t.get(Get::new("r").time_range(0, 11)).unwrap();
    assert_eq!(
        cells(&below),
        vec![c(10, "old")].into_iter().map(|(_, ts, v)| ("e:c".to_string(), ts, v)).collect::<Vec<_>>()
    );
    te.engine().major_compact("t").unwrap();
    assert_eq!(t.get(Get::new("r").time_range(0, 11)).unwrap().cells.len(), 1, "compaction must keep it");
}
