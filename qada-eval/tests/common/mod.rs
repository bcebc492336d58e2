//! Test fixtures of the crates below, the same files included rather than copied: one head's
//! keys and values split as qada-kv would split them (qada-core's tests), and the paths to the
//! real models and the corpus fetched by scripts/setup.sh (qada-model's tests), found from
//! the repository root.
#![allow(dead_code, unused_imports)]

#[path = "../../../qada-core/tests/common/mod.rs"]
mod head;
#[path = "../../../qada-model/tests/common/mod.rs"]
mod models;

pub use head::*;
pub use models::*;
