//! `cellar-shell` sets split policies the HBase way (`SPLIT_POLICY => …` with its prefix
//! length or delimiter), `describe` shows them after a restart, and `split` honours them.

use std::path::Path;
use std::process::Command;

fn run_shell(data: &Path, script: &Path) -> (String, bool) {
    let out = Command::new(env!("CARGO_BIN_EXE_cellar-shell")).arg("--data").arg(data).arg(script).output().unwrap();
    (String::from_utf8(out.stdout).unwrap(), out.status.success())
}

#[test]
fn split_policies_from_the_shell() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let first = dir.path().join("a.hbase");
    std::fs::write(
        &first,
        "create 'users', 'f', {SPLIT_POLICY => 'KeyPrefixRegionSplitPolicy', PREFIX_LENGTH => 4}\n\
         put 'users', 'u001-a', 'f:q', '1'\n\
         put 'users', 'u001-b', 'f:q', '2'\n\
         put 'users', 'u002-a', 'f:q', '3'\n\
         put 'users', 'u002-b', 'f:q', '4'\n\
         flush 'users'\n\
         split 'users', 'u002-b'\n\
         create 'logs', 'f', {SPLIT_POLICY => 'org.apache.hadoop.hbase.regionserver.DelimitedKeyPrefixRegionSplitPolicy', DELIMITER => '|'}\n\
         create 'bad', 'f', {SPLIT_POLICY => 'KeyPrefixRegionSplitPolicy', PREFIX_LENGTH => 0}\n",
    )
    .unwrap();
    let (out, ok) = run_shell(&data, &first);
    assert!(!ok, "the bad table must fail:\n{out}");
    let errors: Vec<&str> = out.lines().filter(|l| l.starts_with("ERROR: ")).collect();
    assert_eq!(errors, ["ERROR: invalid argument `PREFIX_LENGTH`: the key prefix length must be at least 1"], "{out}");
    let second = dir.path().join("b.hbase");
    std::fs::write(&second, "describe 'users'\ndescribe 'logs'\nlist_regions 'users'\n").unwrap();
    let (out, ok) = run_shell(&data, &second);
    assert!(ok, "{out}");
    assert!(out.contains("SPLIT_POLICY => 'KeyPrefixRegionSplitPolicy', PREFIX_LENGTH => '4'}"), "{out}");
    assert!(out.contains("SPLIT_POLICY => 'DelimitedKeyPrefixRegionSplitPolicy', DELIMITER => '|'}"), "{out}");
    // The split point `u002-b` moved to its group's start.
    assert!(out.contains(" users,u002,"), "{out}");
}
