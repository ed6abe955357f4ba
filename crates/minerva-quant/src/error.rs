//! The crate's one error type.

use minerva_core::DType;

/// Why a (de)quantization call refused its arguments.
///
/// Every variant names the format and the lengths involved, so a message read in a log is enough to
/// find the offending tensor. No function in this crate panics on a wrong-sized input; it returns one
/// of these instead.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QuantError {
    /// The input bytes are not a whole number of blocks.
    #[error("{dtype}: {len} bytes is not a whole number of {block_bytes}-byte blocks")]
    PartialBlockBytes {
        /// The dtype being read.
        dtype: DType,
        /// The input's length in bytes.
        len: usize,
        /// Bytes per block of `dtype`.
        block_bytes: usize,
    },
    /// The input values are not a whole number of blocks (quantizing).
    #[error("{dtype}: {len} values is not a whole number of {block_elems}-value blocks")]
    PartialBlockValues {
        /// The dtype being written.
        dtype: DType,
        /// The number of input values.
        len: usize,
        /// Values per block of `dtype`.
        block_elems: usize,
    },
    /// The output slice's length does not match what the input produces.
    #[error("{dtype}: the output holds {actual} {unit}, the input makes {expected}")]
    OutputLength {
        /// The dtype being converted.
        dtype: DType,
        /// The length the input implies.
        expected: usize,
        /// The output slice's length.
        actual: usize,
        /// `"values"` or `"bytes"`.
        unit: &'static str,
    },
    /// There is no (de)quantizer for this dtype in this crate (IQ*, TQ*, integer types, …).
    #[error("{dtype}: not supported by minerva-quant ({operation})")]
    Unsupported {
        /// The dtype asked for.
        dtype: DType,
        /// `"dequantize"` or `"quantize"`.
        operation: &'static str,
    },
    /// A format that is not a single GGML dtype (HF MXFP4, MLX) got a component of the wrong size.
    #[error("{format}: {component} has {actual} {unit}, expected {expected}")]
    ComponentLength {
        /// The format, e.g. `"HF MXFP4"` or `"MLX affine"`.
        format: &'static str,
        /// The tensor component, e.g. `"scales"`.
        component: &'static str,
        /// The length the other arguments imply.
        expected: usize,
        /// The length given.
        actual: usize,
        /// `"values"` or `"bytes"`.
        unit: &'static str,
    },
    /// A component of a format that is not a single GGML dtype is not a whole number of groups.
    #[error("{format}: {component} has {len} bytes, not a whole number of {group_bytes}-byte groups")]
    PartialGroupBytes {
        /// The format, e.g. `"HF MXFP4"`.
        format: &'static str,
        /// The tensor component, e.g. `"blocks"`.
        component: &'static str,
        /// The length given, in bytes.
        len: usize,
        /// Bytes per group of 32 values.
        group_bytes: usize,
    },
    /// MLX affine output length is not a whole number of groups.
    #[error("MLX affine: {len} values is not a whole number of {group_size}-value groups")]
    PartialGroupValues {
        /// The number of values asked for.
        len: usize,
        /// Values per group.
        group_size: usize,
    },
    /// MLX scales/biases in a dtype MLX does not use for them.
    #[error("MLX affine: scales and biases must be F16, BF16 or F32, not {dtype}")]
    MlxScaleDType {
        /// The dtype given.
        dtype: DType,
    },
    /// MLX affine quantization parameters outside what MLX supports.
    #[error("MLX affine: bits {bits} / group size {group_size} unsupported (bits 2,3,4,5,6,8; group 32,64,128)")]
    MlxParameters {
        /// Bits per value asked for.
        bits: u32,
        /// Values per group asked for.
        group_size: usize,
    },
    /// A matrix product's operand does not have the length its shape implies.
    #[error("{dtype} matmul: {operand} has {actual} {unit}, the shape implies {expected}")]
    MatmulOperand {
        /// The weights' dtype.
        dtype: DType,
        /// `"weights"`, `"x"` or `"y"`.
        operand: &'static str,
        /// The length `rows`, `cols` and `n` imply.
        expected: usize,
        /// The slice's length.
        actual: usize,
        /// `"bytes"` or `"values"`.
        unit: &'static str,
    },
    /// A matrix shape whose element or byte count does not fit in `usize`.
    #[error("{dtype} matmul: shape {rows} x {cols} (n = {n}) overflows usize")]
    ShapeOverflow {
        /// The weights' dtype.
        dtype: DType,
        /// Rows of the weight matrix.
        rows: usize,
        /// Columns of the weight matrix.
        cols: usize,
        /// Activation vectors.
        n: usize,
    },
    /// An instruction set that does not exist or that this CPU does not run.
    #[error("no kernels for instruction set {isa:?} on this CPU (it runs: {})", crate::detected_isas().join(", "))]
    UnknownIsa {
        /// The name asked for.
        isa: String,
    },
}
