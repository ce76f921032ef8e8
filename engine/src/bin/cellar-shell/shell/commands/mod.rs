//! The shell's commands. Each turns parsed arguments into engine calls and formats the result.
//!
//! The commands are grouped as HBase groups them: table definitions ([`ddl`]: create, alter),
//! data ([`data`]: put, get, scan, count, delete, counters) and the cluster's state
//! ([`admin`]: regions, status); the small table commands run here, in [`execute`]. This
//! module holds the argument helpers they share.

mod admin;
mod data;
mod ddl;

use super::format;
use super::parse::{Command, Value};
use super::Output;
use admin::{list_regions, status};
use cellar_engine::Engine;
use data::{count, delete, get, get_counter, incr, put, scan};
use ddl::{alter, create};

type CmdResult = Result<Output, String>;

/// Positional arguments with typed accessors that produce readable errors.
struct Args<'a> {
    cmd: &'a Command,
}

impl<'a> Args<'a> {
    fn get(&self, i: usize) -> Option<&'a Value> {
        self.cmd.args.get(i)
    }

    fn bytes(&self, i: usize, what: &str) -> Result<Vec<u8>, String> {
        match self.get(i) {
            Some(Value::Str(s)) => Ok(s.clone()),
            Some(Value::Int(n)) => Ok(n.to_string().into_bytes()),
            Some(other) => Err(format!("{}: {what} must be a string, got {other:?}", self.cmd.name)),
            None => Err(format!("{}: missing {what}", self.cmd.name)),
        }
    }

    fn text(&self, i: usize, what: &str) -> Result<String, String> {
        self.bytes(i, what).map(|b| String::from_utf8_lossy(&b).into_owned())
    }

    fn int(&self, i: usize, what: &str) -> Result<Option<i64>, String> {
        match self.get(i) {
            None | Some(Value::Hash(_)) => Ok(None),
            Some(Value::Int(n)) => Ok(Some(*n)),
            Some(other) => Err(format!("{}: {what} must be an integer, got {other:?}", self.cmd.name)),
        }
    }

    fn hash(&self) -> Option<&'a [(Value, Value)]> {
        self.cmd.args.iter().rev().find_map(|a| match a {
            Value::Hash(h) => Some(h.as_slice()),
            _ => None,
        })
    }
}

fn key_name(k: &Value) -> Option<String> {
    upper(k)
}

fn lookup<'a>(h: &'a [(Value, Value)], key: &str) -> Option<&'a Value> {
    h.iter().find(|(k, _)| key_name(k).as_deref() == Some(key)).map(|(_, v)| v)
}

fn as_u64(v: &Value, key: &str) -> Result<u64, String> {
    match v {
        Value::Int(n) if *n >= 0 => Ok(*n as u64),
        Value::Str(s) => {
            String::from_utf8_lossy(s).trim().parse().map_err(|_| format!("{key} must be a non-negative integer"))
        }
        _ => Err(format!("{key} must be a non-negative integer")),
    }
}

fn as_bool(v: &Value, key: &str) -> Result<bool, String> {
    match v {
        Value::Bool(b) => Ok(*b),
        other => match other.as_text().map(|s| s.to_ascii_lowercase()).as_deref() {
            Some("true") => Ok(true),
            Some("false") => Ok(false),
            _ => Err(format!("{key} must be true or false")),
        },
    }
}

fn as_u32(v: &Value, key: &str) -> Result<u32, String> {
    as_u64(v, key).and_then(|n| u32::try_from(n).map_err(|_| format!("{key} is too large")))
}

/// Splits `family:qualifier` (a bare `family` has no qualifier).
fn split_column(col: &[u8]) -> (Vec<u8>, Option<Vec<u8>>) {
    match col.iter().position(|&b| b == b':') {
        Some(i) => (col[..i].to_vec(), Some(col[i + 1..].to_vec())),
        None => (col.to_vec(), None),
    }
}

