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
