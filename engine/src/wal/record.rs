//! The payload of a WAL record: the edits of one batch to one region, or of one atomic batch
//! to several regions.
//!
//! One region: `region u64 LE | count varint | edits`. Several regions: `u64::MAX LE |
//! regions varint`, then per region `region u64 LE | count varint | edits` (region ids count
//! up from 1, so the marker is never an id). Each edit `seq_offset varint | family_len u8 |
//! family | row_len varint | row | qual_len varint | qualifier | ts u64 LE | type u8 | ttl
//! varint (0 = none, else ttl+1) | value_len varint | value`. An edit's sequence number is the
//! record's first sequence number plus its offset. A `row_len` of 0 (with no row bytes) stands
//! for the row of the section's previous edit: the cells of a put share their row, and row keys
//! are never empty.

use crate::cell::CellType;
use crate::sst::format::{get_varint, put_varint};

/// One edit, as logged and as replayed. It borrows its bytes (from the mutation being written,
/// or from the log record being replayed): the memstore and the log copy what they keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WalEdit<'a> {
    pub seq_offset: u32,
    pub family: &'a [u8],
    pub row: &'a [u8],
    pub qualifier: &'a [u8],
    pub ts: u64,
    pub kind: CellType,
    pub ttl_ms: Option<u64>,
    pub value: &'a [u8],
}

