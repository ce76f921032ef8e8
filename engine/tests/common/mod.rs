//! Helpers shared by the engine's integration tests.
#![allow(dead_code)]

use std::sync::Arc;

use cellar_engine::*;

/// An engine in a temporary directory with a manual clock at `now`.
pub struct TestEngine {
    pub dir: tempfile::TempDir,
    pub clock: Arc<ManualClock>,
    pub engine: Option<Engine>,
    /// Options to use instead of [`TestEngine::options`] when reopening.
    pub options_override: Option<EngineOptions>,
}

impl TestEngine {
    pub fn new(now: u64) -> TestEngine {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(now));
        let engine = Engine::open(dir.path(), Self::options(&clock)).unwrap();
        TestEngine { dir, clock, engine: Some(engine), options_override: None }
    }

    pub fn options(clock: &Arc<ManualClock>) -> EngineOptions {
        EngineOptions::default().clock(clock.clone()).block_cache_bytes(4 << 20)
    }

    /// Like [`TestEngine::new`], but closing leaves unflushed writes in the log only, so a
    /// reopen exercises log replay.
    pub fn replaying(now: u64) -> TestEngine {
        let mut te = TestEngine::new(now);
        te.options_override = Some(Self::options(&te.clock).flush_on_close(false));
        te.reopen();
        te
    }

    pub fn engine(&self) -> &Engine {
        self.engine.as_ref().unwrap()
    }

    pub fn reopen(&mut self) {
        self.engine = None;
        let opts = self.options_override.clone().unwrap_or_else(|| Self::options(&self.clock));
        self.engine = Some(Engine::open(self.dir.path(), opts).unwrap());
    }

    pub fn table(&self, name: &str) -> Table {
        self.engine().table(name).unwrap()
    }
}

/// `(qualifier, timestamp, value)` of every cell of a result.
pub fn cells(r: &RowResult) -> Vec<(String, u64, String)> {
    r.cells
        .iter()
        .map(|c| {
            let v = if c.cell_type.is_delete() {
                c.cell_type.name().to_string()
            } else {
                String::from_utf8_lossy(&c.value).into_owned()
            };
            (
                format!("{}:{}", String::from_utf8_lossy(&c.family), String::from_utf8_lossy(&c.qualifier)),
                c.timestamp,
                v,
            )
        })
        .collect()
}

/// Every row key a scan returns.
pub fn rows(t: &Table, scan: Scan) -> Vec<String> {
    scan_both(t, scan).iter().map(|r| String::from_utf8_lossy(&r.row).into_owned()).collect()
}

/// What `scan` returns, after checking that [`Table::scan_with`] and [`Table::scan_cursor`]
/// lend exactly the same rows (or batches of a row's cells), cells and values, and that
/// `scan_with` counts each row once.
pub fn scan_both(t: &Table, scan: Scan) -> Vec<RowResult> {
    let returned: Vec<RowResult> = t.scan(scan.clone()).unwrap().map(|r| r.unwrap()).collect();
    let mut cursor = t.scan_cursor(scan.clone()).unwrap();
    assert!(cursor.row().is_none(), "a cursor lends nothing before its first move");
    let mut pulled = Vec::new();
    while cursor.advance().unwrap() {
        let row = cursor.row().expect("a cursor that moved onto a row lends it");
        assert!(!row.is_empty(), "a lent row has cells");
        pulled.push(row.to_row_result());
    }
    assert!(cursor.row().is_none() && !cursor.advance().unwrap(), "a cursor at its end stays there");
    assert_eq!(pulled, returned, "scan_cursor lends what scan returns");
    let mut lent = Vec::new();
    let visited = t
        .scan_with(scan, |row| {
            assert!(!row.is_empty(), "a lent row has cells");
            lent.push(row.to_row_result());
            std::ops::ControlFlow::Continue(())
        })
        .unwrap();
    assert_eq!(lent, returned, "scan_with lends what scan returns");
    let mut keys: Vec<_> = returned.iter().map(|r| &r.row).collect();
    keys.dedup();
    assert_eq!(visited, keys.len(), "scan_with counts rows, not batches");
    returned
}

/// A small deterministic generator (xorshift64) for test data.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in `[0, n)`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// How a crash-test child ended.
pub struct Killed {
    /// Writes it acknowledged: one past the last `ack N` it printed before it died.
    pub acknowledged: u32,
    /// True if it was still running when killed (the children write until killed).
    pub was_running: bool,
}

/// Runs `test` of this test binary in a child process with `env`; the child prints `ack N`
/// after each acknowledged write. Once it has acknowledged `kill_after` writes (or stopped),
/// waits `delay` and kills it with SIGKILL. Every ack it printed before dying counts: the child
/// runs ahead of our reads.
pub fn kill_child(
    test: &str,
    env: &[(&str, String)],
    kill_after: u32,
    delay: std::time::Duration,
    show_stderr: bool,
) -> Killed {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};

    let mut command = Command::new(std::env::current_exe().unwrap());
    command.args(["--exact", test, "--nocapture", "--test-threads=1"]).stdout(Stdio::piped());
    command.stderr(if show_stderr { Stdio::inherit() } else { Stdio::null() });
    for (key, value) in env {
        command.env(key, value);
    }
    let mut child = command.spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let parse = |line: std::io::Result<String>| line.ok().and_then(|l| l.strip_prefix("ack ")?.parse::<u32>().ok());
    let mut last_ack: Option<u32> = None;
    for line in lines.by_ref() {
        if let Some(n) = parse(line) {
            last_ack = Some(n);
            if n + 1 >= kill_after {
                break;
            }
        }
    }
    std::thread::sleep(delay);
    let was_running = child.try_wait().unwrap().is_none();
    child.kill().unwrap();
    child.wait().unwrap();
    for line in lines {
        if let Some(n) = parse(line) {
            last_ack = Some(n);
        }
    }
    Killed { acknowledged: last_ack.map_or(0, |n| n + 1), was_running }
}

/// A row's mutations putting `value` in its `f:q` cell (the multi-row and multi-table tests).
pub fn put_row(row: &str, value: &str) -> RowMutations {
    RowMutations::new(row.to_string()).with(Put::new(row.to_string()).add("f", "q", value.to_string()))
}

/// The `f:q` cell of `row`, as text.
pub fn value(t: &Table, row: &str) -> Option<String> {
    let r = t.get(Get::new(row.to_string())).unwrap();
    r.value(b"f", b"q").map(|v| String::from_utf8_lossy(v).into_owned())
}
