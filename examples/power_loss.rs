//! What survives when the power goes, the disk fills up or an fsync fails — shown on the
//! embedded engine over `FaultFs`, the fault-injecting file system Cellar's own tests use.
//!
//! 1. Two tables take 100 acknowledged writes each: `journal` with `FsyncWal` (a write returns
//!    once its log record is on disk; writers share fsyncs) and `events` with `SyncWal` (once
//!    the record is handed to the operating system). Then the power goes. After the reboot the
//!    journal has all 100 rows; the events table has some first part of its 100 — never a row
//!    without the rows before it — because a power loss drops what was not yet fsynced.
//! 2. The disk fills up. The write that cannot be logged fails saying so; the engine then
//!    refuses writes until it is reopened, and says why; reads keep working. Once space is
//!    freed and the engine reopened, every acknowledged row is there and writes work again.
//! 3. An fsync of the log fails. That write fails, and the engine does not trust the log
//!    again — even when the disk recovers, writes stay refused — until a reopen replays what
//!    the log really holds.
//! 4. Log segments of 16 KiB roll every few dozen writes; each roll leaves the closed segment's
//!    fsync to a thread while writes go on into the next. The power goes in the middle of it:
//!    the events table keeps a first part of its rows, and every journal write (a synced
//!    write waits for the rolls' fsyncs before its own) is there.
//!
//! What is asserted: every figure above (all journal rows kept, the events kept being a
//! prefix, the errors' kinds, the reads, the rows after each reopen).
//!
//! Run with `cargo run --release --example power_loss`.

use std::sync::Arc;

use cellar::engine::fault::{FaultFs, FaultRates};
use cellar::engine::{Durability, Engine, EngineOptions, Error, FamilyDescriptor, Put, Result, Scan, TableDescriptor};

const DIR: &str = "/data";

fn open(fs: &FaultFs) -> Result<Engine> {
    Engine::open(DIR, EngineOptions::default().fs(Arc::new(fs.clone())).flush_on_close(false))
}

fn key(i: u32) -> String {
    format!("row{i:04}")
}

/// The rows of `table`, as their numbers.
fn rows(engine: &Engine, table: &str) -> Result<Vec<u32>> {
    let mut out = Vec::new();
    for row in engine.table(table)?.scan(Scan::new())? {
        let row = row?;
        out.push(std::str::from_utf8(&row.row[3..]).expect("ascii").parse().expect("a number"));
    }
    Ok(out)
}

fn put(engine: &Engine, table: &str, i: u32) -> Result<()> {
    engine.table(table)?.put(Put::new(key(i)).add("d", "v", format!("value {i}")))
}

