use proptest::prelude::*;
use serde::{Deserialize, Serialize};

use super::*;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Order {
    id: u64,
    customer: String,
    lines: Vec<(String, u32)>,
    note: Option<String>,
}

fn order(lines: usize) -> Order {
    Order {
        id: 42,
        customer: "ada".into(),
        lines: (0..lines).map(|i| (format!("sku-{i:04}"), i as u32)).collect(),
        note: Some("leave at the door".into()),
    }
}

const CODECS: [Codec; 3] = [Codec::MessagePack, Codec::Bincode, Codec::Json];
const COMPRESSIONS: [Compression; 3] = [Compression::None, Compression::Lz4, Compression::Zstd(3)];

fn tag() -> u32 {
    type_tag("Order")
}

#[test]
fn every_codec_and_compression_round_trips() {
    for codec in CODECS {
        for compression in COMPRESSIONS {
            let format = BlobFormat::new(7, codec).compressed(compression, 64);
            let value = order(200);
            let cell = encode(&value, &format, tag()).unwrap();
            let (header, back): (_, Order) = decode(&cell, tag()).unwrap();
            assert_eq!(back, value, "{codec:?} {compression:?}");
            assert_eq!(
                (header.schema_version, header.codec().unwrap(), header.header_version),
                (7, codec, HEADER_VERSION)
            );
            assert_eq!(header.compression().unwrap().name(), compression.name(), "a large payload is compressed");
            if compression != Compression::None {
                assert!(cell.len() < HEADER_LEN + codec.encode(&value).unwrap().len());
            }
        }
    }
}

#[test]
fn small_and_incompressible_payloads_are_stored_as_they_are() {
    let format = BlobFormat::new(1, Codec::MessagePack).compressed(Compression::Zstd(3), 1024);
    let small = encode(&order(2), &format, tag()).unwrap();
    assert_eq!(read_header(&small).unwrap().compression().unwrap(), Compression::None);
    // Pseudo-random bytes do not shrink: stored plain although above the threshold.
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let noise: Vec<u8> = (0..4096)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let format = BlobFormat::new(1, Codec::MessagePack).compressed(Compression::Lz4, 0);
    let cell = seal(&format, tag(), &noise).unwrap();
    assert_eq!(read_header(&cell).unwrap().compression().unwrap(), Compression::None);
    assert_eq!(open(&cell, tag()).unwrap().1, noise);
}

#[test]
fn version_one_headers_checksum_the_payload_alone_and_still_read() {
    let payload = Codec::Bincode.encode(&order(3)).unwrap();
    let mut cell = Vec::new();
    cell.extend_from_slice(&BLOB_MAGIC);
    cell.extend_from_slice(&[1, Codec::Bincode.id(), 0, 0]);
    cell.extend_from_slice(&3u32.to_be_bytes());
    cell.extend_from_slice(&tag().to_be_bytes());
    cell.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    cell.extend_from_slice(&crc32c::crc32c(&payload).to_be_bytes());
    cell.extend_from_slice(&payload);
    let (header, back): (_, Order) = decode(&cell, tag()).unwrap();
    assert_eq!((header.header_version, header.schema_version, back), (1, 3, order(3)));
}

#[test]
fn what_is_wrong_is_named() {
    let format = BlobFormat::new(1, Codec::MessagePack);
    let cell = encode(&order(3), &format, tag()).unwrap();
    let err = |cell: &[u8]| decode::<Order>(cell, tag()).unwrap_err();
    assert_eq!(err(&cell[..10]), BlobError::TooShort { len: 10 });
    assert!(matches!(err(b"JUNKJUNKJUNKJUNKJUNKJUNKJUNK"), BlobError::BadMagic { found } if &found == b"JUNK"));
    assert!(matches!(decode::<Order>(&cell, type_tag("Invoice")), Err(BlobError::TypeMismatch { .. })));
    let with = |at: usize, byte: u8| {
        let mut c = cell.clone();
        c[at] = byte;
        c
    };
    assert_eq!(err(&with(4, 9)), BlobError::HeaderVersion { version: 9 });
    assert_eq!(err(&with(5, 77)), BlobError::UnknownCodec { codec: 77 });
    assert_eq!(err(&with(6, 0x10)), BlobError::UnknownFlags { flags: 0x10 });
    assert!(matches!(err(&with(9, 9)), BlobError::Checksum { .. }), "a damaged schema version is caught");
    assert!(matches!(err(&cell[..cell.len() - 1]), BlobError::Length { .. }));
    // A payload of another type than the one read: the codec says so.
    let number = encode(&5u8, &format, tag()).unwrap();
    assert!(matches!(err(&number), BlobError::Decode { codec: "msgpack", .. }));
    assert!(err(&number).to_string().starts_with("blob payload does not decode as msgpack"));
}

