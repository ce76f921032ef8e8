//! Reads: ReadRows requests with the filters a read needs, streamed into rows and resumed
//! after the last row on transient failures.

use std::future::poll_fn;
use std::task::{Context, Poll, Waker};

use super::nonblocking::Task;
use super::*;
use crate::store::{AsyncRowCursor, Call, LentRow};

impl Conn {
    /// A ReadRows request of `table` with the read filter its families need.
    pub(super) async fn read_request(
        &self,
        table: &str,
        rows: pb::RowSet,
        read: &ReadSpec,
        limit: i64,
        reverse: bool,
    ) -> Result<(pb::ReadRowsRequest, Option<filters::ColumnWindow>)> {
        let families = self.families(table).await?;
        Ok(self.read_request_of(&families, table, rows, read, limit, reverse))
    }

    /// As [`Conn::read_request`], for `table`'s `families`.
    fn read_request_of(
        &self,
        families: &[FamilySpec],
        table: &str,
        rows: pb::RowSet,
        read: &ReadSpec,
        limit: i64,
        reverse: bool,
    ) -> (pb::ReadRowsRequest, Option<filters::ColumnWindow>) {
        let (filter, window) = filters::columns_filter(families, read, now_ms());
        let request = pb::ReadRowsRequest {
            table_name: self.ctx.table_name(table),
            app_profile_id: self.ctx.app_profile.clone(),
            rows: Some(rows),
            filter,
            rows_limit: limit,
            reversed: reverse,
            ..Default::default()
        };
        (request, window)
    }

    /// The ReadRows request of a scan (not an empty one) of `table`, whose families are
    /// `families`.
    fn scan_request(
        &self,
        families: &[FamilySpec],
        table: &str,
        spec: &ScanSpec,
    ) -> (pb::ReadRowsRequest, Option<filters::ColumnWindow>) {
        use pb::row_range::{EndKey, StartKey};
        let range = pb::RowRange {
            start_key: (!spec.start.is_empty()).then(|| StartKey::StartKeyClosed(spec.start.clone())),
            end_key: spec.end.clone().map(EndKey::EndKeyOpen),
        };
        let rows = pb::RowSet { row_keys: Vec::new(), row_ranges: vec![range] };
        let (mut request, window) = self.read_request_of(families, table, rows, &spec.read, 0, spec.reverse);
        // The server counts the rows it sends, before they are trimmed: when trimming can drop
        // a row, a server limit would end the scan short, so the limit is the client's alone.
        if !window.is_some_and(filters::ColumnWindow::can_empty_rows) {
            request.rows_limit = spec.limit.map_or(0, |n| i64::try_from(n).unwrap_or(i64::MAX));
        }
        (request, window)
    }
}

impl BigtableStore {
    /// Opens a scan: answers once its request is built, with the read already streaming into
    /// the cursor's buffer. With the table's families cached that is on the first poll;
    /// otherwise after a GetTable, made by a task as every call is.
    pub(super) fn open_scan<'a>(&'a self, table: &str, spec: &ScanSpec) -> Call<'a, Result<ScanCursor>> {
        if spec.limit == Some(0) || spec.end.as_ref().is_some_and(|end| *end <= spec.start) {
            return Call::ready(Ok(ScanCursor::empty()));
        }
        let conn = self.inner.conn.clone();
        let (table, spec) = (table.to_string(), spec.clone());
        Call::later(async move {
            let families = match conn.cached(&table) {
                Some(families) => families,
                None => {
                    let (conn, table) = (conn.clone(), table.clone());
                    self.call(OnDrop::Abort, async move { conn.families(&table).await }).await?
                }
            };
            let (request, window) = conn.scan_request(&families, &table, &spec);
            let (tx, rx) = mpsc::channel(SCAN_BUFFER);
            // The read starts now, before the first row is asked for: scans opened one after
            // the other (salt buckets) run at the same time.
            let task = self.spawn(OnDrop::Abort, async move {
                read_rows(conn.ctx, table, request, tx).await;
                Ok(())
            })?;
            Ok(ScanCursor { rows: Rows::new(rx, window, spec.limit), task: Some(task), current: None })
        })
    }
}

