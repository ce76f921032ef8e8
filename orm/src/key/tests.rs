//! The [`KeyPart`] contract, property-tested for every type, form and modifier: decoding
//! inverts encoding (also with bytes of a following part behind it), and byte order of the
//! encodings is the order of the values — reversed for `desc`, and for two-part keys the order
//! of the pairs.

use std::cmp::Ordering;
use std::fmt::Debug;

use proptest::prelude::*;

use super::*;

fn encode<T: KeyPart>(v: &T, spec: &PartSpec) -> Vec<u8> {
    let mut out = Vec::new();
    encode_part(v, spec, &mut out).expect("encodes");
    out
}

/// Round trip with `suffix` standing for the parts that follow.
fn round_trip<T: KeyPart + Debug>(v: &T, spec: &PartSpec, suffix: &[u8], same: impl Fn(&T, &T) -> bool) {
    let mut bytes = encode(v, spec);
    let takes_the_rest = T::FIXED_WIDTH.is_none() && spec.form == Form::Last && spec.modifier != Modifier::Desc;
    let suffix = if takes_the_rest { &[] } else { suffix };
    bytes.extend_from_slice(suffix);
    let mut input = &bytes[..];
    let back: T = decode_part(&mut input, spec).expect("decodes").expect("not hashed");
    assert!(same(&back, v), "{v:?} came back as {back:?} ({spec:?})");
    assert_eq!(input, suffix, "the following parts are left in place");
}

fn same_order<T: KeyPart + Debug>(a: &T, b: &T, spec: &PartSpec, expected: Ordering) {
    let (ea, eb) = (encode(a, spec), encode(b, spec));
    let expected = if spec.modifier == Modifier::Desc { expected.reverse() } else { expected };
    assert_eq!(ea.cmp(&eb), expected, "{a:?} vs {b:?} as {ea:02x?} vs {eb:02x?} ({spec:?})");
}

/// Both properties for one pair of values under every form and modifier a type takes.
fn check<T: KeyPart + Debug>(a: &T, b: &T, suffix: &[u8], cmp: impl Fn(&T, &T) -> Ordering) {
    let same = |x: &T, y: &T| cmp(x, y) == Ordering::Equal;
    let mut specs = vec![PartSpec::new("p", Form::Delimited), PartSpec::new("p", Form::Delimited).with(Modifier::Desc)];
    specs.push(PartSpec::new("p", Form::Last).with(Modifier::Desc));
    if T::FIXED_WIDTH.is_some() {
        specs.push(PartSpec::new("p", Form::Last));
    }
    for spec in &specs {
        round_trip(a, spec, suffix, same);
        same_order(a, b, spec, cmp(a, b));
    }
    if T::FIXED_WIDTH.is_some() {
        round_trip(a, &PartSpec::new("p", Form::Delimited).with(Modifier::Reversed), suffix, same);
    }
    // Two-part keys: a delimited first part keeps pairs in order whatever the second holds.
    let first = PartSpec::new("a", Form::Delimited);
    let last = PartSpec::new("b", Form::Last);
    let pair = |x: &T, y: &[u8]| {
        let mut k = encode(x, &first);
        k.extend(encode(&y.to_vec(), &last));
        k
    };
    let expected = cmp(a, b).then_with(|| suffix.cmp(&b"z"[..]));
    assert_eq!(pair(a, suffix).cmp(&pair(b, b"z")), expected, "pair order for {a:?}, {b:?}");
}

