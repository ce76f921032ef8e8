//! The shell's commands. Each turns parsed arguments into engine calls and formats the result.

use bytes::Bytes;

use super::format;
use super::parse::{Command, Value};
use super::Output;
use cellar_engine::cell::to_printable;
use cellar_engine::descriptor::{BloomType, Compression, Durability, FamilyDescriptor, TableDescriptor};
use cellar_engine::{Delete, Engine, Filter, Get, Increment, PrefixField, Put, Scan, SplitAlgorithm, SplitPolicy};

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

/// Applies family options from a hash onto `f`.
fn apply_family_options(mut f: FamilyDescriptor, h: &[(Value, Value)]) -> Result<FamilyDescriptor, String> {
    for (k, v) in h {
        let key = key_name(k).ok_or("option names must be strings or constants")?;
        match key.as_str() {
            "NAME" | "METHOD" => {}
            "VERSIONS" => f.max_versions = as_u32(v, "VERSIONS")?,
            "MIN_VERSIONS" => f.min_versions = as_u32(v, "MIN_VERSIONS")?,
            "TTL" => f.ttl_secs = if upper(v).as_deref() == Some("FOREVER") { None } else { Some(as_u64(v, "TTL")?) },
            "KEEP_DELETED_CELLS" => f.keep_deleted_cells = as_bool(v, "KEEP_DELETED_CELLS")?,
            "IN_MEMORY" => f.in_memory = as_bool(v, "IN_MEMORY")?,
            "BLOCKSIZE" => f.block_size = as_u32(v, "BLOCKSIZE")?,
            "BLOOMFILTER" => {
                let names = [("NONE", BloomType::None), ("ROW", BloomType::Row), ("ROWCOL", BloomType::RowCol)];
                f.bloom = choice(v, "BLOOMFILTER", &names)?;
            }
            "COMPRESSION" => {
                let names = [("NONE", Compression::None), ("LZ4", Compression::Lz4), ("ZSTD", Compression::Zstd)];
                f.compression = choice(v, "COMPRESSION", &names)?;
            }
            "BLOCKCACHE" | "REPLICATION_SCOPE" | "DATA_BLOCK_ENCODING" => {}
            other => return Err(format!("unknown column family option {other}")),
        }
    }
    Ok(f)
}

fn apply_table_option(t: &mut TableDescriptor, key: &str, v: &Value) -> Result<bool, String> {
    match key {
        "DURABILITY" => {
            let names = [
                ("SKIP_WAL", Durability::SkipWal),
                ("ASYNC_WAL", Durability::AsyncWal),
                ("SYNC_WAL", Durability::SyncWal),
                ("USE_DEFAULT", Durability::SyncWal),
                ("FSYNC_WAL", Durability::FsyncWal),
            ];
            t.durability = choice(v, "DURABILITY", &names)?;
        }
        "MAX_FILESIZE" => t.max_region_size = as_u64(v, "MAX_FILESIZE")?,
        _ => return Ok(false),
    }
    Ok(true)
}

/// Canonical name of a table option that sets the split policy: ours (`SPLIT_POLICY`,
/// `PREFIX_LENGTH`, `DELIMITER`, `PREFIX_FIELDS`) and HBase's metadata and configuration keys
/// for the same settings.
fn policy_key(key: &str) -> Option<&'static str> {
    match key {
        "SPLIT_POLICY" | "HBASE.REGIONSERVER.REGION.SPLIT_RESTRICTION.TYPE" => Some("SPLIT_POLICY"),
        "PREFIX_LENGTH"
        | "KEYPREFIXREGIONSPLITPOLICY.PREFIX_LENGTH"
        | "PREFIX_SPLIT_KEY_POLICY.PREFIX_LENGTH"
        | "HBASE.REGIONSERVER.REGION.SPLIT_RESTRICTION.PREFIX_LENGTH" => Some("PREFIX_LENGTH"),
        "DELIMITER"
        | "DELIMITEDKEYPREFIXREGIONSPLITPOLICY.DELIMITER"
        | "HBASE.REGIONSERVER.REGION.SPLIT_RESTRICTION.DELIMITER" => Some("DELIMITER"),
        "PREFIX_FIELDS" => Some("PREFIX_FIELDS"),
        _ => None,
    }
}

