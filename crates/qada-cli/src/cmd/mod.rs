//! One module per subcommand.

pub mod generate;
pub mod inspect;
pub mod tokenize;
