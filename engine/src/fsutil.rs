//! Small file-system helpers for crash safety.

use std::fs::{self, File};
use std::io::Write;
use std::path::Path;

use crate::{Error, Result};

/// Fsyncs a directory so creates, renames and removals inside it are durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(|e| Error::io(dir, e))
}

/// Replaces `path` with `bytes` atomically: write a temporary file, fsync, rename, fsync the
/// directory. Readers see the old contents or the new, never a mix.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = path.with_extension("tmp");
    let mut f = File::create(&tmp).map_err(|e| Error::io(&tmp, e))?;
    f.write_all(bytes).map_err(|e| Error::io(&tmp, e))?;
    f.sync_all().map_err(|e| Error::io(&tmp, e))?;
    drop(f);
    fs::rename(&tmp, path).map_err(|e| Error::io(path, e))?;
    sync_dir(dir)
}
