//! The memstore's ordered index: a skiplist for one writer and any number of readers.
//!
//! Nodes live in append-only segments and link to each other by number, so the list needs no
//! `unsafe` and a node, once written, stays readable until the list is dropped: a reader never
//! meets a freed node, whatever the writer unlinks meanwhile. Compared with a general
//! concurrent skiplist this buys three things:
//! - no allocation per entry: nodes are slots of segments allocated thousands at a time (a
//!   new memstore's list takes the full segments a dropped one left, [`Spares`]);
//! - the writer remembers where its last insert went (a *splice*, as RocksDB's memtable
//!   does). The cells of one row arrive together and land next to each other, so every insert
//!   after a row's first starts from the splice and compares a few neighbours instead of
//!   searching from the top of a list of millions;
//! - a search hop reads one cache line. A node is 64 bytes, aligned: its links and a 24-byte
//!   *tag* of its item ([`Tagged`]) that settles most comparisons. Items sit in a
//!   parallel array, read only where tags tie. In a memstore larger than the caches a search
//!   is a chain of cache misses, one per hop, so this is what bounds it.
//!
//! One writer at a time is enforced by a mutex only writers take; readers take no lock.
//! Writers publish a node by storing its number into its predecessors' links (release), after
//! the node, its item and its own links are written; readers load links with acquire.

use std::cmp::Ordering;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering as AtomicOrdering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

/// Levels of the list. With a quarter of the nodes on each next level, nine keep searches
/// logarithmic up to about 260 000 entries (a 64 MiB memstore of YCSB records holds about
/// 240 000 cells); beyond that the top level grows by one node per 65 536 entries. Every node
/// carries all nine links, which with the tag and the height fill its cache line.
const MAX_HEIGHT: usize = 9;

/// The first segments grow from `FIRST_SEGMENT` slots, doubling, up to `SEGMENT` (a small
/// memstore stays small); after that every segment holds `SEGMENT` slots.
const FIRST_SEGMENT: usize = 16;
const SEGMENT: usize = 4096;
/// Growing segments: 16, 32, …, 4096 slots.
const GROWING: usize = (SEGMENT / FIRST_SEGMENT).trailing_zeros() as usize + 1;
/// Slots in the growing segments together.
const GROWN: usize = FIRST_SEGMENT * ((1 << GROWING) - 1);
/// Tables of full segments: table `j` holds `2^j` of them, enough for every node number a
/// `u32` can give.
const TABLES: usize = 21;

/// "No node" in a link; node numbers start at 1.
const NONE: u32 = 0;

/// 24 bytes that order items coarsely, compared as three numbers in order.
pub(crate) type Tag = [u64; 3];

/// An item that carries a [`Tag`] its order agrees with: `a.tag() < b.tag()` implies
/// `a < b`. Items with equal tags are ordered by `Ord` alone.
pub(crate) trait Tagged: Ord {
    fn tag(&self) -> Tag;

    /// Starts loading what reading the item will touch beyond the item itself (see
    /// [`prefetch`]); nothing by default.
    fn prefetch(&self) {}
}

/// Asks the CPU to start loading the cache line holding `p` and returns at once. Only a hint:
/// it reads nothing into the program and never faults, whatever `p` points at.
#[inline]
pub(crate) fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    #[expect(unsafe_code, reason = "the prefetch instruction has no safe wrapper")]
    // SAFETY: PREFETCHT0 only hints at an address: it does not dereference `p` for the program,
    // cannot fault on any address, and changes no memory.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// What a search hop reads, in one cache line. Written by the writer before it publishes the
/// node; atomics only because readers may hold the segment while it writes other slots.
#[repr(align(64))]
#[derive(Default)]
struct Node {
    tag: [AtomicU64; 3],
    next: [AtomicU32; MAX_HEIGHT],
    height: AtomicU8,
}

impl Node {
    fn tag(&self) -> Tag {
        self.tag.each_ref().map(|t| t.load(AtomicOrdering::Relaxed))
    }

    fn height(&self) -> usize {
        usize::from(self.height.load(AtomicOrdering::Relaxed))
    }
}

type Segment<S> = Box<[S]>;
type Table<S> = Box<[OnceLock<Segment<S>>]>;

