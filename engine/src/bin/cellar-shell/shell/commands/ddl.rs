//! Table definitions: `create` and `alter`, with the family, table and split-policy options
//! they take.

use bytes::Bytes;

use super::{as_bool, as_u32, as_u64, bytes_of, choice, key_name, lookup, upper, Args, CmdResult};
use crate::shell::parse::Value;
use crate::shell::Output;
use cellar_engine::descriptor::{BloomType, Compression, Durability, FamilyDescriptor, TableDescriptor};
use cellar_engine::{Engine, PrefixField, SplitAlgorithm, SplitPolicy};

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

pub(super) fn create(engine: &Engine, a: &Args<'_>) -> CmdResult {
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

pub(super) fn alter(engine: &Engine, a: &Args<'_>) -> CmdResult {
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
