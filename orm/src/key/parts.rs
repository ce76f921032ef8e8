//! [`KeyPart`] for the types a key can hold: unsigned integers big-endian; signed integers
//! with the sign bit flipped; floats in their total order; bool; timestamps; strings and byte
//! strings escaped and terminated, raw when last, or zero-padded to a fixed width.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{take, Form, KeyError, KeyPart};

/// Escape for a zero byte inside a delimited string: `00 FF`. The terminator is `00 01`, which
/// sorts below every escaped or ordinary byte, so a string sorts before its extensions.
const ESCAPED_ZERO: u8 = 0xFF;
const TERMINATOR: u8 = 0x01;

macro_rules! unsigned {
    ($($t:ty),*) => {$(
        impl KeyPart for $t {
            const FIXED_WIDTH: Option<usize> = Some(std::mem::size_of::<$t>());
            const ENCODING: &'static str = "big-endian";

            fn encode_part(&self, _: Form, _: &'static str, out: &mut Vec<u8>) -> Result<(), KeyError> {
                out.extend_from_slice(&self.to_be_bytes());
                Ok(())
            }

            fn decode_part(input: &mut &[u8], _: Form, part: &'static str) -> Result<Self, KeyError> {
                let mut a = [0u8; std::mem::size_of::<$t>()];
                a.copy_from_slice(take(input, std::mem::size_of::<$t>(), part)?);
                Ok(<$t>::from_be_bytes(a))
            }
        }
    )*};
}
unsigned!(u8, u16, u32, u64, u128);

macro_rules! signed {
    ($($t:ty => $u:ty),*) => {$(
        impl KeyPart for $t {
            const FIXED_WIDTH: Option<usize> = Some(std::mem::size_of::<$t>());
            const ENCODING: &'static str = "big-endian, sign bit flipped";

            fn encode_part(&self, form: Form, part: &'static str, out: &mut Vec<u8>) -> Result<(), KeyError> {
                // Flipping the sign bit puts negatives (now 0...) below non-negatives (1...).
                ((*self as $u) ^ (1 << (<$u>::BITS - 1))).encode_part(form, part, out)
            }

            fn decode_part(input: &mut &[u8], form: Form, part: &'static str) -> Result<Self, KeyError> {
                let u = <$u>::decode_part(input, form, part)?;
                Ok((u ^ (1 << (<$u>::BITS - 1))) as $t)
            }
        }
    )*};
}
signed!(i8 => u8, i16 => u16, i32 => u32, i64 => u64, i128 => u128);

macro_rules! float {
    ($($t:ty => $u:ty),*) => {$(
        impl KeyPart for $t {
            const FIXED_WIDTH: Option<usize> = Some(std::mem::size_of::<$t>());
            const ENCODING: &'static str = "IEEE 754 in total order";

            fn encode_part(&self, form: Form, part: &'static str, out: &mut Vec<u8>) -> Result<(), KeyError> {
                // IEEE 754 total order: negatives have every bit inverted, the rest only the
                // sign bit. -0.0 sorts just below 0.0; NaNs at the ends, by sign.
                let bits = self.to_bits();
                let sign = 1 << (<$u>::BITS - 1);
                let ordered = if bits & sign != 0 { !bits } else { bits | sign };
                ordered.encode_part(form, part, out)
            }

            fn decode_part(input: &mut &[u8], form: Form, part: &'static str) -> Result<Self, KeyError> {
                let ordered = <$u>::decode_part(input, form, part)?;
                let sign = 1 << (<$u>::BITS - 1);
                let bits = if ordered & sign != 0 { ordered & !sign } else { !ordered };
                Ok(<$t>::from_bits(bits))
            }
        }
    )*};
}
float!(f32 => u32, f64 => u64);

impl KeyPart for bool {
    const FIXED_WIDTH: Option<usize> = Some(1);
    const ENCODING: &'static str = "0 or 1";

    fn encode_part(&self, _: Form, _: &'static str, out: &mut Vec<u8>) -> Result<(), KeyError> {
        out.push(u8::from(*self));
        Ok(())
    }

    fn decode_part(input: &mut &[u8], _: Form, part: &'static str) -> Result<Self, KeyError> {
        match take(input, 1, part)?[0] {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(KeyError::Malformed { part, reason: format!("{b:#04x} is not a bool") }),
        }
    }
}

/// A point in time with millisecond precision (milliseconds since the Unix epoch), the unit of
/// HBase and Bigtable cell timestamps. Encoded in keys and values as a big-endian `u64`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, serde::Serialize, serde::Deserialize)]
pub struct Timestamp(pub u64);

