//! The file layer: every file the engine touches — log segments, SSTables, the manifest, its
//! directories and its lock — goes through a [`FileSystem`].
//!
//! [`OsFs`] (the operating system's file system) is the only production implementation; it
//! adds one virtual call to operations that each make a system call. Tests substitute
//! [`crate::fault::FaultFs`], which simulates power loss and injects I/O errors.
//!
//! The interface is what the engine needs and no more: files are written once from start to end
//! (appends) and read by offset; the only in-place changes are cutting a file short and
//! extending it with zeros ahead of the appends (a log segment's preallocation).

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use crate::{Error, Result};

/// The file operations of an engine. Implementations are shared by every thread of an engine.
pub trait FileSystem: Send + Sync + std::fmt::Debug {
    /// Creates `dir` and any missing parents.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// The names of the entries in `dir`.
    fn list(&self, dir: &Path) -> io::Result<Vec<OsString>>;
    /// The whole contents of `path`.
    fn read(&self, path: &Path) -> io::Result<Vec<u8>>;
    /// Opens `path` for reads at offsets.
    fn open(&self, path: &Path) -> io::Result<Arc<dyn ReadFile>>;
    /// Creates `path` for appends; fails if it exists.
    fn create_new(&self, path: &Path) -> io::Result<Arc<dyn WriteFile>>;
    /// Renames `from` to `to` (same directory), replacing `to`.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes a file.
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// Makes the creates, renames and removals inside `dir` durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Takes the exclusive lock of a data directory through the file `path`; held until the
    /// returned guard is dropped. Fails with [`io::ErrorKind::WouldBlock`] if another holder has it.
    fn lock(&self, path: &Path) -> io::Result<Box<dyn std::any::Any + Send + Sync>>;
}

/// A file being written: appends, a cut, a preallocation, the two syncs, and a writeback hint.
pub trait WriteFile: Send + Sync {
    /// Appends all of `buf` where the previous append ended (the start of the file at first),
    /// even if [`WriteFile::preallocate`] made the file longer.
    fn write_all(&self, buf: &[u8]) -> io::Result<()>;
    /// Makes the file's data durable (`fdatasync`).
    fn sync_data(&self) -> io::Result<()>;
    /// Makes the file's data and metadata durable (`fsync`).
    fn sync_all(&self) -> io::Result<()>;
    /// Cuts the file to `len` bytes.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Makes the file `len` bytes long, the new bytes zeros, without moving where appends go.
    /// Appends inside that length then leave the file's size alone, so an `fdatasync` after
    /// them has no size change to commit.
    fn preallocate(&self, len: u64) -> io::Result<()>;
    /// Asks the OS to start writing `len` (> 0) bytes from `offset` to the disk, so a later
    /// sync finds less to write. It does not wait for the writes, though the OS may make it
    /// wait for room in the disk's queue. A hint that promises no durability; by default
    /// nothing.
    fn start_writeback(&self, _offset: u64, _len: u64) -> io::Result<()> {
        Ok(())
    }
}

/// A file read at offsets.
pub trait ReadFile: Send + Sync {
    /// Fills `buf` from `offset`; an error if the file ends first.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// The file's length in bytes.
    fn size(&self) -> io::Result<u64>;
}

/// The operating system's file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct OsFs;

struct OsFile(File);

impl WriteFile for OsFile {
    fn write_all(&self, buf: &[u8]) -> io::Result<()> {
        (&self.0).write_all(buf)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }

    fn sync_all(&self) -> io::Result<()> {
        self.0.sync_all()
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }

    /// A sparse extension: the blocks are allocated as the appends reach them. On ext4 an
    /// `fdatasync` then commits the journal only when an append enters a new block, where it
    /// commits it for every append that grows the file.
    fn preallocate(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }

    #[cfg(target_os = "linux")]
    #[expect(unsafe_code, reason = "FFI call into the C library")]
    fn start_writeback(&self, offset: u64, len: u64) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        // A length of 0 would mean "to the end of the file".
        let (Ok(offset), Ok(len @ 1..)) = (i64::try_from(offset), i64::try_from(len)) else {
            return Ok(());
        };
        // SAFETY: a plain syscall on a descriptor this file owns; it touches no memory of ours.
        // Without a WAIT flag it leaves the file's error state to the next fsync, which still
        // reports a failed write.
        let rc = unsafe { libc::sync_file_range(self.0.as_raw_fd(), offset, len, libc::SYNC_FILE_RANGE_WRITE) };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}

