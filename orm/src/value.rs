//! Cell values: primitives encoded like HBase's `Bytes.toBytes` (big-endian numbers, UTF-8
//! strings, one byte for bool), anything else through serde as MessagePack, and `Option::None`
//! as no cell at all.

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::key::Timestamp;

/// A cell value that does not decode as its field's type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ValueError {
    /// A required field has no cell.
    #[error("missing required column")]
    Missing,
    /// The bytes are not a value of the field's type.
    #[error("{0}")]
    Malformed(String),
}

/// A type stored as one cell, encoded the way HBase's `Bytes.toBytes` does.
///
/// Contract: `from_bytes(&v.to_bytes()) == v`.
pub trait ColumnValue: Sized {
    /// How values are encoded, in words, for layouts.
    const ENCODING: &'static str;

    /// The cell bytes.
    fn to_bytes(&self) -> Vec<u8>;
    /// The value back from cell bytes.
    ///
    /// # Errors
    /// [`ValueError::Malformed`] when the bytes are not an encoding of `Self`.
    fn from_bytes(bytes: &[u8]) -> Result<Self, ValueError>;

    /// The value back from cell bytes of `Self` or of a narrower type `Self` widens (integers
    /// of the same signedness, `f32` for `f64`): how a field's cells read after its type was
    /// widened. Only plain-value fields read this way; versions, counters and key copies keep
    /// their exact widths.
    ///
    /// # Errors
    /// As [`ColumnValue::from_bytes`].
    fn from_widened(bytes: &[u8]) -> Result<Self, ValueError> {
        Self::from_bytes(bytes)
    }
}

fn exact<const N: usize>(bytes: &[u8], what: &str) -> Result<[u8; N], ValueError> {
    bytes.try_into().map_err(|_| ValueError::Malformed(format!("{} bytes, {what} takes {N}", bytes.len())))
}

/// Integers; [`ColumnValue::from_widened`] also reads a narrower integer of the same signedness
/// (sign- or zero-extended), so a field widened from `i32` to `i64` reads the cells written
/// before.
macro_rules! integers {
    ($($t:ty => [$($narrow:ty),*]),* $(,)?) => {$(
        impl ColumnValue for $t {
            const ENCODING: &'static str = "big-endian, as Bytes.toBytes";

            fn to_bytes(&self) -> Vec<u8> {
                self.to_be_bytes().to_vec()
            }
            fn from_bytes(bytes: &[u8]) -> Result<Self, ValueError> {
                exact(bytes, stringify!($t)).map(<$t>::from_be_bytes)
            }
            fn from_widened(bytes: &[u8]) -> Result<Self, ValueError> {
                $(
                    if bytes.len() == std::mem::size_of::<$narrow>() {
                        return exact(bytes, stringify!($narrow)).map(<$narrow>::from_be_bytes).map(<$t>::from);
                    }
                )*
                Self::from_bytes(bytes)
            }
        }
    )*};
}
integers!(
    u8 => [], u16 => [u8], u32 => [u8, u16], u64 => [u8, u16, u32], u128 => [u8, u16, u32, u64],
    i8 => [], i16 => [i8], i32 => [i8, i16], i64 => [i8, i16, i32], i128 => [i8, i16, i32, i64],
);

impl ColumnValue for f32 {
    const ENCODING: &'static str = "big-endian, as Bytes.toBytes";

    fn to_bytes(&self) -> Vec<u8> {
        self.to_be_bytes().to_vec()
    }
    fn from_bytes(bytes: &[u8]) -> Result<Self, ValueError> {
        exact(bytes, "f32").map(f32::from_be_bytes)
    }
}

impl ColumnValue for f64 {
    const ENCODING: &'static str = "big-endian, as Bytes.toBytes";

    fn to_bytes(&self) -> Vec<u8> {
        self.to_be_bytes().to_vec()
    }
    fn from_bytes(bytes: &[u8]) -> Result<Self, ValueError> {
        exact(bytes, "f64").map(f64::from_be_bytes)
    }
    /// Also a 4-byte `f32` cell: a field widened from `f32` reads the cells written before.
    fn from_widened(bytes: &[u8]) -> Result<Self, ValueError> {
        if bytes.len() == 4 {
            return exact(bytes, "f32").map(f32::from_be_bytes).map(f64::from);
        }
        Self::from_bytes(bytes)
    }
}

