/// Everything that can go wrong in `qada-kv`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KvError {
    /// Appending would take a layer past the cache's capacity (the model's context length).
    #[error(
        "KV cache full: layer {layer} holds {len} of {capacity} tokens and {requested} more were \
         appended (the prompt plus generated tokens exceed the context length)"
    )]
    CapacityExceeded {
        layer: usize,
        len: usize,
        requested: usize,
        capacity: usize,
    },

    /// Keys or values of the wrong length.
    #[error(
        "dimension mismatch in {what}: expected a multiple of {expected} values, found {found}"
    )]
    DimensionMismatch {
        what: &'static str,
        expected: usize,
        found: usize,
    },

    /// The local window must be longer than the sink.
    #[error("invalid window: T_local = {local} must be larger than T_sink = {sink}")]
    InvalidWindow { sink: usize, local: usize },

    /// A layer or KV head index past the model's.
    #[error("{what} index {index} out of range (the cache has {count})")]
    OutOfRange {
        what: &'static str,
        index: usize,
        count: usize,
    },

    /// Keys and values of one append must cover the same tokens.
    #[error("keys cover {keys} tokens but values cover {values}")]
    KeyValueMismatch { keys: usize, values: usize },

    /// A moment computation or calibration lookup failed.
    #[error(transparent)]
    Stats(#[from] qada_stats::StatsError),
}

/// The `Result` of this crate.
pub type Result<T> = std::result::Result<T, KvError>;