fn any_bytes() -> impl Strategy<Value = Vec<u8>> {
    // Zero and 0xFF bytes are the interesting ones for escaping: make them common.
    prop::collection::vec(prop_oneof![Just(0u8), Just(0xFF), Just(1), any::<u8>()], 0..12)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn unsigned(a: u64, b: u64, c: u8, d: u8, w: u32, x: u32, s in any_bytes()) {
        check(&a, &b, &s, Ord::cmp);
        check(&c, &d, &s, Ord::cmp);
        check(&w, &x, &s, Ord::cmp);
        check(&u128::from(a), &u128::from(b), &s, Ord::cmp);
        check(&(a as u16), &(b as u16), &s, Ord::cmp);
    }

    #[test]
    fn signed(a: i64, b: i64, c: i8, d: i8, w: i32, x: i32, s in any_bytes()) {
        check(&a, &b, &s, Ord::cmp);
        check(&c, &d, &s, Ord::cmp);
        check(&w, &x, &s, Ord::cmp);
        check(&(a as i16), &(b as i16), &s, Ord::cmp);
        check(&i128::from(a), &i128::from(b), &s, Ord::cmp);
    }

    #[test]
    fn floats(a: f64, b: f64, c: f32, d: f32, s in any_bytes()) {
        check(&a, &b, &s, f64::total_cmp);
        check(&c, &d, &s, f32::total_cmp);
    }

    #[test]
    fn bools_and_timestamps(a: bool, b: bool, t: u64, u: u64, s in any_bytes()) {
        check(&a, &b, &s, Ord::cmp);
        check(&Timestamp(t), &Timestamp(u), &s, Ord::cmp);
    }

    #[test]
    fn byte_strings(a in any_bytes(), b in any_bytes(), s in any_bytes()) {
        check(&a, &b, &s, Ord::cmp);
        // Raw when last: decoding takes the rest, and byte order is the strings' order.
        let last = PartSpec::new("p", Form::Last);
        round_trip(&a, &last, &[], |x, y| x == y);
        same_order(&a, &b, &last, a.cmp(&b));
    }

    #[test]
    fn strings(a in "[a-c\u{0}\u{ff}é]{0,8}", b in "[a-c\u{0}\u{ff}é]{0,8}", s in any_bytes()) {
        check(&a, &b, &s, Ord::cmp);
    }

    #[test]
    fn fixed_strings(a in "[a-z]{0,6}", b in "[a-z]{0,6}", s in any_bytes()) {
        let fixed = PartSpec::new("p", Form::Fixed(6));
        round_trip(&a, &fixed, &s, |x, y| x == y);
        same_order(&a, &b, &fixed, a.cmp(&b));
        let desc = fixed.with(Modifier::Desc);
        round_trip(&a, &desc, &s, |x, y| x == y);
        same_order(&a, &b, &desc, a.cmp(&b));
    }

    #[test]
    fn md5_parts_are_skipped_and_checkable(a in any_bytes(), s in any_bytes()) {
        let spec = PartSpec::new("p", Form::Delimited).with(Modifier::Md5);
        let mut bytes = encode(&a, &spec);
        prop_assert_eq!(bytes.len(), MD5_WIDTH);
        prop_assert_eq!(&bytes[..], &md5_of(&a, "p").unwrap()[..]);
        bytes.extend_from_slice(&s);
        let mut input = &bytes[..];
        prop_assert_eq!(decode_part::<Vec<u8>>(&mut input, &spec).unwrap(), None);
        prop_assert_eq!(input, &s[..]);
    }

    #[test]
    fn malformed_bytes_give_errors_not_panics(bytes in any_bytes()) {
        for spec in [PartSpec::new("p", Form::Delimited), PartSpec::new("p", Form::Delimited).with(Modifier::Desc)] {
            let _ = decode_part::<String>(&mut &bytes[..], &spec);
            let _ = decode_part::<u64>(&mut &bytes[..], &spec);
            let _ = decode_part::<bool>(&mut &bytes[..], &spec);
            let _ = decode_part::<f32>(&mut &bytes[..], &spec.with(Modifier::Reversed));
        }
    }
}

#[test]
fn fixed_width_strings_reject_what_they_cannot_hold() {
    let spec = PartSpec::new("code", Form::Fixed(3));
    let mut out = Vec::new();
    assert!(matches!(
        encode_part(&"abcd".to_string(), &spec, &mut out),
        Err(KeyError::DoesNotFit { part: "code", .. })
    ));
    assert!(matches!(encode_part(&"a\0".to_string(), &spec, &mut out), Err(KeyError::DoesNotFit { .. })));
    assert!(encode_part(&"ab".to_string(), &spec, &mut out).is_ok());
    assert_eq!(out, b"ab\0");
}

#[test]
fn truncated_and_invalid_parts_are_named() {
    let spec = PartSpec::new("id", Form::Delimited);
    assert_eq!(decode_part::<u64>(&mut &[1u8, 2][..], &spec), Err(KeyError::Truncated { part: "id" }));
    assert_eq!(decode_part::<String>(&mut &b"ab"[..], &spec), Err(KeyError::Truncated { part: "id" }));
    assert!(matches!(decode_part::<String>(&mut &b"a\0\x07"[..], &spec), Err(KeyError::Malformed { part: "id", .. })));
    assert!(matches!(decode_part::<bool>(&mut &[2u8][..], &spec), Err(KeyError::Malformed { .. })));
    assert!(matches!(
        decode_part::<String>(&mut &[0xC3u8, 0x28, 0, 1][..], &spec),
        Err(KeyError::Malformed { part: "id", .. })
    ));
}

#[test]
fn reverse_timestamps_put_the_newest_first() {
    let spec = PartSpec::new("ts", Form::Delimited).with(Modifier::Desc);
    let older = encode(&Timestamp(1_000), &spec);
    let newer = encode(&Timestamp(2_000), &spec);
    assert!(newer < older);
    assert_eq!(newer, (u64::MAX - 2_000).to_be_bytes());
}

#[test]
fn reversed_numbers_spread_consecutive_ids() {
    let spec = PartSpec::new("id", Form::Delimited).with(Modifier::Reversed);
    assert_eq!(encode(&1u32, &spec), [1, 0, 0, 0]);
    assert_eq!(encode(&2u32, &spec), [2, 0, 0, 0]);
}

#[test]
fn prefix_end_is_the_first_key_after_the_prefix() {
    assert_eq!(prefix_end(b"ab"), Some(b"ac".to_vec()));
    assert_eq!(prefix_end(&[1, 0xFF]), Some(vec![2]));
    assert_eq!(prefix_end(&[0xFF, 0xFF]), None);
    assert_eq!(prefix_end(b""), None);
}
