//! A file system for tests that loses power and fails: [`FaultFs`].
//!
//! It keeps every file in memory twice over: what the running process sees, and what is on the
//! simulated disk — each file's contents as of its last fsync, and each directory's entries as
//! of its last directory fsync. [`FaultFs::power_loss`] throws the machine's state away the way
//! a real power cut does, independently per file and per directory:
//! - a file's bytes written since its last fsync are kept, dropped, cut at a random point, or
//!   kept with their end zero-filled (blocks allocated but never written); in a preallocated
//!   file (see [`WriteFile::preallocate`]) they may also reach the disk block by block in any
//!   order, so that a 4 KiB block in the middle (or its sectors after the first few) reads back
//!   as it was before;
//! - a directory keeps a random prefix of the creates, renames and removals made in it since
//!   its last fsync (a journaling file system commits them in order);
//! - after a failed fsync, the bytes it should have made durable never reach the disk, even if
//!   a later fsync reports success (what Linux does when writeback fails).
//!
//! Handles from before a power loss — the old engine's files and its [`FaultFs`] — fail every
//! call afterwards, as a process on a machine that lost power would never run again.
//!
//! It also injects I/O errors: each call of a kind fails with a set probability, with EIO or
//! ENOSPC (writes may land partly first), and a capacity makes writes fail with ENOSPC once the
//! files hold that many bytes. Directories themselves are created durable.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::fs::{FileSystem, ReadFile, WriteFile};

/// How likely each kind of call is to fail (0.0 to 1.0).
///
/// Built from [`FaultRates::default`] (nothing fails) with one setter per field, e.g.
/// `FaultRates::default().sync(1.0)`, so that a minor release can add kinds of call without
/// breaking callers (the struct is `#[non_exhaustive]`); the fields stay public to read.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[non_exhaustive]
pub struct FaultRates {
    /// Appends to a file.
    pub write: f64,
    /// File fsyncs.
    pub sync: f64,
    /// File creations.
    pub create: f64,
    /// Renames.
    pub rename: f64,
    /// File removals.
    pub remove: f64,
    /// Directory fsyncs.
    pub sync_dir: f64,
}

/// One setter per field, each named as the field it sets.
impl FaultRates {
    /// Sets [`write`](field@Self::write).
    pub fn write(mut self, rate: f64) -> Self {
        self.write = rate;
        self
    }

    /// Sets [`sync`](field@Self::sync).
    pub fn sync(mut self, rate: f64) -> Self {
        self.sync = rate;
        self
    }

    /// Sets [`create`](field@Self::create).
    pub fn create(mut self, rate: f64) -> Self {
        self.create = rate;
        self
    }

    /// Sets [`rename`](field@Self::rename).
    pub fn rename(mut self, rate: f64) -> Self {
        self.rename = rate;
        self
    }

    /// Sets [`remove`](field@Self::remove).
    pub fn remove(mut self, rate: f64) -> Self {
        self.remove = rate;
        self
    }

    /// Sets [`sync_dir`](field@Self::sync_dir).
    pub fn sync_dir(mut self, rate: f64) -> Self {
        self.sync_dir = rate;
        self
    }
}

/// What a [`FaultFs`] has done so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultCounts {
    /// Injected failures of appends.
    pub write_errors: u64,
    /// Injected failures of file fsyncs.
    pub sync_errors: u64,
    /// Injected failures of file creations.
    pub create_errors: u64,
    /// Injected failures of renames.
    pub rename_errors: u64,
    /// Injected failures of file removals.
    pub remove_errors: u64,
    /// Injected failures of directory fsyncs.
    pub sync_dir_errors: u64,
    /// Writes refused because the capacity was reached.
    pub disk_full: u64,
    /// Simulated power losses.
    pub power_losses: u64,
    /// Files that lost bytes written since their last fsync at a power loss.
    pub files_cut: u64,
    /// Directory changes (creates, renames, removals) lost at a power loss.
    pub entries_lost: u64,
}

