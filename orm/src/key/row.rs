//! Assembling and taking apart whole row keys: `[salt][partition parts][record type][key
//! parts]`, for the code `#[derive(Entity)]` generates.

use bytes::Bytes;

use super::{
    decode_part, encode_part, md5_of, random_bucket, salt_of, take, KeyError, KeyPart, Modifier, Salt, UidResolver,
    UidSpec, MD5_WIDTH,
};
use crate::entity::{KeyField, Schema};

/// The leading byte of a key or prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaltByte {
    /// The entity's keys have none.
    None,
    /// Known from the key.
    Known(u8),
    /// Any of this many buckets (a random salt, or a prefix that does not determine it).
    Any(u8),
}

/// An encoded key (or key prefix) and its salt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowKey {
    salt: SaltByte,
    body: Vec<u8>,
    /// Length of the partition parts in `body`, when the key reaches past them.
    partition_len: Option<usize>,
}

impl RowKey {
    /// The smallest key after this one: the exclusive form of an inclusive bound.
    pub(crate) fn successor(&self) -> RowKey {
        let mut body = self.body.clone();
        body.push(0);
        RowKey { salt: self.salt, body, partition_len: self.partition_len }
    }

    /// The smallest key after every key that starts with this one: the exclusive end of its
    /// rows; `None` for a key of nothing but `0xFF` bytes, which nothing follows.
    pub(crate) fn group_end(&self) -> Option<RowKey> {
        let body = super::prefix_end(&self.body)?;
        // The successor drops trailing 0xFF bytes and increments the byte before them. If that
        // byte lies inside the partition parts, the end is in another partition: it no longer
        // reaches past partition parts of its own, and its salt (the group's) fixes no bucket.
        let partition_len = self.partition_len.filter(|&n| body.len() > n);
        Some(RowKey { salt: self.salt, body, partition_len })
    }

    /// The encoded partition parts, if the key has any and reaches past them.
    pub(crate) fn partition(&self) -> Option<&[u8]> {
        self.partition_len.filter(|&n| n > 0).and_then(|n| self.body.get(..n))
    }

    /// A prefix that ends right after `schema`'s record-type byte, cut back to the partition
    /// parts: the prefix of every record type's rows in that partition. Other keys as they are.
    pub(crate) fn without_record_type(mut self, schema: &Schema) -> RowKey {
        if let (Some(_), Some(len)) = (schema.record_type, self.partition_len) {
            if self.body.len() == len + 1 {
                self.body.truncate(len);
            }
        }
        self
    }

    /// The salt byte.
    pub fn salt(&self) -> SaltByte {
        self.salt
    }

    /// The key without its salt byte.
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    fn with_salt(&self, salt: Option<u8>) -> Bytes {
        // Sized exactly, so `Bytes::from` takes it as it is (see `exact_bytes`).
        let mut k = Vec::with_capacity(self.body.len() + usize::from(salt.is_some()));
        k.extend(salt);
        k.extend_from_slice(&self.body);
        Bytes::from(k)
    }

    /// The row key a write goes to (a random bucket under a random salt).
    pub fn for_write(&self) -> Bytes {
        match self.salt {
            SaltByte::None => self.with_salt(None),
            SaltByte::Known(b) => self.with_salt(Some(b)),
            SaltByte::Any(n) => self.with_salt(Some(random_bucket(n))),
        }
    }

    /// [`RowKey::for_write`], taking the key: an unsalted key's bytes are not copied.
    pub fn into_write(self) -> Bytes {
        match self.salt {
            SaltByte::None => exact_bytes(self.body),
            _ => self.for_write(),
        }
    }

    /// [`RowKey::candidates`], taking the key: an unsalted key's bytes are not copied.
    pub fn into_candidates(self) -> Vec<Bytes> {
        match self.salt {
            SaltByte::None => vec![exact_bytes(self.body)],
            _ => self.candidates(),
        }
    }

