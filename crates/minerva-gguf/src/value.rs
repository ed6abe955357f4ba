//! Metadata values: the type tags, borrowed values as read, and owned values to write.

use std::fmt;

/// A metadata value type tag (GGUF `gguf_metadata_value_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
#[allow(missing_docs)] // The names are the spec's.
pub enum ValueType {
    U8 = 0,
    I8 = 1,
    U16 = 2,
    I16 = 3,
    U32 = 4,
    I32 = 5,
    F32 = 6,
    Bool = 7,
    String = 8,
    Array = 9,
    U64 = 10,
    I64 = 11,
    F64 = 12,
}

impl ValueType {
    /// The type with tag `id`, if it is one of the 13 the spec defines.
    pub fn from_id(id: u32) -> Option<ValueType> {
        use ValueType::*;
        Some(match id {
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

    /// Encoded size of one value of this type, for fixed-size types.
    pub fn fixed_size(self) -> Option<usize> {
        use ValueType::*;
        match self {
            U8 | I8 | Bool => Some(1),
            U16 | I16 => Some(2),
            U32 | I32 | F32 => Some(4),
            U64 | I64 | F64 => Some(8),
            String | Array => None,
        }
    }

    /// The smallest number of bytes one value of this type can take: the bound that keeps absurd
    /// element counts from being believed.
    pub(crate) fn min_size(self) -> usize {
        match self {
            ValueType::String => 8,    // u64 length
            ValueType::Array => 4 + 8, // u32 type + u64 count
            fixed => fixed.fixed_size().unwrap_or(1),
        }
    }

    /// The lower-case name used in messages and `--json` output (`"u32"`, `"string"`, …).
    pub fn name(self) -> &'static str {
        use ValueType::*;
        match self {
            U8 => "u8",
            I8 => "i8",
            U16 => "u16",
            I16 => "i16",
            U32 => "u32",
            I32 => "i32",
            F32 => "f32",
            Bool => "bool",
            String => "string",
            Array => "array",
            U64 => "u64",
            I64 => "i64",
            F64 => "f64",
        }
    }
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A metadata value as read, borrowing strings and array bytes from the file.
#[derive(Clone, Copy, Debug, PartialEq)]
#[allow(missing_docs)] // One variant per value type.
pub enum Value<'a> {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(&'a str),
    Array(ArrayValue<'a>),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl<'a> Value<'a> {
    /// The value's type tag.
    pub fn value_type(&self) -> ValueType {
        match self {
            Value::U8(_) => ValueType::U8,
            Value::I8(_) => ValueType::I8,
            Value::U16(_) => ValueType::U16,
            Value::I16(_) => ValueType::I16,
            Value::U32(_) => ValueType::U32,
            Value::I32(_) => ValueType::I32,
            Value::F32(_) => ValueType::F32,
            Value::Bool(_) => ValueType::Bool,
            Value::String(_) => ValueType::String,
            Value::Array(_) => ValueType::Array,
            Value::U64(_) => ValueType::U64,
            Value::I64(_) => ValueType::I64,
            Value::F64(_) => ValueType::F64,
        }
    }

    /// A description for messages: `"u32"`, `"array of string"`.
    pub fn type_description(&self) -> String {
        match self {
            Value::Array(a) => format!("array of {}", a.elem_type()),
            other => other.value_type().name().to_string(),
        }
    }

    /// Any integer type as `u64`, if it is non-negative. GGUF writers disagree on whether counts are
    /// u32 or u64 (and some use signed types), so readers of counts should use this.
    pub fn to_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// Any integer type as `i64`, if it fits.
    pub fn to_i64(&self) -> Option<i64> {
        match *self {
            Value::I8(v) => Some(v.into()),
            Value::I16(v) => Some(v.into()),
            Value::I32(v) => Some(v.into()),
            Value::I64(v) => Some(v),
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => i64::try_from(v).ok(),
            _ => None,
        }
    }

    /// A float type (or an integer, converted) as `f64`.
    pub fn to_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v.into()),
            Value::F64(v) => Some(v),
            _ => self.to_i64().map(|v| v as f64),
        }
    }

    /// The string, if this is one.
    pub fn as_str(&self) -> Option<&'a str> {
        match *self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// The array, if this is one.
    pub fn as_array(&self) -> Option<ArrayValue<'a>> {
        match *self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }

    /// The value copied into an owned [`MetadataValue`].
    pub fn to_owned_value(&self) -> MetadataValue {
        match *self {
            Value::U8(v) => MetadataValue::U8(v),
            Value::I8(v) => MetadataValue::I8(v),
            Value::U16(v) => MetadataValue::U16(v),
            Value::I16(v) => MetadataValue::I16(v),
            Value::U32(v) => MetadataValue::U32(v),
            Value::I32(v) => MetadataValue::I32(v),
            Value::F32(v) => MetadataValue::F32(v),
            Value::Bool(v) => MetadataValue::Bool(v),
            Value::String(v) => MetadataValue::String(v.to_string()),
            Value::Array(a) => MetadataValue::Array {
                elem_type: a.elem_type(),
                values: a.iter().map(|v| v.to_owned_value()).collect(),
            },
            Value::U64(v) => MetadataValue::U64(v),
            Value::I64(v) => MetadataValue::I64(v),
            Value::F64(v) => MetadataValue::F64(v),
        }
    }
}

