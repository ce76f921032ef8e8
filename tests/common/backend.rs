//! The backends the ORM suite runs on: the embedded engine, and Cloud Bigtable's emulator.
//!
//! [`on_every_backend!`] turns each test into one per backend (`name::embedded`,
//! `name::bigtable`). The Bigtable instances share one emulator per test binary, started on a
//! free loopback port at first use and stopped when the binary exits; each test gets its own
//! Bigtable instance name, so tests running at once never see each other's tables.
//!
//! Without the emulator the Bigtable tests skip, printing one line that says how to enable
//! them; with `CELLAR_REQUIRE_EMULATOR=1` (set by `.ci/run`) they fail instead.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use cellar::engine::{Engine, EngineOptions};
use cellar::orm::store::{BigtableOptions, BigtableStore, EmbeddedStore};
use cellar::orm::Db;

/// Where the Google Cloud SDK's Debian package puts the emulator.
const SDK_EMULATOR: &str = "/usr/lib/google-cloud-sdk/platform/bigtable-emulator/cbtemulator";

/// A running emulator. Its watchdog shell holds `stdin`'s other end and stops the emulator
/// when that closes, which happens when this process exits however it exits.
pub struct Emulator {
    /// `host:port`.
    pub host: String,
    stdin: Mutex<Option<ChildStdin>>,
    child: Mutex<Child>,
}

fn emulator_binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("CELLAR_CBTEMULATOR") {
        return Some(PathBuf::from(path)).filter(|p| p.is_file());
    }
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|dir| dir.join("cbtemulator"))
        .find(|p| p.is_file());
    on_path.or_else(|| Some(PathBuf::from(SDK_EMULATOR)).filter(|p| p.is_file()))
}

/// Starts an emulator of its own (most tests share the binary's: [`emulator`]); dropping it
/// stops it.
pub fn start() -> Result<Emulator, String> {
    let binary = emulator_binary().ok_or("cbtemulator not found")?;
    // `read` returns when the test binary's end of stdin closes; then the emulator goes too.
    // The shell exits only once the emulator has: a dropped `Emulator` is gone, not going.
    let script =
        r#""$0" -host 127.0.0.1 -port 0 & pid=$!; trap 'kill $pid 2>/dev/null; wait $pid' EXIT; read _ignored; exit 0"#;
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg(&binary)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("starting {}: {e}", binary.display()))?;
    let stdin = child.stdin.take().ok_or("no stdin")?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    // The address line, or nothing if the emulator fails to start: wait a bounded time.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = tx.send(BufReader::new(stdout).read_line(&mut line).map(|_| line));
    });
    let line = match rx.recv_timeout(std::time::Duration::from_secs(20)) {
        Ok(Ok(line)) => line,
        Ok(Err(e)) => return Err(format!("reading the emulator's address: {e}")),
        Err(_) => {
            let _ = child.kill();
            return Err(format!("{} printed no address within 20 s", binary.display()));
        }
    };
    // "Cloud Bigtable emulator running on 127.0.0.1:PORT"
    let host = line
        .trim()
        .rsplit(' ')
        .next()
        .filter(|h| h.contains(':'))
        .ok_or_else(|| format!("unexpected emulator output: {line:?}"))?
        .to_string();
    Ok(Emulator { host, stdin: Mutex::new(Some(stdin)), child: Mutex::new(child) })
}

impl Drop for Emulator {
    fn drop(&mut self) {
        // Closing the watchdog's stdin makes it stop the emulator and exit.
        if let Ok(stdin) = self.stdin.get_mut() {
            stdin.take();
        }
        if let Ok(child) = self.child.get_mut() {
            let _ = child.wait();
        }
    }
}

/// The binary's emulator, started at first use; `None` (after one loud line) if it cannot
/// run and `CELLAR_REQUIRE_EMULATOR` is not set.
pub fn emulator() -> Option<&'static Emulator> {
    static EMULATOR: OnceLock<Option<Emulator>> = OnceLock::new();
    EMULATOR
        .get_or_init(|| match start() {
            Ok(e) => Some(e),
            Err(reason) => {
                let required = std::env::var("CELLAR_REQUIRE_EMULATOR").is_ok_and(|v| v == "1");
                assert!(!required, "the Bigtable emulator is required (CELLAR_REQUIRE_EMULATOR=1) and {reason}");
                // Straight to stderr: the test harness captures `eprintln!` of passing tests.
                let _ = writeln!(
                    std::io::stderr(),
                    "SKIPPING the Bigtable backend tests: {reason}. Install google-cloud-cli-bigtable-emulator \
                     (or set CELLAR_CBTEMULATOR to a cbtemulator binary) to run them."
                );
                None
            }
        })
        .as_ref()
}

/// A fresh Bigtable instance name on the emulator, unique in this process and across
/// processes sharing it.
pub fn instance_name() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("t{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
}

/// A store on a fresh instance of the emulator, or `None` when the emulator is skipped.
pub fn bigtable_store() -> Option<BigtableStore> {
    let emulator = emulator()?;
    let options = BigtableOptions::new("cellar", instance_name()).emulator(emulator.host.clone());
    Some(BigtableStore::connect(options).expect("connecting to the emulator"))
}

/// The database a crash test's child writes and its parent checks, named by `target`:
/// `dir:<path>` (the embedded engine, with small memstores and log segments so flushes and log
/// rolls happen between kills; its engine is returned too) or `bigtable:<host:port>/<instance>`.
pub fn open_target(target: &str) -> (Option<Engine>, Db) {
    if let Some(dir) = target.strip_prefix("dir:") {
        let options =
            EngineOptions { memstore_flush_bytes: 32 * 1024, wal_segment_bytes: 64 * 1024, ..Default::default() };
        let engine = Engine::open(dir, options).expect("the crash test's directory opens");
        let db = Db::with_store(Arc::new(EmbeddedStore::new(engine.clone())));
        return (Some(engine), db);
    }
    let (host, instance) = target.strip_prefix("bigtable:").and_then(|t| t.split_once('/')).expect("a target");
    let store = BigtableStore::connect(BigtableOptions::new("cellar", instance).emulator(host)).expect("the emulator");
    (None, Db::with_store(Arc::new(store)))
}

/// Which backend a suite test runs on.
#[derive(Debug, Clone)]
pub enum Backend {
    /// A fresh embedded database.
    Embedded,
    /// A fresh instance on the emulator.
    Bigtable(BigtableStore),
}

impl Backend {
    /// A database on this backend: empty at first, and the same data on every call.
    pub fn db(&self) -> Db {
        match self {
            Backend::Embedded => Db::open_temporary().expect("temporary database"),
            Backend::Bigtable(store) => Db::with_store(Arc::new(store.clone())),
        }
    }
}

/// Declares tests that run on every backend: each `fn name(db: Db) { ... }` becomes a module
/// `name` with the tests `embedded` and `bigtable`, each given a fresh, empty database.
#[macro_export]
macro_rules! on_every_backend {
    ($($(#[$attr:meta])* fn $name:ident($db:ident: Db) $body:block)*) => {$(
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            $(#[$attr])*
            #[test]
            fn embedded() {
                let $db: Db = $crate::common::backend::Backend::Embedded.db();
                $body
            }

            $(#[$attr])*
            #[test]
            fn bigtable() {
                let Some(store) = $crate::common::backend::bigtable_store() else { return };
                let $db: Db = $crate::common::backend::Backend::Bigtable(store).db();
                $body
            }
        }
    )*};
}