impl ColumnValue for bool {
    const ENCODING: &'static str = "1 byte, 0xFF or 0x00";

    /// `0xFF` for true, `0x00` for false, as HBase writes them.
    fn to_bytes(&self) -> Vec<u8> {
        vec![if *self { 0xFF } else { 0 }]
    }
    fn from_bytes(bytes: &[u8]) -> Result<Self, ValueError> {
        exact::<1>(bytes, "bool").map(|[b]| b != 0)
    }
}

impl ColumnValue for String {
    const ENCODING: &'static str = "UTF-8";

    fn to_bytes(&self) -> Vec<u8> {
        self.as_bytes().to_vec()
    }
    fn from_bytes(bytes: &[u8]) -> Result<Self, ValueError> {
        String::from_utf8(bytes.to_vec()).map_err(|e| ValueError::Malformed(format!("not UTF-8: {e}")))
    }
}

impl ColumnValue for Vec<u8> {
    const ENCODING: &'static str = "raw bytes";

    fn to_bytes(&self) -> Vec<u8> {
        self.clone()
    }
    fn from_bytes(bytes: &[u8]) -> Result<Self, ValueError> {
        Ok(bytes.to_vec())
    }
}

impl ColumnValue for bytes::Bytes {
    const ENCODING: &'static str = "raw bytes";

    fn to_bytes(&self) -> Vec<u8> {
        self.to_vec()
    }
    fn from_bytes(bytes: &[u8]) -> Result<Self, ValueError> {
        Ok(bytes::Bytes::copy_from_slice(bytes))
    }
}

impl ColumnValue for Timestamp {
    const ENCODING: &'static str = "milliseconds, big-endian";

    fn to_bytes(&self) -> Vec<u8> {
        self.0.to_bytes()
    }
    fn from_bytes(bytes: &[u8]) -> Result<Self, ValueError> {
        u64::from_bytes(bytes).map(Timestamp)
    }
}

/// A field stored in at most one cell: a [`ColumnValue`], or an `Option` of one (`None` = no
/// cell).
pub trait Column: Sized {
    /// How the cell is encoded, in words, for layouts.
    const ENCODING: &'static str;

    /// The cell to write, `None` for none.
    fn encode_cell(&self) -> Option<Vec<u8>>;
    /// The field from its cell, or from its absence.
    ///
    /// # Errors
    /// [`ValueError::Missing`] for an absent required field; [`ValueError::Malformed`].
    fn decode_cell(cell: Option<&[u8]>) -> Result<Self, ValueError>;
    /// As [`Column::decode_cell`], also reading the cells of a narrower type
    /// ([`ColumnValue::from_widened`]).
    ///
    /// # Errors
    /// As [`Column::decode_cell`].
    fn decode_widened(cell: Option<&[u8]>) -> Result<Self, ValueError> {
        Self::decode_cell(cell)
    }
}

impl<T: ColumnValue> Column for T {
    const ENCODING: &'static str = T::ENCODING;

    fn encode_cell(&self) -> Option<Vec<u8>> {
        Some(self.to_bytes())
    }
    fn decode_cell(cell: Option<&[u8]>) -> Result<Self, ValueError> {
        T::from_bytes(cell.ok_or(ValueError::Missing)?)
    }
    fn decode_widened(cell: Option<&[u8]>) -> Result<Self, ValueError> {
        T::from_widened(cell.ok_or(ValueError::Missing)?)
    }
}

impl<T: ColumnValue> Column for Option<T> {
    const ENCODING: &'static str = T::ENCODING;

    fn encode_cell(&self) -> Option<Vec<u8>> {
        self.as_ref().map(T::to_bytes)
    }
    fn decode_cell(cell: Option<&[u8]>) -> Result<Self, ValueError> {
        cell.map(T::from_bytes).transpose()
    }
    fn decode_widened(cell: Option<&[u8]>) -> Result<Self, ValueError> {
        cell.map(T::from_widened).transpose()
    }
}

/// MessagePack with field names (tolerant of added optional fields) for `#[cellar(serde)]`.
pub fn to_msgpack<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, ValueError> {
    rmp_serde::to_vec_named(value).map_err(|e| ValueError::Malformed(format!("MessagePack encoding failed: {e}")))
}

