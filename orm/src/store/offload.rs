//! [`Offload`]: a synchronous [`Store`] for asynchronous callers. Each call runs on a small,
//! bounded pool of threads shared by the process, and the caller's future waits without
//! holding a runtime worker.
//!
//! Why a pool of Cellar's own rather than the runtime's blocking pool: the embedded engine
//! needs no runtime, and an application on any executor (or none) gets the same behaviour. The
//! pool is bounded (see [`POOL_THREADS`]), so a burst of thousands of calls queues instead of
//! starting thousands of threads.
//!
//! Cancellation: a call whose future is dropped before its turn comes is never run, exactly as
//! if the caller had stopped before making it. A call already running finishes (a write that
//! began is not torn) and its answer is dropped, as a request already sent to a server may
//! still apply after its caller is gone. The protocols are safe with that: index writes fence a
//! row before they settle what a writer left, so a late write of a writer taken for gone
//! cannot apply over them, and a call made by an aggregate's writer keeps that writer live
//! until the call ends, so nobody finishes its intent while a step of it may still land.
//! Dropping never blocks the dropping thread.
//!
//! Scans hold no thread between rows: the cursor reads a chunk of rows per call (growing from
//! [`FIRST_CHUNK`] to [`SCAN_CHUNK`]) and starts the next call after the last row it got. Each
//! row is read atomically, as always; rows of different chunks may come from different points
//! in time, as on Bigtable and HBase, where a scan is consistent per row only.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use futures::channel::{mpsc, oneshot};
use futures::StreamExt;
use parking_lot::{Condvar, Mutex};

use super::nonblocking::{AsyncCursorBox, AsyncRowCursor, AsyncStore, BuildCommit, Visit};
use super::{
    Call, Commit, Condition, FamilyAlteration, FamilyChange, Guarantees, LentRow, ReadSpec, Row, RowCheck, RowMutation,
    ScanSpec, Store, TableSpec,
};
use crate::{Error, Result};

/// Threads the pool starts at most: enough to keep a few disks and cores busy with the
/// engine's synchronous calls, few enough that an async service stays a handful of threads.
pub const POOL_THREADS: usize = 8;

/// Rows one scan call reads at most. A scan's first call reads [`FIRST_CHUNK`], and each
/// next one twice as many as the last, up to this: a caller that wants a few rows of a long
/// range (a page) gets them without a long read ahead, and a long scan costs few calls.
pub const SCAN_CHUNK: usize = 256;

/// Rows a scan's first call reads.
pub const FIRST_CHUNK: usize = 16;

/// A synchronous store whose calls run on Cellar's blocking pool (see the module's
/// documentation). Cheap to clone.
#[derive(Clone)]
pub struct Offload {
    store: Arc<dyn Store>,
}

impl std::fmt::Debug for Offload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Offload")
    }
}

type Job = Box<dyn FnOnce() + Send>;

/// The process's pool: jobs in arrival order, threads started as they are needed.
struct Pool {
    state: Mutex<PoolState>,
    work: Condvar,
}

#[derive(Default)]
struct PoolState {
    jobs: VecDeque<Job>,
    threads: usize,
    idle: usize,
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| Pool { state: Mutex::new(PoolState::default()), work: Condvar::new() })
}

impl Pool {
    fn submit(&'static self, job: Job) {
        let mut state = self.state.lock();
        state.jobs.push_back(job);
        if state.idle > 0 {
            self.work.notify_one();
            return;
        }
        if state.threads < POOL_THREADS {
            let started = std::thread::Builder::new().name("cellar-offload".into()).spawn(move || self.serve());
            // Without a new thread the job waits for a running one.
            if started.is_ok() {
                state.threads += 1;
            }
        }
    }

    fn serve(&self) {
        let mut state = self.state.lock();
        loop {
            if let Some(job) = state.jobs.pop_front() {
                drop(state);
                // A panicking call drops its answer's sender: its caller gets an error, and
                // the thread serves on.
                let _ = catch_unwind(AssertUnwindSafe(job));
                state = self.state.lock();
                continue;
            }
            state.idle += 1;
            self.work.wait(&mut state);
            state.idle -= 1;
        }
    }
}

impl Offload {
    /// `store`'s calls, run on the pool.
    pub fn new(store: Arc<dyn Store>) -> Self {
        Offload { store }
    }

    /// Runs `job` on the pool; the call answers what it returns. A job whose caller is gone
    /// before it starts does not run.
    fn run<'a, T: Send + 'static>(
        &self,
        job: impl FnOnce(&dyn Store) -> Result<T> + Send + 'static,
    ) -> Call<'a, Result<T>> {
        let (tx, rx) = oneshot::channel();
        let store = self.store.clone();
        let slot = Slot::submit(move || {
            let _ = tx.send(job(&*store));
        });
        // Made before the future, so that dropping a future never polled cancels the job too.
        let in_flight = InFlight { slot, before: None::<()> };
        Call::later(async move {
            let answer = rx.await.unwrap_or_else(|_| Err(lost()));
            drop(in_flight);
            answer
        })
    }
}