/// Reads every row `request` names, in one task: the stream feeds the rows to the merge as
/// they arrive. Keyed by row key.
pub(super) async fn read_all(
    ctx: Ctx,
    table: String,
    request: pb::ReadRowsRequest,
    window: Option<filters::ColumnWindow>,
) -> Result<HashMap<Bytes, Row>> {
    let (tx, rx) = mpsc::channel(SCAN_BUFFER);
    let mut rows = Rows::new(rx, window, None);
    let collect = async move {
        let mut found = HashMap::new();
        while let Some(row) = rows.next().await {
            let row = row?;
            found.insert(row.key.clone(), row);
        }
        Ok(found)
    };
    futures::future::join(read_rows(ctx, table, request, tx), collect).await.1
}

pub(super) fn chunk_of(c: pb::read_rows_response::CellChunk) -> Chunk {
    use pb::read_rows_response::cell_chunk::RowStatus;
    Chunk {
        row_key: c.row_key,
        family: c.family_name,
        qualifier: c.qualifier.map(Bytes::from),
        timestamp_micros: c.timestamp_micros,
        value: c.value,
        value_size: c.value_size,
        has_labels: !c.labels.is_empty(),
        reset_row: matches!(c.row_status, Some(RowStatus::ResetRow(true))),
        commit_row: matches!(c.row_status, Some(RowStatus::CommitRow(true))),
    }
}

/// The part of `request` not yet read once rows up to `last` (in the read's direction) and
/// `delivered` rows have arrived; `None` if nothing is left.
pub(super) fn resume(mut request: pb::ReadRowsRequest, last: &Bytes, delivered: i64) -> Option<pb::ReadRowsRequest> {
    use pb::row_range::{EndKey, StartKey};
    if request.rows_limit > 0 {
        request.rows_limit -= delivered;
        if request.rows_limit <= 0 {
            return None;
        }
    }
    let reverse = request.reversed;
    let rows = request.rows.get_or_insert_with(Default::default);
    let remaining = |k: &Bytes| if reverse { k < last } else { k > last };
    rows.row_keys.retain(remaining);
    let had_keys = !rows.row_keys.is_empty();
    if rows.row_ranges.is_empty() && !had_keys {
        return None;
    }
    for range in &mut rows.row_ranges {
        if reverse {
            let below = match &range.end_key {
                None => true,
                Some(EndKey::EndKeyOpen(e)) => last < e,
                Some(EndKey::EndKeyClosed(e)) => last <= e,
            };
            if below {
                range.end_key = Some(EndKey::EndKeyOpen(last.clone()));
            }
        } else {
            let above = match &range.start_key {
                None => true,
                Some(StartKey::StartKeyClosed(s)) => last >= s,
                Some(StartKey::StartKeyOpen(s)) => last >= s,
            };
            if above {
                range.start_key = Some(StartKey::StartKeyOpen(last.clone()));
            }
        }
    }
    // Ranges left empty (start at or past their end).
    rows.row_ranges.retain(|r| match (&r.start_key, &r.end_key) {
        (Some(StartKey::StartKeyOpen(s)), Some(EndKey::EndKeyOpen(e))) => s < e && s.as_ref() != e.as_ref(),
        (Some(StartKey::StartKeyClosed(s)), Some(EndKey::EndKeyOpen(e))) => s < e,
        (Some(StartKey::StartKeyOpen(s)), Some(EndKey::EndKeyClosed(e))) => s < e,
        _ => true,
    });
    (had_keys || !rows.row_ranges.is_empty()).then_some(request)
}

/// Streams the rows of a ReadRows request into `tx`, resuming after the last row on transient
/// failures; ends when the read ends, fails, or the receiver is dropped.
pub(super) async fn read_rows(ctx: Ctx, table: String, request: pb::ReadRowsRequest, tx: mpsc::Sender<Result<Row>>) {
    let mut merger = RowMerger::new(request.reversed);
    let (mut last, mut delivered) = (None::<Bytes>, 0i64);
    let mut retry = ctx.retry.start();
    let mut next = Some(request.clone());
    while let Some(message) = next.take() {
        let delivered_before = delivered;
        // No deadline on the whole attempt: a scan may stream for longer than any deadline.
        // Each wait for a response has one (`Ctx::deadline`), and retries stop at the
        // operation deadline counted from the last progress.
        let failure = match read_once(&ctx, &table, message, &mut merger, &tx, &mut last, &mut delivered).await {
            Ok(()) => return,
            Err(ReadFailure::Fatal(e)) => {
                let _ = tx.send(Err(e)).await;
                return;
            }
            Err(ReadFailure::ReceiverGone) => return,
            Err(ReadFailure::Transient(s)) => s,
        };
        // A stream that made progress before it broke starts its attempts and deadline over.
        if delivered > delivered_before {
            retry.progressed(&ctx.retry);
        }
        let Some(wait) = retry.after(&failure) else {
            let _ = tx.send(Err(rpc_error("ReadRows", &table, None, &failure))).await;
            return;
        };
        merger.restart();
        ctx.rpcs.count(Rpc::Retry);
        tokio::time::sleep(wait).await;
        next = match &last {
            Some(last) => resume(request.clone(), last, delivered),
            None => Some(request.clone()),
        };
    }
}