/// Append-only slots numbered from 1, in segments that never move: growing ones first, then
/// full ones in tables of `2^j`.
struct Slots<S> {
    growing: [OnceLock<Segment<S>>; GROWING],
    tables: [OnceLock<Table<S>>; TABLES],
}

impl<S: Default> Slots<S> {
    fn new() -> Self {
        Slots { growing: Default::default(), tables: Default::default() }
    }

    /// Slot `number`, if its segment was made.
    fn get(&self, number: u32) -> Option<&S> {
        match place((number as usize).checked_sub(1)?) {
            Place::Growing { segment, offset } => self.growing[segment].get()?.get(offset),
            Place::Full { table, position, offset } => self.tables.get(table)?.get()?.get(position)?.get()?.get(offset),
        }
    }

    /// Makes the segment slot `s` (counting from 0) opens, if it is a segment's first (a full
    /// one from `spare` if it has one); returns the bytes the list now holds for it.
    fn open(&self, s: usize, spare: impl FnOnce() -> Option<Segment<S>>) -> usize {
        let segment = |len: usize| -> Segment<S> { (0..len).map(|_| S::default()).collect() };
        let mut allocated = 0;
        match place(s) {
            Place::Growing { segment: k, offset: 0 } => {
                let len = FIRST_SEGMENT << k;
                let _ = self.growing[k].set(segment(len));
                allocated += len * std::mem::size_of::<S>();
            }
            Place::Full { table: j, position, offset: 0 } => {
                let table = self.tables[j].get_or_init(|| {
                    allocated += (1usize << j) * std::mem::size_of::<OnceLock<Segment<S>>>();
                    (0..1usize << j).map(|_| OnceLock::new()).collect()
                });
                let _ = table[position].set(spare().unwrap_or_else(|| segment(SEGMENT)));
                allocated += SEGMENT * std::mem::size_of::<S>();
            }
            _ => {}
        }
        allocated
    }
}

impl<S> Slots<S> {
    /// Takes the full segments out, each emptied by `empty`.
    fn take_full(&mut self, empty: impl Fn(&mut S)) -> Vec<Segment<S>> {
        let tables = self.tables.iter_mut().filter_map(OnceLock::get_mut);
        let mut full: Vec<Segment<S>> = tables.flat_map(|t| t.iter_mut().filter_map(OnceLock::take)).collect();
        for segment in &mut full {
            segment.iter_mut().for_each(&empty);
        }
        full
    }
}

/// Full segments of dropped lists, emptied: a new list takes these before it allocates (and
/// faults in) segments of its own. Kept by the memstores' account with their arena chunks.
pub(crate) struct Spares<T> {
    nodes: Vec<Segment<Node>>,
    items: Vec<Segment<OnceLock<T>>>,
}

impl<T> std::fmt::Debug for Spares<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spares").field("nodes", &self.nodes.len()).field("items", &self.items.len()).finish()
    }
}

impl<T> Default for Spares<T> {
    fn default() -> Self {
        Spares { nodes: Vec::new(), items: Vec::new() }
    }
}

impl<T> Spares<T> {
    /// Bytes one node segment and one item segment take.
    const PAIR_BYTES: usize = SEGMENT * (std::mem::size_of::<Node>() + std::mem::size_of::<OnceLock<T>>());

    /// Bytes the segments take.
    pub fn bytes(&self) -> usize {
        SEGMENT
            * (self.nodes.len() * std::mem::size_of::<Node>() + self.items.len() * std::mem::size_of::<OnceLock<T>>())
    }

    /// Node and item segments held, in pairs.
    #[cfg(test)]
    pub fn pairs(&self) -> usize {
        self.nodes.len().min(self.items.len())
    }

    /// Moves pairs of segments from `from` while they fit in `room` bytes; what is left in
    /// `from` is for the caller to drop.
    pub fn take_from(&mut self, from: &mut Spares<T>, room: usize) {
        let pairs = (room / Self::PAIR_BYTES).min(from.nodes.len()).min(from.items.len());
        self.nodes.extend(from.nodes.drain(..pairs));
        self.items.extend(from.items.drain(..pairs));
    }
}

/// The writer's memory of its last insert: at every level, the node before it and the one
/// after. Valid while only inserts happened since (each updates it); a removal clears it.
struct Splice {
    prev: [u32; MAX_HEIGHT],
    next: [u32; MAX_HEIGHT],
    valid: bool,
}

struct Writer {
    /// Slots handed out so far.
    used: usize,
    rng: u64,
    splice: Splice,
}