impl FaultCounts {
    /// Injected errors of every kind, disk-full refusals included.
    pub fn errors(&self) -> u64 {
        self.write_errors
            + self.sync_errors
            + self.create_errors
            + self.rename_errors
            + self.remove_errors
            + self.sync_dir_errors
            + self.disk_full
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Node {
    Dir,
    File(u64),
}

/// A directory change not yet made durable by a directory fsync.
#[derive(Debug, Clone)]
enum DirOp {
    Set(PathBuf, Option<Node>),
    Rename { from: PathBuf, to: PathBuf, node: Node },
}

#[derive(Debug, Default)]
struct Inode {
    data: Vec<u8>,
    /// Where the next append goes: the end of `data`, unless a preallocation lies beyond it
    /// (or a cut came after the last append).
    pos: usize,
    /// Whether the file was ever preallocated: its unsynced blocks may then be lost out of
    /// order, since they are not appended to the file's end.
    preallocated: bool,
    /// The contents on the simulated disk.
    durable: Vec<u8>,
    /// Lowest offset changed since the last fsync.
    dirty_from: Option<usize>,
    /// Set by a failed fsync: bytes from here never reach the disk.
    stuck_at: Option<usize>,
}

#[derive(Debug)]
struct State {
    rng: u64,
    epoch: u64,
    inodes: HashMap<u64, Inode>,
    next_ino: u64,
    /// What the running process sees.
    live: BTreeMap<PathBuf, Node>,
    /// What the disk's directories hold.
    durable: BTreeMap<PathBuf, Node>,
    /// Per directory, its changes since its last fsync, in order.
    pending: HashMap<PathBuf, Vec<DirOp>>,
    locks: HashSet<PathBuf>,
    rates: FaultRates,
    capacity: Option<u64>,
    counts: FaultCounts,
    /// The latest calls, when tracing (see [`FaultFs::trace`]).
    trace: Option<std::collections::VecDeque<String>>,
}

impl State {
    fn log(&mut self, what: impl FnOnce() -> String) {
        if let Some(trace) = &mut self.trace {
            if trace.len() == TRACE_LEN {
                trace.pop_front();
            }
            trace.push_back(what());
        }
    }

    fn next(&mut self) -> u64 {
        // splitmix64: deterministic per seed, no dependency.
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }

    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }

    /// An injected error for a call of the kind counted by `count`, if the dice say so.
    fn inject(&mut self, p: f64, count: fn(&mut FaultCounts) -> &mut u64) -> io::Result<()> {
        if !self.chance(p) {
            return Ok(());
        }
        *count(&mut self.counts) += 1;
        Err(if self.next().is_multiple_of(2) {
            io::Error::from_raw_os_error(EIO)
        } else {
            io::Error::from_raw_os_error(ENOSPC)
        })
    }

    fn used(&self) -> u64 {
        self.live
            .values()
            .filter_map(|n| match n {
                // A preallocation is sparse: only what was written takes room.
                Node::File(ino) => self.inodes.get(ino).map(|i| i.data.len().min(i.pos) as u64),
                Node::Dir => None,
            })
            .sum()
    }

    fn file(&self, path: &Path) -> io::Result<u64> {
        match self.live.get(path) {
            Some(Node::File(ino)) => Ok(*ino),
            Some(Node::Dir) => Err(io::Error::new(io::ErrorKind::IsADirectory, path.display().to_string())),
            None => Err(io::Error::new(io::ErrorKind::NotFound, path.display().to_string())),
        }
    }

    fn record(&mut self, path: &Path, op: DirOp) {
        let dir = path.parent().unwrap_or(Path::new("")).to_path_buf();
        self.pending.entry(dir).or_default().push(op);
    }

    fn create(&mut self, path: &Path) -> io::Result<u64> {
        let parent = path.parent().unwrap_or(Path::new(""));
        if self.live.get(parent) != Some(&Node::Dir) {
            return Err(io::Error::new(io::ErrorKind::NotFound, parent.display().to_string()));
        }
        let ino = self.next_ino;
        self.next_ino += 1;
        self.inodes.insert(ino, Inode::default());
        self.live.insert(path.to_path_buf(), Node::File(ino));
        self.record(path, DirOp::Set(path.to_path_buf(), Some(Node::File(ino))));
        Ok(ino)
    }

    fn apply(durable: &mut BTreeMap<PathBuf, Node>, op: DirOp) {
        match op {
            DirOp::Set(path, Some(node)) => {
                durable.insert(path, node);
            }
            DirOp::Set(path, None) => {
                durable.remove(&path);
            }
            DirOp::Rename { from, to, node } => {
                durable.remove(&from);
                durable.insert(to, node);
            }
        }
    }

    /// What survives of one file at a power loss; `None` if it was synced whole.
    fn surviving(&mut self, inode: &Inode) -> Option<Vec<u8>> {
        let from = inode.dirty_from?;
        let data = &inode.data;
        let limit = inode.stuck_at.unwrap_or(data.len()).min(data.len());
        let from = from.min(limit);
        let shapes = if inode.preallocated { 5 } else { 4 };
        Some(match self.below(shapes) {
            0 => inode.durable.clone(),
            1 => data[..limit].to_vec(),
            2 => {
                let cut = from + self.below(limit - from + 1);
                data[..cut].to_vec()
            }
            3 => {
                let cut = from + self.below(limit - from + 1);
                let zeros = from + self.below(cut - from + 1);
                let mut kept = data[..zeros].to_vec();
                kept.resize(cut, 0);
                kept
            }
            _ => {
                // Each dirty block independently reached the disk, or only its first sectors
                // did and the rest still holds what it held at the last fsync (zeros past it).
                let mut kept = data[..limit].to_vec();
                for block in (from / DISK_BLOCK * DISK_BLOCK..limit).step_by(DISK_BLOCK) {
                    if self.chance(0.5) {
                        continue;
                    }
                    let landed = block + self.below(DISK_BLOCK / SECTOR) * SECTOR;
                    let (lo, hi) = (landed.max(from), limit.min(block + DISK_BLOCK));
                    if lo >= hi {
                        continue;
                    }
                    let before = inode.durable.get(lo..).unwrap_or_default();
                    let lost = &mut kept[lo..hi];
                    let old = before.len().min(lost.len());
                    lost[..old].copy_from_slice(&before[..old]);
                    lost[old..].fill(0);
                }
                kept
            }
        })
    }
}

/// Calls a trace keeps.
const TRACE_LEN: usize = 4_000;

/// The unit in which a preallocated file's unsynced bytes reach the disk (a page), and the
/// unit a disk writes atomically (a page may be torn between its sectors).
const DISK_BLOCK: usize = 4096;
const SECTOR: usize = 512;

/// Linux's error numbers for an I/O error and a full disk.
const EIO: i32 = 5;
const ENOSPC: i32 = 28;

fn power_off() -> io::Error {
    io::Error::other("simulated power loss: this handle belongs to a machine that lost power")
}

/// A fault-injecting, power-losing file system in memory (see the module docs). Cheap to
/// clone; clones share the simulated disk.
#[derive(Debug, Clone)]
pub struct FaultFs {
    state: Arc<Mutex<State>>,
    epoch: u64,
}

impl FaultFs {
    /// An empty file system whose random choices follow `seed`.
    pub fn new(seed: u64) -> FaultFs {
        let state = State {
            rng: seed,
            epoch: 0,
            inodes: HashMap::new(),
            next_ino: 1,
            live: BTreeMap::new(),
            durable: BTreeMap::new(),
            pending: HashMap::new(),
            locks: HashSet::new(),
            rates: FaultRates::default(),
            capacity: None,
            counts: FaultCounts::default(),
            trace: None,
        };
        FaultFs { state: Arc::new(Mutex::new(state)), epoch: 0 }
    }