/// True for the table options [`split_policy_option`] reads.
fn is_policy_option(key: &str) -> bool {
    policy_key(key).is_some() || matches!(key, "METADATA" | "CONFIGURATION")
}

/// The split-policy settings of a table-options hash, `METADATA => {...}` and
/// `CONFIGURATION => {...}` looked into, by canonical name.
fn policy_settings<'a>(h: &'a [(Value, Value)], out: &mut Vec<(&'static str, &'a Value)>) -> Result<(), String> {
    for (k, v) in h {
        let key = key_name(k).ok_or("option names must be strings")?;
        match (policy_key(&key), v) {
            (Some(name), _) => out.push((name, v)),
            (None, Value::Hash(inner)) if matches!(key.as_str(), "METADATA" | "CONFIGURATION") => {
                for (ik, _) in inner {
                    let ikey = key_name(ik).ok_or("option names must be strings")?;
                    if policy_key(&ikey).is_none() {
                        return Err(format!("unknown {key} key {}", ik.as_text().unwrap_or_default()));
                    }
                }
                policy_settings(inner, out)?;
            }
            (None, _) if matches!(key.as_str(), "METADATA" | "CONFIGURATION") => {
                return Err(format!("{key} must be a hash"));
            }
            (None, _) => {}
        }
    }
    Ok(())
}

/// The kinds of split policy, with the names the shell accepts for each (HBase's class names,
/// plain or fully qualified, and its split-restriction types), matched case-insensitively.
#[derive(Clone, Copy, PartialEq, Eq)]
enum PolicyKind {
    MidKey,
    KeyPrefix,
    Delimited,
    Fields,
}

const POLICY_NAMES: [(&str, PolicyKind); 11] = [
    ("KeyPrefixRegionSplitPolicy", PolicyKind::KeyPrefix),
    ("DelimitedKeyPrefixRegionSplitPolicy", PolicyKind::Delimited),
    ("FieldsKeyPrefixRegionSplitPolicy", PolicyKind::Fields),
    ("ConstantSizeRegionSplitPolicy", PolicyKind::MidKey),
    ("SteppingSplitPolicy", PolicyKind::MidKey),
    ("SteppingRegionSplitPolicy", PolicyKind::MidKey),
    ("IncreasingToUpperBoundRegionSplitPolicy", PolicyKind::MidKey),
    ("KeyPrefix", PolicyKind::KeyPrefix),
    ("DelimitedKeyPrefix", PolicyKind::Delimited),
    ("NoRestriction", PolicyKind::MidKey),
    ("MidKey", PolicyKind::MidKey),
];

fn policy_kind(v: &Value) -> Result<PolicyKind, String> {
    let name = v.as_text().ok_or("SPLIT_POLICY must be a string")?;
    let short = name.rsplit('.').next().unwrap_or_default();
    POLICY_NAMES.iter().find(|(n, _)| n.eq_ignore_ascii_case(short)).map(|(_, k)| *k).ok_or_else(|| {
        format!(
            "unknown SPLIT_POLICY {name}; use KeyPrefixRegionSplitPolicy (with PREFIX_LENGTH), \
             DelimitedKeyPrefixRegionSplitPolicy (with DELIMITER), FieldsKeyPrefixRegionSplitPolicy (with \
             PREFIX_FIELDS) or ConstantSizeRegionSplitPolicy"
        )
    })
}

fn prefix_fields(v: &Value) -> Result<Vec<PrefixField>, String> {
    let Value::Array(items) = v else {
        return Err("PREFIX_FIELDS must be an array of byte counts and terminator strings".into());
    };
    items
        .iter()
        .map(|i| match i {
            Value::Str(t) => Ok(PrefixField::Terminated(t.clone())),
            other => as_u32(other, "PREFIX_FIELDS").map(PrefixField::Fixed),
        })
        .collect()
}

