//! Test machinery for applications (feature `test-util` of `cellar-orm`, `testing` of the
//! `cellar` facade): a clock that runs ahead or behind, and — with the `bigtable` feature — the
//! Cloud Bigtable emulator started on demand and a macro that runs a test on every backend.
//!
//! [`on_every_backend!`](crate::on_every_backend) turns each test into one per backend
//! (`name::embedded`, `name::bigtable`). The Bigtable tests of one test binary share one
//! emulator, started on a free loopback port at first use and stopped when the binary exits;
//! each test gets its own Bigtable instance, so tests running at once never see each other's
//! tables. The emulator is `cbtemulator` on the `PATH`, the Google Cloud SDK's (Debian package
//! `google-cloud-cli-bigtable-emulator`), or the binary `CELLAR_CBTEMULATOR` names. Without it
//! the Bigtable tests skip, printing one line that says how to enable them; with
//! `CELLAR_REQUIRE_EMULATOR=1` they fail instead.
//!
//! ```ignore
//! use cellar::prelude::*;
//! use cellar::orm::on_every_backend;
//!
//! on_every_backend! {
//! fn a_put_reads_back(db: Db) {
//!     // `db` is a fresh, empty database: embedded in one test, on the emulator in the other.
//! }
//! }
//! ```

pub use crate::writer::skew_clock;

#[cfg(feature = "bigtable")]
pub use emulator::*;

#[cfg(feature = "bigtable")]
mod emulator {
    use std::io::{BufRead, BufReader, Write};
    use std::path::PathBuf;
    use std::process::{Child, ChildStdin, Command, Stdio};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex, OnceLock};

    use crate::store::{BigtableOptions, BigtableStore};
    use crate::Db;

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
    pub fn start_emulator() -> Result<Emulator, String> {
        let binary = emulator_binary().ok_or("cbtemulator not found")?;
        // `read` returns when the test binary's end of stdin closes; then the emulator goes too.
        // The shell exits only once the emulator has: a dropped `Emulator` is gone, not going.
        let script = r#""$0" -host 127.0.0.1 -port 0 & pid=$!; trap 'kill $pid 2>/dev/null; wait $pid' EXIT; read _ignored; exit 0"#;
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
            .get_or_init(|| match start_emulator() {
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
    ///
    /// # Panics
    /// If the emulator runs but does not answer: the test fails.
    pub fn bigtable_store() -> Option<BigtableStore> {
        let emulator = emulator()?;
        let options = BigtableOptions::new("cellar", instance_name()).emulator(emulator.host.clone());
        Some(BigtableStore::connect(options).expect("connecting to the emulator"))
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
        ///
        /// # Panics
        /// If a temporary directory cannot be created: the test fails.
        pub fn db(&self) -> Db {
            match self {
                Backend::Embedded => Db::open_temporary().expect("temporary database"),
                Backend::Bigtable(store) => Db::with_store(Arc::new(store.clone())),
            }
        }
    }
}

/// Declares tests that run on every backend: each `fn name(db: Db) { ... }` becomes a module
/// `name` with the tests `embedded` and `bigtable`, each given a fresh, empty database (the
/// Bigtable one skips without the emulator; see [`testing`](crate::testing)).
#[cfg(feature = "bigtable")]
#[macro_export]
macro_rules! on_every_backend {
    ($($(#[$attr:meta])* fn $name:ident($db:ident: Db) $body:block)*) => {$(
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            $(#[$attr])*
            #[test]
            fn embedded() {
                let $db: $crate::Db = $crate::testing::Backend::Embedded.db();
                $body
            }

            $(#[$attr])*
            #[test]
            fn bigtable() {
                let Some(store) = $crate::testing::bigtable_store() else { return };
                let $db: $crate::Db = $crate::testing::Backend::Bigtable(store).db();
                $body
            }
        }
    )*};
}
