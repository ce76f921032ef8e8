//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod backend;
pub mod blob_orders;
pub mod capture;
pub mod faulty;
pub mod hooked;
pub mod notes;
pub mod orders;
pub mod pausing;
pub mod people;
pub mod proxy;
pub mod raw;
pub mod stepped;
pub mod versions;