/// The split policy a table-options hash sets, if any. Settings given without `SPLIT_POLICY`
/// change the `current` policy's parameters (`alter 't', PREFIX_LENGTH => 4`).
fn split_policy_option(h: &[(Value, Value)], current: &SplitPolicy) -> Result<Option<SplitPolicy>, String> {
    let mut settings = Vec::new();
    policy_settings(h, &mut settings)?;
    if settings.is_empty() {
        return Ok(None);
    }
    let get = |name: &str| settings.iter().rev().find(|(n, _)| *n == name).map(|(_, v)| *v);
    let current_kind = match current {
        SplitPolicy::KeyPrefix { .. } => PolicyKind::KeyPrefix,
        SplitPolicy::DelimitedKeyPrefix { .. } => PolicyKind::Delimited,
        SplitPolicy::Fields(_) => PolicyKind::Fields,
        _ => PolicyKind::MidKey,
    };
    let kind = match get("SPLIT_POLICY") {
        Some(v) => policy_kind(v)?,
        None => current_kind,
    };
    let (needed, class) = match kind {
        PolicyKind::MidKey => (None, "ConstantSizeRegionSplitPolicy"),
        PolicyKind::KeyPrefix => (Some("PREFIX_LENGTH"), "KeyPrefixRegionSplitPolicy"),
        PolicyKind::Delimited => (Some("DELIMITER"), "DelimitedKeyPrefixRegionSplitPolicy"),
        PolicyKind::Fields => (Some("PREFIX_FIELDS"), "FieldsKeyPrefixRegionSplitPolicy"),
    };
    for (name, _) in &settings {
        if *name != "SPLIT_POLICY" && Some(*name) != needed {
            return Err(match needed {
                Some(n) => format!("{name} does not apply to {class}, which takes {n}"),
                None => format!("{name} needs a key-prefix SPLIT_POLICY (e.g. KeyPrefixRegionSplitPolicy)"),
            });
        }
    }
    let param = match (needed, needed.and_then(get)) {
        (None, _) => return Ok(Some(SplitPolicy::MidKey)),
        (Some(_), Some(v)) => v,
        // `SPLIT_POLICY` repeated without its parameter keeps the current one.
        (Some(_), None) if kind == current_kind => return Ok(Some(current.clone())),
        (Some(n), None) => return Err(format!("{class} needs {n}")),
    };
    let policy = match kind {
        PolicyKind::KeyPrefix => SplitPolicy::KeyPrefix { length: as_u32(param, "PREFIX_LENGTH")? },
        PolicyKind::Delimited => SplitPolicy::DelimitedKeyPrefix { delimiter: bytes_of(param, "DELIMITER")? },
        PolicyKind::Fields => SplitPolicy::Fields(prefix_fields(param)?),
        PolicyKind::MidKey => SplitPolicy::MidKey,
    };
    policy.validate().map_err(|e| e.to_string())?;
    Ok(Some(policy))
}

/// Split keys from `SPLITS => [...]`, or `NUMREGIONS => n, SPLITALGO => 'HexStringSplit'`.
fn create_splits(h: &[(Value, Value)]) -> Result<Vec<Bytes>, String> {
    if let Some(v) = lookup(h, "SPLITS") {
        let Value::Array(items) = v else {
            return Err("SPLITS must be an array of strings".into());
        };
        return items.iter().map(|i| bytes_of(i, "SPLITS").map(Bytes::from)).collect();
    }
    match (lookup(h, "NUMREGIONS"), lookup(h, "SPLITALGO")) {
        (None, None) => Ok(Vec::new()),
        (Some(n), Some(algo)) => {
            let name = algo.as_text().ok_or("SPLITALGO must be a string")?;
            let algo = SplitAlgorithm::from_name(&name)
                .ok_or_else(|| format!("unknown SPLITALGO {name}; use HexStringSplit or UniformSplit"))?;
            algo.split_keys(as_u64(n, "NUMREGIONS")? as usize).map_err(|e| e.to_string())
        }
        _ => Err("NUMREGIONS and SPLITALGO go together".into()),
    }
}

