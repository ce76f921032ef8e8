//! `cargo bench --bench migrate`: how fast a bulk migration moves versioned blobs to the
//! current version — blobs of about 1 KiB, written at version 1 (bincode), migrated to version
//! 2 (MessagePack) on the embedded engine, with the census before and after. Writes its table
//! into `benches/README.md` between the `migrate` markers.
//!
//! `-- --quick` (or `CELLAR_MIGRATE_QUICK=1`) runs a tenth of the blobs and only prints. Without
//! `--bench` (as `cargo test --benches` runs it) it is a short smoke run that writes nothing.

mod common;

use std::time::Instant;

use bytes::Bytes;
use cellar::orm::blob::{self, BlobFormat, Codec};
use cellar::orm::store::{CellMutation, RowMutation};
use cellar::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct BodyV1 {
    id: u64,
    title: String,
    text: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Versioned)]
#[cellar(blob(version = 2, codec = "msgpack", history(1 = BodyV1 via "bincode")))]
struct Body {
    id: u64,
    title: String,
    text: String,
    words: u32,
}

impl From<BodyV1> for Body {
    fn from(v: BodyV1) -> Self {
        let words = v.text.split(' ').count() as u32;
        Body { id: v.id, title: v.title, text: v.text, words }
    }
}

#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "docs")]
struct Doc {
    #[cellar(key)]
    id: u64,
    #[cellar(blob, column = "b")]
    body: Body,
}

fn v1(id: u64) -> BodyV1 {
    // About 1 KiB once encoded.
    let text = (0..220).map(|w| format!("w{}", (id + w) % 1000)).collect::<Vec<_>>().join(" ");
    BodyV1 { id, title: format!("document {id}"), text: text[..text.len().min(1000)].to_string() }
}

fn load(db: &Db, n: u64) -> u64 {
    db.repo::<Doc>().expect("the docs table");
    let format = BlobFormat::new(1, Codec::Bincode);
    let tag = blob::type_tag("Body");
    let mut bytes = 0;
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        let rows = chunk
            .iter()
            .map(|&id| {
                let cell = blob::encode(&v1(id), &format, tag).expect("a v1 blob");
                bytes += cell.len() as u64;
                let put = CellMutation::Put {
                    family: Bytes::from_static(b"d"),
                    qualifier: Bytes::from_static(b"b"),
                    value: cell.into(),
                    timestamp: None,
                };
                RowMutation { row: Bytes::copy_from_slice(&id.to_be_bytes()), mutations: vec![put] }
            })
            .collect();
        db.store().mutate("docs", rows).expect("loading");
    }
    bytes / n.max(1)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let benching = args.iter().any(|a| a == "--bench");
    let quick = args.iter().any(|a| a == "--quick") || std::env::var_os("CELLAR_MIGRATE_QUICK").is_some();
    let n: u64 = match (benching, quick) {
        (false, _) => 2_000,
        (true, true) => 20_000,
        (true, false) => 200_000,
    };
    // Default engine options, then memstores large enough to hold the whole migration.
    let mut rows = String::new();
    let mut censuses = String::new();
    let mut avg = 0;
    for memstore_mib in [64usize, 512] {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let options = EngineOptions::default().memstore_flush_bytes(memstore_mib << 20);
        let db = Db::open_with(dir.path(), options).expect("the database");
        avg = load(&db, n);
        let census_before = db.migrate_column::<Body>("docs", "d:b").expect("column").census().expect("census");
        let started = Instant::now();
        let report = db.migrate_column::<Body>("docs", "d:b").expect("column").run().expect("migration");
        let secs = started.elapsed().as_secs_f64();
        let census_after = db.migrate_column::<Body>("docs", "d:b").expect("column").census().expect("census");
        assert_eq!(report.rewritten, n, "every blob migrated");
        assert_eq!(census_after.readable(), n);
        let docs = db.repo::<Doc>().expect("docs");
        assert_eq!(docs.get(n / 2).expect("read").map(|d| d.body), Some(Body::from(v1(n / 2))));
        let rate = n as f64 / secs;
        let mib = rate * avg as f64 / (1024.0 * 1024.0);
        rows.push_str(&format!("| {memstore_mib} MiB | {n} | {secs:.2} | {rate:.0} | {mib:.1} |\n"));
        if memstore_mib == 64 {
            censuses = format!("Census before: `{census_before}`; after: `{census_after}`.");
        }
    }
    let section = format!(
        "## Blob migration\n\n`cargo bench --bench migrate` (`benches/migrate.rs`): {n} blobs of {avg} bytes on \
         average, written at version 1 (bincode) straight into the store, migrated to version 2 (MessagePack) \
         by `Db::migrate_column` — one scan, a version-1 decode, a `From` step and a MessagePack encode per \
         blob on a reading thread, and one conditional write (check-and-mutate on the bytes read) per blob, \
         sent in batches of 1000 with a checkpoint after each, on the calling thread; embedded engine (SyncWal), release build, {} cores ({}), once with the default 64 MiB memstore \
         flush size and once with 512 MiB.\n\n\
         | memstore flush size | blobs | seconds | blobs/s | MiB/s read |\n|---:|---:|---:|---:|---:|\n{rows}\n\
         {censuses}",
        std::thread::available_parallelism().map_or(0, |p| p.get()),
        common::cpu_model(),
    );
    println!("{section}");
    if benching && !quick {
        common::write_section("migrate", &section);
    }
}
