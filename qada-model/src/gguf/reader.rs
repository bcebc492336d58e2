//! Parsing a GGUF file held in memory.

use std::collections::HashMap;
use std::path::Path;

use super::value::{Value, ValueType};
use crate::quant::{dequantize, GgmlType};
use crate::{ModelError, Result};

/// Most dimensions a tensor may have (ggml's `GGML_MAX_DIMS`).
const MAX_DIMS: u32 = 4;
/// How deep arrays may nest.
const MAX_NESTING: u32 = 4;

/// One tensor's description.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    /// Name, e.g. `blk.0.attn_q.weight`.
    pub name: String,
    /// Dimensions, fastest-varying first (ggml's `ne`).
    pub dims: Vec<u64>,
    /// Element type.
    pub ty: GgmlType,
    /// Offset of the data from the start of the data section.
    pub offset: u64,
    /// Number of elements.
    pub n_elements: u64,
    /// Size of the data in bytes.
    pub n_bytes: u64,
}

/// A parsed GGUF file and its bytes.
#[derive(Debug)]
pub struct GgufFile {
    /// Format version (2 or 3).
    pub version: u32,
    metadata: Vec<(String, Value)>,
    index: HashMap<String, usize>,
    tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
    /// Absolute offset of the data section.
    pub data_offset: u64,
    /// `general.alignment`.
    pub alignment: u64,
    bytes: Vec<u8>,
}

struct Cursor<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn remaining(&self) -> u64 {
        (self.b.len() - self.pos) as u64
    }
    fn take(&mut self, n: u64, what: &dyn Fn() -> String) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(ModelError::Truncated {
                what: what(),
                offset: self.pos as u64,
                needed: n,
                available: self.remaining(),
            });
        }
        let s = &self.b[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }
    fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32> {
        Ok(u32::from_le_bytes(
            self.take(4, what)?.try_into().expect("4"),
        ))
    }
    fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64> {
        Ok(u64::from_le_bytes(
            self.take(8, what)?.try_into().expect("8"),
        ))
    }
    fn string(&mut self, what: &dyn Fn() -> String) -> Result<String> {
        let at = self.pos as u64;
        let len = self.u64(what)?;
        let bytes = self.take(len, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| ModelError::Invalid {
            what: what(),
            offset: at,
            reason: "string is not UTF-8".into(),
        })
    }

    fn value(&mut self, ty: ValueType, depth: u32, what: &dyn Fn() -> String) -> Result<Value> {
        let at = self.pos as u64;
        Ok(match ty {
            ValueType::U8 => Value::U8(self.take(1, what)?[0]),
            ValueType::I8 => Value::I8(self.take(1, what)?[0] as i8),
            ValueType::Bool => {
                let b = self.take(1, what)?[0];
                if b > 1 {
                    return Err(ModelError::Invalid {
                        what: what(),
                        offset: at,
                        reason: format!("bool byte {b}, expected 0 or 1"),
                    });
                }
                Value::Bool(b == 1)
            }
            ValueType::U16 => Value::U16(u16::from_le_bytes(
                self.take(2, what)?.try_into().expect("2"),
            )),
            ValueType::I16 => Value::I16(i16::from_le_bytes(
                self.take(2, what)?.try_into().expect("2"),
            )),
            ValueType::U32 => Value::U32(self.u32(what)?),
            ValueType::I32 => Value::I32(self.u32(what)? as i32),
            ValueType::F32 => Value::F32(f32::from_bits(self.u32(what)?)),
            ValueType::U64 => Value::U64(self.u64(what)?),
            ValueType::I64 => Value::I64(self.u64(what)? as i64),
            ValueType::F64 => Value::F64(f64::from_bits(self.u64(what)?)),
            ValueType::String => Value::String(self.string(what)?),
            ValueType::Array => {
                if depth >= MAX_NESTING {
                    return Err(ModelError::Invalid {
                        what: what(),
                        offset: at,
                        reason: format!("arrays nested deeper than {MAX_NESTING}"),
                    });
                }
                let tag = self.u32(what)?;
                let elem = ValueType::from_u32(tag).ok_or_else(|| ModelError::Invalid {
                    what: what(),
                    offset: at,
                    reason: format!("unknown array element type {tag}"),
                })?;
                let count = self.u64(what)?;
                // Every element takes at least one byte (strings 8, arrays 12): refuse counts
                // the rest of the file cannot hold before allocating anything.
                let min =
                    elem.fixed_size()
                        .unwrap_or(if elem == ValueType::String { 8 } else { 12 });
                if count.saturating_mul(min) > self.remaining() {
                    return Err(ModelError::Truncated {
                        what: what(),
                        offset: self.pos as u64,
                        needed: count.saturating_mul(min),
                        available: self.remaining(),
                    });
                }
                let mut items = Vec::with_capacity(count as usize);
                for _ in 0..count {
                    items.push(self.value(elem, depth + 1, what)?);
                }
                Value::Array(elem, items)
            }
        })
    }
}