fn create(engine: &Engine, a: &Args<'_>) -> CmdResult {
    let name = a.text(0, "table name")?;
    let mut desc = TableDescriptor::new(name.clone());
    let mut splits = Vec::new();
    for v in &a.cmd.args[1..] {
        match v {
            Value::Str(f) => desc = desc.family(FamilyDescriptor::new(String::from_utf8_lossy(f))),
            Value::Hash(h) => match lookup(h, "NAME") {
                Some(n) => {
                    let fname = n.as_text().ok_or("NAME must be a string")?;
                    desc = desc.family(apply_family_options(FamilyDescriptor::new(fname), h)?);
                }
                None => {
                    splits = create_splits(h)?;
                    if let Some(policy) = split_policy_option(h, &desc.split_policy)? {
                        desc.split_policy = policy;
                    }
                    for (k, v) in h {
                        let key = key_name(k).ok_or("option names must be strings")?;
                        let split_option = matches!(key.as_str(), "SPLITS" | "NUMREGIONS" | "SPLITALGO");
                        if !split_option && !is_policy_option(&key) && !apply_table_option(&mut desc, &key, v)? {
                            return Err(format!("unknown table option {key}"));
                        }
                    }
                }
            },
            other => return Err(format!("create: unexpected argument {other:?}")),
        }
    }
    engine.create_table_with_splits(desc, splits).map_err(|e| e.to_string())?;
    Ok(Output { text: String::new(), rows: Some(0), ret: Some(format!("Hbase::Table - {name}")) })
}

fn alter(engine: &Engine, a: &Args<'_>) -> CmdResult {
    let table = a.text(0, "table name")?;
    let mut desc = engine.describe(&table).map_err(|e| e.to_string())?;
    for v in &a.cmd.args[1..] {
        let Value::Hash(h) = v else {
            return Err("alter: expected NAME => 'family', ...".into());
        };
        if let Some(f) = lookup(h, "DELETE") {
            let name = f.as_text().ok_or("'delete' => needs a family name")?;
            engine.delete_family(&table, &name).map_err(|e| e.to_string())?;
            continue;
        }
        match lookup(h, "NAME") {
            Some(n) => {
                let fname = n.as_text().ok_or("NAME must be a string")?;
                let is_delete =
                    lookup(h, "METHOD").and_then(Value::as_text).is_some_and(|m| m.eq_ignore_ascii_case("delete"));
                if is_delete {
                    engine.delete_family(&table, &fname).map_err(|e| e.to_string())?;
                } else {
                    let base = desc
                        .get_family(fname.as_bytes())
                        .cloned()
                        .unwrap_or_else(|| FamilyDescriptor::new(fname.clone()));
                    engine.modify_family(&table, apply_family_options(base, h)?).map_err(|e| e.to_string())?;
                }
            }
            None => {
                let mut changed = desc.clone();
                if let Some(policy) = split_policy_option(h, &desc.split_policy)? {
                    changed.split_policy = policy;
                }
                for (k, v) in h {
                    let key = key_name(k).ok_or("option names must be strings")?;
                    let table_att = key == "METHOD" && upper(v).as_deref() == Some("TABLE_ATT");
                    if !table_att && !is_policy_option(&key) && !apply_table_option(&mut changed, &key, v)? {
                        return Err(format!("unknown table option {key}"));
                    }
                }
                engine
                    .alter_table(&table, |d| {
                        *d = changed;
                        Ok(())
                    })
                    .map_err(|e| e.to_string())?;
            }
        }
        desc = engine.describe(&table).map_err(|e| e.to_string())?;
    }
    Ok(Output::rows("Updating all regions with the new schema...\nDone.\n".into(), 0))
}

fn put(engine: &Engine, a: &Args<'_>) -> CmdResult {
    let t = engine.table(&a.text(0, "table name")?).map_err(|e| e.to_string())?;
    let row = a.bytes(1, "row")?;
    let (fam, qual) = split_column(&a.bytes(2, "column")?);
    let value = a.bytes(3, "value")?;
    let qual = qual.unwrap_or_default();
    let mut p = match a.int(4, "timestamp")? {
        Some(ts) if ts >= 0 => Put::new(row).add_at(fam, qual, ts as u64, value),
        Some(_) => return Err("put: timestamp must not be negative".into()),
        None => Put::new(row).add(fam, qual, value),
    };
    if let Some(ttl) = a.hash().and_then(|h| lookup(h, "TTL")) {
        p = p.ttl_ms(as_u64(ttl, "TTL")?);
    }
    t.put(p).map_err(|e| e.to_string())?;
    Ok(Output::rows(String::new(), 0))
}

