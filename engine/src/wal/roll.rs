//! The syncs that finish a log roll, run on a thread of their own.
//!
//! A roll closes a full segment and starts the next. The closed segment's records must reach
//! the disk before anything depends on the records after them, but the writer that filled it
//! need not wait for that: it goes on into the new segment while a thread fsyncs the closed
//! one (up to a segment of page cache to write out) and the directory that names the new one.
//! Until that is done, a power loss may tear the closed segment while blocks of the new one
//! persist; recovery then ends the log at the tear and drops the new segment (see
//! [`super::recovery`]). Whatever makes records durable — a synced write, a catalog write that
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

use super::format::{segment_path, Header, SEGMENT_HEADER};
use super::segment::{Closed, Inner, Wal};
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

/// A segment a flush of every region started rolls by size only at this many times the
/// segment limit: the next such flush closes it, and its sync can wait until the catalog
/// write after that flush deletes it. A roll by size in between would have to sync it.
pub(super) const FLUSH_ROLLED_LIMIT: u64 = 4;

/// Why a roll failed.
pub(super) enum Roll {
    /// The new segment could not be made; the current one is as it was and takes appends.
    NotStarted(Error),
    /// The previous roll's syncs or cutting the current segment back failed.
    Failed(Error),
}

impl Wal {
    /// The size at which the current segment rolls.
    pub(super) fn roll_size(&self, inner: &Inner) -> u64 {
        if inner.flush_rolled {
            self.segment_limit.saturating_mul(FLUSH_ROLLED_LIMIT)
        } else {
            self.segment_limit
        }
    }

    /// Closes the current segment and starts the next. The closed one's fsync runs on a
    /// thread (see [`RollSync`]) while appends go on into the new one, or, with `defer`, waits
    /// until something needs it.
    pub(super) fn roll(&self, inner: &mut Inner, defer: bool) -> std::result::Result<(), Roll> {
        // Only the last two segments may be torn by a power loss: the segment the previous
        // roll closed must be durable before this roll closes another.
        if let Some(previous) = inner.rolling.take() {
            previous.finish().map_err(Roll::Failed)?;
        }
        let id = inner.id + 1;
        let header = Header { previous: Some((inner.id, inner.size)), rolled: true };
        let file = Self::start_segment(&*self.fs, &self.dir, id, header).map_err(|e| {
            // Best effort: a file left half made would be in the way of the next roll.
            let _ = self.fs.remove(&segment_path(&self.dir, id));
            Roll::NotStarted(e)
        })?;
        // Only the last segments may end in zeros (recovery reads them as a torn tail). None
        // is left here: preallocation never passes the roll size, and the write that reaches
        // it extends the file to exactly its own end; a roll before that cuts the file back to
        // its last record (made durable with the records, by the closed segment's fdatasync).
        let path = segment_path(&self.dir, inner.id);
        if inner.allocated != inner.size {
            inner.file.set_len(inner.size).map_err(|e| Roll::Failed(Error::io(&path, e)))?;
            inner.allocated = inner.size;
        }
        let closed = std::mem::replace(&mut inner.file, file);
        inner.closed.push(Closed { id: inner.id, max_seq: inner.cur_max_seq, bytes: inner.size });
        let named = (inner.id, path);
        let mut rolling = RollSync::defer(&self.fs, &self.dir, closed, named);
        if !defer {
            rolling.begin();
        }
        inner.rolling = Some(rolling);
        inner.id = id;
        inner.size = SEGMENT_HEADER as u64;
        inner.allocated = SEGMENT_HEADER as u64;
        inner.flush_rolled = defer;
        Ok(())
    }

    /// Makes the segment the latest roll closed durable, if it is not: a flush of every region
    /// calls this before it stops the writers to roll the log ([`Wal::roll_for_flush`]), so
    /// that roll has no fsync to wait for.
    pub fn settle_closed(&self) -> Result<()> {
        let rolled = self.inner.lock().rolling.as_mut().map(RollSync::waiter);
        self.wait_for_roll(rolled)
    }

    /// Closes the current segment at a flush of every region, the caller holding the writers
    /// off: the closed segment holds exactly the records that flush writes to files. Its fsync
    /// is deferred until something needs it, and once the catalog names the flush's files the
    /// segment is deleted unsynced. Nothing happens if no record was logged since the last
    /// roll.
    pub fn roll_for_flush(&self) -> Result<()> {
        let mut inner = self.inner.lock();
        if let Some(why) = &inner.failed {
            return Err(Error::ReadOnly(why.clone()));
        }
        if !inner.buf.is_empty() {
            let buf = std::mem::take(&mut inner.buf);
            let last = inner.cur_max_seq;
            self.write_out(&mut inner, &buf, last)?;
        }
        if inner.size == SEGMENT_HEADER as u64 {
            inner.flush_rolled = true;
            return Ok(());
        }
        let rolled = self.roll(&mut inner, true);
        match rolled {
            // No new segment (a full disk): appends go on in this one, which a later flush
            // closes. Nothing about the log changed.
            Err(Roll::NotStarted(_)) => Ok(()),
            Err(Roll::Failed(e)) => {
                self.set_failed(&mut inner, format!("closing a log segment failed: {e}"));
                Err(e)
            }
            Ok(()) => Ok(()),
        }
    }

    /// Waits for a roll's syncs, if there is one; if they failed, fails the log too.
    pub(super) fn wait_for_roll(&self, roll: Option<RollWaiter>) -> Result<()> {
        match roll.map(|r| r.wait()) {
            Some(Err(e)) => {
                self.fail_first(&mut self.inner.lock(), e.to_string());
                Err(e)
            }
            _ => Ok(()),
        }
    }
}