/// An array value, decoded lazily: holding a tokenizer's 200 000 strings costs nothing until they
/// are read.
///
/// The bytes were walked and validated (bounds, UTF-8, element types) when the file was parsed, so
/// iteration cannot fail.
#[derive(Clone, Copy, PartialEq)]
pub struct ArrayValue<'a> {
    pub(crate) elem_type: ValueType,
    pub(crate) len: usize,
    /// The encoded elements (after the array's type tag and count).
    pub(crate) bytes: &'a [u8],
}

impl fmt::Debug for ArrayValue<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ArrayValue({} × {})", self.len, self.elem_type)
    }
}

impl<'a> ArrayValue<'a> {
    /// The element type.
    pub fn elem_type(&self) -> ValueType {
        self.elem_type
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The elements, decoded one by one.
    pub fn iter(&self) -> ArrayIter<'a> {
        ArrayIter { elem_type: self.elem_type, remaining: self.len, bytes: self.bytes }
    }

    /// The elements as strings, or `None` if this is not an array of strings.
    pub fn strings(&self) -> Option<impl Iterator<Item = &'a str> + use<'a>> {
        (self.elem_type == ValueType::String).then(|| self.iter().filter_map(|v| v.as_str()))
    }

    /// The elements as `f32`, or `None` if this is not an array of f32.
    pub fn to_f32_vec(&self) -> Option<Vec<f32>> {
        self.fixed_vec(ValueType::F32, |v| match v {
            Value::F32(x) => Some(x),
            _ => None,
        })
    }

    /// The elements as `i32`, or `None` if this is not an array of i32.
    pub fn to_i32_vec(&self) -> Option<Vec<i32>> {
        self.fixed_vec(ValueType::I32, |v| match v {
            Value::I32(x) => Some(x),
            _ => None,
        })
    }

    /// The elements of any integer type as `i64`, or `None` if one is not an integer that fits.
    pub fn to_i64_vec(&self) -> Option<Vec<i64>> {
        self.iter().map(|v| v.to_i64()).collect()
    }

    /// The elements of any integer type as `u64`, or `None` if one is negative or not an integer.
    pub fn to_u64_vec(&self) -> Option<Vec<u64>> {
        self.iter().map(|v| v.to_u64()).collect()
    }

    fn fixed_vec<T>(&self, ty: ValueType, get: impl Fn(Value<'a>) -> Option<T>) -> Option<Vec<T>> {
        if self.elem_type != ty {
            return None;
        }
        self.iter().map(get).collect()
    }
}

/// Iterator over an [`ArrayValue`]'s elements.
#[derive(Clone, Debug)]
pub struct ArrayIter<'a> {
    elem_type: ValueType,
    remaining: usize,
    bytes: &'a [u8],
}

impl<'a> Iterator for ArrayIter<'a> {
    type Item = Value<'a>;

    fn next(&mut self) -> Option<Value<'a>> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        // Cannot fail on validated bytes; should it ever, the iteration ends rather than panics.
        match decode_value(self.bytes, self.elem_type) {
            Some((value, used)) => {
                self.bytes = &self.bytes[used..];
                Some(value)
            }
            None => {
                self.remaining = 0;
                None
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.remaining))
    }
}

/// Decodes one value of type `ty` from the start of `bytes`, returning it and its encoded length.
/// `None` if the bytes are short or invalid: callers run this only on validated bytes.
pub(crate) fn decode_value(bytes: &[u8], ty: ValueType) -> Option<(Value<'_>, usize)> {
    fn arr<const N: usize>(b: &[u8]) -> Option<[u8; N]> {
        b.get(..N)?.try_into().ok()
    }
    Some(match ty {
        ValueType::U8 => (Value::U8(*bytes.first()?), 1),
        ValueType::I8 => (Value::I8(i8::from_le_bytes(arr(bytes)?)), 1),
        ValueType::U16 => (Value::U16(u16::from_le_bytes(arr(bytes)?)), 2),
        ValueType::I16 => (Value::I16(i16::from_le_bytes(arr(bytes)?)), 2),
        ValueType::U32 => (Value::U32(u32::from_le_bytes(arr(bytes)?)), 4),
        ValueType::I32 => (Value::I32(i32::from_le_bytes(arr(bytes)?)), 4),
        ValueType::F32 => (Value::F32(f32::from_le_bytes(arr(bytes)?)), 4),
        ValueType::Bool => (Value::Bool(*bytes.first()? != 0), 1),
        ValueType::U64 => (Value::U64(u64::from_le_bytes(arr(bytes)?)), 8),
        ValueType::I64 => (Value::I64(i64::from_le_bytes(arr(bytes)?)), 8),
        ValueType::F64 => (Value::F64(f64::from_le_bytes(arr(bytes)?)), 8),
        ValueType::String => {
            let len = usize::try_from(u64::from_le_bytes(arr(bytes)?)).ok()?;
            let s = std::str::from_utf8(bytes.get(8..8usize.checked_add(len)?)?).ok()?;
            (Value::String(s), 8 + len)
        }
        ValueType::Array => {
            let elem_type = ValueType::from_id(u32::from_le_bytes(arr(bytes)?))?;
            let len = usize::try_from(u64::from_le_bytes(arr(bytes.get(4..)?)?)).ok()?;
            let body = bytes.get(12..)?;
            let mut used = 0;
            for _ in 0..len {
                let (_, n) = decode_value(body.get(used..)?, elem_type)?;
                used += n;
            }
            (Value::Array(ArrayValue { elem_type, len, bytes: &body[..used] }), 12 + used)
        }
    })
}

