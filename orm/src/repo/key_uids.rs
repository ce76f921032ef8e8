//! The [`UidResolver`] a repository resolves key parts stored as uids with: one [`Uids`] per
//! kind its entity's key uses, so both directions are cached for the repository's lifetime.
//!
//! [`UidResolver`] answers in [`KeyError`]s, which carry no store error: the store error
//! behind a failed lookup is kept by the call's [`Resolve`] and handed back by
//! [`Resolve::error`], so a caller reports it as it is (a timeout stays a timeout).

use std::cell::RefCell;
use std::sync::Arc;

use bytes::Bytes;

use crate::entity::Schema;
use crate::key::{KeyError, UidResolver, UidSpec};
use crate::store::{AsyncStore, Store};
use crate::uid::Uids;
use crate::{Error, Result};

/// The [`Uids`] of an entity's key parts stored as uids.
#[derive(Default)]
pub(crate) struct KeyUids {
    uids: Vec<Uids>,
}

impl KeyUids {
    /// The [`Uids`] `schema`'s key parts use (none for most entities).
    pub(crate) fn open(store: &Arc<dyn Store>, schema: &Schema) -> Result<Self> {
        let mut uids: Vec<Uids> = Vec::new();
        for spec in schema.partition.iter().chain(schema.key).filter_map(|f| f.uid) {
            if !uids.iter().any(|u| u.kind() == spec.kind) {
                uids.push(Uids::open(store.clone(), spec.kind, spec.width)?);
            }
        }
        Ok(KeyUids { uids })
    }

    /// Resolves, through `store`, the names stored as uids that `encode` asks for and the cache
    /// does not hold (assigning ids to new ones if `assign`), so that encoding then answers
    /// from the cache: an asynchronous caller resolves them with awaited calls, not with the
    /// synchronous ones a resolver makes. False if a name has no id (only when not
    /// `assign`ing): no row holds the key, and the caller answers so without encoding it.
    ///
    /// # Errors
    /// Store errors.
    pub(crate) async fn warm(
        &self,
        store: &dyn AsyncStore,
        assign: bool,
        encode: impl Fn(&dyn UidResolver) -> std::result::Result<(), KeyError>,
    ) -> Result<bool> {
        if self.uids.is_empty() {
            return Ok(true);
        }
        // Each round resolves one name the cache lacked, so the rounds end.
        loop {
            let probe = Probe { key_uids: self, missing: RefCell::default() };
            let _ = encode(&probe);
            let Some(Missing::Id(uids, name)) = probe.missing.take() else { return Ok(true) };
            if assign {
                uids.id_via(store, &name).await?;
            } else if uids.lookup_via(store, &name).await?.is_none() {
                return Ok(false);
            }
        }
    }

    /// True if no key part is stored as a uid.
    pub(crate) fn is_empty(&self) -> bool {
        self.uids.is_empty()
    }

    /// The first id `decode` asks the name of that the cache lacks, with the kind's ids: what
    /// an asynchronous scan resolves, with an awaited call, before it decodes a row.
    pub(crate) fn missing_name(&self, decode: impl FnOnce(&dyn UidResolver)) -> Option<(&Uids, Bytes)> {
        let probe = Probe { key_uids: self, missing: RefCell::default() };
        decode(&probe);
        match probe.missing.take() {
            Some(Missing::Name(uids, id)) => Some((uids, id)),
            _ => None,
        }
    }

    /// Resolves names for a write: new names get uids.
    pub(crate) fn writing(&self) -> Resolve<'_> {
        Resolve { key_uids: self, assign: true, failure: RefCell::default() }
    }

    /// Resolves names for a read: a name without a uid is [`KeyError::Unassigned`].
    pub(crate) fn reading(&self) -> Resolve<'_> {
        Resolve { key_uids: self, assign: false, failure: RefCell::default() }
    }

    fn of_kind(&self, part: &'static str, spec: &UidSpec) -> std::result::Result<&Uids, KeyError> {
        self.uids
            .iter()
            .find(|u| u.kind() == spec.kind)
            .ok_or_else(|| KeyError::Uid { part, reason: format!("no uids opened for kind `{}`", spec.kind) })
    }
}

/// [`KeyUids`] for one read or write.
pub(crate) struct Resolve<'a> {
    key_uids: &'a KeyUids,
    assign: bool,
    /// The store error behind a [`KeyError::Uid`] this call returned.
    failure: RefCell<Option<Error>>,
}

impl Resolve<'_> {
    /// The error to report for a key of `entity` that did not encode: the store error behind
    /// a failed resolution, if there was one, else the key error.
    pub(crate) fn error(&self, entity: &'static str, e: KeyError) -> Error {
        let failure = matches!(e, KeyError::Uid { .. }).then(|| self.take_failure()).flatten();
        failure.unwrap_or(Error::Key { entity, source: e })
    }

    /// The store error behind a failed resolution, if there was one.
    pub(crate) fn take_failure(&self) -> Option<Error> {
        self.failure.borrow_mut().take()
    }

    fn failed(&self, part: &'static str, e: Error) -> KeyError {
        let reason = e.to_string();
        *self.failure.borrow_mut() = Some(e);
        KeyError::Uid { part, reason }
    }
}

/// A resolver that answers from the cache alone and notes the first name or id it lacks.
struct Probe<'a> {
    key_uids: &'a KeyUids,
    missing: RefCell<Option<Missing<'a>>>,
}

/// What a [`Probe`] lacked.
enum Missing<'a> {
    /// The id of a name.
    Id(&'a Uids, String),
    /// The name of an id.
    Name(&'a Uids, Bytes),
}

impl UidResolver for Probe<'_> {
    fn id(&self, part: &'static str, spec: &UidSpec, name: &str) -> std::result::Result<Vec<u8>, KeyError> {
        let uids = self.key_uids.of_kind(part, spec)?;
        match uids.cached_id(name) {
            Some(id) => Ok(id.to_vec()),
            None => {
                *self.missing.borrow_mut() = Some(Missing::Id(uids, name.to_string()));
                Err(KeyError::Unassigned { part, name: name.to_string() })
            }
        }
    }

    fn name(&self, part: &'static str, spec: &UidSpec, id: &[u8]) -> std::result::Result<String, KeyError> {
        let uids = self.key_uids.of_kind(part, spec)?;
        match uids.cached_name(id) {
            Some(name) => Ok(name),
            None => {
                *self.missing.borrow_mut() = Some(Missing::Name(uids, Bytes::copy_from_slice(id)));
                Err(KeyError::Uid { part, reason: "not cached".into() })
            }
        }
    }
}

impl UidResolver for Resolve<'_> {
    fn id(&self, part: &'static str, spec: &UidSpec, name: &str) -> std::result::Result<Vec<u8>, KeyError> {
        let uids = self.key_uids.of_kind(part, spec)?;
        let id = if self.assign { uids.id(name).map(Some) } else { uids.lookup(name) };
        match id {
            Ok(Some(id)) => Ok(id.to_vec()),
            Ok(None) => Err(KeyError::Unassigned { part, name: name.to_string() }),
            Err(e) => Err(self.failed(part, e)),
        }
    }

    fn name(&self, part: &'static str, spec: &UidSpec, id: &[u8]) -> std::result::Result<String, KeyError> {
        match self.key_uids.of_kind(part, spec)?.name(id) {
            Ok(Some(name)) => Ok(name),
            Ok(None) => Err(KeyError::Uid { part, reason: format!("id {} names nothing", crate::repo::printable(id)) }),
            Err(e) => Err(self.failed(part, e)),
        }
    }
}