fn column_list(v: &Value) -> Result<Vec<Vec<u8>>, String> {
    match v {
        Value::Str(s) => Ok(vec![s.clone()]),
        Value::Array(items) => items
            .iter()
            .map(|i| match i {
                Value::Str(s) => Ok(s.clone()),
                _ => Err("COLUMNS entries must be strings".to_string()),
            })
            .collect(),
        _ => Err("COLUMNS must be a string or an array of strings".into()),
    }
}

fn time_range(v: &Value) -> Result<(u64, u64), String> {
    match v {
        Value::Array(a) if a.len() == 2 => Ok((as_u64(&a[0], "TIMERANGE")?, as_u64(&a[1], "TIMERANGE")?)),
        _ => Err("TIMERANGE must be [min, max]".into()),
    }
}

/// The upper-cased text of a string or constant.
fn upper(v: &Value) -> Option<String> {
    v.as_text().map(|s| s.to_ascii_uppercase())
}

/// One of `names`, matched case-insensitively; the error lists them.
fn choice<T: Copy>(v: &Value, key: &str, names: &[(&str, T)]) -> Result<T, String> {
    let given = upper(v);
    names.iter().find(|(n, _)| given.as_deref() == Some(*n)).map(|(_, t)| *t).ok_or_else(|| {
        let all: Vec<&str> = names.iter().map(|(n, _)| *n).collect();
        format!("{key} must be one of {}", all.join(", "))
    })
}

fn bytes_of(v: &Value, key: &str) -> Result<Vec<u8>, String> {
    match v {
        Value::Str(s) => Ok(s.clone()),
        _ => Err(format!("{key} must be a string")),
    }
}

const HELP: &str = "Commands: create, alter, describe, list, exists, is_enabled, is_disabled, disable, enable, drop, \
truncate, put, get, scan, count, delete, deleteall, incr, get_counter, flush, compact, major_compact, \
list_regions, split, status, exit\n";

/// Runs one parsed command.
pub(crate) fn execute(engine: &Engine, cmd: &Command) -> CmdResult {
    let a = Args { cmd };
    let table = || a.text(0, "table name");
    let done = |r: cellar_engine::Result<()>| r.map(|()| Output::rows(String::new(), 0)).map_err(|e| e.to_string());
    match cmd.name.as_str() {
        "create" => create(engine, &a),
        "alter" => alter(engine, &a),
        "describe" | "desc" => {
            let name = table()?;
            let d = engine.describe(&name).map_err(|e| e.to_string())?;
            let enabled = engine.is_enabled(&name).map_err(|e| e.to_string())?;
            Ok(Output::rows(format::describe(&d, enabled), 1))
        }
        "list" => {
            let names = engine.list_tables();
            let mut text = "TABLE\n".to_string();
            for n in &names {
                text.push_str(n);
                text.push('\n');
            }
            let ret = format!("[{}]", names.iter().map(|n| format!("\"{n}\"")).collect::<Vec<_>>().join(", "));
            Ok(Output { text, rows: Some(names.len()), ret: Some(ret) })
        }
        "exists" => {
            let name = table()?;
            let word = if engine.table_exists(&name) { "does exist" } else { "does not exist" };
            Ok(Output::rows(format!("Table {name} {word}\n"), 0))
        }
        "is_enabled" | "is_disabled" => {
            let enabled = engine.is_enabled(&table()?).map_err(|e| e.to_string())?;
            let answer = if cmd.name == "is_enabled" { enabled } else { !enabled };
            Ok(Output { text: format!("{answer}\n"), rows: Some(0), ret: Some(answer.to_string()) })
        }
        "disable" => done(engine.disable_table(&table()?)),
        "enable" => done(engine.enable_table(&table()?)),
        "drop" => done(engine.drop_table(&table()?)),
        "truncate" => {
            let name = table()?;
            engine.truncate_table(&name).map_err(|e| e.to_string())?;
            Ok(Output::rows(format!("Truncating '{name}' table (it may take a while):\n - Truncating table...\n"), 0))
        }
        "put" => put(engine, &a),
        "get" => get(engine, &a),
        "scan" => scan(engine, &a),
        "count" => count(engine, &a),
        "delete" => delete(engine, &a, false),
        "deleteall" => delete(engine, &a, true),
        "incr" => incr(engine, &a),
        "get_counter" => get_counter(engine, &a),
        "flush" => done(engine.flush(&table()?)),
        "compact" => done(engine.compact(&table()?)),
        "major_compact" => done(engine.major_compact(&table()?)),
        "list_regions" => list_regions(engine, &a),
        "split" => {
            let name = table()?;
            let at = match a.get(1) {
                None => None,
                Some(_) => Some(a.bytes(1, "split key")?),
            };
            engine.split(&name, at.as_deref()).map_err(|e| e.to_string())?;
            Ok(Output::rows(String::new(), 0))
        }
        "status" => status(engine),
        "help" => Ok(Output { text: HELP.into(), rows: None, ret: None }),
        other => Err(format!("Unknown command '{other}'. Try 'help'.")),
    }
}

