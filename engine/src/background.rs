//! Background maintenance: a small pool of worker threads running flushes, compactions and
//! splits that writers request, and writing buffered AsyncWal records out when idle.
//!
//! Requests are deduplicated per (region, kind). Workers hold only a weak reference to the
//! engine; the [`Lifeline`] shared by every user handle stops and joins them when the last
//! handle goes, flushes the memstores, and so closing an engine releases its directory at once.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use crate::engine::EngineInner;

/// What a worker does to one region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum TaskKind {
    Flush,
    Compact,
    Split,
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
    /// The latest failure of each kind of task, until a task of that kind succeeds: what a
    /// write that waited in vain reports ([`crate::Error::RegionTooBusy`]).
    failures: Mutex<HashMap<TaskKind, String>>,
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

    /// Wakes writers waiting on back-pressure before the task that relieved it has finished
    /// (a flush gives its memstore's memory back before it persists the catalog).
    pub fn progress_made(&self) {
        let _q = self.queue.lock();
        self.progress.notify_all();
    }

    /// Notes how a task ended: a failure is kept until a task of its kind succeeds.
    fn record_outcome(&self, task: &Task, outcome: &crate::Result<()>) {
        let mut failures = self.failures.lock();
        match outcome {
            Ok(()) => {
                failures.remove(&task.kind);
            }
            Err(e) => {
                let what = match task.kind {
                    TaskKind::Flush => "flush",
                    TaskKind::Compact => "compaction",
                    TaskKind::Split => "split",
                };
                failures.insert(task.kind, format!("the last {what} of region {} failed: {e}", task.region));
            }
        }
    }

    /// The latest failure of a `kind` task, if none of that kind has succeeded since.
    pub fn failure(&self, kind: TaskKind) -> Option<String> {
        self.failures.lock().get(&kind).cloned()
    }

    /// True when nothing is queued or running.
    pub fn idle(&self) -> bool {
        let q = self.queue.lock();
        q.tasks.is_empty() && q.running == 0
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
    engine: Weak<EngineInner>,
    background: Arc<Background>,
    workers: Mutex<Vec<JoinHandle<()>>>,
}

impl Lifeline {
    /// Starts `threads` workers for `engine`.
    pub fn start(engine: &Arc<EngineInner>, threads: usize) -> Lifeline {
        let background = engine.background.clone();
        background.queue.lock().workers = threads.max(1);
        let workers = (0..threads.max(1))
            .filter_map(|i| {
                let weak: Weak<EngineInner> = Arc::downgrade(engine);
                let bg = background.clone();
                let nice = engine.opts.background_nice;
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
        Lifeline { engine: Arc::downgrade(engine), background, workers: Mutex::new(workers) }
    }
}

impl Drop for Lifeline {
    fn drop(&mut self) {
        self.background.stop.store(true, Ordering::Release);
        self.background.work.notify_all();
        for w in self.workers.lock().drain(..) {
            let _ = w.join();
        }
        if let Some(engine) = self.engine.upgrade() {
            if engine.opts.flush_on_close {
                // Best effort: whatever is not flushed is still in the log (unless SkipWal).
                let _ = engine.flush_all();
            }
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

fn worker(engine: &Weak<EngineInner>, bg: &Background) {
    while let Some(task) = bg.next() {
        let idle_tick = task.table.is_empty();
        if let Some(engine) = engine.upgrade() {
            if !idle_tick {
                // A failed task is retried when the next write asks for it again; the data
                // stays safe in the memstore and the log meanwhile.
                let outcome = engine.run_task(&task);
                bg.record_outcome(&task, &outcome);
                // Flushes and compactions free large buffers; see `heap`.
                crate::heap::release_free_memory();
            }
            // Buffered AsyncWal records go out at least this often, busy or idle.
            let _ = engine.wal.flush_buffer();
        }
        bg.done(&task, !idle_tick);
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