    /// Every row key this key may be stored under: one, or one per bucket.
    pub fn candidates(&self) -> Vec<Bytes> {
        match self.salt {
            SaltByte::None => vec![self.with_salt(None)],
            SaltByte::Known(b) => vec![self.with_salt(Some(b))],
            SaltByte::Any(n) => (0..n).map(|b| self.with_salt(Some(b))).collect(),
        }
    }
}

/// Builds a row key or prefix part by part, in layout order.
#[derive(Debug)]
pub struct KeyBuilder {
    schema: &'static Schema,
    body: Vec<u8>,
    /// End of the partition parts in `body` (before the record type), once reached.
    partition_end: Option<usize>,
    bucket: Option<u8>,
}

impl KeyBuilder {
    /// An empty key of `schema`'s layout.
    pub fn new(schema: &'static Schema) -> Self {
        KeyBuilder { schema, body: Vec::with_capacity(32), partition_end: None, bucket: None }
    }

    /// Appends one part.
    ///
    /// # Errors
    /// As [`encode_part`].
    pub fn part<T: KeyPart>(&mut self, value: &T, field: &KeyField) -> Result<(), KeyError> {
        encode_part(value, &field.spec, &mut self.body)
    }

    /// Appends a part stored as a uid: the uid `uids` gives its name.
    ///
    /// # Errors
    /// As [`UidResolver::id`]; [`KeyError::Layout`] for a part that is not stored as a uid.
    pub fn uid(&mut self, name: &str, field: &KeyField, uids: &dyn UidResolver) -> Result<(), KeyError> {
        let spec = uid_spec_of(field)?;
        let id = uids.id(field.spec.name, spec, name)?;
        if id.len() != usize::from(spec.width) {
            return Err(KeyError::Uid {
                part: field.spec.name,
                reason: format!("a uid of {} bytes where {} were declared", id.len(), spec.width),
            });
        }
        self.body.extend_from_slice(&id);
        Ok(())
    }

    /// Marks the end of the partition parts and appends the record type byte, if any.
    pub fn end_partition(&mut self) {
        self.partition_end = Some(self.body.len());
        self.body.extend(self.schema.record_type);
    }

    /// Supplies the value a bucketed entity's bucket is computed from.
    pub fn bucket(&mut self, value: u64) {
        if let Salt::Bucket { buckets, .. } = self.schema.salt {
            self.bucket = Some(super::bucket_of(value, buckets));
        }
    }

    /// The finished key or prefix. A hash salt is known once the partition parts are (or the
    /// whole key, for an entity without partition parts); a bucket once its field is.
    pub fn finish(self, complete: bool) -> RowKey {
        let salt = match self.schema.salt {
            Salt::None => SaltByte::None,
            Salt::Hash { buckets } => {
                let salted = match self.partition_end {
                    Some(end) if !self.schema.partition.is_empty() => Some(&self.body[..end]),
                    _ if complete => Some(&self.body[..]),
                    _ => None,
                };
                salted.map_or(SaltByte::Any(buckets), |bytes| SaltByte::Known(salt_of(bytes, buckets)))
            }
            Salt::Random { buckets } => SaltByte::Any(buckets),
            Salt::Bucket { buckets, .. } => self.bucket.map_or(SaltByte::Any(buckets), SaltByte::Known),
        };
        RowKey { salt, body: self.body, partition_len: self.partition_end }
    }
}

/// The name the uid of a part stored as a uid stands for.
///
/// # Errors
/// As [`UidResolver::name`]; [`KeyError::Layout`] for a part that is not stored as a uid.
#[doc(hidden)]
pub fn name_of(field: &KeyField, id: &[u8], uids: &dyn UidResolver) -> Result<String, KeyError> {
    uids.name(field.spec.name, uid_spec_of(field)?, id)
}

/// A built key as `Bytes`. `Bytes::from` takes a vector without spare room as it is, but gives
/// one with spare room (a key builder starts with room for 32 bytes) a separate shared header,
/// an allocation per key: giving back the spare room first is cheaper.
fn exact_bytes(mut body: Vec<u8>) -> Bytes {
    body.shrink_to_fit();
    Bytes::from(body)
}