#[test]
fn decompression_bombs_are_refused() {
    let format = BlobFormat::new(1, Codec::MessagePack).compressed(Compression::Lz4, 0);
    let mut cell = seal(&format, tag(), &vec![b'a'; 1000]).unwrap();
    // Claim a decompressed length no LZ4 block of this size can have, and fix the checksum.
    cell[HEADER_LEN..HEADER_LEN + 4].copy_from_slice(&(u32::MAX / 2).to_le_bytes());
    let checksum = header::checksum(&cell, &cell[HEADER_LEN..]);
    cell[20..24].copy_from_slice(&checksum.to_be_bytes());
    assert!(matches!(open(&cell, tag()), Err(BlobError::Compression { compression: "lz4", .. })));
}

#[test]
fn node_trees_are_not_serde_payloads() {
    assert!(matches!(Codec::NodeTree.encode(&1u8), Err(BlobError::Encode { codec: "node-tree", .. })));
    for codec in [Codec::NodeTree, Codec::MessagePack, Codec::Bincode, Codec::Json] {
        assert_eq!(Codec::from_id(codec.id()), Some(codec));
        assert_eq!(Codec::from_name(codec.name()), Some(codec));
    }
}

fn any_order() -> impl Strategy<Value = Order> {
    (
        any::<u64>(),
        ".{0,12}",
        prop::collection::vec(("[a-z0-9-]{0,10}", any::<u32>()), 0..40),
        prop::option::of(".{0,20}"),
    )
        .prop_map(|(id, customer, lines, note)| Order { id, customer, lines, note })
}

fn any_format() -> impl Strategy<Value = BlobFormat> {
    (any::<u32>(), 0..CODECS.len(), 0..COMPRESSIONS.len(), 0usize..300)
        .prop_map(|(v, c, z, above)| BlobFormat::new(v, CODECS[c]).compressed(COMPRESSIONS[z], above))
}

proptest! {
    #[test]
    fn any_value_round_trips_in_any_format(value in any_order(), format in any_format()) {
        let cell = encode(&value, &format, tag()).unwrap();
        let (header, back): (_, Order) = decode(&cell, tag()).unwrap();
        prop_assert_eq!(back, value);
        prop_assert_eq!(header.schema_version, format.schema_version);
    }

    /// Any damaged byte, anywhere in the cell, or a cut, is an error: never a panic, never
    /// another value.
    #[test]
    fn damage_is_always_an_error(value in any_order(), format in any_format(), at in any::<prop::sample::Index>(),
                                 xor in 1u8.., cut in any::<prop::sample::Index>()) {
        let cell = encode(&value, &format, tag()).unwrap();
        let mut damaged = cell.clone();
        damaged[at.index(cell.len())] ^= xor;
        prop_assert!(decode::<Order>(&damaged, tag()).is_err());
        let cut = cut.index(cell.len());
        prop_assert!(decode::<Order>(&cell[..cut], tag()).is_err());
    }
}

/// A header-version-1 cell around `payload` with a valid checksum (version 1 checksums the
/// payload alone), as an older build wrote them.
fn v1_cell(codec: Codec, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut cell = Vec::new();
    cell.extend_from_slice(&BLOB_MAGIC);
    cell.extend_from_slice(&[1, codec.id(), flags, 0]);
    cell.extend_from_slice(&1u32.to_be_bytes());
    cell.extend_from_slice(&tag().to_be_bytes());
    cell.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    cell.extend_from_slice(&crc32c::crc32c(payload).to_be_bytes());
    cell.extend_from_slice(payload);
    cell
}

/// A bincode `u64` length prefix (standard configuration: varint, little-endian).
fn bincode_len(n: u64) -> Vec<u8> {
    match n {
        0..=250 => vec![n as u8],
        251..=0xFFFF => [&[251][..], &(n as u16).to_le_bytes()].concat(),
        0x1_0000..=0xFFFF_FFFF => [&[252][..], &(n as u32).to_le_bytes()].concat(),
        _ => [&[253][..], &n.to_le_bytes()].concat(),
    }
}