impl ReadFile for OsFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        FileExt::read_exact_at(&self.0, buf, offset)
    }

    fn size(&self) -> io::Result<u64> {
        self.0.metadata().map(|m| m.len())
    }
}

impl FileSystem for OsFs {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<OsString>> {
        std::fs::read_dir(dir)?.map(|e| e.map(|e| e.file_name())).collect()
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        std::fs::read(path)
    }

    fn open(&self, path: &Path) -> io::Result<Arc<dyn ReadFile>> {
        Ok(Arc::new(OsFile(File::open(path)?)))
    }

    fn create_new(&self, path: &Path) -> io::Result<Arc<dyn WriteFile>> {
        // Written through the file's offset rather than `O_APPEND`, which would put appends
        // after a preallocated length.
        Ok(Arc::new(OsFile(File::options().write(true).create_new(true).open(path)?)))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }

    fn lock(&self, path: &Path) -> io::Result<Box<dyn std::any::Any + Send + Sync>> {
        let file = File::options().create(true).truncate(false).write(true).open(path)?;
        file.try_lock().map_err(|e| io::Error::new(io::ErrorKind::WouldBlock, e.to_string()))?;
        Ok(Box::new(file))
    }
}

/// Fsyncs a directory so creates, renames and removals inside it are durable.
pub(crate) fn sync_dir(fs: &dyn FileSystem, dir: &Path) -> Result<()> {
    fs.sync_dir(dir).map_err(|e| Error::io(dir, e))
}

/// Replaces `path` with `bytes` atomically: write a temporary file, fsync, rename, fsync the
/// directory. Readers see the old contents or the new, never a mix.
pub(crate) fn write_atomic(fs: &dyn FileSystem, path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = path.with_extension("tmp");
    // A fresh file each time: one a failed attempt left may have had an fsync fail, and its
    // pages can then never be trusted to reach the disk.
    match fs.remove(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::io(&tmp, e)),
    }
    let f = fs.create_new(&tmp).map_err(|e| Error::io(&tmp, e))?;
    f.write_all(bytes).map_err(|e| Error::io(&tmp, e))?;
    f.sync_all().map_err(|e| Error::io(&tmp, e))?;
    drop(f);
    fs.rename(&tmp, path).map_err(|e| Error::io(path, e))?;
    sync_dir(fs, dir)
}

/// Every this many bytes appended, an SSTable being written starts its new whole pages on
/// their way to the disk ([`WriteFile::start_writeback`], as RocksDB's `bytes_per_sync`): the
/// disk works while the flush or compaction encodes, and the fsync that ends the file finds
/// little left, where it otherwise wrote out most of the file (the kernel starts on dirty
/// pages only past a share of memory or after seconds).
pub(crate) const WRITEBACK_STEP: u64 = 1 << 20;
/// Writeback ranges end on a page boundary: a page still being appended to would be written
/// twice, or make the next append wait for its write where the disk needs stable pages.
const PAGE: u64 = 4096;

/// A [`WriteFile`] as an [`io::Write`], for `BufWriter` (SSTables are written in many small
/// pieces), starting writeback every [`WRITEBACK_STEP`].
pub(crate) struct Appender {
    file: Arc<dyn WriteFile>,
    written: u64,
    written_back: u64,
}

impl Appender {
    pub fn new(file: Arc<dyn WriteFile>) -> Appender {
        Appender { file, written: 0, written_back: 0 }
    }

    pub fn into_file(self) -> Arc<dyn WriteFile> {
        self.file
    }
}

