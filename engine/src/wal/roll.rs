//! The syncs that finish a log roll, run on a thread of their own.
//!
//! A roll closes a full segment and starts the next. The closed segment's records must reach
//! the disk before anything depends on the records after them, but the writer that filled it
//! need not wait for that: it goes on into the new segment while a thread fsyncs the closed
//! one (up to a segment of page cache to write out) and the directory that names the new one.
//! Until that is done, a power loss may tear the closed segment while blocks of the new one
//! persist; recovery then ends the log at the tear and drops the new segment (see
//! [`super::segment`]). Whatever makes records durable — a synced write, a catalog write —
//! waits for the roll's syncs first, and a roll waits for the one before it, so only the last
//! two segments can be torn.

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

/// One roll's syncs under way (or over).
pub(super) struct RollSync {
    progress: Arc<Progress>,
    thread: Option<JoinHandle<()>>,
}

impl RollSync {
    /// Starts syncing `closed` (the segment at `closed_path`) and then `dir` on a thread. If no
    /// thread can be started, they run here before this returns.
    pub fn start(fs: &Arc<dyn FileSystem>, dir: &Path, closed: Arc<dyn WriteFile>, closed_path: PathBuf) -> RollSync {
        let progress =
            Arc::new(Progress { failed: AtomicBool::new(false), outcome: Mutex::new(None), ended: Condvar::new() });
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
        let thread = match spawned {
            Ok(thread) => Some(thread),
            Err(_) => {
                progress.end(sync(&**fs, dir, &*closed, &closed_path));
                None
            }
        };
        RollSync { progress, thread }
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

    /// A handle that waits for the syncs from wherever the roll is not owned.
    pub fn waiter(&self) -> RollWaiter {
        RollWaiter(self.progress.clone())
    }

    /// Waits for the syncs and the thread that ran them.
    pub fn finish(mut self) -> Result<()> {
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