    /// Sets how often each kind of call fails from now on.
    pub fn set_rates(&self, rates: FaultRates) {
        self.state.lock().rates = rates;
    }

    /// Makes writes fail with ENOSPC once the files hold `bytes` (`None`: no limit).
    pub fn set_capacity(&self, bytes: Option<u64>) {
        self.state.lock().capacity = bytes;
    }

    /// Bytes the files hold now.
    pub fn used(&self) -> u64 {
        self.state.lock().used()
    }

    /// What has been injected and lost so far.
    pub fn counts(&self) -> FaultCounts {
        self.state.lock().counts
    }

    /// Starts keeping the latest calls (a few thousand) and their outcomes, for a failing
    /// test to print.
    pub fn start_trace(&self) {
        self.state.lock().trace.get_or_insert_with(Default::default);
    }

    /// The calls kept since [`FaultFs::start_trace`], oldest first.
    pub fn trace(&self) -> Vec<String> {
        self.state.lock().trace.as_ref().map(|t| t.iter().cloned().collect()).unwrap_or_default()
    }

    /// A random number from the file system's generator (for tests that want one sequence).
    pub fn random(&self) -> u64 {
        self.state.lock().next()
    }

    /// Cuts the power: what was not made durable is lost or damaged (see the module docs), and
    /// every handle from before — this one, its clones, and files they opened — fails from now
    /// on. Returns the file system after the reboot, for the next open. Errors are switched
    /// off; set them again with [`FaultFs::set_rates`].
    pub fn power_loss(&self) -> FaultFs {
        let mut st = self.state.lock();
        st.epoch += 1;
        st.counts.power_losses += 1;
        st.locks.clear();
        st.rates = FaultRates::default();
        let mut pending: Vec<(PathBuf, Vec<DirOp>)> = st.pending.drain().collect();
        pending.sort_by(|a, b| a.0.cmp(&b.0));
        for (dir, ops) in pending {
            let keep = st.below(ops.len() + 1);
            st.counts.entries_lost += (ops.len() - keep) as u64;
            st.log(|| format!("power loss: {} keeps {keep} of {:?}", dir.display(), ops));
            for op in ops.into_iter().take(keep) {
                State::apply(&mut st.durable, op);
            }
        }
        st.live = st.durable.clone();
        let alive: Vec<u64> = st
            .live
            .values()
            .filter_map(|n| match n {
                Node::File(ino) => Some(*ino),
                Node::Dir => None,
            })
            .collect();
        let alive_set: HashSet<u64> = alive.iter().copied().collect();
        let mut inodes = std::mem::take(&mut st.inodes);
        inodes.retain(|ino, _| alive_set.contains(ino));
        // In path order, so a seed gives the same losses every run.
        for ino in alive {
            let Some(inode) = inodes.get_mut(&ino) else { continue };
            let Some(kept) = st.surviving(inode) else { continue };
            let (had, durable, len) = (inode.data.len(), inode.durable.len(), kept.len());
            if kept != inode.data {
                st.counts.files_cut += 1;
            }
            st.log(|| format!("power loss: inode {ino} keeps {len} of {had} bytes ({durable} synced)"));
            inode.durable = kept.clone();
            inode.data = kept;
            inode.dirty_from = None;
            inode.stuck_at = None;
        }
        st.inodes = inodes;
        FaultFs { state: self.state.clone(), epoch: st.epoch }
    }

