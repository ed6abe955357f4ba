//! The one table of element-type facts.
//!
//! Every property of a dtype (its GGML id, its SafeTensors name, how many elements a block holds and
//! how many bytes that block takes) is a column of [`DTYPE_TABLE`]; the methods of [`DType`] only
//! look rows up. Adding a type means adding one enum variant and one row, nothing else.
//!
//! Sources: GGML ids and block sizes from ggml's `ggml.h` / `ggml-common.h` as mirrored by gguf-py
//! 0.19 (`GGML_QUANT_SIZES`); SafeTensors names from the `safetensors` crate's `Dtype`.

/// An element type, as stored in a model file.
///
/// Non-quantized types have a block of one element. Quantized types store `block_elems` values in
/// `block_bytes` bytes; a row's length must be a whole number of blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[allow(non_camel_case_types, missing_docs)] // The names are the ones ggml and SafeTensors use.
#[repr(u8)]
pub enum DType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
    Q8_K,
    IQ2_XXS,
    IQ2_XS,
    IQ3_XXS,
    IQ1_S,
    IQ4_NL,
    IQ3_S,
    IQ2_S,
    IQ4_XS,
    I8,
    I16,
    I32,
    I64,
    F64,
    IQ1_M,
    BF16,
    TQ1_0,
    TQ2_0,
    MXFP4,
    NVFP4,
    Q1_0,
    // Types only SafeTensors uses.
    U8,
    U16,
    U32,
    U64,
    Bool,
    F8_E4M3,
    F8_E5M2,
    F8_E8M0,
    F8_E4M3FNUZ,
    F8_E5M2FNUZ,
    /// OCP MX FP4 (E2M1), two elements per byte, no block scale (SafeTensors `F4`).
    F4,
    /// OCP MX FP6 (E2M3), four elements per three bytes.
    F6_E2M3,
    /// OCP MX FP6 (E3M2), four elements per three bytes.
    F6_E3M2,
    /// Complex, two F32 parts.
    C64,
    // Minerva's own block forms, in no file: what a GPU reads of an MLX affine matrix.
    /// MLX 8-bit affine values in blocks of 32: their group's scale and bias (bf16), then the 32
    /// codes (u8); each value `bf16(bf16(q·scale) + bias)`, as `mx.dequantize`.
    MLX_A8,
    /// MLX 4-bit affine values in blocks of 32: scale and bias (bf16), then 16 bytes of codes in
    /// MLX's order (byte j: value 2j low nibble, 2j + 1 high).
    MLX_A4,
}

/// One row of [`DTYPE_TABLE`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DTypeInfo {
    /// The variant this row describes (its index in the table equals the discriminant).
    pub dtype: DType,
    /// The name ggml and gguf-py print (`"Q4_K"`, `"F32"`, …).
    pub name: &'static str,
    /// The `ggml_type` id in GGUF tensor infos, if GGUF can store this type.
    pub ggml_id: Option<u32>,
    /// The dtype string in a SafeTensors header, if SafeTensors can store this type.
    pub safetensors_name: Option<&'static str>,
    /// Elements per block (1 for plain types).
    pub block_elems: u32,
    /// Bytes per block.
    pub block_bytes: u32,
    /// Whether values are block-quantized (need a dequantizer rather than a cast).
    pub quantized: bool,
}

const fn row(
    dtype: DType,
    name: &'static str,
    ggml_id: Option<u32>,
    safetensors_name: Option<&'static str>,
    block_elems: u32,
    block_bytes: u32,
) -> DTypeInfo {
    DTypeInfo { dtype, name, ggml_id, safetensors_name, block_elems, block_bytes, quantized: block_elems > 1 }
}

