//! The versioned note of the blob migration tests: version 1 (`NoteV1`, bincode) migrates to
//! version 2 (`Note`, MessagePack), stored in the `notes` table's `d:n` column.

use bytes::Bytes;
use cellar::orm::blob::{self, BlobFormat, Codec};
use cellar::orm::store::{CellMutation, RowMutation};
use cellar::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NoteV1 {
    pub text: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Versioned)]
#[cellar(blob(version = 2, codec = "msgpack", history(1 = NoteV1 via "bincode")))]
pub struct Note {
    pub text: String,
    pub by: String,
}

impl From<NoteV1> for Note {
    fn from(v: NoteV1) -> Self {
        Note { text: v.text, by: "migration".into() }
    }
}

#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "notes")]
pub struct Sticky {
    #[cellar(key)]
    pub id: u64,
    #[cellar(blob, column = "n")]
    pub note: Note,
}

/// The version-1 note row `id` starts with.
pub fn original(id: u64) -> NoteV1 {
    NoteV1 { text: format!("note {id} {}", "x".repeat((id % 13) as usize * 20)) }
}

/// Writes rows `0..rows` of `notes` as version-1 blobs, straight into the store.
pub fn load(db: &Db, rows: u64) {
    db.repo::<Sticky>().unwrap();
    let format = BlobFormat::new(1, Codec::Bincode);
    let rows = (0..rows)
        .map(|id| {
            let put = CellMutation::Put {
                family: Bytes::from_static(b"d"),
                qualifier: Bytes::from_static(b"n"),
                value: blob::encode(&original(id), &format, blob::type_tag("Note")).unwrap().into(),
                timestamp: None,
            };
            RowMutation { row: Bytes::copy_from_slice(&id.to_be_bytes()), mutations: vec![put] }
        })
        .collect();
    db.store().mutate("notes", rows).unwrap();
}
