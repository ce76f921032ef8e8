//! Background maintenance: a small pool of worker threads running flushes, compactions and
//! splits that writers request, and writing buffered AsyncWal records out when idle; and a
//! thread of its own writing the catalog after them.
//!
//! Requests are deduplicated per (region, kind). A flush or compaction changes its region's
//! files in memory and hands the catalog write, the log trim and the deletion of replaced
//! files to the catalog thread, which serves every request made while it wrote with one
//! write. A worker is then free for the next flush at once: a catalog write waits for the
//! log's fsync, which on a busy disk takes up to seconds, and writers waiting for memory
//! would otherwise wait for it too. Workers hold only a weak reference to the
//! engine; the [`Lifeline`] shared by every user handle stops and joins them when the last
//! handle goes, flushes the memstores, and so closing an engine releases its directory at once.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use crate::observe::{self, Counters, Failing};
use crate::sst::SstReader;

/// What the background reaches of the engine: the work its threads run. The engine
/// implements it (its maintenance module); the background holds it weakly, so it never keeps
/// an engine open.
pub(crate) trait Maintainer: Send + Sync {
    /// Runs one task. Regions split or dropped meanwhile are skipped.
    fn run_task(&self, task: &Task) -> crate::Result<()>;
    /// The catalog write flushes and compactions ask for: persists the catalog, deletes
    /// `replaced` files no manifest on disk lists any more and trims the log.
    fn write_catalog(&self, replaced: &[Arc<SstReader>]) -> crate::Result<()>;
    /// Writes buffered AsyncWal records out to the OS (best effort).
    fn flush_log_buffer(&self);
    /// The last handle is gone and the workers stopped: flushes the memstores if the engine
    /// is to (best effort: what is not flushed is still in the log, unless SkipWal).
    fn close(&self);
    /// Publishes the engine's gauges: after a task (`after_task`, at most every 100 ms), or on
    /// an idle tick (at most about once a second).
    #[cfg(feature = "metrics")]
    fn publish_metrics(&self, after_task: bool);
}

/// What a worker does to one region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum TaskKind {
    Flush,
    Compact,
    Split,
}

impl TaskKind {
    /// Its name in events and metrics.
    pub fn name(self) -> &'static str {
        match self {
            TaskKind::Flush => "flush",
            TaskKind::Compact => "compaction",
            TaskKind::Split => "split",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// One request.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Task {
    pub table: String,
    pub region: u64,
    pub kind: TaskKind,
}

#[derive(Default)]
struct Queue {
    tasks: VecDeque<Task>,
    queued: HashSet<Task>,
    running: usize,
    /// Compactions running: they may not take the last worker, which flushes need.
    compacting: usize,
    /// Tasks running, by [`TaskKind::index`].
    running_kinds: [usize; 3],
    /// Workers started.
    workers: usize,
}

/// The task queue and its signals.
#[derive(Default)]
pub(crate) struct Background {
    queue: Mutex<Queue>,
    /// Signals workers that a task is queued (or that they should stop).
    work: Condvar,
    /// Signals writers waiting on back-pressure that a task finished.
    progress: Condvar,
    stop: AtomicBool,
    /// Set once the workers have stopped: the catalog thread makes the writes they asked for
    /// and stops too.
    catalog_stop: AtomicBool,
    /// The latest failure of each kind of task, until a task of that kind succeeds: what a
    /// write that waited in vain reports ([`crate::Error::RegionTooBusy`]).
    failures: Mutex<HashMap<TaskKind, Failing>>,
    /// The catalog writes asked for, and how the last one ended.
    catalog: Mutex<CatalogWork>,
    /// Signals the catalog thread that a write is wanted (or that it should stop).
    catalog_wanted: Condvar,
    /// No catalog thread runs: workers write the catalog themselves.
    catalog_inline: AtomicBool,
    /// What the engine has done since it opened ([`crate::EngineStats`]).
    pub counters: Counters,
}

/// The catalog writes flushes and compactions asked for.
#[derive(Default)]
struct CatalogWork {
    /// A flush or compaction changed files since the last catalog write began.
    wanted: bool,
    /// A catalog write is under way.
    running: bool,
    /// Files compactions replaced: deleted after the next catalog write that succeeds, when
    /// no manifest on disk may list them.
    replaced: Vec<Arc<SstReader>>,
    /// Why the latest catalog write failed, until one succeeds.
    failure: Option<Failing>,
}

impl Background {
    /// Queues a task unless an identical one is already waiting.
    pub fn request(&self, task: Task) {
        let mut q = self.queue.lock();
        if q.queued.insert(task.clone()) {
            q.tasks.push_back(task);
            self.work.notify_one();
        }
    }