/// Metadata pairs in file order.
type Metadata = Vec<(String, Value)>;

impl Cursor<'_> {
    /// `n_kv` metadata pairs (key, type tag, value), each key once.
    fn metadata(&mut self, n_kv: u64) -> Result<(Metadata, HashMap<String, usize>)> {
        // a key/value pair takes at least 8 (key length) + 4 (type) + 1 bytes
        if n_kv.saturating_mul(13) > self.remaining() {
            return Err(ModelError::Invalid {
                what: "metadata count".into(),
                offset: 16,
                reason: format!(
                    "{n_kv} pairs cannot fit in the {} bytes that follow",
                    self.remaining()
                ),
            });
        }
        let mut metadata = Vec::with_capacity(n_kv as usize);
        let mut index = HashMap::new();
        for i in 0..n_kv {
            let key_at = self.pos as u64;
            let key = self.string(&|| format!("key of metadata pair {i}"))?;
            let what = || format!("metadata value of {key:?}");
            let tag_at = self.pos as u64;
            let tag = self.u32(&what)?;
            let ty = ValueType::from_u32(tag).ok_or_else(|| ModelError::Invalid {
                what: what(),
                offset: tag_at,
                reason: format!("unknown value type {tag}"),
            })?;
            let v = self.value(ty, 0, &what)?;
            if index.insert(key.clone(), metadata.len()).is_some() {
                return Err(ModelError::Invalid {
                    what: format!("metadata key {key:?}"),
                    offset: key_at,
                    reason: "the key appears twice".into(),
                });
            }
            metadata.push((key, v));
        }
        Ok((metadata, index))
    }

    /// `n_tensors` tensor infos, each name once.
    fn tensor_infos(
        &mut self,
        n_tensors: u64,
    ) -> Result<(Vec<TensorInfo>, HashMap<String, usize>)> {
        // a tensor info takes at least 8 (name length) + 4 (dimensions) + 4 (type) + 8 (offset)
        if n_tensors.saturating_mul(24) > self.remaining() {
            return Err(ModelError::Invalid {
                what: "tensor count".into(),
                offset: 8,
                reason: format!(
                    "{n_tensors} tensor infos cannot fit in the {} bytes that follow",
                    self.remaining()
                ),
            });
        }
        let mut tensors = Vec::with_capacity(n_tensors as usize);
        let mut tensor_index = HashMap::new();
        for i in 0..n_tensors {
            let info_at = self.pos as u64;
            let t = self.tensor_info(i)?;
            if tensor_index.insert(t.name.clone(), tensors.len()).is_some() {
                return Err(ModelError::Invalid {
                    what: format!("tensor {:?}", t.name),
                    offset: info_at,
                    reason: "a tensor of that name appears twice".into(),
                });
            }
            tensors.push(t);
        }
        Ok((tensors, tensor_index))
    }

    /// Tensor info `i`: name, dimensions, type and data offset; its size in whole blocks.
    fn tensor_info(&mut self, i: u64) -> Result<TensorInfo> {
        let info_at = self.pos as u64;
        let name = self.string(&|| format!("name of tensor {i}"))?;
        let what = || format!("tensor {name:?}");
        let n_dims = self.u32(&what)?;
        if n_dims == 0 || n_dims > MAX_DIMS {
            return Err(ModelError::Invalid {
                what: what(),
                offset: self.pos as u64 - 4,
                reason: format!("{n_dims} dimensions (1 to {MAX_DIMS} allowed)"),
            });
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            dims.push(self.u64(&what)?);
        }
        let ty_at = self.pos as u64;
        let ty = GgmlType::from_u32(self.u32(&what)?);
        let offset = self.u64(&what)?;
        let n_elements = dims
            .iter()
            .try_fold(1u64, |a, &d| a.checked_mul(d))
            .filter(|&n| n <= i64::MAX as u64)
            .ok_or_else(|| ModelError::Invalid {
                what: what(),
                offset: info_at,
                reason: format!("dimensions {dims:?} overflow"),
            })?;
        if ty.block().is_none() {
            return Err(ModelError::Invalid {
                what: what(),
                offset: ty_at,
                reason: format!("{ty}"),
            });
        }
        let n_bytes = ty
            .bytes_for(n_elements)
            .ok_or_else(|| ModelError::Invalid {
                what: what(),
                offset: info_at,
                reason: format!("{n_elements} elements are not whole {ty} blocks"),
            })?;
        Ok(TensorInfo {
            name,
            dims,
            ty,
            offset,
            n_elements,
            n_bytes,
        })
    }
}

