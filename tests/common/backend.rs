//! The backends the ORM suite runs on: the embedded engine, and Cloud Bigtable's emulator,
//! from `cellar::orm::testing` (which applications get too), and the crash tests' targets.
//!
//! [`on_every_backend!`] turns each test into one per backend (`name::embedded`,
//! `name::bigtable`); with `CELLAR_REQUIRE_EMULATOR=1` (set by `.ci/run`) a missing emulator
//! fails the Bigtable half instead of skipping it.

use std::sync::Arc;

use cellar::engine::{Engine, EngineOptions};
use cellar::orm::store::{BigtableOptions, BigtableStore, EmbeddedStore};
// Not every test binary uses every one.
#[allow(unused_imports)]
pub use cellar::orm::testing::{bigtable_store, emulator, instance_name, start_emulator as start, Backend, Emulator};
use cellar::orm::Db;

/// The database a crash test's child writes and its parent checks, named by `target`:
/// `dir:<path>` (the embedded engine, with small memstores and log segments so flushes and log
/// rolls happen between kills; its engine is returned too) or `bigtable:<host:port>/<instance>`.
pub fn open_target(target: &str) -> (Option<Engine>, Db) {
    if let Some(dir) = target.strip_prefix("dir:") {
        let options = EngineOptions::default().memstore_flush_bytes(32 * 1024).wal_segment_bytes(64 * 1024);
        let engine = Engine::open(dir, options).expect("the crash test's directory opens");
        let db = Db::with_store(Arc::new(EmbeddedStore::new(engine.clone())));
        return (Some(engine), db);
    }
    let (host, instance) = target.strip_prefix("bigtable:").and_then(|t| t.split_once('/')).expect("a target");
    let store = BigtableStore::connect(BigtableOptions::new("cellar", instance).emulator(host)).expect("the emulator");
    (None, Db::with_store(Arc::new(store)))
}

/// Declares tests that run on every backend: `cellar::orm::on_every_backend!`, in scope in
/// every test file that has `mod common;`.
#[macro_export]
macro_rules! on_every_backend {
    ($($t:tt)*) => { cellar::orm::on_every_backend! { $($t)* } };
}
