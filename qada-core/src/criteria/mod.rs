//! The criteria, one module each.

pub mod approx;
pub mod dense;
pub mod oracle;
pub mod static_heads;
pub mod window;