impl Write for Appender {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.file.write_all(data)?;
        self.written += data.len() as u64;
        let end = self.written / PAGE * PAGE;
        if end - self.written_back >= WRITEBACK_STEP {
            // Only a hint: a failure shows in the fsync that would have found less to write.
            let _ = self.file.start_writeback(self.written_back, end - self.written_back);
            self.written_back = end;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod testing {
    use super::*;
    use parking_lot::Mutex;

    /// The OS file system, noting the writeback ranges its files start.
    #[derive(Debug, Default)]
    pub(crate) struct WritebackLog {
        pub ranges: Arc<Mutex<Vec<(u64, u64)>>>,
    }

    struct Noted {
        file: Arc<dyn WriteFile>,
        ranges: Arc<Mutex<Vec<(u64, u64)>>>,
    }

    impl WriteFile for Noted {
        fn write_all(&self, buf: &[u8]) -> io::Result<()> {
            self.file.write_all(buf)
        }
        fn sync_data(&self) -> io::Result<()> {
            self.file.sync_data()
        }
        fn sync_all(&self) -> io::Result<()> {
            self.file.sync_all()
        }
        fn set_len(&self, len: u64) -> io::Result<()> {
            self.file.set_len(len)
        }
        fn preallocate(&self, len: u64) -> io::Result<()> {
            self.file.preallocate(len)
        }
        fn start_writeback(&self, offset: u64, len: u64) -> io::Result<()> {
            self.ranges.lock().push((offset, len));
            self.file.start_writeback(offset, len)
        }
    }

    impl FileSystem for WritebackLog {
        fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
            OsFs.create_dir_all(dir)
        }
        fn list(&self, dir: &Path) -> io::Result<Vec<OsString>> {
            OsFs.list(dir)
        }
        fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
            OsFs.read(path)
        }
        fn open(&self, path: &Path) -> io::Result<Arc<dyn ReadFile>> {
            OsFs.open(path)
        }
        fn create_new(&self, path: &Path) -> io::Result<Arc<dyn WriteFile>> {
            Ok(Arc::new(Noted { file: OsFs.create_new(path)?, ranges: self.ranges.clone() }))
        }
        fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
            OsFs.rename(from, to)
        }
        fn remove(&self, path: &Path) -> io::Result<()> {
            OsFs.remove(path)
        }
        fn sync_dir(&self, dir: &Path) -> io::Result<()> {
            OsFs.sync_dir(dir)
        }
        fn lock(&self, path: &Path) -> io::Result<Box<dyn std::any::Any + Send + Sync>> {
            OsFs.lock(path)
        }
    }

    /// True if `ranges` start at 0, each begins where the one before ended, and each is at
    /// least [`WRITEBACK_STEP`] long and ends on a page boundary.
    pub(crate) fn contiguous_steps(ranges: &[(u64, u64)]) -> bool {
        let mut at = 0;
        ranges.iter().all(|&(offset, len)| {
            let ok = offset == at && len >= WRITEBACK_STEP && (offset + len) % PAGE == 0;
            at = offset + len;
            ok
        })
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::testing::{contiguous_steps, WritebackLog};
    use super::*;

    #[test]
    fn a_long_write_starts_writeback_step_by_step() {
        let dir = tempfile::tempdir().unwrap();
        let fs = WritebackLog::default();
        let mut out = Appender::new(fs.create_new(&dir.path().join("f")).unwrap());
        let piece = vec![7u8; 100_000];
        for _ in 0..35 {
            out.write_all(&piece).unwrap();
        }
        let ranges = fs.ranges.lock().clone();
        assert_eq!(ranges.len(), 3, "{ranges:?}");
        assert!(contiguous_steps(&ranges), "{ranges:?}");
        let file = out.into_file();
        file.sync_all().unwrap();
        assert_eq!(std::fs::read(dir.path().join("f")).unwrap().len(), 3_500_000);
    }

    /// A file system may refuse the hint (the engine ignores that); the data stays as written.
    #[test]
    fn writeback_leaves_a_real_file_as_written() {
        let dir = tempfile::tempdir().unwrap();
        let file = OsFs.create_new(&dir.path().join("f")).unwrap();
        file.write_all(&[1u8; 8192]).unwrap();
        let _ = file.start_writeback(0, 8192);
        let _ = file.start_writeback(4096, 0);
        file.sync_data().unwrap();
        assert_eq!(std::fs::read(dir.path().join("f")).unwrap(), vec![1u8; 8192]);
    }
}