#[cfg(test)]
mod tests {
    use super::super::Shell;
    use cellar_engine::{EngineOptions, SplitPolicy};

    /// Runs `lines` in a fresh shell; returns the engine and everything printed.
    fn run(lines: &[&str]) -> (cellar_engine::Engine, String, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let engine = cellar_engine::Engine::open(dir.path(), EngineOptions::default()).unwrap();
        let mut shell = Shell::new(engine.clone());
        let mut out = Vec::new();
        for l in lines {
            shell.run_line(l, &mut out).unwrap();
        }
        (engine, String::from_utf8(out).unwrap(), dir)
    }

    #[test]
    fn status_says_why_writes_are_refused() {
        let fs = cellar_engine::fault::FaultFs::new(1);
        let options = EngineOptions::default().fs(std::sync::Arc::new(fs.clone()));
        let engine = cellar_engine::Engine::open("/db", options).unwrap();
        let mut shell = Shell::new(engine.clone());
        let mut out = Vec::new();
        shell.run_line("create 't', 'f'", &mut out).unwrap();
        shell.run_line("status", &mut out).unwrap();
        assert!(!String::from_utf8_lossy(&out).contains("READ-ONLY"));
        fs.set_rates(cellar_engine::fault::FaultRates::default().write(1.0));
        shell.run_line("put 't', 'r', 'f:q', 'v'", &mut out).unwrap();
        fs.set_rates(cellar_engine::fault::FaultRates::default());
        out.clear();
        shell.run_line("status", &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("READ-ONLY until reopened: writing the log segment /db/wal/"), "{text}");
    }

    fn policy(engine: &cellar_engine::Engine, table: &str) -> SplitPolicy {
        engine.describe(table).unwrap().split_policy
    }