    /// Locks the state for a call of this handle; fails once the power was lost.
    fn live(&self) -> io::Result<parking_lot::MutexGuard<'_, State>> {
        let st = self.state.lock();
        if st.epoch != self.epoch {
            return Err(power_off());
        }
        Ok(st)
    }

    fn handle(&self, ino: u64, path: &Path) -> Arc<FaultFile> {
        Arc::new(FaultFile { fs: self.clone(), ino, path: path.to_path_buf() })
    }
}

impl FileSystem for FaultFs {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut st = self.live()?;
        for d in dir.ancestors() {
            match st.live.get(d) {
                Some(Node::Dir) => {}
                Some(Node::File(_)) => {
                    return Err(io::Error::new(io::ErrorKind::AlreadyExists, d.display().to_string()))
                }
                None => {
                    st.live.insert(d.to_path_buf(), Node::Dir);
                    st.durable.insert(d.to_path_buf(), Node::Dir);
                }
            }
        }
        Ok(())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<OsString>> {
        let st = self.live()?;
        if st.live.get(dir) != Some(&Node::Dir) {
            return Err(io::Error::new(io::ErrorKind::NotFound, dir.display().to_string()));
        }
        Ok(st
            .live
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name().map(OsString::from))
            .collect())
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        let st = self.live()?;
        let ino = st.file(path)?;
        Ok(st.inodes[&ino].data.clone())
    }

    fn open(&self, path: &Path) -> io::Result<Arc<dyn ReadFile>> {
        let ino = self.live()?.file(path)?;
        Ok(self.handle(ino, path))
    }

    fn create_new(&self, path: &Path) -> io::Result<Arc<dyn WriteFile>> {
        let mut st = self.live()?;
        let rate = st.rates.create;
        st.inject(rate, |c| &mut c.create_errors)?;
        if st.live.contains_key(path) {
            return Err(io::Error::new(io::ErrorKind::AlreadyExists, path.display().to_string()));
        }
        let ino = st.create(path)?;
        st.log(|| format!("create {} = inode {ino}", path.display()));
        drop(st);
        Ok(self.handle(ino, path))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut st = self.live()?;
        let rate = st.rates.rename;
        st.inject(rate, |c| &mut c.rename_errors)?;
        if from.parent() != to.parent() {
            return Err(io::Error::new(io::ErrorKind::Unsupported, "renames across directories"));
        }
        let ino = st.file(from)?;
        st.live.remove(from);
        st.live.insert(to.to_path_buf(), Node::File(ino));
        st.record(to, DirOp::Rename { from: from.to_path_buf(), to: to.to_path_buf(), node: Node::File(ino) });
        st.log(|| format!("rename {} -> {}", from.display(), to.display()));
        Ok(())
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        let mut st = self.live()?;
        let rate = st.rates.remove;
        st.inject(rate, |c| &mut c.remove_errors)?;
        st.file(path)?;
        st.live.remove(path);
        st.record(path, DirOp::Set(path.to_path_buf(), None));
        st.log(|| format!("remove {}", path.display()));
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut st = self.live()?;
        let rate = st.rates.sync_dir;
        st.inject(rate, |c| &mut c.sync_dir_errors)?;
        for op in st.pending.remove(dir).unwrap_or_default() {
            State::apply(&mut st.durable, op);
        }
        st.log(|| format!("sync dir {}", dir.display()));
        Ok(())
    }

    fn lock(&self, path: &Path) -> io::Result<Box<dyn std::any::Any + Send + Sync>> {
        let mut st = self.live()?;
        if !st.locks.insert(path.to_path_buf()) {
            return Err(io::Error::new(io::ErrorKind::WouldBlock, "held by another engine"));
        }
        if !st.live.contains_key(path) {
            st.create(path)?;
        }
        drop(st);
        Ok(Box::new(LockGuard { fs: self.clone(), path: path.to_path_buf() }))
    }
}

