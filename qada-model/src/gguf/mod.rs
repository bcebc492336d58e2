//! GGUF, the file format of llama.cpp: header, metadata, tensor infos, aligned tensor data.
//!
//! Layout (little-endian): magic `GGUF`, version (u32, 2 or 3), tensor count (u64), metadata
//! count (u64), then the metadata key/value pairs, then the tensor infos (name, dimensions,
//! type, offset), then padding to `general.alignment` (default 32), then the tensor data.
//!
//! Every count, length and offset is checked against the bytes that remain before anything is
//! allocated or indexed, so a truncated or hostile file gives an error naming the key or tensor
//! and the byte offset.

mod reader;
mod value;
pub mod writer;

pub use reader::{GgufFile, TensorInfo};
pub use value::{Value, ValueType};