/// An ordered set of `T` with one writer at a time and lock-free readers.
pub(crate) struct SkipList<T> {
    head: [AtomicU32; MAX_HEIGHT],
    nodes: Slots<Node>,
    /// Node `n`'s item is `items[n]`.
    items: Slots<OnceLock<T>>,
    len: AtomicUsize,
    writer: Mutex<Writer>,
    /// Where full segments come from before they are allocated.
    spares: Option<Arc<Mutex<Spares<T>>>>,
}

impl<T> std::fmt::Debug for SkipList<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SkipList").field("len", &self.len.load(AtomicOrdering::Relaxed)).finish_non_exhaustive()
    }
}

/// What [`SkipList::insert`] did.
pub(crate) struct Inserted<'a, T> {
    /// The new entry.
    pub entry: Entry<'a, T>,
    /// The entry now before it, if its tag ties the new entry's (`None`: the new entry is the
    /// first, or the one before has another tag). A caller comparing the two items learns
    /// all it can from an unequal tag, and the entry before is read only when the tags tie:
    /// for the first cell of a row its item is a cache miss nobody needs.
    pub tied_before: Option<Entry<'a, T>>,
    /// Bytes the list allocated for it (new segments now and then; otherwise 0).
    pub allocated: usize,
}

/// A node of a list, as readers hold it.
pub(crate) struct Entry<'a, T> {
    list: &'a SkipList<T>,
    number: u32,
    node: &'a Node,
    item: &'a T,
}

impl<T> Clone for Entry<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Entry<'_, T> {}

impl<'a, T: Tagged> Entry<'a, T> {
    pub fn item(&self) -> &'a T {
        self.item
    }

    /// The entry after this one. An entry the writer has unlinked still leads forward to
    /// entries that were after it.
    pub fn next(&self) -> Option<Entry<'a, T>> {
        self.list.entry(self.node.next[0].load(AtomicOrdering::Acquire))
    }

    /// A number that finds this entry again ([`SkipList::at`]) for as long as the list lives.
    pub fn handle(&self) -> u32 {
        self.number
    }

    /// The entry's tag, from its node.
    pub fn tag(&self) -> Tag {
        self.node.tag()
    }

    /// The tag of the entry after this one (`None` at the end), read from its node alone: a
    /// caller that looks for more entries like this one can stop without touching their items.
    pub fn next_tag(&self) -> Option<Tag> {
        self.list.nodes.get(self.node.next[0].load(AtomicOrdering::Acquire)).map(Node::tag)
    }

    /// Starts loading what a walk forward from here reads next: the next entry's item's own
    /// bytes ([`Tagged::prefetch`]), and the node and item of the entry after that. A walk
    /// that calls this at every entry finds each entry's node, item and bytes loaded by the
    /// steps before, where each would otherwise be a cache miss that waits on the one before
    /// it (the list is ordered by key, its nodes and items by insertion). It reads the next
    /// entry's node and item, which the step before asked for.
    pub fn prefetch_ahead(&self) {
        let Some(next) = self.next() else { return };
        next.item.prefetch();
        let after = next.node.next[0].load(AtomicOrdering::Acquire);
        if let Some(node) = self.list.nodes.get(after) {
            prefetch(node);
        }
        if let Some(slot) = self.list.items.get(after) {
            prefetch(slot);
        }
    }

    /// The entry before this one: a search, the list links forward only.
    pub fn prev(&self) -> Option<Entry<'a, T>> {
        self.list.before(self.node.tag(), |item| item.cmp(self.item))
    }
}

impl<T: Tagged> SkipList<T> {
    pub fn new() -> Self {
        SkipList {
            head: Default::default(),
            nodes: Slots::new(),
            items: Slots::new(),
            len: AtomicUsize::new(0),
            writer: Mutex::new(Writer {
                used: 0,
                rng: 0x9e37_79b9_7f4a_7c15,
                splice: Splice { prev: [NONE; MAX_HEIGHT], next: [NONE; MAX_HEIGHT], valid: false },
            }),
            spares: None,
        }
    }

    /// A list that takes its full segments from `spares` while there are any.
    pub fn with_spares(spares: Arc<Mutex<Spares<T>>>) -> Self {
        SkipList { spares: Some(spares), ..Self::new() }
    }