    #[test]
    fn create_sets_key_prefix_policies() {
        let (engine, out, _dir) = run(&[
            "create 'a', 'f', {SPLIT_POLICY => 'KeyPrefixRegionSplitPolicy', PREFIX_LENGTH => 8}",
            "create 'b', 'f', {SPLIT_POLICY => 'DelimitedKeyPrefixRegionSplitPolicy', DELIMITER => '#'}",
            "create 'c', 'f', SPLIT_POLICY => 'org.apache.hadoop.hbase.regionserver.KeyPrefixRegionSplitPolicy', PREFIX_LENGTH => '4'",
            "create 'd', 'f', {SPLIT_POLICY => 'SteppingSplitPolicy'}",
            "create 'e', 'f', {SPLIT_POLICY => 'ConstantSizeRegionSplitPolicy', MAX_FILESIZE => 2097152}",
            "create 'g', 'f', {SPLIT_POLICY => 'FieldsKeyPrefixRegionSplitPolicy', PREFIX_FIELDS => [1, \"\\x00\\x01\"]}",
            "create 'h', 'f', {METADATA => {'SPLIT_POLICY' => 'org.apache.hadoop.hbase.regionserver.KeyPrefixRegionSplitPolicy', 'KeyPrefixRegionSplitPolicy.prefix_length' => '2'}}",
            "create 'i', 'f', {CONFIGURATION => {'hbase.regionserver.region.split_restriction.type' => 'DelimitedKeyPrefix', 'hbase.regionserver.region.split_restriction.delimiter' => ','}}",
        ]);
        assert!(!out.contains("ERROR"), "{out}");
        assert_eq!(policy(&engine, "a"), SplitPolicy::KeyPrefix { length: 8 });
        assert_eq!(policy(&engine, "b"), SplitPolicy::DelimitedKeyPrefix { delimiter: b"#".to_vec() });
        assert_eq!(policy(&engine, "c"), SplitPolicy::KeyPrefix { length: 4 });
        assert_eq!(policy(&engine, "d"), SplitPolicy::MidKey);
        assert_eq!(policy(&engine, "e"), SplitPolicy::MidKey);
        assert_eq!(engine.describe("e").unwrap().max_region_size, 2097152);
        assert_eq!(
            policy(&engine, "g"),
            SplitPolicy::Fields(vec![
                cellar_engine::PrefixField::Fixed(1),
                cellar_engine::PrefixField::Terminated(vec![0, 1])
            ])
        );
        assert_eq!(policy(&engine, "h"), SplitPolicy::KeyPrefix { length: 2 });
        assert_eq!(policy(&engine, "i"), SplitPolicy::DelimitedKeyPrefix { delimiter: b",".to_vec() });
    }

    #[test]
    fn describe_shows_the_policy_and_reads_back() {
        let (engine, out, _dir) = run(&[
            "create 'a', 'f', {SPLIT_POLICY => 'KeyPrefixRegionSplitPolicy', PREFIX_LENGTH => 8}",
            "describe 'a'",
            "create 'b', 'f', {SPLIT_POLICY => 'DelimitedKeyPrefixRegionSplitPolicy', DELIMITER => '#'}",
            "describe 'b'",
            "create 'c', 'f'",
            "describe 'c'",
            "create 'g', 'f', {SPLIT_POLICY => 'FieldsKeyPrefixRegionSplitPolicy', PREFIX_FIELDS => [1, \"\\x00'\"]}",
            "describe 'g'",
        ]);
        assert!(!out.contains("ERROR"), "{out}");
        assert!(
            out.contains(
                "TABLE ATTRIBUTES => {DURABILITY => 'SYNC_WAL', MAX_FILESIZE => '10737418240', SPLIT_POLICY => \
             'KeyPrefixRegionSplitPolicy', PREFIX_LENGTH => '8'}\n"
            ),
            "{out}"
        );
        assert!(out.contains(", SPLIT_POLICY => 'DelimitedKeyPrefixRegionSplitPolicy', DELIMITER => '#'}\n"), "{out}");
        assert!(
            out.contains("TABLE ATTRIBUTES => {DURABILITY => 'SYNC_WAL', MAX_FILESIZE => '10737418240'}\n"),
            "{out}"
        );
        let fields = ", SPLIT_POLICY => 'FieldsKeyPrefixRegionSplitPolicy', PREFIX_FIELDS => [1, \"\\x00'\"]}";
        assert!(out.contains(fields), "{out}");
        // What describe prints is valid input for create.
        let (again, out, _dir2) = run(&[&format!("create 'g', 'f', {{{}}}", &fields[2..fields.len() - 1])]);
        assert!(!out.contains("ERROR"), "{out}");
        assert_eq!(policy(&again, "g"), policy(&engine, "g"));
    }