/// Every dtype's facts, indexed by the `DType` discriminant.
#[rustfmt::skip]
pub const DTYPE_TABLE: [DTypeInfo; 50] = [
    //   dtype            name       ggml id   safetensors     elems bytes
    row(DType::F32,     "F32",     Some(0),  Some("F32"),     1,   4),
    row(DType::F16,     "F16",     Some(1),  Some("F16"),     1,   2),
    row(DType::Q4_0,    "Q4_0",    Some(2),  None,           32,  18),
    row(DType::Q4_1,    "Q4_1",    Some(3),  None,           32,  20),
    row(DType::Q5_0,    "Q5_0",    Some(6),  None,           32,  22),
    row(DType::Q5_1,    "Q5_1",    Some(7),  None,           32,  24),
    row(DType::Q8_0,    "Q8_0",    Some(8),  None,           32,  34),
    row(DType::Q8_1,    "Q8_1",    Some(9),  None,           32,  40),
    row(DType::Q2_K,    "Q2_K",    Some(10), None,          256,  84),
    row(DType::Q3_K,    "Q3_K",    Some(11), None,          256, 110),
    row(DType::Q4_K,    "Q4_K",    Some(12), None,          256, 144),
    row(DType::Q5_K,    "Q5_K",    Some(13), None,          256, 176),
    row(DType::Q6_K,    "Q6_K",    Some(14), None,          256, 210),
    row(DType::Q8_K,    "Q8_K",    Some(15), None,          256, 292),
    row(DType::IQ2_XXS, "IQ2_XXS", Some(16), None,          256,  66),
    row(DType::IQ2_XS,  "IQ2_XS",  Some(17), None,          256,  74),
    row(DType::IQ3_XXS, "IQ3_XXS", Some(18), None,          256,  98),
    row(DType::IQ1_S,   "IQ1_S",   Some(19), None,          256,  50),
    row(DType::IQ4_NL,  "IQ4_NL",  Some(20), None,           32,  18),
    row(DType::IQ3_S,   "IQ3_S",   Some(21), None,          256, 110),
    row(DType::IQ2_S,   "IQ2_S",   Some(22), None,          256,  82),
    row(DType::IQ4_XS,  "IQ4_XS",  Some(23), None,          256, 136),
    row(DType::I8,      "I8",      Some(24), Some("I8"),      1,   1),
    row(DType::I16,     "I16",     Some(25), Some("I16"),     1,   2),
    row(DType::I32,     "I32",     Some(26), Some("I32"),     1,   4),
    row(DType::I64,     "I64",     Some(27), Some("I64"),     1,   8),
    row(DType::F64,     "F64",     Some(28), Some("F64"),     1,   8),
    row(DType::IQ1_M,   "IQ1_M",   Some(29), None,          256,  56),
    row(DType::BF16,    "BF16",    Some(30), Some("BF16"),    1,   2),
    row(DType::TQ1_0,   "TQ1_0",   Some(34), None,          256,  54),
    row(DType::TQ2_0,   "TQ2_0",   Some(35), None,          256,  66),
    row(DType::MXFP4,   "MXFP4",   Some(39), None,           32,  17),
    row(DType::NVFP4,   "NVFP4",   Some(40), None,           64,  36),
    row(DType::Q1_0,    "Q1_0",    Some(41), None,          128,  18),
    row(DType::U8,      "U8",      None,     Some("U8"),      1,   1),
    row(DType::U16,     "U16",     None,     Some("U16"),     1,   2),
    row(DType::U32,     "U32",     None,     Some("U32"),     1,   4),
    row(DType::U64,     "U64",     None,     Some("U64"),     1,   8),
    row(DType::Bool,    "BOOL",    None,     Some("BOOL"),    1,   1),
    row(DType::F8_E4M3, "F8_E4M3", None,     Some("F8_E4M3"), 1,   1),
    row(DType::F8_E5M2, "F8_E5M2", None,     Some("F8_E5M2"), 1,   1),
    row(DType::F8_E8M0, "F8_E8M0", None,     Some("F8_E8M0"), 1,   1),
    row(DType::F8_E4M3FNUZ, "F8_E4M3FNUZ", None, Some("F8_E4M3FNUZ"), 1, 1),
    row(DType::F8_E5M2FNUZ, "F8_E5M2FNUZ", None, Some("F8_E5M2FNUZ"), 1, 1),
    // Sub-byte SafeTensors types: a "block" is the fewest elements filling whole bytes.
    row(DType::F4,      "F4",      None,     Some("F4"),      2,   1),
    row(DType::F6_E2M3, "F6_E2M3", None,     Some("F6_E2M3"), 4,   3),
    row(DType::F6_E3M2, "F6_E3M2", None,     Some("F6_E3M2"), 4,   3),
    row(DType::C64,     "C64",     None,     Some("C64"),     1,   8),
    row(DType::MLX_A8,  "MLX_A8",  None,     None,           32,  36),
    row(DType::MLX_A4,  "MLX_A4",  None,     None,           32,  20),
];

