//! One module per subcommand.

pub mod analyze;
pub mod bench;
pub mod calibrate;
pub mod calibrate_heads;
pub mod calibrate_tau;
pub mod calibration;
pub mod eval;
pub mod generate;
pub mod inspect;
pub mod serve;
pub mod tokenize;