impl Timestamp {
    /// The current time (the epoch if the clock is set before it).
    pub fn now() -> Self {
        SystemTime::now().into()
    }

    /// The time `ms` milliseconds after the epoch.
    pub const fn from_millis(ms: u64) -> Self {
        Timestamp(ms)
    }

    /// Milliseconds since the epoch.
    pub const fn as_millis(self) -> u64 {
        self.0
    }
}

impl From<SystemTime> for Timestamp {
    fn from(t: SystemTime) -> Self {
        let ms = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis());
        Timestamp(u64::try_from(ms).unwrap_or(u64::MAX))
    }
}

impl From<Timestamp> for SystemTime {
    fn from(t: Timestamp) -> Self {
        UNIX_EPOCH + Duration::from_millis(t.0)
    }
}

impl KeyPart for Timestamp {
    const FIXED_WIDTH: Option<usize> = Some(8);
    const ENCODING: &'static str = "milliseconds, big-endian";

    fn encode_part(&self, form: Form, part: &'static str, out: &mut Vec<u8>) -> Result<(), KeyError> {
        self.0.encode_part(form, part, out)
    }

    fn decode_part(input: &mut &[u8], form: Form, part: &'static str) -> Result<Self, KeyError> {
        u64::decode_part(input, form, part).map(Timestamp)
    }
}

fn encode_bytes(bytes: &[u8], form: Form, part: &'static str, out: &mut Vec<u8>) -> Result<(), KeyError> {
    match form {
        Form::Last => out.extend_from_slice(bytes),
        Form::Delimited => {
            out.reserve(bytes.len() + 2);
            for &b in bytes {
                out.push(b);
                if b == 0 {
                    out.push(ESCAPED_ZERO);
                }
            }
            out.extend_from_slice(&[0, TERMINATOR]);
        }
        Form::Fixed(width) => {
            let width = usize::from(width);
            if bytes.len() > width {
                return Err(KeyError::DoesNotFit {
                    part,
                    reason: format!("{} bytes, fixed width {width}", bytes.len()),
                });
            }
            if bytes.contains(&0) {
                return Err(KeyError::DoesNotFit { part, reason: "a fixed-width part cannot hold zero bytes".into() });
            }
            out.extend_from_slice(bytes);
            out.resize(out.len() + width - bytes.len(), 0);
        }
    }
    Ok(())
}

fn decode_bytes(input: &mut &[u8], form: Form, part: &'static str) -> Result<Vec<u8>, KeyError> {
    match form {
        Form::Last => Ok(take(input, input.len(), part)?.to_vec()),
        Form::Fixed(width) => {
            let raw = take(input, usize::from(width), part)?;
            let end = raw.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
            Ok(raw[..end].to_vec())
        }
        Form::Delimited => {
            let mut out = Vec::new();
            let mut i = 0;
            loop {
                match input.get(i) {
                    None => return Err(KeyError::Truncated { part }),
                    Some(0) => match input.get(i + 1) {
                        Some(&ESCAPED_ZERO) => out.push(0),
                        Some(&TERMINATOR) => {
                            *input = &input[i + 2..];
                            return Ok(out);
                        }
                        Some(b) => {
                            return Err(KeyError::Malformed { part, reason: format!("zero byte followed by {b:#04x}") })
                        }
                        None => return Err(KeyError::Truncated { part }),
                    },
                    Some(&b) => {
                        out.push(b);
                        i += 1;
                        continue;
                    }
                }
                i += 2;
            }
        }
    }
}

impl KeyPart for Vec<u8> {
    const FIXED_WIDTH: Option<usize> = None;
    const ENCODING: &'static str = "bytes";

    fn encode_part(&self, form: Form, part: &'static str, out: &mut Vec<u8>) -> Result<(), KeyError> {
        encode_bytes(self, form, part, out)
    }

    fn decode_part(input: &mut &[u8], form: Form, part: &'static str) -> Result<Self, KeyError> {
        decode_bytes(input, form, part)
    }
}

impl KeyPart for String {
    const FIXED_WIDTH: Option<usize> = None;
    const ENCODING: &'static str = "UTF-8";

    fn encode_part(&self, form: Form, part: &'static str, out: &mut Vec<u8>) -> Result<(), KeyError> {
        encode_bytes(self.as_bytes(), form, part, out)
    }

    fn decode_part(input: &mut &[u8], form: Form, part: &'static str) -> Result<Self, KeyError> {
        String::from_utf8(decode_bytes(input, form, part)?)
            .map_err(|e| KeyError::Malformed { part, reason: format!("not UTF-8: {e}") })
    }
}
