//! The payload of a WAL record: the edits of one batch to one region.
//!
//! `region u64 LE | count varint | edits`, each edit `seq_offset varint | family_len u8 |
//! family | row_len varint | row | qual_len varint | qualifier | ts u64 LE | type u8 | ttl
//! varint (0 = none, else ttl+1) | value_len varint | value`. An edit's sequence number is the
//! record's first sequence number plus its offset.

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
    let size: usize = edits.iter().map(|e| 32 + e.family.len() + e.row.len() + e.qualifier.len() + e.value.len()).sum();
    let mut out = Vec::with_capacity(16 + size);
    out.extend_from_slice(&region.to_le_bytes());
    put_varint(&mut out, edits.len() as u64);
    for e in edits {
        put_varint(&mut out, u64::from(e.seq_offset));
        out.push(e.family.len() as u8);
        out.extend_from_slice(e.family);
        put_varint(&mut out, e.row.len() as u64);
        out.extend_from_slice(e.row);
        put_varint(&mut out, e.qualifier.len() as u64);
        out.extend_from_slice(e.qualifier);
        out.extend_from_slice(&e.ts.to_le_bytes());
        out.push(e.kind.code());
        put_varint(&mut out, e.ttl_ms.map_or(0, |t| t.saturating_add(1)));
        put_varint(&mut out, e.value.len() as u64);
        out.extend_from_slice(e.value);
    }
    out
}

/// Decodes a payload; `None` if malformed. Edits borrow from the payload.
pub(crate) fn decode_batch(buf: &[u8]) -> Option<(u64, Vec<WalEdit<'_>>)> {
    let region = u64::from_le_bytes(buf.get(..8)?.try_into().ok()?);
    let mut pos = 8;
    let n = get_varint(buf, &mut pos)? as usize;
    let mut edits = Vec::with_capacity(n.min(1 << 16));
    let take = |pos: &mut usize, len: usize| -> Option<&[u8]> {
        let b = buf.get(*pos..pos.checked_add(len)?)?;
        *pos += len;
        Some(b)
    };
    for _ in 0..n {
        let seq_offset = u32::try_from(get_varint(buf, &mut pos)?).ok()?;
        let flen = *buf.get(pos)? as usize;
        pos += 1;
        let family = take(&mut pos, flen)?;
        let rlen = get_varint(buf, &mut pos)? as usize;
        let row = take(&mut pos, rlen)?;
        let qlen = get_varint(buf, &mut pos)? as usize;
        let qualifier = take(&mut pos, qlen)?;
        let ts = u64::from_le_bytes(buf.get(pos..pos + 8)?.try_into().ok()?);
        pos += 8;
        let kind = CellType::from_code(*buf.get(pos)?)?;
        pos += 1;
        let ttl = get_varint(buf, &mut pos)?;
        let vlen = get_varint(buf, &mut pos)? as usize;
        let value = take(&mut pos, vlen)?;
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
    (pos == buf.len()).then_some((region, edits))
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
        assert_eq!(decode_batch(&enc), Some((7, edits)));
        for cut in 0..enc.len() {
            assert_eq!(decode_batch(&enc[..cut]), None);
        }
    }
}