/// The data alignment: `general.alignment` (a power of two up to 2^20), 32 when absent.
fn alignment(value: Option<&Value>) -> Result<u64> {
    match value {
        None => Ok(32),
        Some(v) => match v.as_u64() {
            Some(a) if a > 0 && a.is_power_of_two() && a <= 1 << 20 => Ok(a),
            _ => Err(ModelError::BadMetadata {
                key: "general.alignment".into(),
                found: v.render(4),
                reason: "must be a power of two up to 2^20 (the file is damaged)".into(),
            }),
        },
    }
}

impl TensorInfo {
    /// The tensor's data starts at an aligned offset and ends inside a file of `file_len` bytes.
    fn check_data(&self, data_offset: u64, alignment: u64, file_len: u64) -> Result<()> {
        if !self.offset.is_multiple_of(alignment) {
            return Err(ModelError::Invalid {
                what: format!("tensor {:?}", self.name),
                offset: data_offset,
                reason: format!(
                    "data offset {} is not a multiple of the alignment {alignment}",
                    self.offset
                ),
            });
        }
        let start = data_offset.checked_add(self.offset);
        match start.and_then(|s| s.checked_add(self.n_bytes)) {
            Some(end) if end <= file_len => Ok(()),
            _ => Err(ModelError::Truncated {
                what: format!("data of tensor {:?}", self.name),
                offset: data_offset.saturating_add(self.offset),
                needed: self.n_bytes,
                available: file_len.saturating_sub(data_offset.saturating_add(self.offset)),
            }),
        }
    }
}

impl GgufFile {
    /// Read and parse a file.
    pub fn open(path: &Path) -> Result<Self> {
        let bytes = std::fs::read(path).map_err(|source| ModelError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(bytes)
    }

    /// Parse a whole file held in memory: the header, the metadata pairs, the tensor infos,
    /// then the alignment and every tensor's data checked to lie inside the file.
    pub fn parse(bytes: Vec<u8>) -> Result<Self> {
        let mut c = Cursor { b: &bytes, pos: 0 };
        if bytes.len() < 4 || &bytes[..4] != b"GGUF" {
            let found = String::from_utf8_lossy(&bytes[..bytes.len().min(4)]).into_owned();
            return Err(ModelError::BadMagic { found });
        }
        c.pos = 4;
        let version = c.u32(&|| "version".into())?;
        if !(2..=3).contains(&version) {
            return Err(ModelError::UnsupportedVersion(version));
        }
        let n_tensors = c.u64(&|| "tensor count".into())?;
        let n_kv = c.u64(&|| "metadata count".into())?;
        let (metadata, index) = c.metadata(n_kv)?;
        let (tensors, tensor_index) = c.tensor_infos(n_tensors)?;
        let alignment = alignment(index.get("general.alignment").map(|&i| &metadata[i].1))?;
        let data_offset = (c.pos as u64).div_ceil(alignment) * alignment;
        for t in &tensors {
            t.check_data(data_offset, alignment, bytes.len() as u64)?;
        }
        Ok(GgufFile {
            version,
            metadata,
            index,
            tensors,
            tensor_index,
            data_offset,
            alignment,
            bytes,
        })
    }

    /// Every metadata pair, in file order.
    pub fn metadata(&self) -> &[(String, Value)] {
        &self.metadata
    }

    /// One metadata value.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.index.get(key).map(|&i| &self.metadata[i].1)
    }

    /// A required unsigned integer.
    pub fn get_u64(&self, key: &str) -> Result<u64> {
        let v = self
            .get(key)
            .ok_or_else(|| ModelError::MissingKey(key.into()))?;
        v.as_u64().ok_or(ModelError::WrongType {
            key: key.into(),
            expected: "unsigned integer",
            found: v.type_name(),
        })
    }