#[test]
fn a_bincode_string_length_past_the_payload_is_an_error_not_an_abort() {
    for len in [1u64 << 40, u64::MAX] {
        // `Order { id: 42, customer: <len bytes>, .. }` with three bytes of the customer.
        let payload = [&[42][..], &bincode_len(len), b"ada"].concat();
        let err = decode::<Order>(&v1_cell(Codec::Bincode, 0, &payload), tag()).unwrap_err();
        assert!(matches!(err, BlobError::Decode { codec: "bincode", .. }), "{len}: {err}");
    }
}

#[test]
fn bincode_limits_admit_the_densest_values() {
    // A zero `u128` is one byte that bincode counts as 16: the most a payload byte can claim.
    for n in [0, 1, 255, 256, 4095, 65_536] {
        for value in [0u128, u128::MAX] {
            let values = vec![value; n];
            let cell = encode(&values, &BlobFormat::new(1, Codec::Bincode), tag()).unwrap();
            assert_eq!(decode::<Vec<u128>>(&cell, tag()).unwrap().1, values, "{n} of {value}");
        }
    }
}

/// A length prefix no payload backs: a fixed hostile value, or `extra` bytes more than follow.
#[derive(Debug, Clone, Copy)]
enum Hostile {
    Fixed(u64),
    PastEnd(u16),
}

impl Hostile {
    /// The length stated in front of `follow` bytes: always more than follow.
    fn len(self, follow: usize) -> u64 {
        let past = follow as u64 + 1;
        match self {
            Hostile::Fixed(n) => n.max(past),
            Hostile::PastEnd(extra) => past + u64::from(extra),
        }
    }
}

fn hostile() -> impl Strategy<Value = Hostile> {
    prop_oneof![
        prop::sample::select(vec![1 << 32, 1 << 40, u64::MAX, u64::from(u32::MAX), MAX_PAYLOAD as u64 + 1])
            .prop_map(Hostile::Fixed),
        any::<u64>().prop_map(Hostile::Fixed),
        (0u16..4).prop_map(Hostile::PastEnd),
    ]
}

/// A MessagePack `str 32` or `bin 32` header (lengths above `u32::MAX` saturate).
fn msgpack_len(marker: u8, n: u64) -> Vec<u8> {
    [&[marker][..], &u32::try_from(n).unwrap_or(u32::MAX).to_be_bytes()].concat()
}

fn fixstr(s: &str) -> Vec<u8> {
    [&[0xA0 | s.len() as u8][..], s.as_bytes()].concat()
}

/// Encodes a stated length in a codec's framing.
type LengthPrefix = fn(u64) -> Vec<u8>;

