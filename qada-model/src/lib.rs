//! A real model for QAdA: GGUF files, their tokenizer, and a transformer (Llama, Qwen2 and
//! Gemma 3 are values of [`family::Family`]) whose
//! decoding steps go through a qada-core locality criterion over a qada-kv cache.
//!
//! - [`gguf`] reads (and, for tests, writes) GGUF files; [`quant`] knows ggml's block layouts
//!   and dequantizes them. The quantized products (`qlinear`) and the layer operations (`ops`)
//!   are public for tests and benches only, hidden from these docs.
//! - [`ModelConfig`] and [`Tokenizer`] come from the file's metadata; [`Model`] loads the
//!   weights; a [`Session`] prefills a prompt and decodes token by token through a
//!   `qada_core` criterion; [`generate()`] samples text.
//!
//! A Q4_1 tensor written to a GGUF file in memory, read back, and seen as blocks:
//!
//! ```
//! use qada_model::gguf::{writer::GgufWriter, GgufFile, Value};
//! use qada_model::quant::{view, BlockQ4_1, Dequantize};
//!
//! // one block of 32 values q * d + m: d = 0.5, m = -1, quants 0, 1, ..., 15, 0, 1, ...
//! let half = |v: f32| half::f16::from_f32(v).to_le_bytes();
//! let q: Vec<u8> = (0..32).map(|i| i % 16).collect();
//! let mut bytes = [half(0.5), half(-1.0)].concat();
//! bytes.extend((0..16).map(|j| q[j] | (q[j + 16] << 4)));
//!
//! let mut w = GgufWriter::new();
//! w.meta("general.name", Value::String("tiny".into()))
//!     .tensor("w", &[32, 1], 3, bytes.clone()); // ggml type id 3 is Q4_1
//! let file = GgufFile::parse(w.to_bytes())?;
//! let (dims, values) = file.tensor_f32("w")?;
//! assert_eq!(dims, [32, 1]);
//! assert_eq!(values[3], 3.0 * 0.5 - 1.0);
//!
//! // the same bytes through the typed block view
//! let blocks = view::<BlockQ4_1>(&bytes).expect("whole blocks");
//! let mut y = [0.0f32; 32];
//! blocks[0].dequantize(&mut y);
//! assert_eq!(&y[..], &values[..]);
//!
//! # Ok::<(), qada_model::ModelError>(())
//! ```
#![warn(missing_docs)]

mod block;
mod config;
mod error;
pub mod family;
mod generate;
pub mod gguf;
pub mod known_models;
mod model;
#[doc(hidden)]
pub mod ops;
#[doc(hidden)]
pub mod qlinear;
pub mod quant;
mod rope;
mod rope_scaling;
mod session;
mod strict;
mod tokenizer;
mod warm;

pub use config::{LayerSpec, ModelConfig};
pub use error::{ModelError, Result};
pub use generate::{
    generate, generate_after_prefill, generate_until, GenerateConfig, Generation, Sampler,
    SamplingParams, StopReason,
};
pub use model::{LoadOptions, Model, WeightFormat};
pub use qlinear::ActPrecision;
pub use rope::{Rope, RopeScaling};
pub use session::{
    ModelHandle, Session, SessionCheckpoint, SessionOptions, StepObserver, PREFILL_BLOCK,
};
pub use tokenizer::{
    ChatFormat, ChatMessage, ChatTemplate, StreamDecoder, TemplateOrigin, Tokenizer,
};

// Types users share across threads (a loaded model serves many sessions).
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<Model>();
    send_sync::<Tokenizer>();
    send_sync::<gguf::GgufFile>();
    send_sync::<SessionCheckpoint>();
};
