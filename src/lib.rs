//! Cellar facade.
pub use cellar_engine as engine;
