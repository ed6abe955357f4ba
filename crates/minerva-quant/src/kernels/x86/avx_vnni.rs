//! AVX2 (+FMA, F16C) with AVX-VNNI (the VEX-encoded `vpdpwssd` of Intel's client CPUs since Alder
//! Lake, which have no AVX-512): the i16 matmul of the 32-value block formats, and [`dpbusd`] for
//! the repacked formats' kernels (`repacked::avx_vnni`, `repacked_k::avx_vnni`).
//!
//! These are `avx2_tile_i16`'s tiles (`tile_kernels!`) and `avx2_panel`'s panels with each
//! `vpmaddwd` + `vpaddd` pair that sums into an accumulator done by one `vpdpwssd`. The
//! instruction adds the same exact integers, so every result equals the AVX2 kernels' bit for bit.
//!
//! Memory safety does not rest on `unsafe` (slices and `bytemuck` unaligned loads; the `asm!`
//! reads registers only, in `avx2_panel::madd_add`); the caller promises AVX2, FMA, F16C and
//! AVX-VNNI (see `super::AVX2_VNNI`).

use core::arch::x86_64::{__m256i, _mm256_madd_epi16};

use super::avx2_panel;
use super::avx2_tile_i16::{
    self as tile_i16, Mxfp4, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, format_tiles, load_i16, tile_kernels,
};
use crate::activation::Activation;

/// `s + Σ u·i` over each i32 lane's four byte pairs (`u` unsigned, `i` signed): one VEX
/// `vpdpbusd`, exact (at most 4·255·128 per step). In `asm!` for the reason
/// `avx2_panel::madd_add` gives.
#[inline]
#[target_feature(enable = "avx2")]
#[allow(unsafe_code)]
pub(super) fn dpbusd(s: __m256i, u: __m256i, i: __m256i) -> __m256i {
    let mut s = s;
    // SAFETY: the instruction reads and writes registers only; the kernels calling it are reached
    // only from the `avx2+avxvnni` ISA's rows, which run after its check found AVX-VNNI.
    unsafe {
        core::arch::asm!("{{vex}} vpdpbusd {s}, {u}, {i}", s = inout(ymm_reg) s, u = in(ymm_reg) u,
            i = in(ymm_reg) i, options(pure, nomem, nostack, preserves_flags));
    }
    s
}

/// A block's quants · 32 activation quants: 8 i32 lanes, exact (`tile_i16::quants_dot`'s lanes),
/// the second half added by `vpdpwssd`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn quants_dot(q: (__m256i, __m256i), a: &[i16; 32]) -> __m256i {
    let first = _mm256_madd_epi16(q.0, load_i16(a));
    avx2_panel::madd_add::<{ avx2_panel::VEX_DPWSSD }>(first, q.1, load_i16(&a[16..]))
}

tile_kernels!("avx2,fma,f16c", super::quants_dot);

// The `matmul_i16` kernel of each format: these tiles below `avx2_panel::MIN_ACTS` activations,
// the panels with `vpdpwssd` from there.
format_tiles!(kernel_q8_0, Q8_0, tile_i16::decode_q8_0, tile_i16::decode_q8_0, avx2_panel::VEX_DPWSSD, "avx2,fma,f16c");
format_tiles!(kernel_q4_0, Q4_0, tile_i16::decode_q4_0, tile_i16::decode_q4_0, avx2_panel::VEX_DPWSSD, "avx2,fma,f16c");
format_tiles!(kernel_q4_1, Q4_1, tile_i16::decode_q4_1, tile_i16::decode_q4_1, avx2_panel::VEX_DPWSSD, "avx2,fma,f16c");
format_tiles!(kernel_q5_0, Q5_0, tile_i16::decode_q5_0, tile_i16::decode_q5_0, avx2_panel::VEX_DPWSSD, "avx2,fma,f16c");
format_tiles!(kernel_q5_1, Q5_1, tile_i16::decode_q5_1, tile_i16::decode_q5_1, avx2_panel::VEX_DPWSSD, "avx2,fma,f16c");
format_tiles!(
    kernel_mxfp4,
    Mxfp4,
    tile_i16::decode_mxfp4,
    tile_i16::decode_mxfp4,
    avx2_panel::VEX_DPWSSD,
    "avx2,fma,f16c"
);
