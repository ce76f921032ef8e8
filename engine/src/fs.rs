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

/// A file being written: appends, a cut, a preallocation, and the two syncs.
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

/// A [`WriteFile`] as an [`io::Write`], for `BufWriter` (SSTables are written in many small
/// pieces).
pub(crate) struct Appender(pub Arc<dyn WriteFile>);

impl Write for Appender {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.0.write_all(data)?;
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