    /// A required number.
    pub fn get_f64(&self, key: &str) -> Result<f64> {
        let v = self
            .get(key)
            .ok_or_else(|| ModelError::MissingKey(key.into()))?;
        v.as_f64().ok_or(ModelError::WrongType {
            key: key.into(),
            expected: "number",
            found: v.type_name(),
        })
    }

    /// A required string.
    pub fn get_str(&self, key: &str) -> Result<&str> {
        let v = self
            .get(key)
            .ok_or_else(|| ModelError::MissingKey(key.into()))?;
        v.as_str().ok_or(ModelError::WrongType {
            key: key.into(),
            expected: "string",
            found: v.type_name(),
        })
    }

    /// A required array.
    pub fn get_array(&self, key: &str) -> Result<&[Value]> {
        let v = self
            .get(key)
            .ok_or_else(|| ModelError::MissingKey(key.into()))?;
        v.as_array().ok_or(ModelError::WrongType {
            key: key.into(),
            expected: "array",
            found: v.type_name(),
        })
    }

    /// Every tensor, in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// One tensor's description.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }

    /// The raw bytes of a tensor (bounds checked at parse time).
    pub fn tensor_bytes(&self, info: &TensorInfo) -> &[u8] {
        let start = (self.data_offset + info.offset) as usize;
        &self.bytes[start..start + info.n_bytes as usize]
    }

    /// A tensor dequantized to f32, refusing NaN and infinity.
    pub fn tensor_f32(&self, name: &str) -> Result<(Vec<u64>, Vec<f32>)> {
        let info = self.dequantizable(name)?;
        let mut out = vec![0.0f32; info.n_elements as usize];
        self.dequantize_checked(info, self.tensor_bytes(info), 0, &mut out)?;
        Ok((info.dims.clone(), out))
    }

    /// Check that every value of a tensor is finite, as [`GgufFile::tensor_f32`] does, a
    /// chunk of blocks at a time: memory independent of the tensor's size.
    ///
    /// # Errors
    /// As [`GgufFile::tensor_f32`].
    pub fn check_finite(&self, name: &str) -> Result<()> {
        let info = self.dequantizable(name)?;
        let bytes = self.tensor_bytes(info);
        // `dequantizable` checked the type has a block layout
        let (per, size) = info.ty.block().unwrap_or((1, 1));
        const BLOCKS: usize = 4096;
        let mut buf = vec![0.0f32; BLOCKS * per as usize];
        let chunk_bytes = BLOCKS * size as usize;
        if bytes.len() as u64 != info.ty.bytes_for(info.n_elements).unwrap_or(u64::MAX) {
            return Err(self.size_mismatch(name, info));
        }
        for (i, chunk) in bytes.chunks(chunk_bytes).enumerate() {
            let n = chunk.len() / size as usize * per as usize;
            self.dequantize_checked(info, chunk, i * BLOCKS * per as usize, &mut buf[..n])?;
        }
        Ok(())
    }

    fn dequantizable(&self, name: &str) -> Result<&TensorInfo> {
        let info = self
            .tensor(name)
            .ok_or_else(|| ModelError::MissingTensor(name.into()))?;
        if !info.ty.can_dequantize() {
            return Err(ModelError::UnsupportedType {
                name: name.into(),
                ty: info.ty.to_string(),
            });
        }
        Ok(info)
    }

    fn size_mismatch(&self, name: &str, info: &TensorInfo) -> ModelError {
        ModelError::Invalid {
            what: format!("tensor {name:?}"),
            offset: self.data_offset + info.offset,
            reason: "data size does not match its type and shape".into(),
        }
    }

    /// Dequantize `bytes` (values `first..` of the tensor) into `out`; every value finite.
    fn dequantize_checked(
        &self,
        info: &TensorInfo,
        bytes: &[u8],
        first: usize,
        out: &mut [f32],
    ) -> Result<()> {
        if !dequantize(info.ty, bytes, out) {
            return Err(self.size_mismatch(&info.name, info));
        }
        if let Some(i) = out.iter().position(|v| !v.is_finite()) {
            return Err(ModelError::NonFinite {
                name: info.name.clone(),
                index: first + i,
            });
        }
        Ok(())
    }
}