/// Runs the three scenes, asserting what each leaves.
pub fn main() -> Result<()> {
    let fs = FaultFs::new(7);

    // 1. Power loss.
    let engine = open(&fs)?;
    for (table, durability) in [("journal", Durability::FsyncWal), ("events", Durability::SyncWal)] {
        engine.create_table(TableDescriptor::new(table).family(FamilyDescriptor::new("d")).durability(durability))?;
        for i in 0..100 {
            put(&engine, table, i)?;
        }
    }
    let fs = fs.power_loss();
    drop(engine);
    let engine = open(&fs)?;
    let journal = rows(&engine, "journal")?;
    let events = rows(&engine, "events")?;
    println!("power loss after 100 acknowledged writes to each table:");
    println!("  journal (FsyncWal): {} rows", journal.len());
    println!("  events (SyncWal):   {} rows, the first {} written", events.len(), events.len());
    assert_eq!(journal, (0..100).collect::<Vec<_>>(), "FsyncWal keeps every acknowledged write");
    assert_eq!(events, (0..events.len() as u32).collect::<Vec<_>>(), "SyncWal loses at most a tail");

    // 2. A full disk.
    fs.set_capacity(Some(fs.used() + 8 * 1024));
    let mut acknowledged = 100;
    let full = loop {
        match put(&engine, "journal", acknowledged) {
            Ok(()) => acknowledged += 1,
            Err(e) => break e,
        }
    };
    println!("disk full after {} more rows: {full}", acknowledged - 100);
    assert!(full.to_string().contains("No space left on device"), "{full}");
    let refused = put(&engine, "journal", acknowledged).expect_err("writes are refused");
    println!("  the next write: {refused}");
    assert!(matches!(refused, Error::ReadOnly(_)));
    assert!(engine.read_only_reason().is_some());
    let readable = rows(&engine, "journal")?.len();
    println!("  reads still work: {readable} journal rows");
    assert_eq!(readable, acknowledged as usize);
    fs.set_capacity(None);
    drop(engine);
    let engine = open(&fs)?;
    let after = rows(&engine, "journal")?;
    put(&engine, "journal", acknowledged)?;
    println!("  space freed and reopened: {} journal rows, writes accepted", after.len());
    assert_eq!(after, (0..acknowledged).collect::<Vec<_>>());
    acknowledged += 1;

    // 3. A failed fsync.
    fs.set_rates(FaultRates::default().sync(1.0));
    let failed = put(&engine, "journal", acknowledged).expect_err("the fsync fails");
    println!("fsync failure: {failed}");
    fs.set_rates(FaultRates::default());
    let refused = put(&engine, "journal", acknowledged + 1).expect_err("the log is not trusted again");
    println!("  with the disk well again, the next write: {refused}");
    assert!(matches!(refused, Error::ReadOnly(_)));
    drop(engine);
    let engine = open(&fs)?;
    let after = rows(&engine, "journal")?;
    put(&engine, "journal", acknowledged + 1)?;
    println!("  reopened: {} journal rows (the failed write's among them or not), writes accepted", after.len());
    assert!(after.starts_with(&(0..acknowledged).collect::<Vec<_>>()) && after.len() <= acknowledged as usize + 1);
    println!("faults injected: {:?}", fs.counts());

    // 4. Power loss while log rolls' fsyncs run beside the writes.
    let fs = FaultFs::new(11);
    let small_segments =
        EngineOptions::default().fs(Arc::new(fs.clone())).flush_on_close(false).wal_segment_bytes(16 * 1024);
    let engine = Engine::open(DIR, small_segments.clone())?;
    for (table, durability) in [("journal", Durability::FsyncWal), ("events", Durability::SyncWal)] {
        engine.create_table(TableDescriptor::new(table).family(FamilyDescriptor::new("d")).durability(durability))?;
    }
    // Every 20th write goes to the journal, until the last 40 writes, which are all events.
    let (mut events_written, mut journal_written, mut events_before_last_sync) = (0, 0, 0);
    for i in 0..640 {
        let journal = i < 600 && i % 20 == 19;
        if journal {
            events_before_last_sync = events_written;
        }
        let (name, table) = if journal { ("journal", &mut journal_written) } else { ("events", &mut events_written) };
        engine.table(name)?.put(Put::new(key(*table)).add("d", "v", format!("value {i} {}", "x".repeat(200))))?;
        *table += 1;
    }
    let fs = fs.power_loss();
    drop(engine);
    let engine = Engine::open(DIR, small_segments.fs(Arc::new(fs.clone())))?;
    let journal = rows(&engine, "journal")?;
    let events = rows(&engine, "events")?;
    println!("power loss after {} writes through 16 KiB log segments:", events_written + journal_written);
    println!("  journal (FsyncWal): {} of {journal_written} rows", journal.len());
    println!("  events (SyncWal):   the first {} of {events_written} rows", events.len());
    assert_eq!(journal, (0..journal_written).collect::<Vec<_>>(), "every synced write survives the rolls");
    assert_eq!(events, (0..events.len() as u32).collect::<Vec<_>>(), "SyncWal loses at most a tail");
    // The last journal write made every write before it durable, rolls included.
    assert!(events.len() as u32 >= events_before_last_sync, "{} events kept", events.len());
    Ok(())
}