pub(super) enum ReadFailure {
    Transient(Status),
    Fatal(Error),
    ReceiverGone,
}

pub(super) async fn read_once(
    ctx: &Ctx,
    table: &str,
    message: pb::ReadRowsRequest,
    merger: &mut RowMerger,
    tx: &mpsc::Sender<Result<Row>>,
    last: &mut Option<Bytes>,
    delivered: &mut i64,
) -> Result<(), ReadFailure> {
    let name = message.table_name.clone();
    let classify = |s: Status| {
        if transient(&s) {
            ReadFailure::Transient(s)
        } else {
            ReadFailure::Fatal(rpc_error("ReadRows", table, None, &s))
        }
    };
    let request = ctx.request(Rpc::ReadRows, message, ("table_name", &name)).await.map_err(ReadFailure::Fatal)?;
    let mut stream = ctx.deadline(ctx.data.clone().read_rows(request)).await.map_err(classify)?.into_inner();
    loop {
        match ctx.deadline(stream.message()).await.map_err(classify)? {
            Some(response) => {
                for chunk in response.chunks {
                    let row = merger.push(chunk_of(chunk)).map_err(|e| {
                        ReadFailure::Fatal(rpc_error("ReadRows", table, None, &Status::internal(e.to_string())))
                    })?;
                    if let Some(row) = row {
                        *last = Some(row.key.clone());
                        *delivered += 1;
                        tx.send(Ok(row)).await.map_err(|_| ReadFailure::ReceiverGone)?;
                    }
                }
            }
            None => {
                return merger.finish().map_err(|e| {
                    ReadFailure::Fatal(rpc_error("ReadRows", table, None, &Status::internal(e.to_string())))
                })
            }
        }
    }
}

/// Rows arriving from a read task.
pub(super) struct Rows {
    rx: mpsc::Receiver<Result<Row>>,
    /// Columns per row to keep, for slices Bigtable could not select itself.
    window: Option<filters::ColumnWindow>,
    /// Rows still to return, for a scan's limit: counted here, after trimming, because rows
    /// trimming empties are not returned.
    left: Option<usize>,
}

impl Rows {
    /// The rows a read task sends on `rx`, trimmed to `window`, at most `left` of them.
    pub(super) fn new(
        rx: mpsc::Receiver<Result<Row>>,
        window: Option<filters::ColumnWindow>,
        left: Option<usize>,
    ) -> Self {
        Rows { rx, window, left }
    }

    /// The next row: `None` at the end, after an error or at the limit.
    pub(super) fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Row>>> {
        if self.left == Some(0) {
            // The read may go on past the limit (no server limit): stop it.
            self.rx.close();
            return Poll::Ready(None);
        }
        loop {
            let mut row = std::task::ready!(self.rx.poll_recv(cx));
            if let (Some(Ok(row)), Some(window)) = (&mut row, self.window) {
                filters::trim_columns(row, window);
                if row.cells.is_empty() {
                    continue;
                }
            }
            if let (Some(Ok(_)), Some(left)) = (&row, &mut self.left) {
                *left -= 1;
            }
            return Poll::Ready(row);
        }
    }

    /// As [`Rows::poll_next`], awaited.
    pub(super) async fn next(&mut self) -> Option<Result<Row>> {
        poll_fn(|cx| self.poll_next(cx)).await
    }
}

/// A scan's rows as they arrive from its read task, which reads up to [`SCAN_BUFFER`] rows
/// ahead. The asynchronous API lends them ([`AsyncRowCursor`]); the synchronous one waits for
/// each in turn (`Iterator`).
pub(super) struct ScanCursor {
    rows: Rows,
    /// The read feeding `rows`: aborted when the scan ends, fails or is dropped, so that
    /// nothing more is fetched.
    task: Option<Task<()>>,
    /// The row lent, for [`AsyncRowCursor::row`].
    current: Option<Row>,
}

