//! One module per subcommand.

pub mod analyze;
pub mod generate;
pub mod inspect;
pub mod tokenize;
