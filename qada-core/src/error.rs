/// Everything that can go wrong in `qada-core`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CoreError {
    /// `tau` must lie in (0, 1].
    #[error("tau must be in (0, 1], got {0}")]
    InvalidTau(f64),

    /// `alpha` (fraction of static local heads) must lie in [0, 1].
    #[error("alpha must be in [0, 1], got {0}")]
    InvalidAlpha(f64),

    /// A criterion's parameter (page size, cluster count, margin) out of its range.
    #[error("{what} must be {expected}, got {found}")]
    InvalidParameter {
        /// The parameter, with its criterion.
        what: &'static str,
        /// What it must be.
        expected: &'static str,
        /// The value given.
        found: f64,
    },

    /// Slices whose lengths must agree do not.
    #[error("dimension mismatch in {what}: expected {expected}, found {found}")]
    DimensionMismatch {
        /// The slice, array or count that was checked.
        what: &'static str,
        /// Its expected length.
        expected: usize,
        /// The length found.
        found: usize,
    },

    /// A layer or head index outside the table or model.
    #[error("{what} {index} out of range (there are {count})")]
    OutOfRange {
        /// What was indexed (layer, head, ...).
        what: &'static str,
        /// The index given.
        index: usize,
        /// How many there are.
        count: usize,
    },

    /// The oracle reads every bulk key, but the bulk came as moments only.
    #[error("the oracle needs the bulk keys: pass Bulk::Keys or Bulk::KeysAndMoments, not Bulk::Moments")]
    MissingBulkKeys,

    /// A name that is none of those expected (a group mode, a criterion).
    #[error("unknown {what} {found:?}: use {expected}")]
    UnknownName {
        /// What was named.
        what: &'static str,
        /// The name given.
        found: String,
        /// The names accepted.
        expected: &'static str,
    },

    /// A criterion reads a summary of the bulk (page bounds, cluster moments) that its input
    /// does not carry.
    #[error(
        "the {criterion} criterion needs the bulk's {summary}, but the input has none: keep them \
         in the cache with `KvCache::set_bulk_summaries(criterion.bulk_summaries())`, or decide \
         from arrays with `PreparedQuery::decide` / `decide_query` and the bulk keys \
         (`Bulk::Keys` or `Bulk::KeysAndMoments`), which build them"
    )]
    MissingBulkSummary {
        /// The criterion that asked (`bound`, `mixture`, `hybrid`).
        criterion: &'static str,
        /// What it needs: `page bounds` or `cluster moments`.
        summary: &'static str,
    },

    /// A static table in which calibration observed no head (its prompts were no longer than
    /// the window, or the model has no layer a criterion decides).
    #[error(
        "the static table observed no head: calibrate it again (`qada calibrate static`) on \
         prompts longer than sink + window"
    )]
    EmptyStaticTable,

    /// Reading or checking a moment or criterion file failed.
    #[error(transparent)]
    Stats(#[from] qada_stats::StatsError),
}

/// The `Result` of this crate.
pub type Result<T> = std::result::Result<T, CoreError>;
