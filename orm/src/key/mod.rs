//! Row keys: order-preserving encodings of typed key parts, and the row-key layout of an entity.
//!
//! A row key is `[salt or bucket byte][partition parts][record type byte][key parts]`, every
//! piece optional but the parts. Each part is encoded so that comparing encodings byte by byte
//! orders them as the values order (the contract of [`KeyPart`]), which makes range and prefix
//! scans over typed keys possible. Modifiers change that order on purpose: `desc` reverses it,
//! `reversed` byte-reverses fixed-width numbers (sequential ids spread over the key space), and
//! `hash` replaces a value by its 16-byte MD5 (even spread, no order).

mod parts;
mod row;
mod salt;

use md5::{Digest as _, Md5};

pub use parts::Timestamp;
pub use row::{name_of, Digest, KeyBuilder, KeyReader, RowKey, SaltByte};
pub use salt::{bucket_of, random_bucket, salt_of, Salt};

/// A row key that does not encode or decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The key ended in the middle of a part.
    #[error("row key ends inside key part `{part}`")]
    Truncated {
        /// The part being decoded.
        part: &'static str,
    },
    /// A part's bytes are not a valid encoding of its type.
    #[error("key part `{part}` is malformed: {reason}")]
    Malformed {
        /// The part being decoded.
        part: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// A value does not fit its part's declared form (a string longer than `fixed = N`).
    #[error("key part `{part}` does not fit: {reason}")]
    DoesNotFit {
        /// The part being encoded.
        part: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// The row holds another record type of the same table.
    #[error("record type {found} where {expected} was expected")]
    RecordType {
        /// This entity's record type.
        expected: u8,
        /// The row's.
        found: u8,
    },
    /// Bytes are left over after the last part.
    #[error("row key does not match the entity's layout: {reason}")]
    Layout {
        /// What is wrong.
        reason: String,
    },
    /// The name of a part stored as a uid has no uid yet: no row holds it.
    #[error("key part `{part}`: `{name}` has no id yet, so no row holds it")]
    Unassigned {
        /// The part stored as a uid.
        part: &'static str,
        /// The name.
        name: String,
    },
    /// A part stored as a uid could not be resolved (its uid or name could not be read or
    /// assigned, or the key was encoded without a repository to resolve it).
    #[error("key part `{part}` is stored as a uid: {reason}")]
    Uid {
        /// The part stored as a uid.
        part: &'static str,
        /// What went wrong.
        reason: String,
    },
}

/// A `String` key part stored as a fixed-width uid of its name (`#[cellar(key, uid =
/// "hosts")]`): see [`crate::uid`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UidSpec {
    /// The kind of names the uids stand for.
    pub kind: &'static str,
    /// Uid width in bytes (3 to 8).
    pub width: u8,
}

/// Resolves key parts stored as uids: names to uids when keys are encoded, uids to names when
/// they are decoded. A repository supplies one backed by the database's [`crate::uid::Uids`].
pub trait UidResolver {
    /// The uid of `name` for the part `part`: for a write, assigned if new; for a read,
    /// [`KeyError::Unassigned`] if it has none.
    ///
    /// # Errors
    /// [`KeyError::Unassigned`]; [`KeyError::Uid`] when it cannot be resolved.
    fn id(&self, part: &'static str, spec: &UidSpec, name: &str) -> Result<Vec<u8>, KeyError>;

    /// The name `id` stands for.
    ///
    /// # Errors
    /// [`KeyError::Uid`] when it cannot be resolved, or the uid has no name.
    fn name(&self, part: &'static str, spec: &UidSpec, id: &[u8]) -> Result<String, KeyError>;
}

/// The [`UidResolver`] of code without a repository: every part stored as a uid is an error.
#[derive(Debug, Clone, Copy, Default)]
pub struct Unresolved;

impl UidResolver for Unresolved {
    fn id(&self, part: &'static str, _: &UidSpec, _: &str) -> Result<Vec<u8>, KeyError> {
        Err(unresolved(part))
    }

    fn name(&self, part: &'static str, _: &UidSpec, _: &[u8]) -> Result<String, KeyError> {
        Err(unresolved(part))
    }
}

fn unresolved(part: &'static str) -> KeyError {
    KeyError::Uid { part, reason: "its id is resolved by a repository: read and write through one".into() }
}

/// How a part's encoding is framed inside the row key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// Fixed-width types as they are; variable-length types escaped and terminated, so that
    /// another part can follow.
    Delimited,
    /// The last part of a key: variable-length types raw, so that a string prefix scans as a
    /// row-key prefix.
    Last,
    /// Strings padded with zero bytes to exactly `N` bytes (longer is an error; zero bytes
    /// inside the string are rejected, as they could not be told from padding).
    Fixed(u16),
}

/// Changes to a part's natural order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Modifier {
    /// Natural ascending order.
    #[default]
    None,
    /// Descending order: every byte of the encoding inverted. On a timestamp this is
    /// `reverse_ts` (`u64::MAX - ts`, newest first).
    Desc,
    /// The encoding's bytes in reverse order (fixed-width numbers only): consecutive numbers
    /// land far apart.
    Reversed,
    /// The MD5 of the value's encoding in place of the value.
    Md5,
}

/// One part of a row-key layout, as the derive declares it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartSpec {
    /// The field name, for errors and layouts.
    pub name: &'static str,
    /// How the part is framed.
    pub form: Form,
    /// How its order is changed.
    pub modifier: Modifier,
}

impl PartSpec {
    /// A part framed as `form` with no modifier.
    pub const fn new(name: &'static str, form: Form) -> Self {
        PartSpec { name, form, modifier: Modifier::None }
    }