/// A job's progress, shared by the pool thread running it and the future waiting for it.
struct Slot {
    state: Mutex<JobState>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum JobState {
    Queued,
    Running,
    /// Its future was dropped before it started: it never runs.
    Cancelled,
}

impl Slot {
    /// Queues `job` on the pool.
    fn submit(job: impl FnOnce() + Send + 'static) -> Arc<Slot> {
        let slot = Arc::new(Slot { state: Mutex::new(JobState::Queued) });
        let ours = slot.clone();
        // The writer making the call stays live until it has run (see `writer::Owner`).
        let writer = crate::writer::keep_alive();
        pool().submit(Box::new(move || {
            let _writer = writer;
            {
                let mut state = ours.state.lock();
                if *state == JobState::Cancelled {
                    return;
                }
                *state = JobState::Running;
            }
            job();
        }));
        slot
    }
}

/// Held by a call's future: dropped with it, it cancels the job if the job has not started.
/// `before` is dropped first: what a running job may be waiting on.
struct InFlight<B> {
    slot: Arc<Slot>,
    before: Option<B>,
}

impl<B> Drop for InFlight<B> {
    fn drop(&mut self) {
        drop(self.before.take());
        let mut state = self.slot.state.lock();
        if *state == JobState::Queued {
            *state = JobState::Cancelled;
        }
    }
}

/// The error of a call whose thread panicked.
fn lost() -> Error {
    Error::Store("a store call on Cellar's blocking pool panicked; its answer is lost".into())
}

impl AsyncStore for Offload {
    fn ensure_table<'a>(&'a self, spec: &'a TableSpec) -> Call<'a, Result<()>> {
        let spec = spec.clone();
        self.run(move |s| s.ensure_table(&spec))
    }

    fn alter_families<'a>(
        &'a self,
        table: &'a str,
        changes: &'a [FamilyChange],
    ) -> Call<'a, Result<Vec<FamilyAlteration>>> {
        let (table, changes) = (table.to_string(), changes.to_vec());
        self.run(move |s| s.alter_families(&table, &changes))
    }

    fn mutate<'a>(&'a self, table: &'a str, rows: Vec<RowMutation>) -> Call<'a, Result<()>> {
        let table = table.to_string();
        self.run(move |s| s.mutate(&table, rows))
    }

    fn mutate_row<'a>(&'a self, table: &'a str, row: RowMutation) -> Call<'a, Result<()>> {
        let table = table.to_string();
        self.run(move |s| s.mutate_row(&table, row))
    }

    fn read_rows<'a>(
        &'a self,
        table: &'a str,
        rows: &'a [Bytes],
        read: &'a ReadSpec,
    ) -> Call<'a, Result<Vec<Option<Row>>>> {
        let (table, rows, read) = (table.to_string(), rows.to_vec(), read.clone());
        self.run(move |s| s.read_rows(&table, &rows, &read))
    }

    fn read_rows_with<'a>(
        &'a self,
        table: &'a str,
        rows: &'a [Bytes],
        read: &'a ReadSpec,
        visit: &'a mut Visit<'_>,
    ) -> Call<'a, Result<()>> {
        let read = self.read_rows(table, rows, read);
        Call::later(async move {
            for (i, row) in read.await?.iter().enumerate() {
                visit(i, row.as_ref().map(Row::lend));
            }
            Ok(())
        })
    }

    fn scan_cursor<'a>(&'a self, table: &'a str, scan: &'a ScanSpec) -> Call<'a, Result<AsyncCursorBox<'a>>> {
        let cursor = ChunkedCursor {
            offload: self.clone(),
            table: table.to_string(),
            left: scan.limit,
            scan: scan.clone(),
            rows: VecDeque::new(),
            current: None,
            done: false,
            chunk: FIRST_CHUNK,
        };
        Call::ready(Ok(Box::new(cursor)))
    }

    fn check_and_mutate<'a>(
        &'a self,
        table: &'a str,
        condition: Condition,
        mutation: RowMutation,
    ) -> Call<'a, Result<bool>> {
        let table = table.to_string();
        self.run(move |s| s.check_and_mutate(&table, condition, mutation))
    }

    fn check_and_mutate_many<'a>(
        &'a self,
        table: &'a str,
        entries: Vec<(Condition, RowMutation)>,
    ) -> Call<'a, Result<Vec<bool>>> {
        let table = table.to_string();
        self.run(move |s| s.check_and_mutate_many(&table, entries))
    }

    fn describe<'a>(&'a self, table: &'a str) -> Call<'a, Result<Option<TableSpec>>> {
        let table = table.to_string();
        self.run(move |s| s.describe(&table))
    }

    fn split_keys<'a>(&'a self, table: &'a str) -> Call<'a, Result<Option<Vec<Bytes>>>> {
        let table = table.to_string();
        self.run(move |s| s.split_keys(&table))
    }

    fn increment<'a>(
        &'a self,
        table: &'a str,
        row: Bytes,
        family: &'a str,
        qualifier: &'a str,
        delta: i64,
    ) -> Call<'a, Result<i64>> {
        let (table, family, qualifier) = (table.to_string(), family.to_string(), qualifier.to_string());
        self.run(move |s| s.increment(&table, row, &family, &qualifier, delta))
    }

    fn guarantees(&self) -> Guarantees {
        self.store.guarantees()
    }

    fn mutate_group<'a>(
        &'a self,
        table: &'a str,
        checks: Vec<RowCheck>,
        rows: Vec<RowMutation>,
    ) -> Call<'a, Result<bool>> {
        let table = table.to_string();
        self.run(move |s| s.mutate_group(&table, checks, rows))
    }

    fn commit(&self, commit: Commit) -> Call<'_, Result<bool>> {
        self.run(move |s| s.commit(commit))
    }

    /// The store holds the row on a pool thread while the caller's future builds the commit:
    /// the row goes to the future, the commit comes back. A future dropped meanwhile declines
    /// (nothing is written).
    fn read_and_commit<'a>(
        &'a self,
        table: &'a str,
        row: &'a Bytes,
        read: &'a ReadSpec,
        build: &'a mut BuildCommit<'_>,
    ) -> Call<'a, Result<Option<bool>>> {
        enum Ask {
            Build(Option<Row>),
            Done(Result<Option<bool>>),
        }
        let (ask, mut asked) = mpsc::unbounded::<Ask>();
        let (answer, answers) = std::sync::mpsc::channel::<Option<Commit>>();
        let (table, row, read) = (table.to_string(), row.clone(), read.clone());
        let store = self.store.clone();
        let slot = Slot::submit(move || {
            let done = store.read_and_commit(&table, &row, &read, &mut |found| {
                ask.unbounded_send(Ask::Build(found.cloned())).ok()?;
                answers.recv().ok().flatten()
            });
            let _ = ask.unbounded_send(Ask::Done(done));
        });
        // Dropped first: a job waiting for a commit gets none and declines.
        let in_flight = InFlight { slot, before: Some(answer) };
        Call::later(async move {
            while let Some(asked) = asked.next().await {
                match asked {
                    Ask::Build(found) => {
                        if let Some(answer) = &in_flight.before {
                            let _ = answer.send(build(found.as_ref()));
                        }
                    }
                    Ask::Done(done) => return done,
                }
            }
            Err(lost())
        })
    }
}

