//! Quickstart: create a table on the embedded engine, write rows, read them back, scan (rows
//! returned, and rows lent through a cursor), count, and reopen to show the data is durable.
//!
//! Run with `cargo run --release --example quickstart [DATA_DIR]` (default: a fresh temporary
//! directory). Every printed result is also asserted, so the example fails loudly if the
//! engine misbehaves.

use cellar::prelude::*;

#[allow(dead_code)]
fn main() -> cellar::engine::Result<()> {
    let temp = tempfile::tempdir().map_err(|e| cellar::engine::Error::Io { path: "tempdir".into(), source: e })?;
    let dir = std::env::args().nth(1).map_or_else(|| temp.path().to_path_buf(), Into::into);
    run(&dir)
}

/// The quickstart in `dir` (tests run it in a temporary directory).
pub fn run(dir: &std::path::Path) -> cellar::engine::Result<()> {
    println!("data directory: {}", dir.display());

    let engine = Engine::open(dir, EngineOptions::default())?;
    if engine.table_exists("metrics") {
        engine.disable_table("metrics")?;
        engine.drop_table("metrics")?;
    }
    // A log-style table: the row key leads with the host, then a reverse timestamp so the newest
    // sample of a host sorts first, as the HBase schema guide recommends.
    engine.create_table(
        TableDescriptor::new("metrics")
            .family(FamilyDescriptor::new("m").max_versions(3).compression(Compression::Lz4))
            .family(FamilyDescriptor::new("c")),
    )?;
    let metrics = engine.table("metrics")?;
    let key = |host: &str, ts: u64| [host.as_bytes(), b"#", &(u64::MAX - ts).to_be_bytes()].concat();

    for host in ["web1", "web2", "db1"] {
        for (i, ts) in (1_700_000_000_000u64..).step_by(60_000).take(5).enumerate() {
            let load = format!("{:.2}", 0.5 + i as f64 / 10.0);
            metrics.put(Put::new(key(host, ts)).add_at("m", "load", ts, load))?;
            metrics.increment(Increment::new(host.as_bytes().to_vec()).add("c", "samples", 1))?;
        }
    }
    engine.flush("metrics")?;

    // Newest sample of web1: the first row of its prefix.
    let newest = metrics.scan(Scan::new().prefix("web1#").limit(1))?.next().expect("web1 has samples")?;
    let load = newest.value(b"m", b"load").expect("load column");
    println!("newest web1 load: {}", String::from_utf8_lossy(load));
    assert_eq!(load.as_ref(), b"0.90");

    let web_rows =
        metrics.scan(Scan::new().prefix("web"))?.filter(|r| r.as_ref().is_ok_and(|r| r.row.contains(&b'#'))).count();
    println!("web samples: {web_rows}");
    assert_eq!(web_rows, 10);

    // The same samples pulled through a cursor: each row is lent in place until the next
    // move, for reads that keep only what they compute (here, the mean load).
    let mut cursor = metrics.scan_cursor(Scan::new().prefix("web1#").column("m", "load"))?;
    let (mut sum, mut n) = (0.0, 0);
    while cursor.advance()? {
        let row = cursor.row().expect("the cursor is on a row");
        let load = std::str::from_utf8(row.value(b"m", b"load").expect("load column")).expect("text");
        sum += load.parse::<f64>().expect("a number");
        n += 1;
    }
    println!("web1 mean load over {n} samples: {:.2}", sum / f64::from(n));
    assert_eq!((n, format!("{:.2}", sum / f64::from(n))), (5, "0.70".to_string()));

    let counter = metrics.get(Get::new("db1").column("c", "samples"))?;
    let samples =
        i64::from_be_bytes(counter.value(b"c", b"samples").expect("counter").as_ref().try_into().expect("8 bytes"));
    println!("db1 samples counted: {samples}");
    assert_eq!(samples, 5);

    // Delete web2's history and compact it away.
    for r in metrics.scan(Scan::new().prefix("web2#"))? {
        metrics.delete(Delete::new(r?.row))?;
    }
    engine.major_compact("metrics")?;
    drop(metrics);
    drop(engine);

    // Reopen: everything acknowledged is still there.
    let engine = Engine::open(dir, EngineOptions::default())?;
    let metrics = engine.table("metrics")?;
    let remaining = metrics.scan(Scan::new().filter(Filter::FirstKeyOnly))?.count();
    println!("rows after delete, compaction and reopen: {remaining}");
    assert_eq!(remaining, 10 + 3);
    for region in engine.regions("metrics")? {
        println!("region {}: {} file(s), {} bytes on disk", region.id, region.files, region.file_bytes);
    }
    println!("quickstart OK");
    Ok(())
}