struct LockGuard {
    fs: FaultFs,
    path: PathBuf,
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        // A lock from before a power loss was released by it.
        if let Ok(mut st) = self.fs.live() {
            st.locks.remove(&self.path);
        }
    }
}

struct FaultFile {
    fs: FaultFs,
    ino: u64,
    path: PathBuf,
}

impl FaultFile {
    fn gone(&self) -> io::Error {
        io::Error::new(io::ErrorKind::NotFound, self.path.display().to_string())
    }
}

impl WriteFile for FaultFile {
    fn write_all(&self, buf: &[u8]) -> io::Result<()> {
        let mut st = self.fs.live()?;
        let mut room = buf.len();
        let mut failure = None;
        if let Some(capacity) = st.capacity {
            let free = capacity.saturating_sub(st.used()) as usize;
            if free < buf.len() {
                st.counts.disk_full += 1;
                room = free;
                failure = Some(io::Error::from_raw_os_error(ENOSPC));
            }
        }
        let rate = st.rates.write;
        if failure.is_none() {
            if let Err(e) = st.inject(rate, |c| &mut c.write_errors) {
                // A failed write may have landed partly.
                room = st.below(buf.len() + 1);
                failure = Some(e);
            }
        }
        let inode = st.inodes.get_mut(&self.ino).ok_or_else(|| self.gone())?;
        let at = inode.pos;
        let end = at + room;
        if inode.data.len() < end {
            inode.data.resize(end, 0);
        }
        inode.data[at..end].copy_from_slice(&buf[..room]);
        inode.pos = end;
        if room > 0 {
            inode.dirty_from = Some(inode.dirty_from.map_or(at, |d| d.min(at)));
        }
        let (ino, len) = (self.ino, buf.len());
        st.log(|| {
            format!(
                "write inode {ino} at {at}: {room} of {len} bytes, error {:?}",
                failure.as_ref().map(|e| e.to_string())
            )
        });
        failure.map_or(Ok(()), Err)
    }

