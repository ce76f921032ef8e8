//! The engine's tables in memory: each table's shared state ([`TableState`]: descriptor,
//! flags, regions), and the map of them by name ([`Tables`]).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

use crate::descriptor::TableDescriptor;
use crate::region::Region;

/// Every table of an engine, by name. Readers take it briefly; it is written only under `ddl`
/// (see the lock order in the `engine` module).
pub(crate) type Tables = RwLock<BTreeMap<String, Arc<TableState>>>;

/// State shared by every handle of one table.
pub(crate) struct TableState {
    /// Shared so the hot path takes a reference count, not a copy of every family.
    desc: RwLock<Arc<TableDescriptor>>,
    enabled: AtomicBool,
    dropped: AtomicBool,
    regions: RwLock<Vec<Arc<Region>>>,
}

impl TableState {
    pub fn new(desc: TableDescriptor, enabled: bool, regions: Vec<Arc<Region>>) -> Self {
        TableState {
            desc: RwLock::new(Arc::new(desc)),
            enabled: AtomicBool::new(enabled),
            dropped: AtomicBool::new(false),
            regions: RwLock::new(regions),
        }
    }

    pub fn descriptor(&self) -> TableDescriptor {
        (**self.desc.read()).clone()
    }

    /// The descriptor without copying it.
    pub fn shared_descriptor(&self) -> Arc<TableDescriptor> {
        self.desc.read().clone()
    }

    pub fn set_descriptor(&self, desc: TableDescriptor) {
        *self.desc.write() = Arc::new(desc);
    }

    pub fn is_enabled(&self) -> bool {
        self.enabled.load(Ordering::Acquire)
    }

    pub fn set_enabled(&self, enabled: bool) {
        self.enabled.store(enabled, Ordering::Release);
    }

    pub fn is_dropped(&self) -> bool {
        self.dropped.load(Ordering::Acquire)
    }

    pub fn mark_dropped(&self) {
        self.dropped.store(true, Ordering::Release);
    }

    pub fn regions(&self) -> Vec<Arc<Region>> {
        self.regions.read().clone()
    }

    /// Puts `with` in place of the region `id` (a split's daughters, or a parent restored).
    pub fn replace_region(&self, id: u64, with: Vec<Arc<Region>>) {
        let mut regions = self.regions.write();
        if let Some(i) = regions.iter().position(|r| r.id == id) {
            regions.splice(i..=i, with);
        }
    }

    /// Removes the region `id`.
    pub fn remove_region(&self, id: u64) {
        self.regions.write().retain(|r| r.id != id);
    }

    pub fn replace_regions(&self, regions: Vec<Arc<Region>>) -> Vec<Arc<Region>> {
        std::mem::replace(&mut *self.regions.write(), regions)
    }

    /// The region holding `row`.
    pub fn region_for(&self, row: &[u8]) -> Option<Arc<Region>> {
        let regions = self.regions.read();
        // Regions are sorted by start key and tile the key space.
        // (An empty start is tested, not compared: see `Region::contains`.)
        let i = regions.partition_point(|r| r.start.is_empty() || r.start.as_ref() <= row);
        regions.get(i.checked_sub(1)?).filter(|r| r.contains(row)).cloned()
    }
}
