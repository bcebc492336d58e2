/// Everything that can go wrong in `qada-model`.
///
/// File errors name what was being read (a key, a tensor) and the byte offset.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// Reading a file failed.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },

    /// Not a GGUF file.
    #[error("not a GGUF file: expected magic \"GGUF\" at byte 0, found {found:?}")]
    BadMagic {
        /// The first bytes found.
        found: String,
    },

    /// A GGUF version this reader does not support.
    #[error("unsupported GGUF version {0} (this reader supports versions 2 and 3)")]
    UnsupportedVersion(u32),

    /// The file ends before something it announces.
    #[error("truncated GGUF file: {what} at byte {offset} needs {needed} bytes, the file has {available} left")]
    Truncated {
        /// What was being read.
        what: String,
        /// Byte offset where it starts.
        offset: u64,
        /// Bytes it needs.
        needed: u64,
        /// Bytes the file has left.
        available: u64,
    },

    /// A well-formed field with a value that cannot be right.
    #[error("invalid GGUF file: {what} at byte {offset}: {reason}")]
    Invalid {
        /// What was being read.
        what: String,
        /// Byte offset in the file.
        offset: u64,
        /// Why the value cannot be right.
        reason: String,
    },

    /// A hyper-parameter read from the metadata has a value no decoder can have.
    #[error("metadata key {key:?} = {found}: {reason}")]
    BadMetadata {
        /// The key, or keys joined by " and " when their values contradict each other.
        key: String,
        /// The value(s) found.
        found: String,
        /// What the value must be, and what its being otherwise suggests.
        reason: String,
    },

    /// A slice handed to a product or a layer has another length than its shape implies.
    #[error("{what}: expected {expected}, found {found}")]
    Length {
        /// What was measured.
        what: String,
        /// The length it must have.
        expected: String,
        /// The length it has.
        found: usize,
    },

    /// A metadata key the model needs is absent.
    #[error("missing metadata key {0:?} in the GGUF file")]
    MissingKey(String),

    /// A metadata key has another type than expected.
    #[error("metadata key {key:?} has type {found}, expected {expected}")]
    WrongType {
        /// The key.
        key: String,
        /// The type the model needs.
        expected: &'static str,
        /// The type in the file.
        found: &'static str,
    },

    /// A tensor the model needs is absent.
    #[error("missing tensor {0:?} in the GGUF file")]
    MissingTensor(String),

    /// A tensor has other dimensions than the hyper-parameters imply.
    #[error("tensor {name:?} has shape {found:?}, expected {expected:?}")]
    TensorShape {
        /// The tensor.
        name: String,
        /// Dimensions the hyper-parameters imply.
        expected: Vec<u64>,
        /// Dimensions in the file.
        found: Vec<u64>,
    },

    /// A tensor type the dequantizer does not handle.
    #[error("tensor {name:?} has type {ty}, which this build cannot dequantize (supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K)")]
    UnsupportedType {
        /// The tensor.
        name: String,
        /// Its type.
        ty: String,
    },

    /// An architecture this build does not implement.
    #[error("unsupported architecture {name:?} (this build runs: {supported})")]
    UnsupportedArchitecture {
        /// `general.architecture` of the file.
        name: String,
        /// The families this build runs.
        supported: String,
    },

    /// A metadata key or a tensor this build does not use, which may change what the file
    /// computes: the file is refused rather than run with part of its meaning ignored.
    #[error("{what} {name:?} is not understood by this build: {reason}; running without it could give wrong results, so the file is refused")]
    NotUnderstood {
        /// "metadata key" or "tensor".
        what: &'static str,
        /// The key or tensor name.
        name: String,
        /// What it would mean, and what to do.
        reason: String,
    },

    /// A tensor holds NaN or infinite values.
    #[error("tensor {name:?} holds a non-finite value at element {index}")]
    NonFinite {
        /// The tensor.
        name: String,
        /// Index of the first non-finite value.
        index: usize,
    },

    /// The tokenizer could not be built or used.
    #[error("tokenizer: {0}")]
    Tokenizer(String),

    /// Input (prompt, options) outside what the model can take.
    #[error("{0}")]
    Input(String),

    /// The KV cache refused an operation.
    #[error(transparent)]
    Kv(#[from] qada_kv::KvError),

    /// A criterion or kernel refused an operation.
    #[error(transparent)]
    Core(#[from] qada_core::CoreError),

    /// A moment table or signature problem.
    #[error(transparent)]
    Stats(#[from] qada_stats::StatsError),
}

/// The `Result` of this crate.
pub type Result<T> = std::result::Result<T, ModelError>;
