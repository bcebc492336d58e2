//! The CLI's error: a message for the user, made anywhere in the binary.

use std::error::Error;

/// A result whose error is a message for the user.
pub type CliResult<T> = Result<T, Box<dyn Error>>;

/// Make an error from a message.
pub fn fail<T>(msg: impl Into<String>) -> CliResult<T> {
    Err(msg.into().into())
}
