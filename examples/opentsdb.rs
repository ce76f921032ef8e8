//! Time series the OpenTSDB way, the seeds' "log data and timeseries data on steroids" case
//! study. Samples of two metrics from four hosts in two data centres, one every 10 seconds for
//! three hours, stored twice:
//!
//! - **tall**, as they arrive: a row per sample, `[metric][timestamp][tags]`, the metric name
//!   and the tags spelled out in every row key;
//! - **OpenTSDB's layout**: a row per metric, hour and tag set, `[metric id][base hour][dc
//!   id][host id]` — metric and tag values stored as 3-byte uids — with one column per
//!   sample, its qualifier the second within the hour (a `u16`, so a row holds at most an
//!   hour).
//!
//! One query runs on the tall rows — the mean CPU of data centre `east` from 08:20 to 09:40.
//! Then a compaction job rewrites each hour of tall rows into wide rows, as OpenTSDB's
//! compactions do, and deletes what it rewrote; it adds entries rather than replacing rows,
//! so a run killed halfway is finished by running it again. The same query runs on the wide
//! rows, and the example prints the round trips, rows, cells and bytes each read, and the
//! bytes each layout stores.
//!
//! Run with `cargo run --release --example opentsdb`. Every printed result is also asserted.

use std::collections::BTreeMap;

use cellar::orm::store::Costs;
use cellar::orm::{Entity as _, Result};
use cellar::prelude::*;

/// A sample as it arrives: a tall row.
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "tsdb_tall")]
struct Sample {
    #[cellar(key)]
    metric: String,
    /// Seconds since the epoch.
    #[cellar(key)]
    at: u32,
    /// `dc=...,host=...`, tag keys in order.
    #[cellar(key)]
    tags: String,
    #[cellar(column = "v")]
    value: f64,
}

/// An hour of one series, OpenTSDB's way.
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "tsdb")]
struct HourRow {
    #[cellar(key, uid = "metrics")]
    metric: String,
    /// The hour's first second since the epoch.
    #[cellar(key)]
    base_hour: u32,
    #[cellar(key, uid = "tagv")]
    dc: String,
    #[cellar(key, uid = "tagv")]
    host: String,
    /// Seconds into the hour → value; read on demand, a slice at a time.
    #[cellar(columns(family = "t", lazy))]
    points: BTreeMap<u16, f64>,
}

/// 2026-11-22 07:00:00 UTC, in seconds.
const SEVEN_AM: u32 = 1_795_849_200;
const HOUR: u32 = 3_600;
const HOURS: u32 = 3;
const STEP: u32 = 10;
const METRICS: [&str; 2] = ["sys.cpu.user", "sys.mem.free"];
const HOSTS: [(&str, &str); 4] = [("east", "web-1"), ("east", "web-2"), ("west", "web-3"), ("west", "web-4")];

fn tags(dc: &str, host: &str) -> String {
    format!("dc={dc},host={host}")
}

fn value(metric: usize, host: usize, at: u32) -> f64 {
    f64::from((metric as u32 * 17 + host as u32 * 37 + at / STEP * 13) % 1_000) / 10.0
}

/// `hh:mm` of a UTC timestamp in seconds.
fn clock(at: u32) -> String {
    let s = at % 86_400;
    format!("{:02}:{:02}", s / 3_600, s / 60 % 60)
}

/// Rewrites the tall samples of the hour starting at `base_hour` into wide rows and deletes
/// them; returns how many it rewrote. Entries are added to the hour's rows, never replaced,
/// so running it again after a kill loses nothing.
fn compact_hour(tall: &Repository<Sample>, hours: &Repository<HourRow>, base_hour: u32) -> Result<usize> {
    let mut rewritten = 0;
    for metric in METRICS {
        let from = SampleKey::from((metric.to_string(), base_hour, String::new()));
        let to = SampleKey::from((metric.to_string(), base_hour + HOUR, String::new()));
        let samples = tall.scan().range(from..to).to_vec()?;
        let mut series: BTreeMap<&str, BTreeMap<u16, f64>> = BTreeMap::new();
        for s in &samples {
            series.entry(&s.tags).or_default().insert((s.at - base_hour) as u16, s.value);
        }
        for (tags, points) in series {
            let (dc, host) = parse_tags(tags);
            let key = HourRowKey::from((metric.to_string(), base_hour, dc.clone(), host.clone()));
            // The row itself (its marker cell), then its points.
            hours.put(&HourRow { metric: metric.to_string(), base_hour, dc, host, points: BTreeMap::new() })?;
            hours.wide(key, HourRow::POINTS)?.put_many(points.iter())?;
        }
        for s in &samples {
            tall.delete(s.key())?;
        }
        rewritten += samples.len();
    }
    Ok(rewritten)
}

