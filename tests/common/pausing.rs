//! A store that freezes its writer right before a chosen store call: a writer stalled between
//! two steps of a multi-step write, for as long as the test likes. The writer blocks until a
//! line arrives on its stdin, and the test also stops the whole process (SIGSTOP) meanwhile
//! and lets it go (SIGCONT) before sending the line. Before stopping it prints `paused <n> <call>:<table> <earlier calls>` on
//! stdout (calls as `call:table`, comma-separated), so the test knows where it stands.

use std::io::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use cellar::orm::store::{
    Commit, Condition, Guarantees, ReadSpec, Row, RowCheck, RowMutation, RowStream, ScanSpec, Store, TableSpec,
};
use cellar::orm::Result;

/// Where a [`Pausing`] store freezes its writer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum At {
    /// Never.
    Never,
    /// Before the n-th call after arming (1-based).
    Call(u64),
    /// Before the first call of this kind on this table, as `call:table`
    /// (`check_and_mutate:people`).
    Named(String),
}

impl std::str::FromStr for At {
    type Err = std::convert::Infallible;
    /// `0` (never), a call number, or `call:table`.
    fn from_str(s: &str) -> Result<At, Self::Err> {
        Ok(match s.parse::<u64>() {
            Ok(0) => At::Never,
            Ok(n) => At::Call(n),
            Err(_) => At::Named(s.to_string()),
        })
    }
}

/// `inner`, freezing before the call `at` once armed.
pub struct Pausing {
    inner: Arc<dyn Store>,
    at: At,
    calls: AtomicU64,
    armed: AtomicBool,
    /// Calls made since arming, as `call:table`.
    made: Mutex<Vec<String>>,
}

impl Pausing {
    /// Freezes before the call `at` after [`Pausing::arm`].
    pub fn new(inner: Arc<dyn Store>, at: At) -> Self {
        Pausing { inner, at, calls: AtomicU64::new(0), armed: AtomicBool::new(false), made: Mutex::default() }
    }

    /// Starts counting calls (set-up calls before it do not count).
    pub fn arm(&self) {
        self.armed.store(true, Ordering::SeqCst);
    }

    fn before(&self, call: &str, table: &str) {
        if !self.armed.load(Ordering::SeqCst) {
            return;
        }
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        let this = format!("{call}:{table}");
        let here = match &self.at {
            At::Never => false,
            At::Call(at) => n == *at,
            At::Named(name) => *name == this && !self.made.lock().unwrap().contains(&this),
        };
        if here {
            let earlier = self.made.lock().unwrap().join(",");
            println!("paused {n} {this} {earlier}");
            std::io::stdout().flush().unwrap();
            let mut go = String::new();
            std::io::stdin().read_line(&mut go).unwrap();
        }
        self.made.lock().unwrap().push(this);
    }
}

