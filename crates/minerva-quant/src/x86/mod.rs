//! x86-64 fast paths, chosen at run time. Only [`avx2_dequantizer`] and [`avx2_dot_kernel`] leave
//! this module: they hand out a kernel only after `is_x86_feature_detected!` has confirmed the CPU
//! runs it.

// The one unsafe thing here: calling `#[target_feature]` functions, after run-time detection.
#![allow(unsafe_code)]

mod avx2;
mod avx2_dot;
mod avx2_tile;

use minerva_core::DType;

/// A row kernel that trusts its caller to have checked the lengths (it never reads or writes out
/// of bounds regardless: it zips whole blocks with whole outputs).
pub(crate) type RowKernel = fn(&[u8], &mut [f32]);

/// The AVX2 dequantizer for `dtype`, if there is one and this CPU has AVX2.
pub(crate) fn avx2_dequantizer(dtype: DType) -> Option<RowKernel> {
    if !std::arch::is_x86_feature_detected!("avx2") {
        return None;
    }
    // Each wrapper below is only reachable through this function, after the check above.
    let kernel: RowKernel = match dtype {
        // SAFETY: AVX2 was detected above; the kernels need nothing else.
        DType::Q8_0 => |b, o| unsafe { avx2::dequantize_row_q8_0(b, o) },
        // SAFETY: as above.
        DType::Q4_0 => |b, o| unsafe { avx2::dequantize_row_q4_0(b, o) },
        // SAFETY: as above.
        DType::Q4_1 => |b, o| unsafe { avx2::dequantize_row_q4_1(b, o) },
        // SAFETY: as above.
        DType::MXFP4 => |b, o| unsafe { avx2::dequantize_row_mxfp4(b, o) },
        // SAFETY: as above.
        DType::Q4_K => |b, o| unsafe { avx2::dequantize_row_q4_k(b, o) },
        // SAFETY: as above.
        DType::Q6_K => |b, o| unsafe { avx2::dequantize_row_q6_k(b, o) },
        _ => return None,
    };
    Some(kernel)
}

/// The AVX2 matmul dot kernel for `dtype`, if there is one and this CPU has AVX2, FMA and F16C.
pub(crate) fn avx2_dot_kernel(dtype: DType) -> Option<crate::matmul::DotKernel> {
    use std::arch::is_x86_feature_detected as has;
    if !(has!("avx2") && has!("fma") && has!("f16c")) {
        return None;
    }
    // Each wrapper below is only reachable through this function, after the check above.
    let kernel: crate::matmul::DotKernel = match dtype {
        // SAFETY: AVX2, FMA and F16C were detected above; the kernels need nothing else.
        DType::Q8_0 => |w, a| unsafe { avx2_dot::dot_q8_0(w, a) },
        // SAFETY: as above.
        DType::Q4_0 => |w, a| unsafe { avx2_dot::dot_q4_0(w, a) },
        // SAFETY: as above.
        DType::Q4_1 => |w, a| unsafe { avx2_dot::dot_q4_1(w, a) },
        // SAFETY: as above.
        DType::MXFP4 => |w, a| unsafe { avx2_dot::dot_mxfp4(w, a) },
        // SAFETY: as above.
        DType::Q4_K => |w, a| unsafe { avx2_dot::dot_q4_k(w, a) },
        // SAFETY: as above.
        DType::Q6_K => |w, a| unsafe { avx2_dot::dot_q6_k(w, a) },
        // SAFETY: as above.
        DType::F32 => |w, a| unsafe { avx2_dot::dot_f32(w, a) },
        // SAFETY: as above.
        DType::F16 => |w, a| unsafe { avx2_dot::dot_f16(w, a) },
        // SAFETY: as above.
        DType::BF16 => |w, a| unsafe { avx2_dot::dot_bf16(w, a) },
        _ => return None,
    };
    Some(kernel)
}

/// The AVX2 tile kernel (rows × activations at once) for `dtype` (`wide`: against i16 activations), if there is one and this CPU has
/// AVX2, FMA and F16C.
pub(crate) fn avx2_tile_kernel(dtype: DType, wide: bool) -> Option<crate::matmul::TileKernel> {
    use std::arch::is_x86_feature_detected as has;
    if !(has!("avx2") && has!("fma") && has!("f16c")) {
        return None;
    }
    // Each wrapper below is only reachable through this function, after the check above.
    let kernel: crate::matmul::TileKernel = match (dtype, wide) {
        // SAFETY: AVX2, FMA and F16C were detected above; the kernels need nothing else.
        (DType::Q8_0, false) => |w, rb, a, o| unsafe { avx2_tile::tiles_q8_0(w, rb, a, o) },
        // SAFETY: as above.
        (DType::Q8_0, true) => |w, rb, a, o| unsafe { avx2_tile::tiles_i16_q8_0(w, rb, a, o) },
        // SAFETY: as above.
        (DType::Q4_0, false) => |w, rb, a, o| unsafe { avx2_tile::tiles_q4_0(w, rb, a, o) },
        // SAFETY: as above.
        (DType::Q4_0, true) => |w, rb, a, o| unsafe { avx2_tile::tiles_i16_q4_0(w, rb, a, o) },
        // SAFETY: as above.
        (DType::Q4_1, false) => |w, rb, a, o| unsafe { avx2_tile::tiles_q4_1(w, rb, a, o) },
        // SAFETY: as above.
        (DType::Q4_1, true) => |w, rb, a, o| unsafe { avx2_tile::tiles_i16_q4_1(w, rb, a, o) },
        // SAFETY: as above.
        (DType::Q5_0, false) => |w, rb, a, o| unsafe { avx2_tile::tiles_q5_0(w, rb, a, o) },
        // SAFETY: as above.
        (DType::Q5_0, true) => |w, rb, a, o| unsafe { avx2_tile::tiles_i16_q5_0(w, rb, a, o) },
        // SAFETY: as above.
        (DType::Q5_1, false) => |w, rb, a, o| unsafe { avx2_tile::tiles_q5_1(w, rb, a, o) },
        // SAFETY: as above.
        (DType::Q5_1, true) => |w, rb, a, o| unsafe { avx2_tile::tiles_i16_q5_1(w, rb, a, o) },
        // SAFETY: as above.
        (DType::MXFP4, false) => |w, rb, a, o| unsafe { avx2_tile::tiles_mxfp4(w, rb, a, o) },
        // SAFETY: as above.
        (DType::MXFP4, true) => |w, rb, a, o| unsafe { avx2_tile::tiles_i16_mxfp4(w, rb, a, o) },
        _ => return None,
    };
    Some(kernel)
}
