//! AVX-512 (BW, VL, VNNI, on 256-bit vectors) kernels for decode: fewer than 4 activations of the
//! 32-value block formats against i16 activations.
//!
//! These are `avx2_tile_i16`'s row tiles (`rows_kernel!`: the same lanes, integer reductions and
//! f32 steps, so the same bits) with less work per block and row:
//!
//! * the block dot as one `vpmaddwd` and one `vpdpwssd` (AVX2: two `vpmaddwd` and a `vpaddd`);
//! * MXFP4's nibbles looked up as signed i16 by `vpermw`, which reads only an index's low 4 bits,
//!   so the low nibble needs no mask (AVX2: per half a magnitude `vpshufb`, a shift and `vpsignw`);
//! * Q5's fifth bits added by a masked `vpaddw` with the 32 bits as the mask (AVX2: per half a
//!   broadcast, an `and`, a compare and another `and`).
//!
//! MXFP4 at one activation goes to `avx512_mxfp4` (bytes by `vpdpbusd`) for whole groups of
//! four rows, and comes here for the rest.
//!
//! Only the integers each block produces are computed differently, and they are exact, so a row's
//! result here equals the AVX2 tiles' and the AVX-512 panels' bit for bit.
//!
//! Memory safety does not rest on `unsafe` (slices and `bytemuck` unaligned loads; the one `asm!`
//! reads a slice it has bounds-checked); the caller promises AVX2, FMA, F16C and AVX-512
//! F/BW/VL/VNNI (see `super::AVX512_VNNI`).

use core::arch::x86_64::{
    __m256i, _mm256_madd_epi16, _mm256_mask_add_epi16, _mm256_permutexvar_epi16, _mm256_set1_epi16, _mm256_srli_epi16,
};

use bytemuck::pod_read_unaligned;

use super::avx2_dot::{f16_at, f16_pair_at};
use super::avx2_panel;
use super::avx2_tile_i16::{
    self as tile_i16, Decoded, Mxfp4, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, bytes_wide, format_tiles, load_i16, nibbles_wide,
    tile_kernels,
};
use super::avx512_mxfp4;
use crate::activation::Activation;
use crate::ggml::mxfp4::{KVALUES_MXFP4, e8m0_to_f32_half};

/// A block's quants · 32 activation quants: 8 i32 lanes, exact (`tile_i16::quants_dot`'s lanes).
///
/// The `vpdpwssd` is written in `asm!` because LLVM splits the intrinsic into `vpmaddwd` +
/// `vpaddd` unless it tunes for a CPU it knows to run `vpdpwssd` fast (as in `avx512_panel`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[allow(unsafe_code)]
pub(super) fn quants_dot(q: (__m256i, __m256i), a: &[i16; 32]) -> __m256i {
    let mut s = _mm256_madd_epi16(q.0, load_i16(a));
    let second = &a[16..];
    // SAFETY: the instruction reads the 32 bytes of `second` (16 i16, in bounds of the array) and
    // writes only `s`'s register; the caller promises AVX-512 VL and VNNI (this function's features).
    unsafe {
        core::arch::asm!("vpdpwssd {s}, {w}, ymmword ptr [{p}]", s = inout(ymm_reg) s, w = in(ymm_reg) q.1,
            p = in(reg) second.as_ptr(), options(pure, readonly, nostack, preserves_flags));
    }
    s
}

tile_kernels!("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni", super::quants_dot);

/// The doubled E2M1 values as i16, by nibble.
pub(super) const MXFP4_VALUES: [i16; 16] = {
    let mut values = [0; 16];
    let mut i = 0;
    while i < 16 {
        values[i] = KVALUES_MXFP4[i] as i16;
        i += 1;
    }
    values
};

#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) fn decode_mxfp4(b: &[u8]) -> Decoded {
    let table = pod_read_unaligned::<__m256i>(bytemuck::cast_slice(&MXFP4_VALUES));
    let bytes = bytes_wide(&b[1..]);
    let low = _mm256_permutexvar_epi16(bytes, table);
    let high = _mm256_permutexvar_epi16(_mm256_srli_epi16::<4>(bytes), table);
    ((low, high), e8m0_to_f32_half(b[0]), 0.0)
}

/// A Q5 block's 32 quants (values 0..16, 16..32): the nibbles plus 16 where the value's bit of
/// `qh` is set (a nibble is below 16, so adding sets the fifth bit as `or` would).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn q5_quants(qh: &[u8], qs: &[u8]) -> (__m256i, __m256i) {
    let (low, high) = nibbles_wide(qs);
    let bits = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
    let sixteen = _mm256_set1_epi16(0x10);
    (
        _mm256_mask_add_epi16(low, bits as u16, low, sixteen),
        _mm256_mask_add_epi16(high, (bits >> 16) as u16, high, sixteen),
    )
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn decode_q5_0(b: &[u8]) -> Decoded {
    (q5_quants(&b[2..6], &b[6..]), f16_at(b), 0.0)
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn decode_q5_1(b: &[u8]) -> Decoded {
    let (d, m) = f16_pair_at(b);
    (q5_quants(&b[4..8], &b[8..]), d, m)
}

// The `matmul_i16` kernel of each format below the AVX-512 panels' `MIN_ACTS`: these tiles (`G`
// activation groups per tile) below `avx2_panel::MIN_ACTS` activations, the AVX2 panels from
// there with their sums by EVEX `vpdpwssd`.
format_tiles!(
    tiles_q8_0,
    Q8_0,
    tile_i16::decode_q8_0,
    tile_i16::decode_q8_0,
    avx2_panel::EVEX_DPWSSD,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"
);
format_tiles!(
    tiles_q4_0,
    Q4_0,
    tile_i16::decode_q4_0,
    tile_i16::decode_q4_0,
    avx2_panel::EVEX_DPWSSD,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"
);
format_tiles!(
    tiles_q4_1,
    Q4_1,
    tile_i16::decode_q4_1,
    tile_i16::decode_q4_1,
    avx2_panel::EVEX_DPWSSD,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"
);
format_tiles!(
    tiles_q5_0,
    Q5_0,
    decode_q5_0,
    tile_i16::decode_q5_0,
    avx2_panel::EVEX_DPWSSD,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"
);
format_tiles!(
    tiles_q5_1,
    Q5_1,
    decode_q5_1,
    tile_i16::decode_q5_1,
    avx2_panel::EVEX_DPWSSD,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"
);
format_tiles!(
    tiles_mxfp4_any,
    Mxfp4,
    decode_mxfp4,
    tile_i16::decode_mxfp4,
    avx2_panel::EVEX_DPWSSD,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"
);

/// MXFP4's `matmul_i16` kernel below the AVX-512 panels: at one activation, rows in groups of
/// four by `avx512_mxfp4` (four rows per 512-bit vector), the rest by these tiles.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) fn tiles_mxfp4<const G: usize>(w: &[u8], row_bytes: usize, acts: &[Activation<'_>], out: &mut [f32]) {
    let done = match acts {
        [act] => avx512_mxfp4::rows(w, row_bytes, act, out),
        _ => 0,
    };
    // With one activation `out` has one value per row; with more, `done` is 0.
    if done < out.len() {
        tiles_mxfp4_any::<G>(&w[done * row_bytes..], row_bytes, acts, &mut out[done..]);
    }
}