fn uid_spec_of(field: &KeyField) -> Result<&UidSpec, KeyError> {
    field
        .uid
        .as_ref()
        .ok_or_else(|| KeyError::Layout { reason: format!("key part `{}` is not stored as a uid", field.spec.name) })
}

/// Reads a row key part by part, in layout order.
#[derive(Debug)]
pub struct KeyReader<'a> {
    schema: &'static Schema,
    input: &'a [u8],
}

/// The digest a hashed key part left in the row key; the value comes from its column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Digest(pub [u8; MD5_WIDTH]);

impl Digest {
    /// Checks a value restored from its column against the digest in the key.
    ///
    /// # Errors
    /// [`KeyError::Malformed`] if they differ.
    pub fn check<T: KeyPart>(&self, value: &T, field: &KeyField) -> Result<(), KeyError> {
        if md5_of(value, field.spec.name)? != self.0 {
            return Err(KeyError::Malformed {
                part: field.spec.name,
                reason: "the stored value does not hash to the key's digest".into(),
            });
        }
        Ok(())
    }
}

impl<'a> KeyReader<'a> {
    /// Starts reading `row`, past its salt byte.
    ///
    /// # Errors
    /// [`KeyError::Truncated`] for an empty row under a salt.
    pub fn new(schema: &'static Schema, row: &'a [u8]) -> Result<Self, KeyError> {
        let mut input = row;
        if schema.salt.is_some() {
            take(&mut input, 1, "salt")?;
        }
        Ok(KeyReader { schema, input })
    }

    /// Reads one part that is not hashed.
    ///
    /// # Errors
    /// As [`decode_part`]; [`KeyError::Layout`] for a hashed part.
    pub fn part<T: KeyPart>(&mut self, field: &KeyField) -> Result<T, KeyError> {
        if field.spec.modifier == Modifier::Md5 {
            return Err(KeyError::Layout { reason: format!("key part `{}` is hashed", field.spec.name) });
        }
        decode_part(&mut self.input, &field.spec)?.ok_or_else(|| KeyError::Layout {
            reason: format!("key part `{}` has no value in the key", field.spec.name),
        })
    }

    /// Reads a hashed part's digest. Restore the value from its column once the whole key has
    /// been read (so a row of another record type is recognised first), then check it with
    /// [`Digest::check`].
    ///
    /// # Errors
    /// [`KeyError::Truncated`].
    pub fn digest(&mut self, field: &KeyField) -> Result<Digest, KeyError> {
        let mut digest = [0u8; MD5_WIDTH];
        digest.copy_from_slice(take(&mut self.input, MD5_WIDTH, field.spec.name)?);
        Ok(Digest(digest))
    }

    /// Reads the uid of a part stored as a uid. Resolve its name once the whole key has been
    /// read (so a row of another record type is recognised first) with [`UidResolver::name`].
    ///
    /// # Errors
    /// [`KeyError::Truncated`]; [`KeyError::Layout`] for a part that is not stored as a uid.
    pub fn uid(&mut self, field: &KeyField) -> Result<&'a [u8], KeyError> {
        let width = uid_spec_of(field)?.width;
        take(&mut self.input, usize::from(width), field.spec.name)
    }

    /// Reads the record type byte, if the entity has one.
    ///
    /// # Errors
    /// [`KeyError::RecordType`] for a row of another record type.
    pub fn end_partition(&mut self) -> Result<(), KeyError> {
        if let Some(expected) = self.schema.record_type {
            let found = take(&mut self.input, 1, "record type")?[0];
            if found != expected {
                return Err(KeyError::RecordType { expected, found });
            }
        }
        Ok(())
    }

    /// Checks that nothing is left.
    ///
    /// # Errors
    /// [`KeyError::Layout`] for trailing bytes.
    pub fn finish(self) -> Result<(), KeyError> {
        if self.input.is_empty() {
            Ok(())
        } else {
            Err(KeyError::Layout { reason: format!("{} bytes after the last key part", self.input.len()) })
        }
    }
}
