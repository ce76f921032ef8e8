//! Group commit: writers that need their records durable share one `fdatasync`, led by one of
//! them while the others wait for it and find their records covered.

use std::sync::atomic::Ordering;

use super::format::segment_path;
use super::roll::RollSync;
use super::segment::Wal;
use crate::{Error, Result};

impl Wal {
    /// Makes every record up to `seq` durable with one `fdatasync` shared by all waiters.
    pub fn sync_to(&self, seq: u64) -> Result<()> {
        loop {
            if self.synced.load(Ordering::Acquire) >= seq {
                return Ok(());
            }
            if let Some(leader) = self.leader.try_lock() {
                let synced = self.sync_as_leader(seq);
                drop(leader);
                // Wake the writers that waited for this fsync: most find their records
                // covered, and one of the others leads the next.
                let _wait = self.sync_wait.lock();
                self.sync_done.notify_all();
                return synced;
            }
            let mut wait = self.sync_wait.lock();
            // The leader notifies while holding `sync_wait`, after giving up the lead: if it
            // still leads now, its notification comes after this wait begins.
            if self.synced.load(Ordering::Acquire) < seq && self.leader.is_locked() {
                self.sync_done.wait(&mut wait);
            }
        }
    }

    /// One fsync covering every record written so far; the caller leads (holds `leader`).
    fn sync_as_leader(&self, seq: u64) -> Result<()> {
        if self.synced.load(Ordering::Acquire) >= seq {
            return Ok(());
        }
        let (file, written, id, rolled) = {
            let mut inner = self.inner.lock();
            if let Some(why) = &inner.failed {
                // The caller's records are logged (perhaps applied) but cannot be made durable.
                let e = std::io::Error::other(format!("the log failed before this write was made durable: {why}"));
                return Err(Error::io(segment_path(&self.dir, inner.id), e));
            }
            if !inner.buf.is_empty() {
                let buf = std::mem::take(&mut inner.buf);
                let last = inner.cur_max_seq;
                self.write_out(&mut inner, &buf, last)?;
            }
            (inner.file.clone(), inner.written_seq, inner.id, inner.rolling.as_mut().map(RollSync::waiter))
        };
        // Records before the current segment are durable once the latest roll's syncs are:
        // each roll waited for the one before it.
        self.wait_for_roll(rolled)?;
        if let Err(e) = file.sync_data() {
            let path = segment_path(&self.dir, id);
            // Never retried: after a failed fsync the kernel may have dropped the dirty pages,
            // and a second fsync could succeed without them.
            self.set_failed(&mut self.inner.lock(), format!("fsync of the log segment {} failed: {e}", path.display()));
            return Err(Error::io(path, e));
        }
        // A roll may have closed the segment while it was being synced. The roll's thread then
        // fsyncs the same file, and if that fsync failed, it took the error this one would
        // have reported: the kernel tells each failure once. So the rolls since must have
        // succeeded too (each waits for the one before, so the latest one speaks for all).
        let rolled_since = {
            let mut inner = self.inner.lock();
            if inner.id != id {
                if let Some(why) = &inner.failed {
                    let e = std::io::Error::other(format!("the log failed while this write was made durable: {why}"));
                    return Err(Error::io(segment_path(&self.dir, id), e));
                }
                inner.rolling.as_mut().map(RollSync::waiter)
            } else {
                None
            }
        };
        self.wait_for_roll(rolled_since)?;
        self.synced.fetch_max(written, Ordering::AcqRel);
        Ok(())
    }
}
