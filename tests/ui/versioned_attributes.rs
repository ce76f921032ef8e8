use cellar::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct V1 {
    id: u64,
}

// A version declared twice, and one that is not older than the current version.
#[derive(Serialize, Deserialize, Versioned)]
#[cellar(blob(version = 3, history(1 = V1, 1 = V1, 3 = V1)))]
struct Twice {
    id: u64,
}

// Codecs and compressions by name.
#[derive(Serialize, Deserialize, Versioned)]
#[cellar(blob(version = 2, codec = "protobuf", compress = "brotli", history(1 = V1 via "avro")))]
struct Codecs {
    id: u64,
}

// The version written is required; keys are checked; the legacy version must be declared.
#[derive(Serialize, Deserialize, Versioned)]
#[cellar(blob(codec = "json", colour = "blue"))]
struct NoVersion {
    id: u64,
}

#[derive(Serialize, Deserialize, Versioned)]
#[cellar(blob(version = 2, legacy = 0, history(1 = V1)))]
struct Legacy {
    id: u64,
}

#[derive(Serialize, Deserialize, Versioned)]
#[cellar(blob())]
struct Empty {
    id: u64,
}

fn main() {}
