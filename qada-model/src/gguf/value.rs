//! Metadata values.

/// The type tag of a metadata value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum ValueType {
    /// Tag of an unsigned 8-bit integer.
    U8 = 0,
    /// Tag of a signed 8-bit integer.
    I8 = 1,
    /// Tag of an unsigned 16-bit integer.
    U16 = 2,
    /// Tag of a signed 16-bit integer.
    I16 = 3,
    /// Tag of an unsigned 32-bit integer.
    U32 = 4,
    /// Tag of a signed 32-bit integer.
    I32 = 5,
    /// Tag of a 32-bit float.
    F32 = 6,
    /// Tag of a boolean.
    Bool = 7,
    /// Tag of a UTF-8 string.
    String = 8,
    /// Tag of an array.
    Array = 9,
    /// Tag of an unsigned 64-bit integer.
    U64 = 10,
    /// Tag of a signed 64-bit integer.
    I64 = 11,
    /// Tag of a 64-bit float.
    F64 = 12,
}

impl ValueType {
    /// The type for a tag, if it is one.
    pub fn from_u32(t: u32) -> Option<Self> {
        use ValueType::*;
        Some(match t {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }
    /// Size of a fixed-size value, `None` for strings and arrays.
    pub fn fixed_size(self) -> Option<u64> {
        use ValueType::*;
        match self {
            U8 | I8 | Bool => Some(1),
            U16 | I16 => Some(2),
            U32 | I32 | F32 => Some(4),
            U64 | I64 | F64 => Some(8),
            String | Array => None,
        }
    }
}

/// A metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// An unsigned 8-bit integer.
    U8(u8),
    /// A signed 8-bit integer.
    I8(i8),
    /// An unsigned 16-bit integer.
    U16(u16),
    /// A signed 16-bit integer.
    I16(i16),
    /// An unsigned 32-bit integer.
    U32(u32),
    /// A signed 32-bit integer.
    I32(i32),
    /// A 32-bit float.
    F32(f32),
    /// A boolean.
    Bool(bool),
    /// A UTF-8 string.
    String(String),
    /// Elements all of one type (arrays may nest).
    Array(ValueType, Vec<Value>),
    /// An unsigned 64-bit integer.
    U64(u64),
    /// A signed 64-bit integer.
    I64(i64),
    /// A 64-bit float.
    F64(f64),
}

impl Value {
    /// Name of the value's type, for errors.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::U8(_) => "u8",
            Value::I8(_) => "i8",
            Value::U16(_) => "u16",
            Value::I16(_) => "i16",
            Value::U32(_) => "u32",
            Value::I32(_) => "i32",
            Value::F32(_) => "f32",
            Value::Bool(_) => "bool",
            Value::String(_) => "string",
            Value::Array(..) => "array",
            Value::U64(_) => "u64",
            Value::I64(_) => "i64",
            Value::F64(_) => "f64",
        }
    }

    /// Any integer type that fits a u64 without loss.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v as u64),
            Value::U16(v) => Some(v as u64),
            Value::U32(v) => Some(v as u64),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// Any float or integer as f64.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v as f64),
            Value::F64(v) => Some(v),
            _ => self.as_u64().map(|v| v as f64),
        }
    }

    /// A string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// A boolean.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// Array elements.
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(_, v) => Some(v),
            _ => None,
        }
    }

    /// A short human rendering (arrays abbreviated).
    pub fn render(&self, max_items: usize) -> String {
        match self {
            Value::String(s) => format!("{s:?}"),
            Value::Array(t, v) => {
                let items: Vec<String> = v
                    .iter()
                    .take(max_items)
                    .map(|x| x.render(max_items))
                    .collect();
                let more = if v.len() > max_items {
                    format!(", ... ({} items)", v.len())
                } else {
                    String::new()
                };
                format!("[{:?}; {}{}]", t, items.join(", "), more)
            }
            Value::U8(x) => x.to_string(),
            Value::I8(x) => x.to_string(),
            Value::U16(x) => x.to_string(),
            Value::I16(x) => x.to_string(),
            Value::U32(x) => x.to_string(),
            Value::I32(x) => x.to_string(),
            Value::F32(x) => x.to_string(),
            Value::Bool(x) => x.to_string(),
            Value::U64(x) => x.to_string(),
            Value::I64(x) => x.to_string(),
            Value::F64(x) => x.to_string(),
        }
    }
}