    fn sync_data(&self) -> io::Result<()> {
        let mut st = self.fs.live()?;
        let rate = st.rates.sync;
        let injected = st.inject(rate, |c| &mut c.sync_errors);
        let inode = st.inodes.get_mut(&self.ino).ok_or_else(|| self.gone())?;
        let Some(from) = inode.dirty_from else { return injected };
        if let Err(e) = injected {
            inode.stuck_at = Some(inode.stuck_at.map_or(from, |s| s.min(from)));
            let ino = self.ino;
            st.log(|| format!("sync inode {ino} failed: bytes from {from} never reach the disk"));
            return Err(e);
        }
        let limit = inode.stuck_at.unwrap_or(inode.data.len()).min(inode.data.len());
        let from = from.min(limit).min(inode.durable.len());
        inode.durable.truncate(from);
        inode.durable.extend_from_slice(&inode.data[from..limit]);
        inode.dirty_from = (limit < inode.data.len()).then_some(limit);
        let ino = self.ino;
        st.log(|| format!("sync inode {ino}: {limit} bytes durable"));
        Ok(())
    }

    fn sync_all(&self) -> io::Result<()> {
        self.sync_data()
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut st = self.fs.live()?;
        let inode = st.inodes.get_mut(&self.ino).ok_or_else(|| self.gone())?;
        let len = len as usize;
        let changed_from = len.min(inode.data.len());
        inode.data.resize(len, 0);
        inode.dirty_from = Some(inode.dirty_from.map_or(changed_from, |d| d.min(changed_from)));
        let ino = self.ino;
        st.log(|| format!("set_len inode {ino} to {len}"));
        Ok(())
    }

    fn preallocate(&self, len: u64) -> io::Result<()> {
        let mut st = self.fs.live()?;
        let inode = st.inodes.get_mut(&self.ino).ok_or_else(|| self.gone())?;
        let (len, had) = (len as usize, inode.data.len());
        inode.preallocated = true;
        if len > had {
            inode.data.resize(len, 0);
            inode.dirty_from = Some(inode.dirty_from.map_or(had, |d| d.min(had)));
        }
        let ino = self.ino;
        st.log(|| format!("preallocate inode {ino} to {len}"));
        Ok(())
    }
}

