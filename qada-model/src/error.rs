/// Everything that can go wrong in `qada-model`.
///
/// File errors name what was being read (a key, a tensor) and the byte offset.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// Reading a file failed.
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },

    /// Not a GGUF file.
    #[error("not a GGUF file: expected magic \"GGUF\" at byte 0, found {found:?}")]
    BadMagic { found: String },

    /// A GGUF version this reader does not support.
    #[error("unsupported GGUF version {0} (this reader supports versions 2 and 3)")]
    UnsupportedVersion(u32),

    /// The file ends before something it announces.
    #[error("truncated GGUF file: {what} at byte {offset} needs {needed} bytes, the file has {available} left")]
    Truncated {
        what: String,
        offset: u64,
        needed: u64,
        available: u64,
    },

    /// A well-formed field with a value that cannot be right.
    #[error("invalid GGUF file: {what} at byte {offset}: {reason}")]
    Invalid {
        what: String,
        offset: u64,
        reason: String,
    },

    /// A metadata key the model needs is absent.
    #[error("missing metadata key {0:?} in the GGUF file")]
    MissingKey(String),

    /// A metadata key has another type than expected.
    #[error("metadata key {key:?} has type {found}, expected {expected}")]
    WrongType {
        key: String,
        expected: &'static str,
        found: &'static str,
    },

    /// A tensor the model needs is absent.
    #[error("missing tensor {0:?} in the GGUF file")]
    MissingTensor(String),

    /// A tensor has other dimensions than the hyper-parameters imply.
    #[error("tensor {name:?} has shape {found:?}, expected {expected:?}")]
    TensorShape {
        name: String,
        expected: Vec<u64>,
        found: Vec<u64>,
    },

    /// A tensor type the dequantizer does not handle.
    #[error("tensor {name:?} has type {ty}, which this build cannot dequantize (supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K)")]
    UnsupportedType { name: String, ty: String },

    /// An architecture this build does not implement.
    #[error("unsupported architecture {0:?} (supported: llama, qwen2)")]
    UnsupportedArchitecture(String),

    /// A tensor holds NaN or infinite values.
    #[error("tensor {name:?} holds a non-finite value at element {index}")]
    NonFinite { name: String, index: usize },

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