/// Waits until process `pid` is stopped: a SIGCONT sent before its SIGSTOP took effect would
/// be lost, and the process would stay stopped.
fn wait_stopped(pid: u32) {
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        // `pid (comm) state ...`: the state follows the last parenthesis.
        let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next());
        if state == Some("T") {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Sends `signal` (`STOP`, `CONT`, `KILL`) to process `pid`.
fn signal(pid: u32, signal: &str) {
    let status = std::process::Command::new("kill").args([format!("-{signal}"), pid.to_string()]).status().unwrap();
    assert!(status.success(), "kill -{signal} {pid} failed");
}

impl Store for Pausing {
    fn ensure_table(&self, spec: &TableSpec) -> Result<()> {
        self.inner.ensure_table(spec)
    }
    fn alter_families(
        &self,
        table: &str,
        changes: &[cellar::orm::store::FamilyChange],
    ) -> Result<Vec<cellar::orm::store::FamilyAlteration>> {
        self.inner.alter_families(table, changes)
    }
    fn mutate(&self, table: &str, rows: Vec<RowMutation>) -> Result<()> {
        self.before("mutate", table);
        self.inner.mutate(table, rows)
    }
    fn read_rows(&self, table: &str, rows: &[Bytes], read: &ReadSpec) -> Result<Vec<Option<Row>>> {
        self.before("read_rows", table);
        self.inner.read_rows(table, rows, read)
    }
    fn scan<'a>(&'a self, table: &str, scan: &ScanSpec) -> Result<RowStream<'a>> {
        self.before("scan", table);
        self.inner.scan(table, scan)
    }
    fn check_and_mutate(&self, table: &str, condition: Condition, mutation: RowMutation) -> Result<bool> {
        self.before("check_and_mutate", table);
        self.inner.check_and_mutate(table, condition, mutation)
    }
    fn check_and_mutate_many(&self, table: &str, entries: Vec<(Condition, RowMutation)>) -> Result<Vec<bool>> {
        self.before("check_and_mutate_many", table);
        self.inner.check_and_mutate_many(table, entries)
    }
    fn describe(&self, table: &str) -> Result<Option<TableSpec>> {
        self.inner.describe(table)
    }
    fn split_keys(&self, table: &str) -> Result<Option<Vec<Bytes>>> {
        self.inner.split_keys(table)
    }
    fn increment(&self, table: &str, row: Bytes, family: &str, qualifier: &str, delta: i64) -> Result<i64> {
        self.before("increment", table);
        self.inner.increment(table, row, family, qualifier, delta)
    }
    fn guarantees(&self) -> Guarantees {
        self.inner.guarantees()
    }
    fn mutate_group(&self, table: &str, checks: Vec<RowCheck>, rows: Vec<RowMutation>) -> Result<bool> {
        self.before("mutate_group", table);
        self.inner.mutate_group(table, checks, rows)
    }
    fn commit(&self, commit: Commit) -> Result<bool> {
        self.before("commit", "");
        self.inner.commit(commit)
    }
    fn read_and_commit(
        &self,
        table: &str,
        row: &Bytes,
        read: &ReadSpec,
        build: &mut dyn FnMut(Option<&Row>) -> Option<Commit>,
    ) -> Result<Option<bool>> {
        self.before("read_and_commit", table);
        self.inner.read_and_commit(table, row, read, build)
    }
}

/// A writer process of a nemesis test: this test binary run again as `child` (the name of a
/// test that acts only when its environment says so), with its stdout read line by line and
/// its stdin kept to let a [`Pausing`] store go on.
pub struct Writer {
    child: std::process::Child,
    lines: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
}

impl Writer {
    /// Starts `child` with the environment `env`.
    pub fn spawn(child: &str, env: &[(&str, String)]) -> Writer {
        use std::io::BufRead as _;
        let mut command = std::process::Command::new(std::env::current_exe().unwrap());
        command.args(["--exact", child, "--nocapture", "--test-threads=1"]);
        for (name, value) in env {
            command.env(name, value);
        }
        let mut child = command
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .unwrap();
        let lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        Writer { child, lines }
    }

    /// The rest of the next line holding one of `wanted`, from where it starts (the test
    /// harness prints `test <name> ... ` without a line end before the child's first line).
    pub fn next_line(&mut self, wanted: &[&str]) -> String {
        for line in self.lines.by_ref() {
            let line = line.unwrap();
            if let Some(at) = wanted.iter().filter_map(|w| line.find(w)).min() {
                return line[at..].to_string();
            }
        }
        panic!("the writer exited without printing any of {wanted:?}");
    }

    /// Stops the whole process (SIGSTOP) and waits until it is stopped.
    pub fn freeze(&self) {
        signal(self.child.id(), "STOP");
        wait_stopped(self.child.id());
    }

    /// Lets a frozen process go on (SIGCONT); with `release`, also lets a [`Pausing`] store
    /// waiting for its stdin go on.
    pub fn thaw(&mut self, release: bool) {
        signal(self.child.id(), "CONT");
        if release {
            writeln!(self.child.stdin.as_ref().unwrap(), "go").unwrap();
        }
    }

    /// Waits for the process to exit; true if it succeeded.
    pub fn wait(mut self) -> bool {
        self.child.wait().unwrap().success()
    }

    /// Kills the process and waits for it.
    pub fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}