/// An `Order` payload in `codec` with a hostile length at field `at` (the customer, the line
/// count, a line's sku, the note, or the whole map), cut off after a few bytes.
fn hostile_payload(codec: Codec, at: usize, len: Hostile) -> Vec<u8> {
    let (head, prefix, tail): (Vec<u8>, LengthPrefix, Vec<u8>) = match codec {
        Codec::Bincode => match at % 4 {
            0 => (vec![42], bincode_len, b"ada".to_vec()),
            1 => ([&[42, 3][..], b"ada"].concat(), bincode_len, [&[3][..], b"sku", &[1]].concat()),
            2 => ([&[42, 3][..], b"ada", &[1]].concat(), bincode_len, [&b"sku"[..], &[1]].concat()),
            _ => ([&[42, 3][..], b"ada", &[0, 1]].concat(), bincode_len, b"x".to_vec()),
        },
        Codec::MessagePack => {
            let start = [&[0x84][..], &fixstr("id"), &[42], &fixstr("customer")].concat();
            let lines = [&start[..], &fixstr("ada"), &fixstr("lines")].concat();
            match at {
                0 => (start, |n| msgpack_len(0xDB, n), b"ada".to_vec()),
                1 => (start, |n| msgpack_len(0xC6, n), b"ada".to_vec()),
                2 => (lines, |n| msgpack_len(0xDD, n), [&[0x92][..], &fixstr("sku"), &[1]].concat()),
                3 => {
                    let sku = [&lines[..], &[0x91, 0x92]].concat();
                    (sku, |n| msgpack_len(0xDB, n), [&b"sku"[..], &[1]].concat())
                }
                _ => (Vec::new(), |n| msgpack_len(0xDF, n), start[1..].to_vec()),
            }
        }
        // JSON states no lengths: the nearest things are a value that never ends and nesting
        // that never closes.
        _ => {
            let n = len.len(0);
            let text = match at % 3 {
                0 => format!(r#"{{"id":{n},"customer":"ada"#),
                1 => format!(r#"{{"id":{n},"customer":"ada","lines":{}"#, "[".repeat(4096)),
                _ => format!(r#"{{"id":{n}{}"#, "0".repeat(1 + (n % 512) as usize)),
            };
            return text.into_bytes();
        }
    };
    [head, prefix(len.len(tail.len())), tail].concat()
}

/// A cell around `payload` with a valid checksum, compressed as `compression` says, in header
/// version 1 or 2.
fn cell_around(codec: Codec, compression: Compression, v1: bool, payload: &[u8]) -> Vec<u8> {
    let stored = compression.compress(payload).unwrap();
    let flags = BlobHeader::flags_for(compression);
    if v1 {
        v1_cell(codec, flags, &stored)
    } else {
        v2_cell(codec, flags, &stored)
    }
}

/// A header-version-2 cell around `stored` (stored as it is, whatever `flags` say) with a
/// valid checksum, written by the crate's own header writer.
fn v2_cell(codec: Codec, flags: u8, stored: &[u8]) -> Vec<u8> {
    let header = BlobHeader {
        header_version: HEADER_VERSION,
        codec: codec.id(),
        flags,
        schema_version: 1,
        type_tag: tag(),
        payload_len: stored.len() as u32,
        checksum: 0,
    };
    let mut cell = Vec::new();
    header.write(&mut cell, stored);
    cell.extend_from_slice(stored);
    cell
}

/// A zstd frame of one raw block holding `body`, whose header states `content_size`.
fn zstd_frame(content_size: u64, body: &[u8]) -> Vec<u8> {
    let mut frame = vec![0x28, 0xB5, 0x2F, 0xFD];
    // Eight-byte content size, single segment (no window descriptor).
    frame.push(0b1110_0000);
    frame.extend_from_slice(&content_size.to_le_bytes());
    // Last block, raw, `body.len()` bytes.
    let block = 1 | (body.len() as u32) << 3;
    frame.extend_from_slice(&block.to_le_bytes()[..3]);
    frame.extend_from_slice(body);
    frame
}

#[test]
fn hostile_decompressed_sizes_are_errors() {
    let payload = Codec::Bincode.encode(&order(3)).unwrap();
    let (lz4, zstd) = (BlobHeader::flags_for(Compression::Lz4), BlobHeader::flags_for(Compression::Zstd(3)));
    let read = |flags: u8, stored: &[u8]| decode::<Order>(&v2_cell(Codec::Bincode, flags, stored), tag());
    let block = Compression::Lz4.compress(&payload).unwrap().split_off(4);
    // Above the maximum, or above what an LZ4 block of this size can expand to.
    for size in [u32::MAX, MAX_PAYLOAD as u32 + 1, (block.len() as u32 + 4) * 255 + 1] {
        let err = read(lz4, &[&size.to_le_bytes()[..], &block].concat());
        assert!(matches!(err, Err(BlobError::Compression { compression: "lz4", .. })), "lz4 claiming {size}: {err:?}");
    }
    // A zstd frame stating more than the maximum, or one byte more than it holds.
    for size in [1 << 40, u64::MAX - 1, MAX_PAYLOAD as u64 + 1, payload.len() as u64 + 1] {
        let err = read(zstd, &zstd_frame(size, &payload));
        assert!(
            matches!(err, Err(BlobError::Compression { compression: "zstd", .. })),
            "zstd claiming {size}: {err:?}"
        );
    }
    // The same frame stating its true size reads.
    assert_eq!(read(zstd, &zstd_frame(payload.len() as u64, &payload)).unwrap().1, order(3));
}

proptest! {
    /// A payload with a length prefix past its end — 2^32, 2^40, `u64::MAX`, one byte too
    /// many — behind a valid header and checksum, in every codec, compression and header
    /// version, is a decode error: never an abort, a panic or a large allocation.
    #[test]
    fn hostile_length_prefixes_are_decode_errors(codec in 0..CODECS.len(), at in 0..5usize, len in hostile(),
                                                 compression in 0..COMPRESSIONS.len(), v1 in any::<bool>()) {
        let codec = CODECS[codec];
        let payload = hostile_payload(codec, at, len);
        let cell = cell_around(codec, COMPRESSIONS[compression], v1, &payload);
        let result = decode::<Order>(&cell, tag());
        prop_assert!(
            matches!(result, Err(BlobError::Decode { .. })),
            "{:?} at {} {:?}: {:?}", codec, at, len, result
        );
        let versioned = versioned::decode_version::<Order>("Order", 1, codec, &payload);
        prop_assert!(versioned.is_err());
    }
}
