//! Data commands: `put`, `get`, `scan`, `count`, `delete`, `deleteall`, `incr` and
//! `get_counter`.

use bytes::Bytes;

use super::{
    as_bool, as_u32, as_u64, bytes_of, column_list, key_name, lookup, split_column, time_range, Args, CmdResult,
};
use crate::shell::format;
use crate::shell::parse::Value;
use crate::shell::Output;
use cellar_engine::{Delete, Engine, Filter, Get, Increment, Put, Scan};

pub(super) fn put(engine: &Engine, a: &Args<'_>) -> CmdResult {
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

pub(super) fn get(engine: &Engine, a: &Args<'_>) -> CmdResult {
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

pub(super) fn scan(engine: &Engine, a: &Args<'_>) -> CmdResult {
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

pub(super) fn count(engine: &Engine, a: &Args<'_>) -> CmdResult {
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

pub(super) fn delete(engine: &Engine, a: &Args<'_>, all: bool) -> CmdResult {
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

pub(super) fn incr(engine: &Engine, a: &Args<'_>) -> CmdResult {
    let t = engine.table(&a.text(0, "table name")?).map_err(|e| e.to_string())?;
    let row = a.bytes(1, "row")?;
    let (f, q) = counter_column(a)?;
    let by = a.int(3, "increment")?.unwrap_or(1);
    let r = t.increment(Increment::new(row).add(f.clone(), q.clone(), by)).map_err(|e| e.to_string())?;
    let v = r.value(&f, &q).and_then(|v| <[u8; 8]>::try_from(v.as_ref()).ok()).map_or(0, i64::from_be_bytes);
    Ok(Output::rows(format!("COUNTER VALUE = {v}\n"), 0))
}

pub(super) fn get_counter(engine: &Engine, a: &Args<'_>) -> CmdResult {
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
