//! The local index set `I = {1..T_sink} U {T - (T_local - T_sink) + 1 .. T}` and its complement.

use std::ops::Range;

use crate::{KvError, Result};

/// Sizes of the attention sink and the whole local window (`T_sink < T_local`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowConfig {
    sink: usize,
    local: usize,
}

/// The three disjoint position ranges of a sequence of `T` tokens, 0-based, in order
/// sink, bulk, window; together they cover `0..T`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Split {
    /// First `min(T, T_sink)` positions.
    pub sink: Range<usize>,
    /// Positions that are neither sink nor window; empty when `T <= T_local`.
    pub bulk: Range<usize>,
    /// The most recent `T_local - T_sink` positions (fewer when `T < T_local`).
    pub window: Range<usize>,
}

impl Split {
    /// `T_bulk`.
    pub fn bulk_len(&self) -> usize {
        self.bulk.len()
    }
    /// `|I|`, the number of local positions.
    pub fn local_len(&self) -> usize {
        self.sink.len() + self.window.len()
    }
}

impl WindowConfig {
    /// The paper's defaults: `T_sink = 16`, `T_local = 128`.
    pub const PAPER: WindowConfig = WindowConfig {
        sink: 16,
        local: 128,
    };

    /// A window of `local` tokens of which the first `sink` are the attention sink.
    pub fn new(sink: usize, local: usize) -> Result<Self> {
        if local <= sink {
            return Err(KvError::InvalidWindow { sink, local });
        }
        Ok(WindowConfig { sink, local })
    }

    /// `T_sink`.
    pub fn sink(&self) -> usize {
        self.sink
    }

    /// `T_local`.
    pub fn local(&self) -> usize {
        self.local
    }

    /// `T_local - T_sink`, the recent part of the window.
    pub fn recent(&self) -> usize {
        self.local - self.sink
    }

    /// Split `0..t` into sink, bulk and window.
    pub fn split(&self, t: usize) -> Split {
        if t <= self.local {
            let s = t.min(self.sink);
            return Split {
                sink: 0..s,
                bulk: s..s,
                window: s..t,
            };
        }
        let w = t - self.recent();
        Split {
            sink: 0..self.sink,
            bulk: self.sink..w,
            window: w..t,
        }
    }
}

impl Default for WindowConfig {
    fn default() -> Self {
        WindowConfig::PAPER
    }
}
