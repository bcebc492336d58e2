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
        /// The layer.
        layer: usize,
        /// Tokens it holds.
        len: usize,
        /// Tokens asked for.
        requested: usize,
        /// Most tokens it may hold.
        capacity: usize,
    },

    /// Keys or values of the wrong length.
    #[error(
        "dimension mismatch in {what}: expected a multiple of {expected} values, found {found}"
    )]
    DimensionMismatch {
        /// Keys, values or the head dimension.
        what: &'static str,
        /// Length required (or whose multiple is).
        expected: usize,
        /// Length given.
        found: usize,
    },

    /// A q8 cache stores rows as blocks of 32 values.
    #[error(
        "a q8 KV cache stores rows in blocks of 32 values, but the head dimension is \
         {head_dim}, not a multiple of 32: use an f16 or f32 cache for this model"
    )]
    Q8HeadDim {
        /// The model's head dimension.
        head_dim: usize,
    },

    /// The local window must be longer than the sink.
    #[error("invalid window: T_local = {local} must be larger than T_sink = {sink}")]
    InvalidWindow {
        /// `T_sink`.
        sink: usize,
        /// `T_local`.
        local: usize,
    },

    /// A layer or KV head index past the model's.
    #[error("{what} index {index} out of range (the cache has {count})")]
    OutOfRange {
        /// What was indexed.
        what: &'static str,
        /// Index given.
        index: usize,
        /// Number of valid indices.
        count: usize,
    },

    /// Keys and values of one append must cover the same tokens.
    #[error("keys cover {keys} tokens but values cover {values}")]
    KeyValueMismatch {
        /// Tokens the keys cover.
        keys: usize,
        /// Tokens the values cover.
        values: usize,
    },

    /// [`KvCache::restore`](crate::KvCache::restore) of a checkpoint that another cache took
    /// (another session, a clone, or this cache before it was cleared).
    #[error(
        "this checkpoint was taken from another cache (another session): restore a checkpoint \
         into the session that made it (the checkpoint is of cache #{checkpoint}, this is cache \
         #{cache}; a cache takes a new number when cloned or cleared)"
    )]
    ForeignCheckpoint {
        /// [`KvCache::id`](crate::KvCache::id) recorded in the checkpoint.
        checkpoint: u64,
        /// Id of the cache it was restored into.
        cache: u64,
    },

    /// [`KvCache::with_spans`](crate::KvCache::with_spans) needs one span per layer.
    #[error(
        "{spans} layer spans given for a cache of {layers} layers: give one LayerSpan per layer \
         (Full for global attention, Sliding(W) for a sliding window of W tokens)"
    )]
    SpanCount {
        /// Spans given.
        spans: usize,
        /// Layers of the cache.
        layers: usize,
    },

    /// A sliding layer whose window holds no token.
    #[error(
        "layer {layer} has a sliding window of 0 tokens: a sliding layer sees at least the \
         query's own token (Sliding(W) needs W >= 1)"
    )]
    EmptySlidingWindow {
        /// The layer.
        layer: usize,
    },

    /// A name (of a cache type, of a moments source) that means nothing here.
    #[error("unknown {what} {found:?}: use {expected}")]
    UnknownName {
        /// What was named.
        what: &'static str,
        /// The name given.
        found: String,
        /// The names there are.
        expected: &'static str,
    },

    /// A calibration moment table that could not be read, or is of another model.
    #[error("{}: {source}", path.display())]
    Table {
        /// The table's file.
        path: std::path::PathBuf,
        /// What was wrong.
        source: qada_stats::StatsError,
    },

    /// A moment computation or calibration lookup failed.
    #[error(transparent)]
    Stats(#[from] qada_stats::StatsError),
}

/// The `Result` of this crate.
pub type Result<T> = std::result::Result<T, KvError>;