// The table is indexed by discriminant: make a misordered row a compile error.
const _: () = {
    let mut i = 0;
    while i < DTYPE_TABLE.len() {
        assert!(DTYPE_TABLE[i].dtype as usize == i, "DTYPE_TABLE row out of order");
        assert!(DTYPE_TABLE[i].block_elems > 0 && DTYPE_TABLE[i].block_bytes > 0);
        i += 1;
    }
};

impl DType {
    /// Every dtype, in table order.
    pub fn all() -> impl Iterator<Item = DType> {
        DTYPE_TABLE.iter().map(|row| row.dtype)
    }

    /// This dtype's row of [`DTYPE_TABLE`].
    pub const fn info(self) -> &'static DTypeInfo {
        &DTYPE_TABLE[self as usize]
    }

    /// The name ggml / SafeTensors print.
    pub const fn name(self) -> &'static str {
        self.info().name
    }

    /// Elements per block (1 for plain types).
    pub const fn block_elems(self) -> usize {
        self.info().block_elems as usize
    }

    /// Bytes per block.
    pub const fn block_bytes(self) -> usize {
        self.info().block_bytes as usize
    }

    /// Whether values are block-quantized.
    pub const fn is_quantized(self) -> bool {
        self.info().quantized
    }

    /// The GGUF `ggml_type` id, if GGUF can store this dtype.
    pub const fn ggml_id(self) -> Option<u32> {
        self.info().ggml_id
    }

    /// The dtype with GGUF `ggml_type` id `id`, if the table knows it.
    pub fn from_ggml_id(id: u32) -> Option<DType> {
        DTYPE_TABLE.iter().find(|row| row.ggml_id == Some(id)).map(|row| row.dtype)
    }

    /// The dtype named `name` in a SafeTensors header, if the table knows it.
    pub fn from_safetensors_name(name: &str) -> Option<DType> {
        DTYPE_TABLE.iter().find(|row| row.safetensors_name == Some(name)).map(|row| row.dtype)
    }

    /// The dtype whose printed name is `name` (case-insensitive), e.g. `"q4_k"`.
    pub fn from_name(name: &str) -> Option<DType> {
        DTYPE_TABLE.iter().find(|row| row.name.eq_ignore_ascii_case(name)).map(|row| row.dtype)
    }

    /// Bytes taken by a row of `row_elems` elements, or `None` if the row is not a whole number of
    /// blocks or the size overflows `usize`.
    pub const fn row_bytes(self, row_elems: usize) -> Option<usize> {
        let elems = self.block_elems();
        if !row_elems.is_multiple_of(elems) {
            return None;
        }
        (row_elems / elems).checked_mul(self.block_bytes())
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ggml_ids_are_unique_and_round_trip() {
        let mut seen = std::collections::HashSet::new();
        for dtype in DType::all() {
            if let Some(id) = dtype.ggml_id() {
                assert!(seen.insert(id), "ggml id {id} appears twice");
                assert_eq!(DType::from_ggml_id(id), Some(dtype));
            }
        }
        // Ids ggml removed (repacked Q4_0 variants) are unknown, not guessed.
        for removed in [4, 5, 31, 32, 33, 36, 37, 38] {
            assert_eq!(DType::from_ggml_id(removed), None);
        }
    }

    #[test]
    fn names_round_trip() {
        for dtype in DType::all() {
            assert_eq!(DType::from_name(dtype.name()), Some(dtype));
            if let Some(st) = dtype.info().safetensors_name {
                assert_eq!(DType::from_safetensors_name(st), Some(dtype));
            }
        }
    }

    #[test]
    fn row_bytes_checks_whole_blocks() {
        assert_eq!(DType::Q4_0.row_bytes(64), Some(36));
        assert_eq!(DType::Q4_0.row_bytes(48), None);
        assert_eq!(DType::MXFP4.row_bytes(2880), Some(90 * 17));
        assert_eq!(DType::F32.row_bytes(usize::MAX), None);
        assert_eq!(DType::Q6_K.row_bytes(256), Some(210));
    }
}
