//! The WGSL kernels, one `.wgsl` beside each wrapper of the same name, embedded at build time.
//!
//! Kernels that read a weight are assembled as `common.wgsl` (byte-addressed loads, f16/bf16
//! unpack, E8M0) + `dequant/<dtype>.wgsl` (`load8`/`load1`: 8 or 1 dequantized values of a row)
//! + the kernel, and compiled once per (kernel, dtype, variant) by [`crate::gpu::Gpu`].

pub(crate) mod add;
pub(crate) mod add_bias;
pub(crate) mod argmax;
pub(crate) mod attention;
pub(crate) mod embed;
pub(crate) mod expert_bias;
pub(crate) mod kv_store;
pub(crate) mod moe_route;
pub(crate) mod moe_sum;
pub(crate) mod mul_mat;
pub(crate) mod mul_mat_id;
pub(crate) mod mul_mat_id_grouped;
pub(crate) mod rms_norm;
pub(crate) mod rope;
pub(crate) mod swiglu;
pub(crate) mod swiglu_oai;

use minerva_core::DType;

const COMMON: &str = include_str!("common.wgsl");

/// The dtypes whose weights the kernels read directly (matmul and embedding).
pub const WEIGHT_DTYPES: [DType; 9] = [
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::Q8_0,
    DType::Q4_0,
    DType::Q4_1,
    DType::Q4_K,
    DType::Q6_K,
    DType::MXFP4,
];

/// `load8`/`load1` for `dtype`, if the kernels can read it.
fn dequant_source(dtype: DType) -> Option<&'static str> {
    Some(match dtype {
        DType::F32 => include_str!("dequant/f32.wgsl"),
        DType::F16 => include_str!("dequant/f16.wgsl"),
        DType::BF16 => include_str!("dequant/bf16.wgsl"),
        DType::Q8_0 => include_str!("dequant/q8_0.wgsl"),
        DType::Q4_0 => include_str!("dequant/q4_0.wgsl"),
        DType::Q4_1 => include_str!("dequant/q4_1.wgsl"),
        DType::Q4_K => include_str!("dequant/q4_k.wgsl"),
        DType::Q6_K => include_str!("dequant/q6_k.wgsl"),
        DType::MXFP4 => include_str!("dequant/mxfp4.wgsl"),
        _ => return None,
    })
}

/// Whether the kernels can read weights of `dtype`.
pub fn supports(dtype: DType) -> bool {
    dequant_source(dtype).is_some()
}

/// A weight-reading kernel's full source for `dtype` (checked by [`supports`] at upload).
fn with_dequant(dtype: DType, kernel: &str) -> String {
    let dequant = dequant_source(dtype).expect("weights are checked at upload");
    format!("{COMMON}\n{dequant}\n{kernel}")
}