/// An owned metadata value, for writing (and for comparing what was read).
#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)] // One variant per value type.
pub enum MetadataValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    /// Elements all of `elem_type` (which may itself be `Array`, for nested arrays).
    Array {
        elem_type: ValueType,
        values: Vec<MetadataValue>,
    },
    U64(u64),
    I64(i64),
    F64(f64),
}

impl MetadataValue {
    /// The value's type tag.
    pub fn value_type(&self) -> ValueType {
        match self {
            MetadataValue::U8(_) => ValueType::U8,
            MetadataValue::I8(_) => ValueType::I8,
            MetadataValue::U16(_) => ValueType::U16,
            MetadataValue::I16(_) => ValueType::I16,
            MetadataValue::U32(_) => ValueType::U32,
            MetadataValue::I32(_) => ValueType::I32,
            MetadataValue::F32(_) => ValueType::F32,
            MetadataValue::Bool(_) => ValueType::Bool,
            MetadataValue::String(_) => ValueType::String,
            MetadataValue::Array { .. } => ValueType::Array,
            MetadataValue::U64(_) => ValueType::U64,
            MetadataValue::I64(_) => ValueType::I64,
            MetadataValue::F64(_) => ValueType::F64,
        }
    }

    /// An array of strings.
    pub fn strings<S: Into<String>>(items: impl IntoIterator<Item = S>) -> MetadataValue {
        MetadataValue::Array {
            elem_type: ValueType::String,
            values: items.into_iter().map(|s| MetadataValue::String(s.into())).collect(),
        }
    }

    /// An array of `f32`.
    pub fn f32s(items: impl IntoIterator<Item = f32>) -> MetadataValue {
        MetadataValue::Array { elem_type: ValueType::F32, values: items.into_iter().map(MetadataValue::F32).collect() }
    }

    /// An array of `i32`.
    pub fn i32s(items: impl IntoIterator<Item = i32>) -> MetadataValue {
        MetadataValue::Array { elem_type: ValueType::I32, values: items.into_iter().map(MetadataValue::I32).collect() }
    }

    /// Encodes the value (without its own type tag) in GGUF's little-endian layout, checking that
    /// arrays are homogeneous.
    pub(crate) fn encode(&self, out: &mut Vec<u8>) -> crate::Result<()> {
        match self {
            MetadataValue::U8(v) => out.push(*v),
            MetadataValue::I8(v) => out.extend_from_slice(&v.to_le_bytes()),
            MetadataValue::U16(v) => out.extend_from_slice(&v.to_le_bytes()),
            MetadataValue::I16(v) => out.extend_from_slice(&v.to_le_bytes()),
            MetadataValue::U32(v) => out.extend_from_slice(&v.to_le_bytes()),
            MetadataValue::I32(v) => out.extend_from_slice(&v.to_le_bytes()),
            MetadataValue::F32(v) => out.extend_from_slice(&v.to_le_bytes()),
            MetadataValue::Bool(v) => out.push(u8::from(*v)),
            MetadataValue::String(s) => encode_str(s, out),
            MetadataValue::Array { elem_type, values } => {
                out.extend_from_slice(&(*elem_type as u32).to_le_bytes());
                out.extend_from_slice(&(values.len() as u64).to_le_bytes());
                for v in values {
                    if v.value_type() != *elem_type {
                        return Err(crate::GgufError::MixedArray { first: *elem_type, other: v.value_type() });
                    }
                    v.encode(out)?;
                }
            }
            MetadataValue::U64(v) => out.extend_from_slice(&v.to_le_bytes()),
            MetadataValue::I64(v) => out.extend_from_slice(&v.to_le_bytes()),
            MetadataValue::F64(v) => out.extend_from_slice(&v.to_le_bytes()),
        }
        Ok(())
    }
}

/// A GGUF string: u64 length, then the UTF-8 bytes.
pub(crate) fn encode_str(s: &str, out: &mut Vec<u8>) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

macro_rules! from_scalar {
    ($($t:ty => $v:ident),*) => {$(
        impl From<$t> for MetadataValue {
            fn from(v: $t) -> Self {
                MetadataValue::$v(v)
            }
        }
    )*};
}
from_scalar!(u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32, f32 => F32,
    bool => Bool, String => String, u64 => U64, i64 => I64, f64 => F64);

impl From<&str> for MetadataValue {
    fn from(v: &str) -> Self {
        MetadataValue::String(v.to_string())
    }
}
