//! Split policies: under a key-prefix policy every split — automatic, forced or at a point the
//! caller names — cuts between groups of rows sharing a prefix, never inside one; a region
//! holding one group does not split; the policy survives a restart, and manifests written
//! before policies existed still open.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use cellar_engine::*;
use common::*;

const KEY8: SplitPolicy = SplitPolicy::KeyPrefix { length: 8 };

/// Eight-byte group ids: `grp00042`.
fn group(g: usize) -> String {
    format!("grp{g:05}")
}

fn create(te: &TestEngine, policy: SplitPolicy) -> Table {
    let desc = TableDescriptor::new("t")
        .family(FamilyDescriptor::new("f").block_size(4096))
        .max_region_size(1024 * 1024)
        .split_policy(policy);
    te.engine().create_table(desc).unwrap();
    te.table("t")
}

/// Writes `rows` rows of each group in `groups`, with `value_len`-byte values.
fn fill(t: &Table, groups: impl IntoIterator<Item = usize>, rows: usize, value_len: usize) {
    for g in groups {
        for r in 0..rows {
            t.put(Put::new(format!("{}:{r:04}", group(g))).add("f", "q", vec![b'v'; value_len])).unwrap();
        }
    }
}

/// Asserts that no group of `policy` has rows in two regions; returns the number of regions.
fn assert_groups_whole(engine: &Engine, policy: &SplitPolicy) -> usize {
    let regions = engine.regions("t").unwrap();
    let starts: Vec<Bytes> = regions.iter().map(|r| r.start_key.clone()).collect();
    let mut region_of_group: HashMap<Vec<u8>, usize> = HashMap::new();
    let mut n = 0;
    for row in engine.table("t").unwrap().scan(Scan::new()).unwrap() {
        let row = row.unwrap().row;
        let region = starts.partition_point(|s| s.as_ref() <= row.as_ref()) - 1;
        let g = policy.group_prefix(&row).to_vec();
        let first = *region_of_group.entry(g.clone()).or_insert(region);
        assert_eq!(
            first,
            region,
            "group {} lies in regions {first} and {region}; boundaries {starts:?}",
            String::from_utf8_lossy(&g)
        );
        n += 1;
    }
    assert!(n > 0);
    regions.len()
}

fn region_starts(engine: &Engine) -> Vec<String> {
    engine.regions("t").unwrap().iter().map(|r| String::from_utf8_lossy(&r.start_key).into_owned()).collect()
}

#[test]
fn automatic_splits_cut_only_between_groups() {
    let mut te = TestEngine::new(1000);
    te.options_override = Some(TestEngine::options(&te.clock).memstore_flush_bytes(64 * 1024).compaction_threshold(3));
    te.reopen();
    let t = create(&te, KEY8);
    // 300 groups of 12 rows of ~800 bytes, groups in scattered order: ~3 MB in 1 MiB regions.
    let mut rng = Rng(7);
    let mut order: Vec<usize> = (0..300).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    for g in order {
        fill(&t, [g], 12, 800);
    }
    assert!(te.engine().wait_idle(Duration::from_secs(60)), "background work finishes");
    let regions = assert_groups_whole(te.engine(), &KEY8);
    assert!(regions >= 3, "the table split on its own: {regions} regions");
    for start in region_starts(te.engine()).iter().skip(1) {
        assert_eq!(start.len(), 8, "boundary {start} is a group id");
    }
    assert_eq!(t.scan(Scan::new()).unwrap().count(), 300 * 12);
}

#[test]
fn forced_splits_cut_only_between_groups() {
    let te = TestEngine::new(1000);
    // Two-field keys: a one-byte tenant, a zero-terminated user name, then the row's own part.
    let policy = SplitPolicy::Fields(vec![PrefixField::Fixed(1), PrefixField::Terminated(vec![0])]);
    let t = create(&te, policy.clone());
    let mut rng = Rng(11);
    for u in 0..120 {
        let tenant = b'a' + (u % 3) as u8;
        let user = format!("user{}", rng.below(1_000_000));
        for r in 0..(1 + rng.below(30)) {
            let row = [&[tenant][..], user.as_bytes(), &[0], format!("item{r:03}").as_bytes()].concat();
            t.put(Put::new(row).add("f", "q", vec![b'v'; 300])).unwrap();
        }
    }
    te.engine().flush("t").unwrap();
    for _ in 0..4 {
        te.engine().split("t", None).unwrap();
        assert_groups_whole(te.engine(), &policy);
    }
    assert!(te.engine().regions("t").unwrap().len() >= 8, "{:?}", region_starts(te.engine()));
}