    /// Empties the list (its items are dropped) and returns its full segments, to be reused.
    pub fn into_spares(mut self) -> Spares<T> {
        let nodes = self.nodes.take_full(|n| *n = Node::default());
        let items = self.items.take_full(|i| drop(i.take()));
        Spares { nodes, items }
    }

    /// Entries in the list.
    pub fn len(&self) -> usize {
        self.len.load(AtomicOrdering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn item(&self, number: u32) -> Option<&T> {
        self.items.get(number)?.get()
    }

    fn entry(&self, number: u32) -> Option<Entry<'_, T>> {
        Some(Entry { list: self, number, node: self.nodes.get(number)?, item: self.item(number)? })
    }

    /// Node `number`'s entry if its tag is `tag`; its item is not read otherwise.
    fn tied_entry(&self, number: u32, tag: Tag) -> Option<Entry<'_, T>> {
        self.nodes.get(number).filter(|n| n.tag() == tag).and_then(|_| self.entry(number))
    }

    /// The links out of node `from` (`NONE`: the head's).
    fn links(&self, from: u32) -> &[AtomicU32; MAX_HEIGHT] {
        let node = self.nodes.get(from);
        debug_assert!(from == NONE || node.is_some(), "node {from} was never allocated");
        node.map_or(&self.head, |n| &n.next)
    }

    fn next_at(&self, from: u32, level: usize) -> u32 {
        self.links(from)[level].load(AtomicOrdering::Acquire)
    }

    /// Node `number`'s item against the target (`tag`, and `cmp(item)` = `item.cmp(target)`):
    /// tags first, the item only when they tie.
    fn order(&self, number: u32, node: &Node, tag: Tag, cmp: &impl Fn(&T) -> Ordering) -> Ordering {
        // A published node has its item; `Greater` stops a search rather than passing it.
        node.tag().cmp(&tag).then_with(|| self.item(number).map_or(Ordering::Greater, cmp))
    }

    /// The last node at every level whose item is before the target, from `pred` down; `NONE`
    /// is the head.
    fn descend(&self, mut pred: u32, levels: std::ops::Range<usize>, tag: Tag, cmp: &impl Fn(&T) -> Ordering) -> u32 {
        let mut links = self.links(pred);
        for level in levels.rev() {
            loop {
                let next = links[level].load(AtomicOrdering::Acquire);
                match self.nodes.get(next) {
                    Some(n) if self.order(next, n, tag, cmp) == Ordering::Less => (pred, links) = (next, &n.next),
                    _ => break,
                }
            }
        }
        pred
    }