/// Inverse of [`to_msgpack`].
///
/// # Errors
/// [`ValueError::Malformed`] when the bytes are not MessagePack of `T`.
pub fn from_msgpack<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ValueError> {
    rmp_serde::from_slice(bytes).map_err(|e| ValueError::Malformed(format!("not MessagePack of this type: {e}")))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn numbers_are_big_endian_like_hbase() {
        assert_eq!(1i64.to_bytes(), [0, 0, 0, 0, 0, 0, 0, 1]);
        assert_eq!((-1i32).to_bytes(), [0xFF; 4]);
        assert_eq!(1.5f64.to_bytes(), 1.5f64.to_bits().to_be_bytes());
        assert_eq!(true.to_bytes(), [0xFF]);
        assert_eq!("é".to_string().to_bytes(), "é".as_bytes());
    }

    #[test]
    fn narrower_cells_of_the_same_signedness_widen() {
        assert_eq!(i64::from_widened(&(-5i32).to_bytes()), Ok(-5));
        assert_eq!(i64::from_widened(&(-5i16).to_bytes()), Ok(-5));
        assert_eq!(i32::from_widened(&i8::MIN.to_bytes()), Ok(-128));
        assert_eq!(u64::from_widened(&u32::MAX.to_bytes()), Ok(u64::from(u32::MAX)));
        assert_eq!(u16::from_widened(&[0xFF]), Ok(255));
        assert_eq!(i128::from_widened(&i64::MIN.to_bytes()), Ok(i128::from(i64::MIN)));
        assert_eq!(f64::from_widened(&1.5f32.to_bytes()), Ok(1.5));
        assert_eq!(<Option<i64> as Column>::decode_widened(Some(&7i32.to_bytes())), Ok(Some(7)));
        // Narrowing never reads: the bytes of a wider value do not fit.
        assert!(matches!(i32::from_widened(&1i64.to_bytes()), Err(ValueError::Malformed(_))));
        assert!(matches!(f32::from_widened(&1.5f64.to_bytes()), Err(ValueError::Malformed(_))));
        assert!(matches!(i64::from_widened(&[1, 2, 3]), Err(ValueError::Malformed(_))));
        // The exact decoding stays exact: a version or counter of the wrong width is an error.
        assert!(matches!(u64::from_bytes(&[1, 2]), Err(ValueError::Malformed(_))));
        assert!(matches!(f64::from_bytes(&1.5f32.to_bytes()), Err(ValueError::Malformed(_))));
    }

    #[test]
    fn bad_cells_are_errors() {
        assert!(matches!(i64::from_bytes(&[1, 2]), Err(ValueError::Malformed(_))));
        assert!(matches!(String::from_bytes(&[0xC3, 0x28]), Err(ValueError::Malformed(_))));
        assert_eq!(<u32 as Column>::decode_cell(None), Err(ValueError::Missing));
        assert_eq!(<Option<u32> as Column>::decode_cell(None), Ok(None));
        assert!(from_msgpack::<Vec<u32>>(&[0xC1]).is_err());
    }

    proptest! {
        #[test]
        fn values_round_trip(a: i64, b: u16, c: f64, d: bool, s: String, v: Vec<u8>, o: Option<i32>) {
            prop_assert_eq!(i64::from_bytes(&a.to_bytes()), Ok(a));
            prop_assert_eq!(u16::from_bytes(&b.to_bytes()), Ok(b));
            prop_assert_eq!(f64::from_bytes(&c.to_bytes()).map(f64::to_bits), Ok(c.to_bits()));
            prop_assert_eq!(bool::from_bytes(&d.to_bytes()), Ok(d));
            prop_assert_eq!(String::from_bytes(&s.to_bytes()), Ok(s.clone()));
            prop_assert_eq!(Vec::<u8>::from_bytes(&v.to_bytes()), Ok(v.clone()));
            prop_assert_eq!(Option::<i32>::decode_cell(o.encode_cell().as_deref()), Ok(o));
            let pair = (s, v);
            prop_assert_eq!(from_msgpack::<(String, Vec<u8>)>(&to_msgpack(&pair).unwrap()), Ok(pair));
        }
    }
}
