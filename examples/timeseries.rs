//! Log events, the seeds' time-series case study. A row key led by the timestamp sends every new
//! event to the last region; Cellar's advice says so. Two better layouts, written side by side:
//!
//! - `[bucket][timestamp][host][event]`: `timestamp % 8` in front spreads writes over eight
//!   key ranges; a time-range read fans out over all eight and merges back into time order.
//! - `[host][event][reverse timestamp]`: one host's events of one kind, newest first.
//!
//! Run with `cargo run --release --example timeseries`. Every printed result is also asserted.

use cellar::orm::advice::Rule;
use cellar::orm::{Entity as _, Result};
use cellar::prelude::*;

/// Events by time, bucketed; kept for a week.
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "events", bucket(field = "at", buckets = 8), ttl = 604800)]
struct Event {
    #[cellar(key)]
    at: Timestamp,
    #[cellar(key)]
    host: String,
    #[cellar(key)]
    event: String,
    #[cellar(column = "m")]
    message: String,
}

/// The same events by host and kind, newest first; kept for a week.
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "events_by_host", ttl = 604800)]
struct HostEvent {
    #[cellar(key)]
    host: String,
    #[cellar(key)]
    event: String,
    #[cellar(key, reverse_ts)]
    at: Timestamp,
    #[cellar(column = "m")]
    message: String,
}

/// `[timestamp][host][event]`: the layout the seeds warn about.
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "events_naive")]
struct NaiveEvent {
    #[cellar(key)]
    at: Timestamp,
    #[cellar(key)]
    host: String,
    #[cellar(key)]
    event: String,
}

/// 2026-11-22 09:00:00 UTC, in milliseconds.
const NINE_AM: u64 = 1_795_856_400_000;

/// `hh:mm:ss.mmm` of a UTC timestamp.
fn clock(t: Timestamp) -> String {
    let ms = t.as_millis() % 86_400_000;
    format!("{:02}:{:02}:{:02}.{:03}", ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60, ms % 1000)
}

pub(crate) fn main() -> Result<()> {
    let advice = NaiveEvent::advice();
    for a in &advice {
        println!("advice on [timestamp][host][event]: {a}");
    }
    assert_eq!(advice.iter().map(|a| a.rule).collect::<Vec<_>>(), [Rule::MonotonicLeadingKey]);
    assert_eq!(Event::advice(), [], "a bucket in front of the timestamp spreads the writes");
    println!("{}", Event::layout());

    let db = Db::open_temporary()?;
    let events = db.repo::<Event>()?;
    let by_host = db.repo::<HostEvent>()?;

    // 30 events, 1.237 s apart, round-robin over three hosts; every third one an error.
    let mut written = Vec::new();
    for i in 0..30u64 {
        let at = Timestamp(NINE_AM + i * 1_237);
        let host = format!("web-{}", i % 3 + 1);
        let event = if i % 3 == 2 { "error" } else { "request" }.to_string();
        let message = format!("event {i}");
        written.push(Event { at, host: host.clone(), event: event.clone(), message: message.clone() });
        by_host.put(&HostEvent { host, event, at, message })?;
    }
    events.put_many(&written)?;
    let buckets: std::collections::BTreeSet<u64> = written.iter().map(|e| e.at.as_millis() % 8).collect();
    println!("30 events written over {} buckets", buckets.len());
    assert!(buckets.len() > 4, "consecutive events land in different buckets");

    // 09:00:10 to 09:00:20, read across every bucket, back in time order.
    let (from, to) = (Timestamp(NINE_AM + 10_000), Timestamp(NINE_AM + 20_000));
    let window = events
        .scan()
        .range(EventKey::from((from, String::new(), String::new()))..EventKey::from((to, String::new(), String::new())))
        .to_vec()?;
    let lines: Vec<String> =
        window.iter().map(|e| format!("{} {} {} {}", clock(e.at), e.host, e.event, e.message)).collect();
    println!("events from {} to {}:", clock(from), clock(to));
    lines.iter().for_each(|l| println!("  {l}"));
    let expected: Vec<&Event> = written.iter().filter(|e| e.at >= from && e.at < to).collect();
    assert_eq!(window.iter().collect::<Vec<_>>(), expected);
    assert_eq!(lines.first().map(String::as_str), Some("09:00:11.133 web-1 request event 9"));
    assert_eq!(lines.len(), 8);

    // The newest three errors of web-3.
    let newest = by_host.scan().prefix(HostEventKey::host("web-3".into()).event("error".into())).limit(3).to_vec()?;
    let lines: Vec<String> = newest.iter().map(|e| format!("{} {}", clock(e.at), e.message)).collect();
    println!("newest errors on web-3: {lines:?}");
    assert_eq!(lines, ["09:00:35.873 event 29", "09:00:32.162 event 26", "09:00:28.451 event 23"]);
    println!("timeseries: ok");
    Ok(())
}