#[test]
fn an_explicit_split_point_inside_a_group_moves_to_the_group_start() {
    let te = TestEngine::new(1000);
    let t = create(&te, KEY8);
    fill(&t, 0..10, 20, 10);
    assert_eq!(te.engine().split("t", Some(b"grp00005:0007")).unwrap(), 1);
    assert_eq!(region_starts(te.engine()), ["", "grp00005"]);
    // The group starts the region: the cut moves past the group instead.
    assert_eq!(te.engine().split("t", Some(b"grp00005:0003")).unwrap(), 1);
    assert_eq!(region_starts(te.engine()), ["", "grp00005", "grp00006"]);
    // The group fills its region: nothing to cut.
    assert_eq!(te.engine().split("t", Some(b"grp00005:0001")).unwrap(), 0);
    assert!(matches!(te.engine().split("t", Some(b"grp00005")), Err(Error::InvalidArgument { .. })));
    // A point between groups is kept as given.
    assert_eq!(te.engine().split("t", Some(b"grp00002")).unwrap(), 1);
    assert_eq!(region_starts(te.engine()), ["", "grp00002", "grp00005", "grp00006"]);
    assert_groups_whole(te.engine(), &KEY8);
    assert_eq!(t.scan(Scan::new()).unwrap().count(), 200);
}

#[test]
fn a_region_holding_one_group_does_not_split() {
    let mut te = TestEngine::new(1000);
    te.options_override = Some(TestEngine::options(&te.clock).memstore_flush_bytes(128 * 1024));
    te.reopen();
    let t = create(&te, KEY8);
    // A few rows: the middle row is found by reading them.
    fill(&t, [3], 5, 10);
    te.engine().flush("t").unwrap();
    assert_eq!(te.engine().split("t", None).unwrap(), 0);
    // Past the region size: the background asks for splits, and none happens.
    fill(&t, [3], 1500, 1000);
    assert!(te.engine().wait_idle(Duration::from_secs(60)));
    te.engine().flush("t").unwrap();
    assert_eq!(te.engine().split("t", None).unwrap(), 0);
    let regions = te.engine().regions("t").unwrap();
    assert_eq!(regions.len(), 1, "{regions:?}");
    assert!(regions[0].file_bytes > 1024 * 1024, "the region outgrew its size: {regions:?}");
    // From here on only the explicit splits below split (a flush would have the background
    // split the oversized region as soon as it has a boundary).
    te.options_override = Some(te.options_override.clone().unwrap().auto_compact(false));
    drop(t);
    te.reopen();
    let t = te.table("t");
    // A second group gives the split its boundary, whichever side of the big group it is on.
    fill(&t, [1], 3, 10);
    te.engine().flush("t").unwrap();
    assert_eq!(te.engine().split("t", None).unwrap(), 1);
    assert_eq!(region_starts(te.engine()), ["", "grp00003"]);
    fill(&t, [7], 3, 10);
    te.engine().flush("t").unwrap();
    assert_eq!(te.engine().split("t", None).unwrap(), 1, "only the region with two groups splits");
    assert_eq!(region_starts(te.engine()), ["", "grp00003", "grp00004"]);
    assert_groups_whole(te.engine(), &KEY8);
}

/// With one row per block, the mid-key cut falls just after a block's last row (`row\0`); the
/// policy must snap `row` itself. Here that row, `ab`, has no delimiter and so is its own
/// group's first row: cutting at `ab\0` would part it from `ab#1`.
#[test]
fn a_block_boundary_cut_snaps_the_row_before_it() {
    let te = TestEngine::new(1000);
    let policy = SplitPolicy::DelimitedKeyPrefix { delimiter: b"#".to_vec() };
    let desc =
        TableDescriptor::new("t").family(FamilyDescriptor::new("f").block_size(1024)).split_policy(policy.clone());
    te.engine().create_table(desc).unwrap();
    let t = te.table("t");
    for (row, len) in [("aa#1", 2000), ("aa#2", 2000), ("ab", 3000), ("ab#1", 2000), ("ab#2", 2000), ("ab#3", 2000)] {
        t.put(Put::new(row).add("f", "q", vec![b'v'; len])).unwrap();
    }
    te.engine().flush("t").unwrap();
    assert_eq!(te.engine().split("t", None).unwrap(), 1);
    assert_eq!(region_starts(te.engine()), ["", "ab"]);
    assert_groups_whole(te.engine(), &policy);
}

