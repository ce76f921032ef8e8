//! Admin commands: `list_regions` and `status`.

use super::{Args, CmdResult};
use crate::shell::Output;
use cellar_engine::cell::to_printable;
use cellar_engine::Engine;

pub(super) fn list_regions(engine: &Engine, a: &Args<'_>) -> CmdResult {
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

pub(super) fn status(engine: &Engine) -> CmdResult {
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