/// A scan through the pool, a chunk of rows per call (see the module's documentation).
struct ChunkedCursor {
    offload: Offload,
    table: String,
    /// What is left of the range: its bounds move past each chunk read.
    scan: ScanSpec,
    /// Rows still to lend under the scan's limit.
    left: Option<usize>,
    rows: VecDeque<Row>,
    current: Option<Row>,
    /// The range is read to its end.
    done: bool,
    /// Rows the next call reads (see [`SCAN_CHUNK`]).
    chunk: usize,
}

impl ChunkedCursor {
    /// Reads the next chunk and narrows the range to what lies past it.
    async fn fetch(&mut self) -> Result<()> {
        let want = self.left.map_or(self.chunk, |n| n.min(self.chunk));
        self.chunk = (self.chunk * 2).min(SCAN_CHUNK);
        let chunk = ScanSpec { limit: Some(want), ..self.scan.clone() };
        let table = self.table.clone();
        let rows = self
            .offload
            .run(move |s| {
                let mut cursor = s.scan_cursor(&table, &chunk)?;
                let mut rows = Vec::with_capacity(want);
                while cursor.advance()? {
                    rows.extend(cursor.row().map(|r| r.to_row()));
                }
                Ok(rows)
            })
            .await?;
        self.done = rows.len() < want;
        if let Some(last) = rows.last() {
            if self.scan.reverse {
                self.scan.end = Some(last.key.clone());
            } else {
                let mut next = last.key.to_vec();
                next.push(0);
                self.scan.start = next.into();
            }
        }
        if let Some(left) = &mut self.left {
            *left -= rows.len();
            self.done |= *left == 0;
        }
        self.rows.extend(rows);
        Ok(())
    }
}

impl AsyncRowCursor for ChunkedCursor {
    fn advance(&mut self) -> Call<'_, Result<bool>> {
        self.current = None;
        if let Some(row) = self.rows.pop_front() {
            self.current = Some(row);
            return Call::ready(Ok(true));
        }
        if self.done {
            return Call::ready(Ok(false));
        }
        Call::later(async move {
            if let Err(e) = self.fetch().await {
                self.done = true;
                return Err(e);
            }
            self.current = self.rows.pop_front();
            Ok(self.current.is_some())
        })
    }

    fn row(&self) -> Option<LentRow<'_>> {
        self.current.as_ref().map(Row::lend)
    }
}
