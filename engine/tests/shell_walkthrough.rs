//! `cellar-shell` runs the seeds' shell examples and prints what the HBase shell prints
//! (timings aside; column padding is compared with runs of spaces collapsed).

use std::path::Path;
use std::process::Command;

/// Collapses runs of spaces (the shell pads columns) and replaces timings with `T`.
fn normalize(text: &str) -> String {
    text.lines()
        .map(|line| {
            let mut l = line.split(' ').filter(|w| !w.is_empty()).collect::<Vec<_>>().join(" ");
            if line.starts_with(' ') {
                l.insert(0, ' ');
            }
            if let (Some(a), Some(b)) = (l.find(" in "), l.rfind(" seconds")) {
                if l.contains("row(s)") && a < b {
                    l = format!("{} in T seconds", &l[..a]);
                }
            }
            l
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn run_shell(data: &Path, script: &Path) -> (String, bool) {
    let out = Command::new(env!("CARGO_BIN_EXE_cellar-shell")).arg("--data").arg(data).arg(script).output().unwrap();
    (String::from_utf8(out.stdout).unwrap(), out.status.success())
}

#[test]
fn keep_deleted_cells_walkthrough() {
    let dir = tempfile::tempdir().unwrap();
    let here = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/shell");
    let (out, ok) = run_shell(&dir.path().join("data"), &here.join("keep_deleted_cells.hbase"));
    assert!(ok, "shell reported errors:\n{out}");
    let expected = std::fs::read_to_string(here.join("keep_deleted_cells.out")).unwrap();
    assert_eq!(normalize(&out), normalize(&expected));
}

#[test]
fn column_filters_in_the_filter_language() {
    let dir = tempfile::tempdir().unwrap();
    let here = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/shell");
    let (out, ok) = run_shell(&dir.path().join("data"), &here.join("column_filters.hbase"));
    assert!(ok, "shell reported errors:\n{out}");
    let expected = std::fs::read_to_string(here.join("column_filters.out")).unwrap();
    assert_eq!(normalize(&out), normalize(&expected));

    let script = dir.path().join("bad.hbase");
    std::fs::write(&script, "scan 'wide', {FILTER => \"ValueFilter(=, 'regexstring:.*')\"}\n").unwrap();
    let (out, ok) = run_shell(&dir.path().join("data"), &script);
    assert!(!ok && out.contains("ERROR: ") && out.contains("comparator `regexstring` is not supported"), "{out}");
}

#[test]
fn counters_print_as_hex_like_hbase() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("s.hbase");
    std::fs::write(&script, "create 't', 'f'\nhbase(main):001:0> incr 't', 'r', 'f:q', 1\nhbase(main):002:0> get 't', 'r'\nget_counter 't', 'r', 'f:q'\n").unwrap();
    let (out, ok) = run_shell(&dir.path().join("data"), &script);
    assert!(ok, "{out}");
    let out = normalize(&out);
    assert!(out.contains("COUNTER VALUE = 1\n0 row(s) in T seconds\nCOLUMN CELL\n f:q timestamp="), "{out}");
    assert!(out.contains(", value=\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x01\n1 row(s) in T seconds"), "{out}");
}

#[test]
fn errors_are_reported_and_the_script_continues() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("s.hbase");
    std::fs::write(&script, "create 't', 'f'\nput 't', '', 'f:q', 'v'\nput 't', 'r', 'nofam:q', 'v'\nscan 't', {RAW true}\nput 't', 'r', 'f:q', 'v'\ncount 't'\n").unwrap();
    let (out, ok) = run_shell(&dir.path().join("data"), &script);
    assert!(!ok, "exit status must report the failures");
    let errors: Vec<&str> = out.lines().filter(|l| l.starts_with("ERROR: ")).collect();
    assert_eq!(errors.len(), 3, "{out}");
    assert!(errors[0].contains("row key must not be empty"), "{out}");
    assert!(errors[1].contains("no column family `nofam`"), "{out}");
    assert!(normalize(&out).ends_with("1 row(s) in T seconds\n\n=> 1"), "{out}");
}

#[test]
fn data_persists_between_shell_runs() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let first = dir.path().join("a.hbase");
    std::fs::write(&first, "create 't', {NAME => 'f', VERSIONS => 3, COMPRESSION => 'LZ4', BLOOMFILTER => 'ROWCOL'}\nput 't', 'r1', 'f:a', 'x', 5\nput 't', 'r2', 'f:a', 'y', 6\nflush 't'\nput 't', 'r3', 'f:a', 'z', 7\n").unwrap();
    assert!(run_shell(&data, &first).1);
    let second = dir.path().join("b.hbase");
    std::fs::write(&second, "scan 't', {REVERSED => true, LIMIT => 2}\ndescribe 't'\n").unwrap();
    let (out, ok) = run_shell(&data, &second);
    assert!(ok, "{out}");
    let out = normalize(&out);
    assert!(
        out.contains(" r3 column=f:a, timestamp=7, value=z\n r2 column=f:a, timestamp=6, value=y\n2 row(s)"),
        "{out}"
    );
    assert!(out.contains("{NAME => 'f', BLOOMFILTER => 'ROWCOL', VERSIONS => '3'"), "{out}");
    assert!(out.contains("COMPRESSION => 'LZ4'"), "{out}");
}

#[test]
fn alter_changes_families_and_table_attributes() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("s.hbase");
    std::fs::write(
        &script,
        "create 't', 'f', 'g'\n\
         alter 't', NAME => 'f', VERSIONS => 5, TTL => 3600\n\
         alter 't', {NAME => 'h', COMPRESSION => 'ZSTD'}\n\
         alter 't', 'delete' => 'g'\n\
         alter 't', DURABILITY => 'FSYNC_WAL'\n\
         alter 't', NAME => 'f', NOPE => 1\n\
         describe 't'\n",
    )
    .unwrap();
    let (out, ok) = run_shell(&dir.path().join("data"), &script);
    assert!(!ok, "the bad option must fail");
    let out = normalize(&out);
    assert!(out.contains("ERROR: unknown column family option NOPE"), "{out}");
    assert!(out.contains("DURABILITY => 'FSYNC_WAL'"), "{out}");
    assert!(out.contains("{NAME => 'f', BLOOMFILTER => 'ROW', VERSIONS => '5'"), "{out}");
    assert!(out.contains("TTL => '3600 SECONDS'"), "{out}");
    assert!(out.contains("{NAME => 'h'") && !out.contains("{NAME => 'g'"), "{out}");
}
