//! A real model for QAdA: GGUF files, their tokenizer, and a Llama-family transformer whose
//! decoding steps go through a qada-core locality criterion over a qada-kv cache.

mod error;
pub mod gguf;
pub mod quant;

pub use error::{ModelError, Result};
pub mod config;
pub mod tokenizer;

pub use config::{Architecture, ModelConfig, RopeStyle};
pub use tokenizer::{ChatTemplate, StreamDecoder, Tokenizer};
pub mod model;
pub mod ops;
pub mod session;

pub use model::{LoadOptions, Model, WeightFormat};
pub use session::{Session, SessionCheckpoint, SessionOptions, StepObserver};
pub mod generate;

pub use generate::{generate, GenerateConfig, Generation, Sampler, SamplingParams, StopReason};
pub mod eval;
pub mod qlinear;

pub use eval::{FidelityReference, FidelityStep, PasskeyPrompt, PasskeyTask};

// Types users share across threads (a loaded model serves many sessions).
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<Model>();
    send_sync::<Tokenizer>();
    send_sync::<gguf::GgufFile>();
    send_sync::<SessionCheckpoint>();
};
