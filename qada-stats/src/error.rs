use std::fmt;

/// Everything that can go wrong in `qada-stats`.
///
/// File errors name the section of the file and the byte offset, so that a user can tell a
/// truncated download from a file made for another model.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StatsError {
    /// A key or query had another length than the moments were built for.
    #[error("dimension mismatch: expected {expected} values, found {found}")]
    DimensionMismatch { expected: usize, found: usize },

    /// Two accumulators or tables that must agree in shape do not.
    #[error("shape mismatch in {what}: expected {expected}, found {found}")]
    ShapeMismatch {
        what: &'static str,
        expected: usize,
        found: usize,
    },

    /// A calibration table has no checkpoint short enough for this prompt.
    #[error(
        "no calibration checkpoint for a prompt of {prompt_len} tokens: need one of at most \
         {prompt_len} - {offset} tokens, the smallest in the table is {smallest} \
         (use a longer prompt, a smaller offset, or a table with a finer stride)"
    )]
    NoCheckpoint {
        prompt_len: usize,
        offset: usize,
        smallest: u64,
    },

    /// Checkpoints must be added in strictly increasing order of token count.
    #[error("checkpoint at {tokens} tokens does not follow the previous one at {previous}")]
    CheckpointOrder { tokens: u64, previous: u64 },

    /// The file ends before a section it announces.
    #[error(
        "truncated file: {what} at byte {offset} needs {needed} bytes, only {available} remain"
    )]
    Truncated {
        what: &'static str,
        offset: usize,
        needed: u64,
        available: usize,
    },

    /// The file does not start with the magic bytes of the expected format.
    #[error("not a {format} file: expected magic {expected:?} at byte 0, found {found:?}")]
    BadMagic {
        format: &'static str,
        expected: String,
        found: String,
    },

    /// The file's format version is not one this build reads.
    #[error("unsupported {format} version {found} (this build reads version {supported})")]
    UnsupportedVersion {
        format: &'static str,
        found: u32,
        supported: u32,
    },

    /// The stored checksum does not match the bytes: the file was modified or damaged.
    #[error(
        "corrupted {format} file: checksum of bytes 0..{covered} is {computed:#018x}, \
         the file stores {stored:#018x}"
    )]
    ChecksumMismatch {
        format: &'static str,
        covered: usize,
        stored: u64,
        computed: u64,
    },

    /// The file was made for another model.
    #[error(
        "file was made for another model: {field} is {found} in the file, {expected} in the model"
    )]
    ModelMismatch {
        field: &'static str,
        found: String,
        expected: String,
    },

    /// A value inside a well-formed file is out of its valid range.
    #[error("invalid {what} at byte {offset}: {reason}")]
    Invalid {
        what: &'static str,
        offset: usize,
        reason: String,
    },

    /// Reading or writing the file failed.
    #[error("i/o error on {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// The `Result` of this crate.
pub type Result<T> = std::result::Result<T, StatsError>;

pub(crate) struct Lossy<'a>(pub &'a [u8]);

impl fmt::Display for Lossy<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for &b in self.0 {
            if b.is_ascii_graphic() || b == b' ' {
                write!(f, "{}", b as char)?;
            } else {
                write!(f, "\\x{b:02x}")?;
            }
        }
        Ok(())
    }
}