impl ScanCursor {
    /// A scan of no rows.
    fn empty() -> Self {
        // A channel whose sender is gone: the first receive finds its end.
        let (_, rx) = mpsc::channel(1);
        ScanCursor { rows: Rows::new(rx, None, None), task: None, current: None }
    }

    fn poll_row(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Row>>> {
        let row = std::task::ready!(self.rows.poll_next(cx));
        if !matches!(row, Some(Ok(_))) {
            self.task = None;
        }
        Poll::Ready(row)
    }

    /// Lends `row`, as [`AsyncRowCursor::advance`] answers.
    fn land(&mut self, row: Option<Result<Row>>) -> Result<bool> {
        match row {
            Some(Ok(row)) => {
                self.current = Some(row);
                Ok(true)
            }
            Some(Err(e)) => Err(e),
            None => Ok(false),
        }
    }
}

impl AsyncRowCursor for ScanCursor {
    fn advance(&mut self) -> Call<'_, Result<bool>> {
        self.current = None;
        // A row already read ahead answers at once, with no future to allocate.
        if let Poll::Ready(row) = self.poll_row(&mut Context::from_waker(Waker::noop())) {
            return Call::ready(self.land(row));
        }
        Call::later(async move {
            let row = poll_fn(|cx| self.poll_row(cx)).await;
            self.land(row)
        })
    }

    fn row(&self) -> Option<LentRow<'_>> {
        self.current.as_ref().map(Row::lend)
    }
}

impl Iterator for ScanCursor {
    type Item = Result<Row>;

    fn next(&mut self) -> Option<Result<Row>> {
        drive(poll_fn(|cx| self.poll_row(cx)))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc as sync_mpsc;
    use std::time::Duration;

    use super::*;

    /// Signals when the read task's future is dropped.
    struct Dropped(sync_mpsc::Sender<()>);

    impl Drop for Dropped {
        fn drop(&mut self) {
            let _ = self.0.send(());
        }
    }

    /// A cursor over a read task that sends rows as fast as the buffer takes them and, once
    /// its receiver is gone, waits forever (a read waiting on the network): only an abort
    /// stops it.
    fn endless(runtime: &Runtime, limit: Option<usize>) -> (ScanCursor, sync_mpsc::Receiver<()>) {
        let (tx, rx) = mpsc::channel(SCAN_BUFFER);
        let (dropped, stopped) = sync_mpsc::channel();
        let task = Task::spawn(runtime, OnDrop::Abort, async move {
            let _dropped = Dropped(dropped);
            for i in 0u64.. {
                let row = Row { key: Bytes::copy_from_slice(&i.to_be_bytes()), cells: Vec::new() };
                if tx.send(Ok(row)).await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
            Ok(())
        });
        (ScanCursor { rows: Rows::new(rx, None, limit), task: Some(task), current: None }, stopped)
    }

    fn runtime() -> Runtime {
        tokio::runtime::Builder::new_multi_thread().worker_threads(1).build().unwrap()
    }

    #[test]
    fn a_scan_cursor_dropped_part_way_stops_its_read() {
        let runtime = runtime();
        let (mut cursor, stopped) = endless(&runtime, None);
        let keys: Vec<u64> = cursor
            .by_ref()
            .take(10)
            .map(|row| u64::from_be_bytes(row.unwrap().key.as_ref().try_into().unwrap()))
            .collect();
        assert_eq!(keys, (0..10).collect::<Vec<_>>());
        assert!(stopped.try_recv().is_err(), "the read runs while the cursor lives");
        drop(cursor);
        stopped.recv_timeout(Duration::from_secs(5)).expect("the read stops when the cursor is dropped");
    }

    #[test]
    fn a_scan_cursor_lends_rows_and_stops_its_read_at_the_limit() {
        let runtime = runtime();
        let (mut cursor, stopped) = endless(&runtime, Some(3));
        let mut keys = Vec::new();
        while drive(AsyncRowCursor::advance(&mut cursor)).unwrap() {
            keys.push(cursor.row().unwrap().key().to_vec());
        }
        assert_eq!(keys.len(), 3);
        assert!(cursor.row().is_none());
        stopped.recv_timeout(Duration::from_secs(5)).expect("the read stops at the limit");
        assert!(!drive(AsyncRowCursor::advance(&mut cursor)).unwrap(), "the cursor stays at its end");
    }

    #[test]
    fn an_empty_scan_ends_at_once() {
        let mut cursor = ScanCursor::empty();
        assert!(cursor.next().is_none());
        assert!(!drive(AsyncRowCursor::advance(&mut cursor)).unwrap());
    }
}
