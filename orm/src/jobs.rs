//! Checkpoints of long-running jobs (migrations, index backfills, copies): the last row a job
//! finished, kept in the database so a killed or interrupted job resumes after it.
//!
//! Written once over [`AsyncStore`]: the synchronous jobs call it through
//! [`Inline`](crate::store::Inline), their async forms through the store's own.

use bytes::Bytes;

use crate::store::{AsyncStore, CellMutation, ReadSpec, RowMutation, TableSpec};
use crate::Result;

/// The table where jobs keep their checkpoints.
pub const JOBS_TABLE: &str = "cellar_jobs";
const FAMILY: &str = "j";
const LAST: &[u8] = b"last";

/// The checkpoint of one job, named by its row in [`JOBS_TABLE`].
pub(crate) struct Checkpoint<'s> {
    store: &'s dyn AsyncStore,
    job: Bytes,
}

impl<'s> Checkpoint<'s> {
    /// The checkpoint of job `job`; creates the jobs table if missing.
    pub(crate) async fn open(store: &'s dyn AsyncStore, job: Bytes) -> Result<Self> {
        store.ensure_table(&TableSpec::internal(JOBS_TABLE, FAMILY)).await?;
        Ok(Checkpoint { store, job })
    }

    /// The last row the job finished, if it has started and not finished.
    pub(crate) async fn last(&self) -> Result<Option<Bytes>> {
        let read = ReadSpec::default();
        let rows = self.store.read_rows(JOBS_TABLE, std::slice::from_ref(&self.job), &read).await?;
        Ok(rows.into_iter().flatten().next().and_then(|row| row.cells.into_iter().next()).map(|c| c.value))
    }

    /// Where a resumed job starts: just after the last row it finished (empty: the start).
    pub(crate) fn resume_from(last: Option<&Bytes>) -> Bytes {
        last.map(|last| Bytes::from([&last[..], &[0]].concat())).unwrap_or_default()
    }

    /// Records that the job finished every row up to `last`.
    pub(crate) async fn save(&self, last: &Bytes) -> Result<()> {
        let put = CellMutation::put_now(FAMILY, LAST, last.clone());
        self.store.mutate_row(JOBS_TABLE, RowMutation { row: self.job.clone(), mutations: vec![put] }).await
    }

    /// Removes the checkpoint: the job is done, and a next run starts from the beginning.
    pub(crate) async fn clear(&self) -> Result<()> {
        let delete = RowMutation { row: self.job.clone(), mutations: vec![CellMutation::DeleteRow] };
        self.store.mutate_row(JOBS_TABLE, delete).await
    }
}