    /// Waits until some task finishes or `timeout` passes.
    pub fn wait_for_progress(&self, timeout: Duration) {
        let mut q = self.queue.lock();
        self.progress.wait_for(&mut q, timeout);
    }

    /// Asks for a catalog write, after which `replaced` (a compaction's inputs, already out of
    /// their region) are deleted. Without a catalog thread, the caller writes it now.
    pub fn request_catalog(&self, engine: &dyn Maintainer, replaced: Vec<Arc<SstReader>>) -> crate::Result<()> {
        if self.catalog_inline.load(Ordering::Acquire) {
            return engine.write_catalog(&replaced);
        }
        let mut c = self.catalog.lock();
        c.wanted = true;
        c.replaced.extend(replaced);
        self.catalog_wanted.notify_one();
        Ok(())
    }

    /// Waits until a catalog write is wanted and takes it: the files to delete after it.
    /// `None` once the workers have stopped and nothing is wanted.
    fn next_catalog(&self) -> Option<Vec<Arc<SstReader>>> {
        let mut c = self.catalog.lock();
        loop {
            if c.wanted {
                c.wanted = false;
                c.running = true;
                return Some(std::mem::take(&mut c.replaced));
            }
            if self.catalog_stop.load(Ordering::Acquire) {
                return None;
            }
            self.catalog_wanted.wait(&mut c);
        }
    }

    /// Notes how a catalog write ended. A failed one is tried again when the next flush or
    /// compaction asks, as a failed task is; its files wait for that write.
    fn catalog_done(&self, outcome: crate::Result<()>, replaced: Vec<Arc<SstReader>>) {
        let mut c = self.catalog.lock();
        c.running = false;
        match outcome {
            Ok(()) => {
                if let Some(was) = c.failure.take() {
                    observe::catalog_recovered(&was);
                }
            }
            Err(e) => {
                observe::catalog_failed(c.failure.get_or_insert_with(Failing::default), &e);
                c.replaced.extend(replaced);
            }
        }
        drop(c);
        let _q = self.queue.lock();
        self.progress.notify_all();
    }

    /// Why the latest catalog write failed, if none has succeeded since.
    pub fn catalog_failure(&self) -> Option<String> {
        self.catalog.lock().failure.as_ref().map(|f| f.message.clone())
    }

    /// Notes how a task ended: a failure is kept until a task of its kind succeeds.
    fn record_outcome(&self, task: &Task, outcome: &crate::Result<()>) {
        let mut failures = self.failures.lock();
        match outcome {
            Ok(()) => {
                if let Some(was) = failures.remove(&task.kind) {
                    observe::task_recovered(&was, task.kind.name(), &task.table, task.region);
                }
            }
            Err(e) => {
                let failing = failures.entry(task.kind).or_default();
                observe::task_failed(failing, task.kind.name(), &task.table, task.region, e);
            }
        }
    }

    /// The latest failure of a `kind` task, if none of that kind has succeeded since.
    pub fn failure(&self, kind: TaskKind) -> Option<String> {
        self.failures.lock().get(&kind).map(|f| f.message.clone())
    }

    /// Tasks queued or running, by kind: flushes, compactions, splits.
    pub fn pending(&self) -> (usize, usize, usize) {
        let q = self.queue.lock();
        let mut pending = q.running_kinds;
        for t in &q.tasks {
            pending[t.kind.index()] += 1;
        }
        (pending[0], pending[1], pending[2])
    }

    /// True when no task and no catalog write is queued or running.
    pub fn idle(&self) -> bool {
        let tasks_idle = {
            let q = self.queue.lock();
            q.tasks.is_empty() && q.running == 0
        };
        let c = self.catalog.lock();
        tasks_idle && !c.wanted && !c.running
    }