/// Reads COLUMN(S), VERSIONS, TIMERANGE, TIMESTAMP and the scan-only keys into a `Scan`.
fn scan_options(h: &[(Value, Value)], mut scan: Scan) -> Result<Scan, String> {
    for (k, v) in h {
        let key = key_name(k).ok_or("option names must be strings or constants")?;
        scan = match key.as_str() {
            "STARTROW" => scan.start(bytes_of(v, "STARTROW")?),
            "STOPROW" | "ENDROW" => scan.stop(bytes_of(v, "STOPROW")?),
            "ROWPREFIXFILTER" => scan.prefix(bytes_of(v, "ROWPREFIXFILTER")?),
            "LIMIT" => scan.limit(as_u64(v, "LIMIT")? as usize),
            "REVERSED" => scan.reversed(as_bool(v, "REVERSED")?),
            "RAW" => scan.raw(as_bool(v, "RAW")?),
            "BATCH" => scan.batch(as_u64(v, "BATCH")? as usize),
            "VERSIONS" => scan.max_versions(as_u32(v, "VERSIONS")?),
            "TIMERANGE" => {
                let (lo, hi) = time_range(v)?;
                scan.time_range(lo, hi)
            }
            "TIMESTAMP" => scan.timestamp(as_u64(v, "TIMESTAMP")?),
            "COLUMNS" | "COLUMN" => {
                for col in column_list(v)? {
                    scan = match split_column(&col) {
                        (f, Some(q)) => scan.column(f, q),
                        (f, None) => scan.family(f),
                    };
                }
                scan
            }
            "FILTER" => scan.filter(filter_of(v)?),
            "CACHE" | "CACHE_BLOCKS" => scan,
            other => return Err(format!("unknown option {other}")),
        };
    }
    Ok(scan)
}

/// `FILTER => "..."`: HBase's filter language.
fn filter_of(v: &Value) -> Result<Filter, String> {
    let text = bytes_of(v, "FILTER")?;
    let text = String::from_utf8(text).map_err(|_| "FILTER must be text".to_string())?;
    Filter::parse(&text).map_err(|e| e.to_string())
}

fn bytes_of(v: &Value, key: &str) -> Result<Vec<u8>, String> {
    match v {
        Value::Str(s) => Ok(s.clone()),
        _ => Err(format!("{key} must be a string")),
    }
}

fn get(engine: &Engine, a: &Args<'_>) -> CmdResult {
    let t = engine.table(&a.text(0, "table name")?).map_err(|e| e.to_string())?;
    let row = a.bytes(1, "row")?;
    let mut g = Get::new(row);
    for v in &a.cmd.args[2..] {
        let cols = match v {
            Value::Hash(h) => {
                for (k, v) in h {
                    let key = key_name(k).ok_or("option names must be strings")?;
                    g = match key.as_str() {
                        "COLUMN" | "COLUMNS" => {
                            for col in column_list(v)? {
                                g = match split_column(&col) {
                                    (f, Some(q)) => g.column(f, q),
                                    (f, None) => g.family(f),
                                };
                            }
                            g
                        }
                        "VERSIONS" => g.max_versions(as_u32(v, "VERSIONS")?),
                        "TIMERANGE" => {
                            let (lo, hi) = time_range(v)?;
                            g.time_range(lo, hi)
                        }
                        "TIMESTAMP" => g.timestamp(as_u64(v, "TIMESTAMP")?),
                        "FILTER" => g.filter(filter_of(v)?),
                        other => return Err(format!("unknown option {other}")),
                    };
                }
                continue;
            }
            other => column_list(other)?,
        };
        for col in cols {
            g = match split_column(&col) {
                (f, Some(q)) => g.column(f, q),
                (f, None) => g.family(f),
            };
        }
    }
    let r = t.get(g).map_err(|e| e.to_string())?;
    let mut text = format::get_header();
    for c in &r.cells {
        text.push_str(&format::get_line(c));
    }
    Ok(Output::rows(text, usize::from(!r.is_empty())))
}

