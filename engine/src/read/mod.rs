//! The read path: cursors over memstores and SSTables, their merge, per-row visibility, and
//! row assembly for Get and Scan (forward and reversed).

pub(crate) mod cursor;
pub(crate) mod rows;
pub(crate) mod visibility;