    fn next(&self) -> Option<Task> {
        let mut q = self.queue.lock();
        loop {
            if self.stop.load(Ordering::Acquire) {
                return None;
            }
            // Flushes first: a writer may be waiting for one. A compaction leaves one worker
            // free, so a long merge never holds up a flush (HBase's separate flusher threads).
            let compaction_room = q.compacting + 1 < q.workers.max(2);
            let pick = q
                .tasks
                .iter()
                .position(|t| t.kind == TaskKind::Flush)
                .or_else(|| q.tasks.iter().position(|t| t.kind != TaskKind::Compact || compaction_room));
            if let Some(t) = pick.and_then(|i| q.tasks.remove(i)) {
                q.queued.remove(&t);
                q.running += 1;
                q.running_kinds[t.kind.index()] += 1;
                if t.kind == TaskKind::Compact {
                    q.compacting += 1;
                }
                return Some(t);
            }
            // The idle tick: come back to write out buffered AsyncWal records.
            if self.work.wait_for(&mut q, Duration::from_millis(100)).timed_out() {
                return Some(Task { table: String::new(), region: 0, kind: TaskKind::Flush });
            }
        }
    }

    fn done(&self, task: &Task, counted: bool) {
        let mut q = self.queue.lock();
        if counted {
            q.running -= 1;
            q.running_kinds[task.kind.index()] -= 1;
            if task.kind == TaskKind::Compact {
                q.compacting -= 1;
                // A compaction may have waited for this one's worker.
                self.work.notify_one();
            }
        }
        drop(q);
        self.progress.notify_all();
    }
}

/// Shared by every user handle; stops and joins the workers when the last one is dropped.
pub(crate) struct Lifeline {
    engine: Weak<dyn Maintainer>,
    background: Arc<Background>,
    workers: Mutex<Vec<JoinHandle<()>>>,
    catalog: Mutex<Option<JoinHandle<()>>>,
}

impl Lifeline {
    /// Starts `threads` workers for `engine`, taking tasks from `background`, at `nice` more
    /// niceness than the application's.
    pub fn start(engine: Weak<dyn Maintainer>, background: Arc<Background>, threads: usize, nice: u8) -> Lifeline {
        background.queue.lock().workers = threads.max(1);
        let workers = (0..threads.max(1))
            .filter_map(|i| {
                let weak = engine.clone();
                let bg = background.clone();
                std::thread::Builder::new()
                    .name(format!("cellar-bg-{i}"))
                    .spawn(move || {
                        lower_priority(nice);
                        worker(&weak, &bg)
                    })
                    // Without a worker, writers still make progress: back-pressure waits time
                    // out, and explicit flushes and compactions run in the caller.
                    .ok()
            })
            .collect();
        let catalog = {
            let weak = engine.clone();
            let bg = background.clone();
            std::thread::Builder::new()
                .name("cellar-catalog".into())
                .spawn(move || {
                    lower_priority(nice);
                    catalog_writer(&weak, &bg)
                })
                .ok()
        };
        background.catalog_inline.store(catalog.is_none(), Ordering::Release);
        Lifeline { engine, background, workers: Mutex::new(workers), catalog: Mutex::new(catalog) }
    }
}

impl Drop for Lifeline {
    fn drop(&mut self) {
        self.background.stop.store(true, Ordering::Release);
        self.background.work.notify_all();
        for w in self.workers.lock().drain(..) {
            let _ = w.join();
        }
        // After the workers: it makes the catalog writes their last tasks asked for.
        {
            let _c = self.background.catalog.lock();
            self.background.catalog_stop.store(true, Ordering::Release);
            self.background.catalog_wanted.notify_all();
        }
        if let Some(catalog) = self.catalog.lock().take() {
            let _ = catalog.join();
        }
        if let Some(engine) = self.engine.upgrade() {
            engine.close();
        }
    }
}

/// Adds `nice` (at most 19) to the calling thread's niceness: on Linux niceness is per thread.
#[cfg(target_os = "linux")]
fn lower_priority(nice: u8) {
    if nice == 0 {
        return;
    }
    #[expect(unsafe_code, reason = "FFI calls into the C library")]
    // SAFETY: getpriority and setpriority of the calling thread (who = 0) read and change
    // only its scheduling weight; a call that fails leaves it as it was, which is harmless.
    unsafe {
        let current = libc::getpriority(libc::PRIO_PROCESS, 0);
        libc::setpriority(libc::PRIO_PROCESS, 0, (current + i32::from(nice.min(19))).min(19));
    }
}

/// Background threads keep the application's priority where niceness is per process.
#[cfg(not(target_os = "linux"))]
fn lower_priority(_nice: u8) {}

fn worker(engine: &Weak<dyn Maintainer>, bg: &Background) {
    while let Some(task) = bg.next() {
        let idle_tick = task.table.is_empty();
        let engine = engine.upgrade();
        if let Some(engine) = &engine {
            if !idle_tick {
                // A failed task is retried when the next write asks for it again; the data
                // stays safe in the memstore and the log meanwhile.
                let outcome = engine.run_task(&task);
                bg.record_outcome(&task, &outcome);
                // Flushes and compactions free large buffers; see `heap`.
                crate::heap::release_free_memory();
            }
            // Buffered AsyncWal records go out at least this often, busy or idle.
            engine.flush_log_buffer();
        }
        bg.done(&task, !idle_tick);
        // After `done`, so the queue lengths published leave this task out.
        #[cfg(feature = "metrics")]
        if let Some(engine) = &engine {
            engine.publish_metrics(!idle_tick);
        }
    }
}

/// The catalog thread: writes the catalog whenever flushes or compactions ask.
fn catalog_writer(engine: &Weak<dyn Maintainer>, bg: &Background) {
    while let Some(replaced) = bg.next_catalog() {
        let outcome = match engine.upgrade() {
            Some(engine) => engine.write_catalog(&replaced),
            None => Ok(()),
        };
        let deleted = outcome.is_ok() && !replaced.is_empty();
        bg.catalog_done(outcome, replaced);
        if deleted {
            // The deleted files' readers and cached blocks were the last of a compaction's
            // memory, freed here rather than on the worker that trimmed after it; see `heap`.
            crate::heap::release_free_memory();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(region: u64, kind: TaskKind) -> Task {
        Task { table: "t".into(), region, kind }
    }

    fn with_workers(n: usize) -> Background {
        let bg = Background::default();
        bg.queue.lock().workers = n;
        bg
    }

    /// A queued flush goes before older compactions, and compactions never take the last
    /// worker: a writer waiting on a full memstore is not held up by long merges.
    #[test]
    fn flushes_go_first_and_compactions_leave_a_worker_free() {
        let bg = with_workers(2);
        bg.request(task(1, TaskKind::Compact));
        bg.request(task(2, TaskKind::Compact));
        bg.request(task(3, TaskKind::Flush));
        assert_eq!(bg.next(), Some(task(3, TaskKind::Flush)));
        bg.done(&task(3, TaskKind::Flush), true);
        let first = bg.next().unwrap();
        assert_eq!(first, task(1, TaskKind::Compact));
        // One compaction runs: the other worker only gets the idle tick, not the second one.
        let second = bg.next().unwrap();
        assert!(second.table.is_empty(), "{second:?}");
        bg.done(&second, false);
        // A flush still goes through while the compaction runs.
        bg.request(task(4, TaskKind::Flush));
        assert_eq!(bg.next(), Some(task(4, TaskKind::Flush)));
        bg.done(&task(4, TaskKind::Flush), true);
        bg.done(&first, true);
        assert_eq!(bg.next(), Some(task(2, TaskKind::Compact)));
        bg.done(&task(2, TaskKind::Compact), true);
        assert!(bg.idle());
    }

    /// A single worker still compacts: the reserve only applies when there is a worker to keep.
    #[test]
    fn a_single_worker_runs_compactions() {
        let bg = with_workers(1);
        bg.request(task(1, TaskKind::Compact));
        assert_eq!(bg.next(), Some(task(1, TaskKind::Compact)));
        bg.done(&task(1, TaskKind::Compact), true);
        assert!(bg.idle());
    }
}
