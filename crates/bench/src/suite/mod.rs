//! The benchmarks, one module per family.

pub mod create;
pub mod logless;
pub mod mutate;
pub mod namespace;
pub mod reads;
pub mod recovery;
pub mod search;