fn parse_tags(tags: &str) -> (String, String) {
    let mut dc = String::new();
    let mut host = String::new();
    for pair in tags.split(',') {
        match pair.split_once('=') {
            Some(("dc", v)) => dc = v.to_string(),
            Some(("host", v)) => host = v.to_string(),
            _ => {}
        }
    }
    (dc, host)
}

/// Mean of `metric` over `[from, to)` for data centre `dc`, from the tall rows: one scan of
/// the time range, every tag set's rows read and filtered here.
fn mean_tall(samples: &Repository<Sample>, metric: &str, dc: &str, from: u32, to: u32) -> Result<(f64, usize)> {
    let range = SampleKey::from((metric.to_string(), from, String::new()))
        ..SampleKey::from((metric.to_string(), to, String::new()));
    let wanted = format!("dc={dc},");
    let values: Vec<f64> = samples
        .scan()
        .range(range)
        .to_vec()?
        .into_iter()
        .filter(|s| s.tags.starts_with(&wanted))
        .map(|s| s.value)
        .collect();
    Ok((values.iter().sum::<f64>() / values.len() as f64, values.len()))
}

/// The same from the wide rows: per hour, a scan of the data centre's rows (their marker
/// cells only), then a slice of each row's seconds.
fn mean_wide(hours: &Repository<HourRow>, metric: &str, dc: &str, from: u32, to: u32) -> Result<(f64, usize)> {
    let mut values = Vec::new();
    let mut base_hour = from / HOUR * HOUR;
    while base_hour < to {
        let prefix = HourRowKey::metric(metric.to_string()).base_hour(base_hour).dc(dc.to_string());
        for row in hours.scan().prefix(prefix).to_vec()? {
            let first = from.saturating_sub(base_hour).min(HOUR) as u16;
            let last = (to - base_hour).min(HOUR);
            let points = hours.wide(row.key(), HourRow::POINTS)?;
            let slice =
                if last == HOUR { points.range(first.., None)? } else { points.range(first..last as u16, None)? };
            values.extend(slice.into_iter().map(|(_, v)| v));
        }
        base_hour += HOUR;
    }
    Ok((values.iter().sum::<f64>() / values.len() as f64, values.len()))
}

/// Everything a table stores, read back: cells and bytes.
fn footprint(db: &Db, table: &str) -> Result<Costs> {
    let (rows, costs) = db.measure(|| db.store().scan(table, &Default::default()).map(|s| s.count()));
    rows?;
    Ok(costs)
}

fn line(layout: &str, what: &str, c: &Costs) -> String {
    format!(
        "{layout:<9}  {what:<6}  {:>11}  {:>5}  {:>5}  {:>7}",
        c.round_trips(),
        c.rows_read,
        c.cells_read,
        c.bytes_read
    )
}