fn scan(engine: &Engine, a: &Args<'_>) -> CmdResult {
    let t = engine.table(&a.text(0, "table name")?).map_err(|e| e.to_string())?;
    let s = scan_options(a.hash().unwrap_or(&[]), Scan::new())?;
    let mut text = format::scan_header();
    let mut rows = 0;
    let mut last: Option<Bytes> = None;
    for r in t.scan(s).map_err(|e| e.to_string())? {
        let r = r.map_err(|e| e.to_string())?;
        if last.as_ref() != Some(&r.row) {
            rows += 1;
        }
        for c in &r.cells {
            text.push_str(&format::scan_line(c));
        }
        last = Some(r.row);
    }
    Ok(Output::rows(text, rows))
}

fn count(engine: &Engine, a: &Args<'_>) -> CmdResult {
    let t = engine.table(&a.text(0, "table name")?).map_err(|e| e.to_string())?;
    let mut s = Scan::new().filter(cellar_engine::Filter::FirstKeyOnly);
    if let Some(h) = a.hash() {
        let h: Vec<_> =
            h.iter().filter(|(k, _)| !matches!(key_name(k).as_deref(), Some("INTERVAL"))).cloned().collect();
        s = scan_options(&h, s)?;
    }
    let mut n = 0;
    for r in t.scan(s).map_err(|e| e.to_string())? {
        r.map_err(|e| e.to_string())?;
        n += 1;
    }
    Ok(Output { text: String::new(), rows: Some(n), ret: Some(n.to_string()) })
}

fn delete(engine: &Engine, a: &Args<'_>, all: bool) -> CmdResult {
    let t = engine.table(&a.text(0, "table name")?).map_err(|e| e.to_string())?;
    let row = a.bytes(1, "row")?;
    // `delete t, r, col[, ts]`; `deleteall t, r[, col][, ts]`.
    let (column, ts) = match (a.get(2), a.get(3)) {
        (Some(Value::Int(ts)), _) if all => (None, Some(*ts)),
        (Some(Value::Str(c)), Some(Value::Int(ts))) => (Some(c.clone()), Some(*ts)),
        (Some(Value::Str(c)), _) => (Some(c.clone()), None),
        (None, _) if all => (None, None),
        _ => return Err(format!("{}: expected table, row, column[, timestamp]", a.cmd.name)),
    };
    let ts = match ts {
        Some(ts) if ts < 0 => return Err("timestamp must not be negative".into()),
        Some(ts) => Some(ts as u64),
        None => None,
    };
    let d = match (column.map(|c| split_column(&c)), ts) {
        (None, None) => Delete::new(row),
        (None, Some(ts)) => Delete::new(row).at(ts),
        (Some((f, Some(q))), None) => Delete::new(row).add_columns(f, q),
        (Some((f, Some(q))), Some(ts)) => Delete::new(row).add_columns_at(f, q, ts),
        (Some((f, None)), None) => Delete::new(row).add_family(f),
        (Some((f, None)), Some(ts)) => Delete::new(row).add_family_at(f, ts),
    };
    t.delete(d).map_err(|e| e.to_string())?;
    Ok(Output::rows(String::new(), 0))
}

fn counter_column(a: &Args<'_>) -> Result<(Vec<u8>, Vec<u8>), String> {
    match split_column(&a.bytes(2, "column")?) {
        (f, Some(q)) => Ok((f, q)),
        (f, None) => Ok((f, Vec::new())),
    }
}

fn incr(engine: &Engine, a: &Args<'_>) -> CmdResult {
    let t = engine.table(&a.text(0, "table name")?).map_err(|e| e.to_string())?;
    let row = a.bytes(1, "row")?;
    let (f, q) = counter_column(a)?;
    let by = a.int(3, "increment")?.unwrap_or(1);
    let r = t.increment(Increment::new(row).add(f.clone(), q.clone(), by)).map_err(|e| e.to_string())?;
    let v = r.value(&f, &q).and_then(|v| <[u8; 8]>::try_from(v.as_ref()).ok()).map_or(0, i64::from_be_bytes);
    Ok(Output::rows(format!("COUNTER VALUE = {v}\n"), 0))
}

