//! The [`Names`] a repository resolves substituted key parts with: one [`Uids`] per kind its
//! entity's key uses, so both directions are cached for the repository's lifetime.
//!
//! [`Names`] answers in [`KeyError`]s, which carry no store error: the store error behind a
//! failed lookup is kept by the call's [`Resolve`] and handed back by [`Resolve::error`], so a
//! caller reports it as it is (a timeout stays a timeout).

use std::cell::RefCell;
use std::sync::Arc;

use crate::entity::Schema;
use crate::key::{KeyError, Names, Substitute};
use crate::store::Store;
use crate::uid::Uids;
use crate::{Error, Result};

/// The id tables of an entity's substituted key parts.
#[derive(Default)]
pub(crate) struct SubstitutedNames {
    uids: Vec<Uids>,
}

impl SubstitutedNames {
    /// The id tables `schema`'s key parts use (none for most entities).
    pub(crate) fn open(store: &Arc<dyn Store>, schema: &Schema) -> Result<Self> {
        let mut uids: Vec<Uids> = Vec::new();
        for sub in schema.partition.iter().chain(schema.key).filter_map(|f| f.substitute) {
            if !uids.iter().any(|u| u.kind() == sub.kind) {
                uids.push(Uids::open(store.clone(), sub.kind, sub.width)?);
            }
        }
        Ok(SubstitutedNames { uids })
    }

    /// Resolves names for a write: new names get ids.
    pub(crate) fn writing(&self) -> Resolve<'_> {
        Resolve { names: self, assign: true, failure: RefCell::default() }
    }

    /// Resolves names for a read: a name without an id is [`KeyError::Unassigned`].
    pub(crate) fn reading(&self) -> Resolve<'_> {
        Resolve { names: self, assign: false, failure: RefCell::default() }
    }

    fn uids(&self, part: &'static str, sub: &Substitute) -> std::result::Result<&Uids, KeyError> {
        self.uids
            .iter()
            .find(|u| u.kind() == sub.kind)
            .ok_or_else(|| KeyError::Substitution { part, reason: format!("no id table for kind `{}`", sub.kind) })
    }
}

/// [`SubstitutedNames`] for one read or write.
pub(crate) struct Resolve<'a> {
    names: &'a SubstitutedNames,
    assign: bool,
    /// The store error behind a [`KeyError::Substitution`] this call returned.
    failure: RefCell<Option<Error>>,
}

impl Resolve<'_> {
    /// The error to report for a key of `entity` that did not encode: the store error behind
    /// a failed resolution, if there was one, else the key error.
    pub(crate) fn error(&self, entity: &'static str, e: KeyError) -> Error {
        let failure = matches!(e, KeyError::Substitution { .. }).then(|| self.take_failure()).flatten();
        failure.unwrap_or(Error::Key { entity, source: e })
    }

    /// The store error behind a failed resolution, if there was one.
    pub(crate) fn take_failure(&self) -> Option<Error> {
        self.failure.borrow_mut().take()
    }

    fn failed(&self, part: &'static str, e: Error) -> KeyError {
        let reason = e.to_string();
        *self.failure.borrow_mut() = Some(e);
        KeyError::Substitution { part, reason }
    }
}

impl Names for Resolve<'_> {
    fn id(&self, part: &'static str, sub: &Substitute, name: &str) -> std::result::Result<Vec<u8>, KeyError> {
        let uids = self.names.uids(part, sub)?;
        let id = if self.assign { uids.id(name).map(Some) } else { uids.lookup(name) };
        match id {
            Ok(Some(id)) => Ok(id.to_vec()),
            Ok(None) => Err(KeyError::Unassigned { part, name: name.to_string() }),
            Err(e) => Err(self.failed(part, e)),
        }
    }

    fn name(&self, part: &'static str, sub: &Substitute, id: &[u8]) -> std::result::Result<String, KeyError> {
        match self.names.uids(part, sub)?.name(id) {
            Ok(Some(name)) => Ok(name),
            Ok(None) => {
                Err(KeyError::Substitution { part, reason: format!("id {} names nothing", crate::repo::printable(id)) })
            }
            Err(e) => Err(self.failed(part, e)),
        }
    }
}
