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
    DimensionMismatch {
        /// Length `d` of the moments.
        expected: usize,
        /// Length given.
        found: usize,
    },

    /// Two accumulators or tables that must agree in shape do not.
    #[error("shape mismatch in {what}: expected {expected}, found {found}")]
    ShapeMismatch {
        /// What was measured.
        what: &'static str,
        /// Size required.
        expected: usize,
        /// Size given.
        found: usize,
    },

    /// A calibration table has no checkpoint short enough for this prompt.
    #[error(
        "no calibration checkpoint for a prompt of {prompt_len} tokens: need one of at most \
         {prompt_len} - {offset} tokens, the smallest in the table is {smallest} \
         (use a longer prompt, a smaller offset, or a table with a finer stride)"
    )]
    NoCheckpoint {
        /// Prompt length `T`.
        prompt_len: usize,
        /// Offset asked for: the checkpoint must hold at most `T - offset` keys.
        offset: usize,
        /// Token count of the table's first checkpoint.
        smallest: u64,
    },

    /// Checkpoints must be added in strictly increasing order of token count.
    #[error("checkpoint at {tokens} tokens does not follow the previous one at {previous}")]
    CheckpointOrder {
        /// Token count of the checkpoint added.
        tokens: u64,
        /// Token count of the last checkpoint in the table.
        previous: u64,
    },

    /// The file ends before a section it announces.
    #[error(
        "truncated file: {what} at byte {offset} needs {needed} bytes, only {available} remain"
    )]
    Truncated {
        /// The section being read.
        what: &'static str,
        /// Byte offset of the section.
        offset: usize,
        /// Bytes the section needs.
        needed: u64,
        /// Bytes left in the file.
        available: usize,
    },

    /// The file does not start with the magic bytes of the expected format.
    #[error("not a {format} file: expected magic {expected:?} at byte 0, found {found:?}")]
    BadMagic {
        /// Name of the expected format.
        format: &'static str,
        /// Its magic bytes.
        expected: String,
        /// The first bytes of the file.
        found: String,
    },

    /// The file's format version is not one this build reads.
    #[error("unsupported {format} version {found} (this build reads version {supported})")]
    UnsupportedVersion {
        /// Name of the format.
        format: &'static str,
        /// Version in the file.
        found: u32,
        /// Version this build reads.
        supported: u32,
    },

    /// The stored checksum does not match the bytes: the file was modified or damaged.
    #[error(
        "corrupted {format} file: checksum of bytes 0..{covered} is {computed:#018x}, \
         the file stores {stored:#018x}"
    )]
    ChecksumMismatch {
        /// Name of the format.
        format: &'static str,
        /// Bytes the checksum covers.
        covered: usize,
        /// Checksum stored in the file.
        stored: u64,
        /// Checksum of the bytes read.
        computed: u64,
    },

    /// The file was made for another model.
    #[error(
        "file was made for another model: {field} is {found} in the file, {expected} in the model"
    )]
    ModelMismatch {
        /// Which part of the model signature differs.
        field: &'static str,
        /// Its value in the file.
        found: String,
        /// Its value in the model.
        expected: String,
    },

    /// A value inside a well-formed file is out of its valid range.
    #[error("invalid {what} at byte {offset}: {reason}")]
    Invalid {
        /// The value.
        what: &'static str,
        /// Byte offset of the value (0 for values not read from a file).
        offset: usize,
        /// Why it is invalid.
        reason: String,
    },

    /// Reading or writing the file failed.
    #[error("i/o error on {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The operating system's error.
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
