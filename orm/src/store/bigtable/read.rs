//! Reads: ReadRows requests with the filters a read needs, streamed into rows and resumed
//! after the last row on transient failures.

use super::*;

impl BigtableStore {
    /// A ReadRows request of `table` with the read filter its families need.
    pub(super) fn read_request(
        &self,
        table: &str,
        rows: pb::RowSet,
        read: &ReadSpec,
        limit: i64,
        reverse: bool,
    ) -> Result<(pb::ReadRowsRequest, Option<filters::ColumnWindow>)> {
        let families = self.families(table)?;
        let (filter, window) = filters::columns_filter(&families, read, now_ms());
        let request = pb::ReadRowsRequest {
            table_name: self.inner.ctx.table_name(table),
            app_profile_id: self.inner.ctx.app_profile.clone(),
            rows: Some(rows),
            filter,
            rows_limit: limit,
            reversed: reverse,
            ..Default::default()
        };
        Ok((request, window))
    }

    /// Starts a ReadRows stream feeding `tx`.
    pub(super) fn start_read(
        &self,
        table: &str,
        request: pb::ReadRowsRequest,
        tx: mpsc::Sender<Result<Row>>,
    ) -> Result<()> {
        let runtime = self.runtime()?;
        runtime.spawn(read_rows(self.inner.ctx.clone(), table.to_string(), request, tx));
        Ok(())
    }
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
}

impl Iterator for Rows {
    type Item = Result<Row>;

    fn next(&mut self) -> Option<Result<Row>> {
        if self.left == Some(0) {
            // The read may go on past the limit (no server limit): stop it.
            self.rx.close();
            return None;
        }
        loop {
            let mut row = wait(self.rx.recv());
            if let (Some(Ok(row)), Some(window)) = (&mut row, self.window) {
                filters::trim_columns(row, window);
                if row.cells.is_empty() {
                    continue;
                }
            }
            if let (Some(Ok(_)), Some(left)) = (&row, &mut self.left) {
                *left -= 1;
            }
            return row;
        }
    }
}