#[test]
fn the_policy_survives_a_restart() {
    let mut te = TestEngine::replaying(1000);
    let policy = SplitPolicy::Fields(vec![PrefixField::Fixed(3), PrefixField::Terminated(b"\x00\x01".to_vec())]);
    let t = create(&te, policy.clone());
    for g in 0..6 {
        for r in 0..10 {
            t.put(Put::new(format!("k{g:02}name{g}\x00\x01{r:03}")).add("f", "q", "v")).unwrap();
        }
    }
    drop(t);
    te.reopen();
    assert_eq!(te.engine().describe("t").unwrap().split_policy, policy);
    te.engine().flush("t").unwrap();
    assert_eq!(te.engine().split("t", Some(b"k03name3\x00\x01005")).unwrap(), 1);
    assert_eq!(region_starts(te.engine()), ["", "k03name3\u{0}\u{1}"]);
    te.engine()
        .alter_table("t", |d| {
            d.split_policy = SplitPolicy::DelimitedKeyPrefix { delimiter: b"name".to_vec() };
            Ok(())
        })
        .unwrap();
    te.reopen();
    let policy = SplitPolicy::DelimitedKeyPrefix { delimiter: b"name".to_vec() };
    assert_eq!(te.engine().describe("t").unwrap().split_policy, policy);
    assert_eq!(te.engine().split("t", Some(b"k04name4\x00\x01002")).unwrap(), 1);
    assert_eq!(region_starts(te.engine()), ["", "k03name3\u{0}\u{1}", "k04"]);
    assert_groups_whole(te.engine(), &policy);
}

#[test]
fn bad_policies_are_refused() {
    let te = TestEngine::new(1000);
    let desc = |p: SplitPolicy| TableDescriptor::new("t").family(FamilyDescriptor::new("f")).split_policy(p);
    for bad in [
        SplitPolicy::KeyPrefix { length: 0 },
        SplitPolicy::DelimitedKeyPrefix { delimiter: Vec::new() },
        SplitPolicy::Fields(Vec::new()),
        SplitPolicy::Fields(vec![PrefixField::Fixed(1), PrefixField::Terminated(Vec::new())]),
    ] {
        assert!(matches!(te.engine().create_table(desc(bad)), Err(Error::InvalidArgument { .. })));
    }
    te.engine().create_table(desc(KEY8)).unwrap();
    let bad = te.engine().alter_table("t", |d| {
        d.split_policy = SplitPolicy::KeyPrefix { length: 0 };
        Ok(())
    });
    assert!(matches!(bad, Err(Error::InvalidArgument { .. })));
    assert_eq!(te.engine().describe("t").unwrap().split_policy, KEY8);
}

/// The version-1 fixture's manifest predates split policies: its table has the default.
#[test]
fn a_manifest_without_a_policy_opens_with_the_default() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/format-v1");
    let tmp = tempfile::tempdir().unwrap();
    copy_dir(&fixture, tmp.path());
    let engine = Engine::open(tmp.path(), EngineOptions::default()).unwrap();
    assert_eq!(engine.describe("fixture").unwrap().split_policy, SplitPolicy::MidKey);
    engine
        .alter_table("fixture", |d| {
            d.split_policy = KEY8;
            Ok(())
        })
        .unwrap();
    drop(engine);
    let engine = Engine::open(tmp.path(), EngineOptions::default()).unwrap();
    assert_eq!(engine.describe("fixture").unwrap().split_policy, KEY8);
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

/// A split that finds nothing to cut has still flushed the region: the catalog must name the
/// new file before the log that held its rows is trimmed, or a crash loses them.
#[test]
fn a_refused_split_loses_nothing_in_a_crash() {
    let mut te = TestEngine::new(1000);
    let opts = TestEngine::options(&te.clock).wal_segment_bytes(32 * 1024).flush_on_close(false).auto_compact(false);
    te.options_override = Some(opts);
    te.reopen();
    let t = create(&te, KEY8);
    fill(&t, [4], 300, 500);
    assert!(te.engine().wal_segments() > 1, "the log rolled");
    assert_eq!(te.engine().split("t", None).unwrap(), 0, "one group: no split");
    // The same under the mid-key policy, with a region of a single row.
    te.engine().create_table(TableDescriptor::new("u").family(FamilyDescriptor::new("f"))).unwrap();
    let u = te.table("u");
    for i in 0..300 {
        u.put(Put::new("only").add("f", "q", format!("{i:0500}"))).unwrap();
    }
    assert_eq!(te.engine().split("u", None).unwrap(), 0, "one row: no split");
    drop((t, u));
    te.reopen();
    assert_eq!(te.table("t").scan(Scan::new()).unwrap().count(), 300);
    let last = te.table("u").get(Get::new("only")).unwrap();
    assert_eq!(last.value(b"f", b"q").map(|v| v.len()), Some(500));
    assert!(last.value(b"f", b"q").unwrap().ends_with(b"299"));
}