pub(crate) fn main() -> Result<()> {
    assert_eq!(HourRow::advice(), [], "a u16 second offset bounds a row to an hour");
    println!("{}", HourRow::layout());

    let db = Db::open_temporary()?;
    let samples = db.repo::<Sample>()?;
    let hours = db.repo::<HourRow>()?;

    // Ingest, tall.
    let mut arrived = Vec::new();
    for at in (SEVEN_AM..SEVEN_AM + HOURS * HOUR).step_by(STEP as usize) {
        for (m, metric) in METRICS.iter().enumerate() {
            for (h, (dc, host)) in HOSTS.iter().enumerate() {
                arrived.push(Sample { metric: metric.to_string(), at, tags: tags(dc, host), value: value(m, h, at) });
            }
        }
    }
    samples.put_many(&arrived)?;
    println!(
        "ingested {} samples: {} metrics x {} hosts, every {STEP} s for {HOURS} h",
        arrived.len(),
        METRICS.len(),
        HOSTS.len()
    );
    assert_eq!(arrived.len(), 2 * 4 * 1_080);

    // The query on the tall rows.
    let (from, to) = (SEVEN_AM + HOUR + 20 * 60, SEVEN_AM + 2 * HOUR + 40 * 60);
    let expected: Vec<f64> = arrived
        .iter()
        .filter(|s| s.metric == "sys.cpu.user" && s.tags.starts_with("dc=east,") && s.at >= from && s.at < to)
        .map(|s| s.value)
        .collect();
    let expected_mean = expected.iter().sum::<f64>() / expected.len() as f64;
    let ((tall_mean, tall_n), tall) = measured(&db, || mean_tall(&samples, "sys.cpu.user", "east", from, to))?;
    let tall_store = footprint(&db, "tsdb_tall")?;

    // Compaction, an hour at a time.
    for hour in 0..HOURS {
        let base_hour = SEVEN_AM + hour * HOUR;
        let n = compact_hour(&samples, &hours, base_hour)?;
        println!("compacted {} into wide rows: {n} samples", clock(base_hour));
        assert_eq!(n, 2 * 4 * 360);
    }
    assert!(samples.scan().to_vec()?.is_empty(), "every tall sample was rewritten");
    let rows = hours.scan().to_vec()?;
    assert_eq!(rows.len() as u32, METRICS.len() as u32 * HOURS * HOSTS.len() as u32, "a row per metric, hour and host");
    // Running an hour again (a compaction killed before its deletes) changes nothing.
    samples.put_many(&arrived[..8])?;
    compact_hour(&samples, &hours, SEVEN_AM)?;
    assert_eq!(hours.wide(rows[0].key(), HourRow::POINTS)?.count()?, 360);

    // The query on the wide rows.
    let ((wide_mean, wide_n), wide) = measured(&db, || mean_wide(&hours, "sys.cpu.user", "east", from, to))?;
    let wide_store = footprint(&db, "tsdb")?;
    println!("mean sys.cpu.user of dc=east, {} to {}: {tall_mean:.3} over {tall_n} samples", clock(from), clock(to));
    assert_eq!((tall_n, wide_n), (expected.len(), expected.len()));
    assert!((tall_mean - expected_mean).abs() < 1e-9 && (wide_mean - expected_mean).abs() < 1e-9);

    println!("layout     what    round trips   rows  cells    bytes");
    println!("{}", line("tall", "query", &tall));
    println!("{}", line("opentsdb", "query", &wide));
    println!("{}", line("tall", "stored", &tall_store));
    println!("{}", line("opentsdb", "stored", &wide_store));

    // Tall reads every tag set's samples in the range (both data centres) to keep half;
    // OpenTSDB's layout reads the east rows' marker cells and exactly the samples it uses.
    let n = expected.len() as u64;
    assert_eq!(n, 2 * 480);
    assert_eq!((tall.round_trips(), tall.rows_read, tall.cells_read), (1, 2 * n, 2 * n), "{tall}");
    assert_eq!((wide.round_trips(), wide.rows_read, wide.cells_read), (2 + 4, 4 + 4, n + 4), "{wide}");
    // Bytes per cell: row key + family + qualifier + value + 8. A tall row key spells out the
    // metric (escaped, 14 bytes), the time (4) and the tags (18): 36 bytes. A wide one holds
    // two 3-byte ids around the 4-byte hour and the 3-byte host id: 13 bytes, and a 2-byte
    // qualifier; each row's empty marker cell adds 22 bytes.
    let (tall_cell, wide_cell, marker) = (36 + 1 + 1 + 8 + 8, 13 + 1 + 2 + 8 + 8, 13 + 1 + 8);
    assert_eq!(tall.bytes_read, 2 * n * tall_cell);
    assert_eq!(wide.bytes_read, n * wide_cell + 4 * marker);
    // Stored: one cell per sample either way, plus a marker per wide row.
    let (samples_n, rows_n) = (arrived.len() as u64, rows.len() as u64);
    assert_eq!((tall_store.cells_read, tall_store.bytes_read), (samples_n, samples_n * tall_cell));
    assert_eq!(
        (wide_store.cells_read, wide_store.bytes_read),
        (samples_n + rows_n, samples_n * wide_cell + rows_n * marker)
    );
    println!("opentsdb: ok");
    Ok(())
}

fn measured<T>(db: &Db, f: impl FnOnce() -> Result<T>) -> Result<(T, Costs)> {
    let (r, costs) = db.measure(f);
    Ok((r?, costs))
}