    /// The first entry not before the target: its tag is `tag`, and where an item's tag ties
    /// `cmp(item)` is `item.cmp(target)`.
    pub fn lower_bound(&self, tag: Tag, cmp: impl Fn(&T) -> Ordering) -> Option<Entry<'_, T>> {
        let pred = self.descend(NONE, 0..MAX_HEIGHT, tag, &cmp);
        self.entry(self.next_at(pred, 0))
    }

    /// The last entry before the target and the first one not before it (as for
    /// [`SkipList::lower_bound`]), found by one search.
    pub fn around(&self, tag: Tag, cmp: impl Fn(&T) -> Ordering) -> (Option<Entry<'_, T>>, Option<Entry<'_, T>>) {
        let pred = self.descend(NONE, 0..MAX_HEIGHT, tag, &cmp);
        (self.entry(pred), self.entry(self.next_at(pred, 0)))
    }

    /// [`SkipList::around`] for the writer, which then inserts next to the target: the search
    /// leaves the splice there, so those inserts start from it instead of searching again. A
    /// plain search if another writer holds the list. Like an insert, it starts from the
    /// splice where that still brackets the target: a second search for the same row (a
    /// read's seek after a check for the row) is a few comparisons.
    pub fn around_splicing(
        &self,
        tag: Tag,
        cmp: impl Fn(&T) -> Ordering,
    ) -> (Option<Entry<'_, T>>, Option<Entry<'_, T>>) {
        let Some(mut w) = self.writer.try_lock() else {
            return self.around(tag, cmp);
        };
        let (prev, next) = self.position(&w.splice, tag, &cmp);
        w.splice = Splice { prev, next, valid: true };
        (self.entry(prev[0]), self.entry(next[0]))
    }

    /// The last entry before the target (as for [`SkipList::lower_bound`]).
    pub fn before(&self, tag: Tag, cmp: impl Fn(&T) -> Ordering) -> Option<Entry<'_, T>> {
        self.entry(self.descend(NONE, 0..MAX_HEIGHT, tag, &cmp))
    }

    #[cfg(test)]
    pub fn first(&self) -> Option<Entry<'_, T>> {
        self.entry(self.next_at(NONE, 0))
    }

    pub fn last(&self) -> Option<Entry<'_, T>> {
        self.before([u64::MAX; 3], |_| Ordering::Less)
    }

    /// Adds `item`, replacing an equal one: see [`Inserted`].
    pub fn insert(&self, item: T) -> Inserted<'_, T> {
        let mut guard = self.writer.lock();
        let w = &mut *guard;
        let (number, allocated) = self.allocate(w);
        let height = random_height(&mut w.rng);
        let tag = item.tag();
        let (mut prev, mut next) = self.position(&w.splice, tag, &|t: &T| t.cmp(&item));
        let tied_before = self.tied_entry(prev[0], tag);
        // An equal item right after the target is replaced: the new node takes over its links,
        // so at every level its predecessor's link moves from the old node to the new one in
        // one store, and a reader passes through one of them, never both. (A reader already on
        // the old node goes on from it as before.) The node's tag settles most cases without
        // the item.
        let replaced = self.tied_entry(next[0], tag).filter(|old| *old.item == item);
        if let Some(old) = &replaced {
            for (level, link) in old.node.next.iter().enumerate().take(old.node.height()) {
                next[level] = link.load(AtomicOrdering::Acquire);
            }
        }
        // `allocate` made both slots; nothing else writes them.
        let (Some(node), Some(slot)) = (self.nodes.get(number), self.items.get(number)) else {
            unreachable!("slot {number} was just allocated");
        };
        let item = slot.get_or_init(|| item);
        for (word, value) in node.tag.iter().zip(tag) {
            word.store(value, AtomicOrdering::Relaxed);
        }
        node.height.store(height as u8, AtomicOrdering::Relaxed);
        for (level, link) in node.next.iter().enumerate().take(height) {
            link.store(next[level], AtomicOrdering::Relaxed);
        }
        for (level, &pred) in prev.iter().enumerate().take(height) {
            self.links(pred)[level].store(number, AtomicOrdering::Release);
        }
        match &replaced {
            // Above the new node's height the old one is unlinked.
            Some(old) => {
                for level in height..old.node.height() {
                    self.links(prev[level])[level].store(next[level], AtomicOrdering::Release);
                }
            }
            None => {
                self.len.fetch_add(1, AtomicOrdering::Relaxed);
            }
        }
        for level in 0..height {
            prev[level] = number;
            next[level] = node.next[level].load(AtomicOrdering::Relaxed);
        }
        // Levels above the new node keep their brackets; the ones below end at it.
        w.splice = Splice { prev, next, valid: true };
        Inserted { entry: Entry { list: self, number, node, item }, tied_before, allocated }
    }

    /// The entry [`Entry::handle`] names, if the list holds its node.
    pub fn at(&self, handle: u32) -> Option<Entry<'_, T>> {
        self.entry(handle)
    }

    /// Unlinks `entry`'s node (it stays readable to readers holding it).
    pub fn remove(&self, entry: &Entry<'_, T>) {
        let mut guard = self.writer.lock();
        guard.splice.valid = false;
        let (tag, target) = (entry.node.tag(), entry.item);
        let cmp = |item: &T| item.cmp(target);
        let mut pred = NONE;
        let mut unlinked = false;
        for level in (0..MAX_HEIGHT).rev() {
            pred = self.descend(pred, level..level + 1, tag, &cmp);
            if level < entry.node.height() && self.next_at(pred, level) == entry.number {
                self.links(pred)[level]
                    .store(entry.node.next[level].load(AtomicOrdering::Acquire), AtomicOrdering::Release);
                unlinked = true;
            }
        }
        if unlinked {
            self.len.fetch_sub(1, AtomicOrdering::Relaxed);
        }
    }

    /// Where the target (`tag`, and `cmp(item)` = `item.cmp(target)`) goes: the last node
    /// before it and the one after that, at every level. Starts from the splice at the lowest
    /// level where it still brackets the target, else from the top.
    fn position(
        &self,
        splice: &Splice,
        tag: Tag,
        cmp: &impl Fn(&T) -> Ordering,
    ) -> ([u32; MAX_HEIGHT], [u32; MAX_HEIGHT]) {
        let order = |n: u32| self.nodes.get(n).map(|node| self.order(n, node, tag, cmp));
        let before = |n: u32| n == NONE || order(n) == Some(Ordering::Less);
        let after = |n: u32| n == NONE || matches!(order(n), Some(Ordering::Greater | Ordering::Equal));
        let (mut prev, mut next) = (splice.prev, splice.next);
        let mut from = MAX_HEIGHT;
        if splice.valid {
            if let Some(level) = (0..MAX_HEIGHT).find(|&l| before(prev[l]) && after(next[l])) {
                from = level;
            }
        }
        for level in (0..from).rev() {
            // Level `from` brackets the target (or is the head, above the top).
            let start = if level + 1 < MAX_HEIGHT { prev[level + 1] } else { NONE };
            prev[level] = self.descend(start, level..level + 1, tag, cmp);
            next[level] = self.next_at(prev[level], level);
        }
        (prev, next)
    }

    /// A fresh slot: its number, and the bytes allocated for new segments (or 0).
    fn allocate(&self, w: &mut Writer) -> (u32, usize) {
        let s = w.used;
        w.used += 1;
        let number = u32::try_from(s + 1).expect("a memstore holds fewer than 2^32 cells");
        let spares = self.spares.as_deref();
        let nodes = self.nodes.open(s, || spares.and_then(|p| p.lock().nodes.pop()));
        (number, nodes + self.items.open(s, || spares.and_then(|p| p.lock().items.pop())))
    }
}

