//! The criteria, one module each.

pub mod approx;
pub mod bound;
pub mod by_name;
pub mod dense;
pub mod dense_below;
pub mod hybrid;
pub mod mixture;
pub mod oracle;
pub mod pages;
pub mod per_head;
pub mod static_heads;
pub mod window;
