//! The read path: cursors over memstores and SSTables, their merge, per-row visibility, the
//! buffer a row's cells are gathered in, row assembly for Get and Scan (forward and
//! reversed), and the read points open readers pin.

pub(crate) mod cursor;
pub(crate) mod pins;
pub(crate) mod row_buf;
pub(crate) mod rows;
pub(crate) mod visibility;