impl<T: Tagged> Default for SkipList<T> {
    fn default() -> Self {
        Self::new()
    }
}

/// Where slot `s` (counting from 0) lives.
enum Place {
    /// In growing segment `segment` (of `FIRST_SEGMENT << segment` slots).
    Growing { segment: usize, offset: usize },
    /// In full segment `position` of table `table` (of `2^table` segments).
    Full { table: usize, position: usize, offset: usize },
}

fn place(s: usize) -> Place {
    if s < GROWN {
        let segment = (s / FIRST_SEGMENT + 1).ilog2() as usize;
        Place::Growing { segment, offset: s - FIRST_SEGMENT * ((1 << segment) - 1) }
    } else {
        let full = (s - GROWN) / SEGMENT;
        let table = (full + 1).ilog2() as usize;
        Place::Full { table, position: full + 1 - (1 << table), offset: (s - GROWN) % SEGMENT }
    }
}

/// The bytes a list of `T` holds per entry: its node and its item's slot.
#[cfg(test)]
pub(crate) fn slot_bytes<T>() -> usize {
    std::mem::size_of::<Node>() + std::mem::size_of::<OnceLock<T>>()
}

/// A level count with a quarter of the nodes reaching each next level (xorshift64).
fn random_height(rng: &mut u64) -> usize {
    let mut x = *rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *rng = x;
    (1 + (x.trailing_zeros() / 2) as usize).min(MAX_HEIGHT)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;

    use proptest::prelude::*;

    use super::*;

    /// Four neighbours share a tag: searches settle some comparisons by tag and some by item.
    impl Tagged for u64 {
        fn tag(&self) -> Tag {
            [*self / 4, 0, 0]
        }
    }

    fn lower_bound(list: &SkipList<u64>, k: u64) -> Option<Entry<'_, u64>> {
        list.lower_bound(k.tag(), |i| i.cmp(&k))
    }

    fn items(list: &SkipList<u64>) -> Vec<u64> {
        std::iter::successors(list.first(), |e| e.next()).map(|e| *e.item()).collect()
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u64),
        /// Inserts a run of neighbours, as the cells of one row arrive.
        Run(u64, u8),
        Remove(u64),
        /// The writer's search, which leaves the splice where it lands.
        Seek(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0..2_000u64).prop_map(Op::Insert),
            2 => (0..2_000u64, 1..12u8).prop_map(|(k, n)| Op::Run(k, n)),
            1 => (0..2_000u64).prop_map(Op::Remove),
            2 => (0..2_100u64).prop_map(Op::Seek),
        ]
    }

    proptest! {
        /// Inserts (splice or not, the splice left by an insert or by the writer's search),
        /// replacements and removals keep the list equal to an ordered set, and every search
        /// answers as the set does.
        #[test]
        fn behaves_as_an_ordered_set(ops in proptest::collection::vec(op(), 1..400), probes in proptest::collection::vec(0..2_100u64, 8)) {
            let list = SkipList::new();
            let mut model = BTreeSet::new();
            for op in ops {
                match op {
                    Op::Insert(k) => { list.insert(k); model.insert(k); }
                    Op::Run(k, n) => for i in 0..u64::from(n) { list.insert(k + i); model.insert(k + i); },
                    Op::Remove(k) => {
                        if let Some(e) = lower_bound(&list, k).filter(|e| *e.item() == k) {
                            list.remove(&e);
                            list.remove(&e); // a second removal finds nothing to unlink
                        }
                        model.remove(&k);
                    }
                    Op::Seek(k) => {
                        let found = list.around_splicing(k.tag(), |i| i.cmp(&k)).1.map(|e| *e.item());
                        prop_assert_eq!(found, model.range(k..).next().copied());
                    }
                }
            }
            prop_assert_eq!(items(&list), model.iter().copied().collect::<Vec<_>>());
            prop_assert_eq!(list.len(), model.len());
            prop_assert_eq!(list.last().map(|e| *e.item()), model.last().copied());
            for p in probes {
                prop_assert_eq!(lower_bound(&list, p).map(|e| *e.item()), model.range(p..).next().copied());
                let before = model.range(..p).next_back().copied();
                prop_assert_eq!(list.before(p.tag(), |i| i.cmp(&p)).map(|e| *e.item()), before);
                let (floor, ceiling) = list.around(p.tag(), |i| i.cmp(&p));
                prop_assert_eq!((floor.map(|e| *e.item()), ceiling.map(|e| *e.item())), (before, model.range(p..).next().copied()));
                let (floor, ceiling) = list.around_splicing(p.tag(), |i| i.cmp(&p));
                prop_assert_eq!((floor.map(|e| *e.item()), ceiling.map(|e| *e.item())), (before, model.range(p..).next().copied()));
                if let Some(e) = lower_bound(&list, p) {
                    prop_assert_eq!(e.prev().map(|e| *e.item()), before);
                }
            }
        }
    }

    /// Items equal for the order but not the same: an insert replaces the one it equals.
    #[derive(Debug)]
    struct Keyed(u32, &'static str);
    impl PartialEq for Keyed {
        fn eq(&self, other: &Self) -> bool {
            self.0 == other.0
        }
    }
    impl Eq for Keyed {}
    impl PartialOrd for Keyed {
        fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
            Some(self.cmp(other))
        }
    }
    impl Ord for Keyed {
        fn cmp(&self, other: &Self) -> Ordering {
            self.0.cmp(&other.0)
        }
    }

    impl Tagged for Keyed {
        fn tag(&self) -> Tag {
            [u64::from(self.0 / 2), 0, 0]
        }
    }

    #[test]
    fn a_dropped_lists_full_segments_serve_the_next_list_emptied() {
        let spares = Arc::new(Mutex::new(Spares::default()));
        let first = SkipList::with_spares(spares.clone());
        let n = (GROWN + 2 * SEGMENT + 10) as u64;
        for k in 0..n {
            first.insert(k * 2);
        }
        let mut returned = first.into_spares();
        assert_eq!(returned.pairs(), 3, "the list's three full segments");
        assert!(returned.items.iter().flat_map(|s| s.iter()).all(|i| i.get().is_none()));
        assert!(returned.nodes.iter().flat_map(|s| s.iter()).all(|n| n.height() == 0 && n.tag() == [0; 3]));
        spares.lock().take_from(&mut returned, Spares::<u64>::PAIR_BYTES * 2);
        assert_eq!((spares.lock().pairs(), returned.pairs()), (2, 1), "as many as the room holds");
        let second = SkipList::with_spares(spares.clone());
        for k in 0..n {
            second.insert(k * 2 + 1);
        }
        assert_eq!(spares.lock().pairs(), 0, "taken before allocating");
        assert_eq!(items(&second), (0..n).map(|k| k * 2 + 1).collect::<Vec<_>>());
        assert_eq!(lower_bound(&second, 2 * SEGMENT as u64).map(|e| *e.item()), Some(2 * SEGMENT as u64 + 1));
    }

    #[test]
    fn a_hop_reads_one_cache_line() {
        assert_eq!(std::mem::size_of::<Node>(), 64);
        assert_eq!(std::mem::align_of::<Node>(), 64);
    }

    #[test]
    fn a_memstore_slot_stays_small() {
        // A cell's slot is most of its overhead beyond its bytes: keep it from growing unseen.
        assert!(slot_bytes::<crate::memstore::MemCell>() <= 112, "{}", slot_bytes::<crate::memstore::MemCell>());
    }

    #[test]
    fn an_equal_item_is_replaced() {
        let list = SkipList::new();
        for k in [5, 1, 9, 5, 3] {
            list.insert(Keyed(k, "first"));
        }
        list.insert(Keyed(5, "second"));
        list.insert(Keyed(1, "second"));
        let all: Vec<(u32, &str)> =
            std::iter::successors(list.first(), |e| e.next()).map(|e| (e.item().0, e.item().1)).collect();
        assert_eq!(all, vec![(1, "second"), (3, "first"), (5, "second"), (9, "first")]);
        assert_eq!(list.len(), 4);
    }

    #[test]
    fn an_insert_names_its_predecessor_and_a_handle_finds_the_entry_again() {
        let list = SkipList::new();
        for k in [10u64, 30, 20] {
            list.insert(k);
        }
        // Tags are a quarter of the number: 20 and 21 tie, 21 and 25 do not.
        let inserted = list.insert(21);
        assert_eq!(inserted.tied_before.map(|e| *e.item()), Some(20));
        let handle = inserted.entry.handle();
        assert_eq!(list.insert(25).tied_before.map(|e| *e.item()), None, "the entry before has another tag");
        assert_eq!(list.insert(5).tied_before.map(|e| *e.item()), None, "a new first entry has none before it");
        assert_eq!(list.insert(41).tied_before.map(|e| *e.item()), None);
        assert_eq!(list.insert(43).tied_before.map(|e| *e.item()), Some(41));
        assert_eq!(list.at(handle).map(|e| *e.item()), Some(21));
        assert_eq!(list.at(handle).and_then(|e| e.next()).map(|e| *e.item()), Some(25));
        assert!(list.at(0).is_none() && list.at(1_000).is_none(), "no entry behind other numbers");
    }

    #[test]
    fn segments_are_charged_once_and_cover_every_slot() {
        let list = SkipList::new();
        let mut charged = 0;
        let n = (GROWN + 3 * SEGMENT + 5) as u64;
        for k in 0..n {
            charged += list.insert(k * 7 % n).allocated;
        }
        assert_eq!(list.len() as u64, n);
        assert!(charged >= n as usize * slot_bytes::<u64>(), "every slot is charged");
        assert!(charged < (n as usize + SEGMENT) * slot_bytes::<u64>() + 4096, "a segment is charged once");
        assert_eq!(items(&list), (0..n).collect::<Vec<_>>());
    }

    /// Readers racing the writer see a sorted list that holds everything inserted before they
    /// started, and an entry the writer unlinks still leads them forward.
    #[test]
    fn readers_racing_the_writer_see_a_sorted_list() {
        let list = Arc::new(SkipList::new());
        let published = Arc::new(AtomicU64::new(0));
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (list, published, done) = (list.clone(), published.clone(), done.clone());
                std::thread::spawn(move || {
                    let mut rounds = 0;
                    while !done.load(AtomicOrdering::Acquire) || rounds == 0 {
                        let floor = published.load(AtomicOrdering::Acquire);
                        let seen: Vec<u64> =
                            std::iter::successors(list.first(), |e| e.next()).map(|e| *e.item()).collect();
                        assert!(seen.windows(2).all(|w| w[0] < w[1]), "sorted, no duplicates");
                        // Even keys below `floor` were inserted before this pass and never removed.
                        let evens = seen.iter().filter(|k| **k % 2 == 0 && **k < floor).count() as u64;
                        assert_eq!(evens, floor.div_ceil(2));
                        rounds += 1;
                    }
                })
            })
            .collect();
        for k in 0..20_000u64 {
            let e = list.insert(k).entry;
            if k % 2 == 1 {
                list.remove(&e);
            }
            published.store(k + 1, AtomicOrdering::Release);
        }
        done.store(true, AtomicOrdering::Release);
        for r in readers {
            r.join().unwrap();
        }
    }
}