/// Encodes a batch of edits to `region`.
pub(crate) fn encode_batch(region: u64, edits: &[WalEdit<'_>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(encoded_size(edits));
    encode_into(&mut out, region, edits);
    out
}

/// About the bytes `edits` take encoded (an upper bound on their varints).
fn encoded_size(edits: &[WalEdit<'_>]) -> usize {
    16 + edits.iter().map(|e| 32 + e.family.len() + e.row.len() + e.qualifier.len() + e.value.len()).sum::<usize>()
}

/// Appends one region's section: `region | count | edits`.
fn encode_into(out: &mut Vec<u8>, region: u64, edits: &[WalEdit<'_>]) {
    out.extend_from_slice(&region.to_le_bytes());
    put_varint(out, edits.len() as u64);
    let mut previous_row: &[u8] = &[];
    for e in edits {
        put_varint(out, u64::from(e.seq_offset));
        out.push(e.family.len() as u8);
        out.extend_from_slice(e.family);
        if e.row == previous_row {
            put_varint(out, 0);
        } else {
            put_varint(out, e.row.len() as u64);
            out.extend_from_slice(e.row);
            previous_row = e.row;
        }
        put_varint(out, e.qualifier.len() as u64);
        out.extend_from_slice(e.qualifier);
        out.extend_from_slice(&e.ts.to_le_bytes());
        out.push(e.kind.code());
        put_varint(out, e.ttl_ms.map_or(0, |t| t.saturating_add(1)));
        put_varint(out, e.value.len() as u64);
        out.extend_from_slice(e.value);
    }
}

/// Marks a payload holding the edits of several regions.
const SEVERAL_REGIONS: u64 = u64::MAX;

/// Encodes one atomic batch of edits to several regions (each region's edits in its own
/// section, replayed by that region alone).
pub(crate) fn encode_regions(batches: &[(u64, &[WalEdit<'_>])]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + batches.iter().map(|(_, e)| encoded_size(e)).sum::<usize>());
    out.extend_from_slice(&SEVERAL_REGIONS.to_le_bytes());
    put_varint(&mut out, batches.len() as u64);
    for (region, edits) in batches {
        encode_into(&mut out, *region, edits);
    }
    out
}

/// Decodes a payload into its regions' edits; `None` if malformed. Edits borrow from the
/// payload.
pub(crate) fn decode_batch(buf: &[u8]) -> Option<Vec<(u64, Vec<WalEdit<'_>>)>> {
    if buf.get(..8)? != SEVERAL_REGIONS.to_le_bytes() {
        let mut pos = 0;
        let batch = decode_region(buf, &mut pos)?;
        return (pos == buf.len()).then(|| vec![batch]);
    }
    let mut pos = 8;
    let n = get_varint(buf, &mut pos)? as usize;
    let mut batches = Vec::with_capacity(n.min(1 << 10));
    for _ in 0..n {
        batches.push(decode_region(buf, &mut pos)?);
    }
    (pos == buf.len()).then_some(batches)
}

/// Decodes one region's section starting at `pos`, advancing it.
fn decode_region<'a>(buf: &'a [u8], pos: &mut usize) -> Option<(u64, Vec<WalEdit<'a>>)> {
    let region = u64::from_le_bytes(buf.get(*pos..pos.checked_add(8)?)?.try_into().ok()?);
    *pos += 8;
    let n = get_varint(buf, pos)? as usize;
    let mut edits = Vec::with_capacity(n.min(1 << 16));
    let mut previous_row: &[u8] = &[];
    let take = |pos: &mut usize, len: usize| -> Option<&[u8]> {
        let b = buf.get(*pos..pos.checked_add(len)?)?;
        *pos += len;
        Some(b)
    };
    for _ in 0..n {
        let seq_offset = u32::try_from(get_varint(buf, pos)?).ok()?;
        let flen = *buf.get(*pos)? as usize;
        *pos += 1;
        let family = take(pos, flen)?;
        let row = match get_varint(buf, pos)? as usize {
            0 => previous_row,
            len => take(pos, len)?,
        };
        previous_row = row;
        let qlen = get_varint(buf, pos)? as usize;
        let qualifier = take(pos, qlen)?;
        let ts = u64::from_le_bytes(buf.get(*pos..*pos + 8)?.try_into().ok()?);
        *pos += 8;
        let kind = CellType::from_code(*buf.get(*pos)?)?;
        *pos += 1;
        let ttl = get_varint(buf, pos)?;
        let vlen = get_varint(buf, pos)? as usize;
        let value = take(pos, vlen)?;
        edits.push(WalEdit {
            seq_offset,
            family,
            row,
            qualifier,
            ts,
            kind,
            ttl_ms: if ttl == 0 { None } else { Some(ttl - 1) },
            value,
        });
    }
    Some((region, edits))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_round_trips_and_rejects_truncation() {
        let edits = vec![
            WalEdit {
                seq_offset: 0,
                family: b"f",
                row: b"r1",
                qualifier: b"q",
                ts: 10,
                kind: CellType::Put,
                ttl_ms: Some(5),
                value: b"v",
            },
            WalEdit {
                seq_offset: 1,
                family: b"g",
                row: b"r1",
                qualifier: b"",
                ts: 11,
                kind: CellType::DeleteFamily,
                ttl_ms: None,
                value: b"",
            },
        ];
        let enc = encode_batch(7, &edits);
        assert_eq!(decode_batch(&enc), Some(vec![(7, edits.clone())]));
        for cut in 0..enc.len() {
            assert_eq!(decode_batch(&enc[..cut]), None);
        }
        // The second edit's row is written as a reference to the first's.
        let written_out = [edits[0], WalEdit { row: b"r2", ..edits[1] }];
        assert_eq!(encode_batch(7, &written_out).len(), enc.len() + 2);
        let several = encode_regions(&[(7, &edits[..1]), (9, &edits[1..])]);
        assert_eq!(decode_batch(&several), Some(vec![(7, edits[..1].to_vec()), (9, edits[1..].to_vec())]));
        for cut in 0..several.len() {
            assert_eq!(decode_batch(&several[..cut]), None);
        }
    }

    /// Rows that change back and forth, and a log written before edits could share a row (every
    /// row spelled out), decode to the same edits.
    #[test]
    fn edits_share_the_previous_row_and_spelled_out_rows_still_decode() {
        let edit = |seq_offset: u32, row: &'static [u8]| WalEdit {
            seq_offset,
            family: b"f",
            row,
            qualifier: b"q",
            ts: 3,
            kind: CellType::Put,
            ttl_ms: None,
            value: b"value",
        };
        let edits = vec![edit(0, b"row-a"), edit(1, b"row-a"), edit(2, b"row-b"), edit(3, b"row-a"), edit(4, b"row-a")];
        let enc = encode_batch(1, &edits);
        assert_eq!(decode_batch(&enc), Some(vec![(1, edits.clone())]));
        // The same edits with every row written out, as a log from before the sharing holds them.
        let mut spelled = Vec::new();
        spelled.extend_from_slice(&1u64.to_le_bytes());
        put_varint(&mut spelled, edits.len() as u64);
        for e in &edits {
            put_varint(&mut spelled, u64::from(e.seq_offset));
            spelled.push(1);
            spelled.extend_from_slice(e.family);
            put_varint(&mut spelled, e.row.len() as u64);
            spelled.extend_from_slice(e.row);
            put_varint(&mut spelled, 1);
            spelled.extend_from_slice(e.qualifier);
            spelled.extend_from_slice(&e.ts.to_le_bytes());
            spelled.push(e.kind.code());
            put_varint(&mut spelled, 0);
            put_varint(&mut spelled, e.value.len() as u64);
            spelled.extend_from_slice(e.value);
        }
        assert_eq!(spelled.len(), enc.len() + 2 * 5, "the second and fifth rows shared");
        assert_eq!(decode_batch(&spelled), Some(vec![(1, edits)]));
    }
}