fn get_counter(engine: &Engine, a: &Args<'_>) -> CmdResult {
    let t = engine.table(&a.text(0, "table name")?).map_err(|e| e.to_string())?;
    let row = a.bytes(1, "row")?;
    let (f, q) = counter_column(a)?;
    let r = t.get(Get::new(row).column(f.clone(), q.clone())).map_err(|e| e.to_string())?;
    let text = match r.value(&f, &q) {
        None => "No counter found at specified coordinates\n".to_string(),
        Some(v) => match <[u8; 8]>::try_from(v.as_ref()) {
            Ok(b) => format!("COUNTER VALUE = {}\n", i64::from_be_bytes(b)),
            Err(_) => return Err(format!("cell holds {} bytes, not an 8-byte counter", v.len())),
        },
    };
    Ok(Output { text, rows: None, ret: None })
}

fn list_regions(engine: &Engine, a: &Args<'_>) -> CmdResult {
    let table = a.text(0, "table name")?;
    let regions = engine.regions(&table).map_err(|e| e.to_string())?;
    let mut rows: Vec<[String; 5]> =
        vec![["REGION_NAME".into(), "START_KEY".into(), "END_KEY".into(), "SIZE".into(), "REQ".into()]];
    for r in &regions {
        rows.push([
            format!("{table},{},{}", to_printable(&r.start_key), r.id),
            to_printable(&r.start_key),
            to_printable(&r.end_key),
            ((r.file_bytes + r.memstore_bytes) / (1024 * 1024)).to_string(),
            (r.reads + r.writes).to_string(),
        ]);
    }
    let widths: Vec<usize> = (0..5).map(|i| rows.iter().map(|r| r[i].len()).max().unwrap_or(0)).collect();
    let mut text = String::new();
    for (n, r) in rows.iter().enumerate() {
        let cells: Vec<String> = r.iter().zip(&widths).map(|(c, w)| format!(" {c:>w$} |")).collect();
        text.push_str(&cells.concat());
        text.push('\n');
        if n == 0 {
            let rule: Vec<String> = widths.iter().map(|w| format!(" {} |", "-".repeat(*w))).collect();
            text.push_str(&rule.concat());
            text.push('\n');
        }
    }
    text.push_str(&format!(" {} rows\n", regions.len()));
    Ok(Output { text, rows: None, ret: None })
}

fn status(engine: &Engine) -> CmdResult {
    let tables = engine.list_tables();
    let mut regions = 0;
    let mut requests = 0;
    for t in &tables {
        for r in engine.regions(t).map_err(|e| e.to_string())? {
            regions += 1;
            requests += r.reads + r.writes;
        }
    }
    let c = engine.cache_stats();
    Ok(Output {
        text: format!(
            "1 active master, 0 backup masters, 1 servers, 0 dead, {regions}.0000 average load\n\
             {} tables, {regions} regions, {requests} requests, block cache {} of {} bytes ({} of them file indexes and blooms), {} hits, {} misses, {} WAL segments\n",
            tables.len(),
            c.used_bytes + c.pinned_bytes,
            c.capacity_bytes,
            c.pinned_bytes,
            c.hits,
            c.misses,
            engine.wal_segments()
        ) + &engine.read_only_reason().map(|why| format!("READ-ONLY until reopened: {why}\n")).unwrap_or_default(),
        rows: None,
        ret: None,
    })
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
        let options = EngineOptions { fs: std::sync::Arc::new(fs.clone()), ..EngineOptions::default() };
        let engine = cellar_engine::Engine::open("/db", options).unwrap();
        let mut shell = Shell::new(engine.clone());
        let mut out = Vec::new();
        shell.run_line("create 't', 'f'", &mut out).unwrap();
        shell.run_line("status", &mut out).unwrap();
        assert!(!String::from_utf8_lossy(&out).contains("READ-ONLY"));
        fs.set_rates(cellar_engine::fault::FaultRates { write: 1.0, ..Default::default() });
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