    #[test]
    fn alter_changes_the_policy() {
        let (engine, out, _dir) =
            run(&["create 't', 'f'", "alter 't', {SPLIT_POLICY => 'KeyPrefixRegionSplitPolicy', PREFIX_LENGTH => 8}"]);
        assert!(!out.contains("ERROR"), "{out}");
        assert_eq!(policy(&engine, "t"), SplitPolicy::KeyPrefix { length: 8 });
        let mut shell = Shell::new(engine.clone());
        let mut out = Vec::new();
        for l in [
            "alter 't', PREFIX_LENGTH => 3",
            "alter 't', METHOD => 'table_att', MAX_FILESIZE => 4194304",
            "alter 't', {SPLIT_POLICY => 'DelimitedKeyPrefixRegionSplitPolicy', DELIMITER => ':'}",
        ] {
            shell.run_line(l, &mut out).unwrap();
        }
        assert_eq!(shell.errors(), 0, "{}", String::from_utf8_lossy(&out));
        assert_eq!(policy(&engine, "t"), SplitPolicy::DelimitedKeyPrefix { delimiter: b":".to_vec() });
        assert_eq!(engine.describe("t").unwrap().max_region_size, 4194304);
        shell.run_line("alter 't', SPLIT_POLICY => 'ConstantSizeRegionSplitPolicy'", &mut out).unwrap();
        assert_eq!(policy(&engine, "t"), SplitPolicy::MidKey);
    }

    #[test]
    fn bad_policies_name_the_argument() {
        let (engine, out, _dir) = run(&[
            "create 'a', 'f', {SPLIT_POLICY => 'NoSuchPolicy'}",
            "create 'b', 'f', {SPLIT_POLICY => 'KeyPrefixRegionSplitPolicy'}",
            "create 'c', 'f', {SPLIT_POLICY => 'KeyPrefixRegionSplitPolicy', PREFIX_LENGTH => 0}",
            "create 'd', 'f', {SPLIT_POLICY => 'KeyPrefixRegionSplitPolicy', PREFIX_LENGTH => 'x'}",
            "create 'e', 'f', {SPLIT_POLICY => 'DelimitedKeyPrefixRegionSplitPolicy', DELIMITER => ''}",
            "create 'g', 'f', {SPLIT_POLICY => 'KeyPrefixRegionSplitPolicy', DELIMITER => '#'}",
            "create 'h', 'f', {PREFIX_LENGTH => 4}",
            "create 'i', 'f', {METADATA => {'OTHER' => 'x'}}",
            "create 'j', 'f', {SPLIT_POLICY => 'FieldsKeyPrefixRegionSplitPolicy', PREFIX_FIELDS => []}",
            "create 'k', 'f', {SPLIT_POLICY => 'DelimitedKeyPrefixRegionSplitPolicy', DELIMITER => 5}",
            "create 't', 'f'",
            "alter 't', PREFIX_LENGTH => 4",
            "alter 't', {SPLIT_POLICY => 'KeyPrefixRegionSplitPolicy', PREFIX_LENGTH => -1}",
        ]);
        let errors: Vec<&str> = out.lines().filter(|l| l.starts_with("ERROR: ")).collect();
        assert_eq!(errors.len(), 12, "{out}");
        let expect = [
            "SPLIT_POLICY",
            "needs PREFIX_LENGTH",
            "PREFIX_LENGTH",
            "PREFIX_LENGTH",
            "DELIMITER",
            "DELIMITER does not apply to KeyPrefixRegionSplitPolicy",
            "PREFIX_LENGTH needs a key-prefix SPLIT_POLICY",
            "unknown METADATA key OTHER",
            "PREFIX_FIELDS",
            "DELIMITER must be a string",
            "PREFIX_LENGTH needs a key-prefix SPLIT_POLICY",
            "PREFIX_LENGTH",
        ];
        for (e, want) in errors.iter().zip(expect) {
            assert!(e.contains(want), "{e} lacks {want}");
        }
        assert_eq!(engine.list_tables(), ["t"], "no table was created by a bad command");
        assert_eq!(policy(&engine, "t"), SplitPolicy::MidKey);
    }
}
