//! The syncs that finish a log roll, run on a thread of their own.
//!
//! A roll closes a full segment and starts the next. The closed segment's records must reach
//! the disk before anything depends on the records after them, but the writer that filled it
//! need not wait for that: it goes on into the new segment while a thread fsyncs the closed
//! one (up to a segment of page cache to write out) and the directory that names the new one.
//! Until that is done, a power loss may tear the closed segment while blocks of the new one
//! persist; recovery then ends the log at the tear and drops the new segment (see
//! [`super::segment`]). Whatever makes records durable — a synced write, a catalog write that
//! syncs the log — waits for the roll's syncs first, and a roll waits for the one before it, so only the last
//! two segments can be torn.
//!
//! A roll at a flush of every region defers the syncs instead: the closed segment holds only
//! records the flush is writing to files, so once the catalog names those files the segment is
//! deleted, and its pages need never reach the disk. The syncs start only when something needs
//! them first (a synced write, the next roll, a close).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};

use crate::fs::{FileSystem, WriteFile};
use crate::{Error, Result};

/// How the syncs ended: `None` while they run.
type Outcome = Option<std::result::Result<(), (PathBuf, io::ErrorKind, String)>>;

/// Where a roll's syncs stand, shared with the thread running them.
struct Progress {
    /// Set with the outcome when the syncs failed: checked on every append, without a lock.
    failed: AtomicBool,
    outcome: Mutex<Outcome>,
    ended: Condvar,
}

impl Progress {
    fn end(&self, synced: std::result::Result<(), (PathBuf, io::Error)>) {
        let mut outcome = self.outcome.lock();
        *outcome = Some(synced.map_err(|(path, e)| (path, e.kind(), e.to_string())));
        if matches!(*outcome, Some(Err(_))) {
            self.failed.store(true, Ordering::Release);
        }
        self.ended.notify_all();
    }
}

/// The closed segment's records, then the directory entry of the segment after it.
fn sync(
    fs: &dyn FileSystem,
    dir: &Path,
    closed: &dyn WriteFile,
    closed_path: &Path,
) -> std::result::Result<(), (PathBuf, io::Error)> {
    closed.sync_data().map_err(|e| (closed_path.to_path_buf(), e))?;
    fs.sync_dir(dir).map_err(|e| (dir.to_path_buf(), e))
}

/// A roll's syncs not started yet: what they will sync.
struct Deferred {
    fs: Arc<dyn FileSystem>,
    dir: PathBuf,
    closed: Arc<dyn WriteFile>,
    closed_path: PathBuf,
}

/// One roll's syncs: deferred, under way or over.
pub(super) struct RollSync {
    progress: Arc<Progress>,
    thread: Option<JoinHandle<()>>,
    /// Set while the syncs wait for something to need them.
    deferred: Option<Deferred>,
    /// The id of the segment the roll closed.
    closed_id: u64,
}

impl RollSync {
    /// The syncs of a roll: of `closed` (segment `closed_id`, at `closed_path`), then of `dir`.
    /// They wait until [`RollSync::begin`] starts them, [`RollSync::waiter`] or
    /// [`RollSync::finish`] needs them, or [`RollSync::cancel_if_removed`] finds their segment
    /// deleted.
    pub fn defer(
        fs: &Arc<dyn FileSystem>,
        dir: &Path,
        closed: Arc<dyn WriteFile>,
        (closed_id, closed_path): (u64, PathBuf),
    ) -> RollSync {
        let progress =
            Arc::new(Progress { failed: AtomicBool::new(false), outcome: Mutex::new(None), ended: Condvar::new() });
        let deferred = Deferred { fs: fs.clone(), dir: dir.to_path_buf(), closed, closed_path };
        RollSync { progress, thread: None, deferred: Some(deferred), closed_id }
    }

    /// True while the syncs wait for something to need them.
    pub fn is_deferred(&self) -> bool {
        self.deferred.is_some()
    }

    /// Drops deferred syncs whose segment is among `removed`: a deleted segment needs none.
    /// The caller has synced the directory after the deletion, which also made the entry of
    /// the segment after it durable. Returns the roll back otherwise.
    pub fn cancel_if_removed(self, removed: &[u64]) -> Option<RollSync> {
        if self.deferred.is_some() && removed.contains(&self.closed_id) {
            self.progress.end(Ok(()));
            return None;
        }
        Some(self)
    }

    /// Starts deferred syncs on a thread; nothing if they have started. If no thread can be
    /// started, they run here before this returns.
    pub fn begin(&mut self) {
        let Some(Deferred { fs, dir, closed, closed_path }) = self.deferred.take() else { return };
        let progress = self.progress.clone();
        let spawned = {
            let (fs, dir, closed, closed_path, progress) =
                (fs.clone(), dir.to_path_buf(), closed.clone(), closed_path.clone(), progress.clone());
            std::thread::Builder::new().name("cellar-log-roll".into()).spawn(move || {
                // Waiters must hear of the end even if a file system implementation panics.
                let synced =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sync(&*fs, &dir, &*closed, &closed_path)))
                        .unwrap_or_else(|_| Err((closed_path.clone(), io::Error::other("the log-roll sync panicked"))));
                progress.end(synced);
            })
        };
        self.thread = match spawned {
            Ok(thread) => Some(thread),
            Err(_) => {
                progress.end(sync(&*fs, &dir, &*closed, &closed_path));
                None
            }
        };
    }

    /// Why the syncs failed, if they have ended in a failure; does not wait.
    pub fn failure(&self) -> Option<String> {
        if !self.progress.failed.load(Ordering::Acquire) {
            return None;
        }
        match &*self.progress.outcome.lock() {
            Some(Err((path, _, message))) => {
                Some(format!("syncing {} after a log roll failed: {message}", path.display()))
            }
            _ => None,
        }
    }

    /// A handle that waits for the syncs from wherever the roll is not owned; starts them if
    /// they were deferred.
    pub fn waiter(&mut self) -> RollWaiter {
        self.begin();
        RollWaiter(self.progress.clone())
    }

    /// Waits for the syncs and the thread that ran them; runs deferred ones here.
    pub fn finish(mut self) -> Result<()> {
        if let Some(Deferred { fs, dir, closed, closed_path }) = self.deferred.take() {
            self.progress.end(sync(&*fs, &dir, &*closed, &closed_path));
        }
        if let Some(thread) = self.thread.take() {
            // The thread catches a panic of the syncs and reports it as their failure.
            let _ = thread.join();
        }
        self.waiter().wait()
    }
}

/// Waits for a roll's syncs.
pub(super) struct RollWaiter(Arc<Progress>);

impl RollWaiter {
    /// Waits until the syncs end; their error if they failed.
    pub fn wait(&self) -> Result<()> {
        let mut outcome = self.0.outcome.lock();
        loop {
            match &*outcome {
                None => self.0.ended.wait(&mut outcome),
                Some(Ok(())) => return Ok(()),
                Some(Err((path, kind, message))) => {
                    return Err(Error::io(
                        path,
                        io::Error::new(*kind, format!("syncing a closed log segment failed: {message}")),
                    ))
                }
            }
        }
    }
}