    /// The same part with `modifier`.
    pub const fn with(mut self, modifier: Modifier) -> Self {
        self.modifier = modifier;
        self
    }

    /// The framing actually used: a descending variable-length part is always delimited, as
    /// a raw string's order cannot be inverted byte by byte.
    pub(crate) const fn effective_form(&self, fixed_width: bool) -> Form {
        match (self.modifier, self.form) {
            (Modifier::Desc, Form::Last) if !fixed_width => Form::Delimited,
            (_, form) => form,
        }
    }
}

/// A type that can be part of a row key.
///
/// Contract: `decode` is the inverse of `encode` for every form, and for the forms a type
/// accepts, comparing two encodings byte by byte gives the same order as comparing the values
/// (`Ord`, or the total order of floats). Property tests in this module check both.
pub trait KeyPart: Sized {
    /// Encoded width in bytes if every value has the same width (numbers, bool, timestamps).
    const FIXED_WIDTH: Option<usize>;

    /// How values are encoded, in words, for layouts (framing and modifiers are added there).
    const ENCODING: &'static str;

    /// Appends the encoding of `self` in `form` to `out`.
    ///
    /// # Errors
    /// [`KeyError::DoesNotFit`] if the value cannot take `form` (a string longer than `fixed`).
    fn encode_part(&self, form: Form, part: &'static str, out: &mut Vec<u8>) -> Result<(), KeyError>;

    /// Reads one value in `form` from the front of `input` and advances it.
    ///
    /// # Errors
    /// [`KeyError::Truncated`] or [`KeyError::Malformed`] when the bytes are not an encoding.
    fn decode_part(input: &mut &[u8], form: Form, part: &'static str) -> Result<Self, KeyError>;
}

/// Appends `value` as the part `spec` describes.
///
/// # Errors
/// As [`KeyPart::encode_part`]; also for `reversed` on a variable-length type.
pub fn encode_part<T: KeyPart>(value: &T, spec: &PartSpec, out: &mut Vec<u8>) -> Result<(), KeyError> {
    let form = spec.effective_form(T::FIXED_WIDTH.is_some());
    let start = out.len();
    match spec.modifier {
        Modifier::None => value.encode_part(form, spec.name, out),
        Modifier::Desc => {
            value.encode_part(form, spec.name, out)?;
            out[start..].iter_mut().for_each(|b| *b = !*b);
            Ok(())
        }
        Modifier::Reversed => {
            if T::FIXED_WIDTH.is_none() {
                return Err(KeyError::DoesNotFit {
                    part: spec.name,
                    reason: "`reversed` applies to fixed-width numbers only".into(),
                });
            }
            value.encode_part(form, spec.name, out)?;
            out[start..].reverse();
            Ok(())
        }
        Modifier::Md5 => {
            let mut natural = Vec::new();
            value.encode_part(Form::Last, spec.name, &mut natural)?;
            out.extend_from_slice(&Md5::digest(&natural));
            Ok(())
        }
    }
}

/// Width of an MD5-hashed part.
pub const MD5_WIDTH: usize = 16;

/// Reads the part `spec` describes from the front of `input`. Hashed parts cannot be decoded:
/// they are skipped and `None` is returned (the entity keeps the value in a column).
///
/// # Errors
/// As [`KeyPart::decode_part`].
pub fn decode_part<T: KeyPart>(input: &mut &[u8], spec: &PartSpec) -> Result<Option<T>, KeyError> {
    let form = spec.effective_form(T::FIXED_WIDTH.is_some());
    match spec.modifier {
        Modifier::None => T::decode_part(input, form, spec.name).map(Some),
        Modifier::Md5 => {
            take(input, MD5_WIDTH, spec.name)?;
            Ok(None)
        }
        Modifier::Desc => {
            // Invert a copy of what could belong to this part, decode, and advance `input` by
            // what the decoder consumed.
            let inverted: Vec<u8> = input.iter().map(|b| !b).collect();
            let mut rest = &inverted[..];
            let value = T::decode_part(&mut rest, form, spec.name)?;
            *input = &input[inverted.len() - rest.len()..];
            Ok(Some(value))
        }
        Modifier::Reversed => {
            let width = T::FIXED_WIDTH.ok_or_else(|| KeyError::Malformed {
                part: spec.name,
                reason: "`reversed` applies to fixed-width numbers only".into(),
            })?;
            let mut bytes = take(input, width, spec.name)?.to_vec();
            bytes.reverse();
            let mut rest = &bytes[..];
            T::decode_part(&mut rest, form, spec.name).map(Some)
        }
    }
}

/// The MD5 a hashed part holds for `value`: to check a value restored from its column.
///
/// # Errors
/// As [`KeyPart::encode_part`].
pub fn md5_of<T: KeyPart>(value: &T, part: &'static str) -> Result<[u8; MD5_WIDTH], KeyError> {
    let mut natural = Vec::new();
    value.encode_part(Form::Last, part, &mut natural)?;
    Ok(Md5::digest(&natural).into())
}

/// Splits `n` bytes off the front of `input`.
pub(crate) fn take<'a>(input: &mut &'a [u8], n: usize, part: &'static str) -> Result<&'a [u8], KeyError> {
    if input.len() < n {
        return Err(KeyError::Truncated { part });
    }
    let (head, rest) = input.split_at(n);
    *input = rest;
    Ok(head)
}

/// The exclusive end of a prefix scan: the smallest key after every key starting with
/// `prefix`, or `None` (empty or all-`0xFF` prefix). The engine's definition, shared so both
/// layers agree on prefix ranges.
pub use cellar_engine::prefix_successor as prefix_end;

#[cfg(test)]
mod tests;