impl ReadFile for FaultFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let st = self.fs.live()?;
        let data = &st.inodes.get(&self.ino).ok_or_else(|| self.gone())?.data;
        let start = usize::try_from(offset).map_err(|_| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        let src = start
            .checked_add(buf.len())
            .and_then(|end| data.get(start..end))
            .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        buf.copy_from_slice(src);
        Ok(())
    }

    fn size(&self) -> io::Result<u64> {
        let st = self.fs.live()?;
        Ok(st.inodes.get(&self.ino).ok_or_else(|| self.gone())?.data.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(fs: &FaultFs, path: &str, bytes: &[u8], sync: bool) -> Arc<dyn WriteFile> {
        let f = fs.create_new(Path::new(path)).unwrap();
        f.write_all(bytes).unwrap();
        if sync {
            f.sync_all().unwrap();
        }
        f
    }

    #[test]
    fn rate_setters_set_their_fields() {
        let r = FaultRates::default().write(0.1).sync(0.2).create(0.3).rename(0.4).remove(0.5).sync_dir(0.6);
        assert_eq!([r.write, r.sync, r.create, r.rename, r.remove, r.sync_dir], [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]);
        assert_eq!(FaultRates::default().sync(1.0), FaultRates { sync: 1.0, ..FaultRates::default() });
    }

    #[test]
    fn synced_files_and_directories_survive_power_loss() {
        for seed in 0..50 {
            let fs = FaultFs::new(seed);
            fs.create_dir_all(Path::new("/d")).unwrap();
            let f = write(&fs, "/d/a", b"durable", true);
            fs.sync_dir(Path::new("/d")).unwrap();
            f.write_all(b" and more").unwrap();
            let fs2 = fs.power_loss();
            let a = fs2.read(Path::new("/d/a")).unwrap();
            assert!(a.starts_with(b"durable") && a.len() <= 16, "{a:?}");
            assert!(f.write_all(b"x").is_err(), "a handle from before the power loss still works");
            assert!(fs.read(Path::new("/d/a")).is_err());
        }
    }

    #[test]
    fn unsynced_entries_and_bytes_may_vanish() {
        let (mut lost_entry, mut lost_bytes, mut kept) = (0, 0, 0);
        for seed in 0..200 {
            let fs = FaultFs::new(seed);
            fs.create_dir_all(Path::new("/d")).unwrap();
            write(&fs, "/d/a", b"synced data, unsynced entry", true);
            write(&fs, "/d/b", b"unsynced data", false);
            let fs = fs.power_loss();
            match fs.read(Path::new("/d/a")) {
                Ok(a) => assert_eq!(a, b"synced data, unsynced entry"),
                Err(_) => lost_entry += 1,
            }
            match fs.read(Path::new("/d/b")) {
                Ok(b) if b == b"unsynced data" => kept += 1,
                Ok(b) => {
                    assert!(b.len() <= 13);
                    lost_bytes += 1;
                }
                Err(_) => lost_entry += 1,
            }
        }
        assert!(lost_entry > 0 && lost_bytes > 0 && kept > 0, "{lost_entry} {lost_bytes} {kept}");
    }

    #[test]
    fn a_preallocated_file_takes_appends_at_its_start_and_may_lose_any_unsynced_block() {
        let (mut middle_lost, mut torn_inside, mut whole) = (0, 0, 0);
        for seed in 0..300 {
            let fs = FaultFs::new(seed);
            fs.create_dir_all(Path::new("/d")).unwrap();
            let f = write(&fs, "/d/log", &[1; 100], true);
            fs.sync_dir(Path::new("/d")).unwrap();
            f.preallocate(8 * DISK_BLOCK as u64).unwrap();
            f.sync_data().unwrap();
            assert_eq!(fs.used(), 100, "preallocated bytes take no room until written");
            // Blocks 0 to 2 get appends past the synced prefix; none is synced.
            f.write_all(&[2; 3 * DISK_BLOCK - 100]).unwrap();
            let live = fs.read(Path::new("/d/log")).unwrap();
            assert_eq!(live.len(), 8 * DISK_BLOCK, "appends stay inside the preallocation");
            assert!(live[..100] == [1; 100] && live[100..3 * DISK_BLOCK] == [2; 3 * DISK_BLOCK - 100]);
            let after = fs.power_loss().read(Path::new("/d/log")).unwrap();
            assert!(after.len() >= 100 && after[..100] == [1; 100], "the synced prefix survives");
            // Whatever is left of the appends reads as written or as zeros.
            assert!(after[100..].iter().all(|&x| x == 2 || x == 0));
            let block = |b: usize| after.get((b * DISK_BLOCK).max(100)..(b + 1) * DISK_BLOCK);
            let blocks: Vec<bool> = (0..3).map(|b| block(b).is_some_and(|x| x.iter().all(|&x| x == 2))).collect();
            // Block 1 lost from one of its sectors on (its first ones may have landed), block 2 not.
            let sector =
                |at: usize| after.get(at..at + SECTOR).map(|x| (x.iter().all(|&x| x == 2), x.iter().all(|&x| x == 0)));
            let tail_lost = sector(2 * DISK_BLOCK - SECTOR).is_some_and(|(_, zero)| zero);
            middle_lost += usize::from(tail_lost && blocks[2]);
            torn_inside += usize::from(tail_lost && blocks[2] && sector(DISK_BLOCK).is_some_and(|(new, _)| new));
            whole += usize::from(blocks.iter().all(|&k| k));
        }
        assert!(middle_lost > 0 && torn_inside > 0 && whole > 0, "{middle_lost} {torn_inside} {whole}");
    }

    #[test]
    fn a_failed_fsync_never_makes_its_bytes_durable() {
        for seed in 0..50 {
            let fs = FaultFs::new(seed);
            fs.create_dir_all(Path::new("/d")).unwrap();
            let f = fs.create_new(Path::new("/d/log")).unwrap();
            fs.sync_dir(Path::new("/d")).unwrap();
            f.write_all(b"head").unwrap();
            f.sync_data().unwrap();
            f.write_all(b"tail").unwrap();
            fs.set_rates(FaultRates::default().sync(1.0));
            assert!(f.sync_data().is_err());
            fs.set_rates(FaultRates::default());
            f.sync_data().unwrap();
            let fs = fs.power_loss();
            let log = fs.read(Path::new("/d/log")).unwrap();
            assert!(log.len() <= 4 || !log.ends_with(b"tail"), "{log:?}");
            assert!(log.starts_with(b"head") || log.len() < 4);
        }
    }

    #[test]
    fn renames_are_atomic_and_capacity_fills() {
        for seed in 0..50 {
            let fs = FaultFs::new(seed);
            fs.create_dir_all(Path::new("/d")).unwrap();
            write(&fs, "/d/m", b"old", true);
            fs.sync_dir(Path::new("/d")).unwrap();
            write(&fs, "/d/m.tmp", b"new", true);
            fs.rename(Path::new("/d/m.tmp"), Path::new("/d/m")).unwrap();
            let fs = fs.power_loss();
            let m = fs.read(Path::new("/d/m")).unwrap();
            assert!(m == b"old" || m == b"new", "{m:?}");
        }
        let fs = FaultFs::new(1);
        fs.create_dir_all(Path::new("/d")).unwrap();
        fs.set_capacity(Some(10));
        let f = fs.create_new(Path::new("/d/f")).unwrap();
        f.write_all(b"0123456").unwrap();
        let e = f.write_all(b"789abc").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(28));
        assert_eq!(fs.counts().disk_full, 1);
    }
}
