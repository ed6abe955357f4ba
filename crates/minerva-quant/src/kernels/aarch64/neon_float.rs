//! NEON matmul of float weights (F32, F16, BF16) × f32 activations, in panels of up to
//! [`ROWS`] rows × [`ACTS`] activations (one activation in a decode), each row's values widened
//! once per panel.
//!
//! A (row, activation) pair's arithmetic is one fixed sequence wherever it runs, as on x86
//! (`x86/float_panel.rs`): four 4-lane accumulators over each 16 values (value `16k + 4s + i`
//! into accumulator `s`, lane `i`), the rest 4 at a time into the first, the four added
//! `(0 + 1) + (2 + 3)` and summed across lanes, then the last `cols % 4` products summed in order
//! and added. So a decode and a prefill or a batch give every pair the same bits (the engine's
//! batch invariance).
//!
//! F16 is widened without the `fp16` conversion instructions (their Rust intrinsics take the
//! unstable `f16` vector types): the 15 low bits shifted into an f32's place and multiplied by
//! 2¹¹², which is exact for zeros, subnormals and normals alike, with infinities and NaNs (all
//! exponent bits set) given all f32 exponent bits instead, and the sign put back.

use std::arch::aarch64::{
    float32x4_t, uint32x4_t, vaddq_f32, vaddvq_f32, vandq_u32, vbslq_u32, vcgeq_u32, vdupq_n_f32, vdupq_n_u32,
    vfmaq_f32, vld1_u16, vld1q_f32, vmovl_u16, vmulq_f32, vorrq_u32, vreinterpretq_f32_u32, vreinterpretq_u32_f32,
    vshll_n_u16, vshlq_n_u32,
};

use half::{bf16, f16};

use super::neon_vector::load;
use crate::activation::Activation;
use crate::kernels::float_format::{BF16, F16, F32, width};

/// Rows per panel.
const ROWS: usize = 2;
/// Activations per panel.
const ACTS: usize = 2;

/// 4 halves (F16 or BF16 bit patterns) at `b[..8]`, widened to u32 lanes (BF16: already in the
/// upper half, i.e. its f32 bits).
#[inline]
#[target_feature(enable = "neon")]
fn load4_halves<const FORMAT: u8>(b: &[u8]) -> uint32x4_t {
    let b = &b[..8];
    // SAFETY: `b` holds 8 bytes, four u16; `vld1_u16` has no alignment requirement.
    let halves = unsafe { vld1_u16(b.as_ptr().cast::<u16>()) };
    if FORMAT == BF16 { vshll_n_u16::<16>(halves) } else { vmovl_u16(halves) }
}

/// 4 stored values of `FORMAT` at `b` as f32, exactly.
#[inline]
#[target_feature(enable = "neon")]
fn widen<const FORMAT: u8>(b: &[u8]) -> float32x4_t {
    match FORMAT {
        F32 => {
            let b = &b[..16];
            // SAFETY: `b` holds 16 bytes, four f32; `vld1q_f32` has no alignment requirement.
            unsafe { vld1q_f32(b.as_ptr().cast::<f32>()) }
        }
        BF16 => vreinterpretq_f32_u32(load4_halves::<BF16>(b)),
        _ => {
            let h = load4_halves::<F16>(b);
            let magnitude = vandq_u32(h, vdupq_n_u32(0x7FFF));
            let shifted = vshlq_n_u32::<13>(magnitude);
            // 2^112 as f32 bits: exponent 127 + 112.
            let scaled = vmulq_f32(vreinterpretq_f32_u32(shifted), vreinterpretq_f32_u32(vdupq_n_u32(239 << 23)));
            let special = vcgeq_u32(magnitude, vdupq_n_u32(0x7C00));
            let value = vbslq_u32(special, vorrq_u32(shifted, vdupq_n_u32(0x7F80_0000)), vreinterpretq_u32_f32(scaled));
            let sign = vshlq_n_u32::<16>(vandq_u32(h, vdupq_n_u32(0x8000)));
            vreinterpretq_f32_u32(vorrq_u32(value, sign))
        }
    }
}

/// The stored value `b` (one value's bytes) of `format` as f32, for the last `cols % 4` columns.
fn scalar(format: u8, b: &[u8]) -> f32 {
    match format {
        F32 => f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        F16 => f16::from_le_bytes([b[0], b[1]]).to_f32(),
        _ => bf16::from_le_bytes([b[0], b[1]]).to_f32(),
    }
}

/// `out[r][a]` = row `r` · activation `a` (rows of `cols` values of `FORMAT`, activations of
/// `cols` f32), by the fixed sequence of the module comment.
#[inline]
#[target_feature(enable = "neon")]
fn panel<const FORMAT: u8, const R: usize, const A: usize>(rows: [&[u8]; R], acts: [&[f32]; A]) -> [[f32; A]; R] {
    let cols = acts[0].len();
    let w = width(FORMAT);
    let mut acc = [[[vdupq_n_f32(0.0); 4]; A]; R];
    // Columns `at..at + 4` into accumulator `s` of every pair.
    let mut step = |at: usize, s: usize| {
        let xs: [float32x4_t; A] = std::array::from_fn(|a| load(&acts[a][at..]));
        for (row, acc) in rows.iter().zip(acc.iter_mut()) {
            let v = widen::<FORMAT>(&row[w * at..]);
            for (acc, &x) in acc.iter_mut().zip(&xs) {
                acc[s] = vfmaq_f32(acc[s], v, x);
            }
        }
    };
    for k in 0..cols / 16 {
        for s in 0..4 {
            step(16 * k + 4 * s, s);
        }
    }
    for at in (cols / 16 * 16..cols / 4 * 4).step_by(4) {
        step(at, 0);
    }
    std::array::from_fn(|r| {
        std::array::from_fn(|a| {
            let [s0, s1, s2, s3] = acc[r][a];
            let head = vaddvq_f32(vaddq_f32(vaddq_f32(s0, s1), vaddq_f32(s2, s3)));
            let tail: f32 = (cols / 4 * 4..cols).map(|c| scalar(FORMAT, &rows[r][w * c..]) * acts[a][c]).sum();
            head + tail
        })
    })
}

/// Every row of `weights` (whole rows of `row_bytes`) × every activation, row-major into `out`
/// (rows × activations): panels of [`ROWS`] × [`ACTS`], the rest in smaller ones.
#[inline]
#[target_feature(enable = "neon")]
fn tiles<const FORMAT: u8>(weights: &[u8], row_bytes: usize, acts: &[Activation<'_>], out: &mut [f32]) {
    let n = acts.len();
    let mut row_groups = weights.chunks_exact(ROWS * row_bytes);
    let mut out_groups = out.chunks_exact_mut(ROWS * n);
    for (group, out) in (&mut row_groups).zip(&mut out_groups) {
        let rows: [&[u8]; ROWS] = std::array::from_fn(|r| &group[r * row_bytes..(r + 1) * row_bytes]);
        rows_times_acts::<FORMAT, ROWS>(rows, acts, out);
    }
    let rest = row_groups.remainder().chunks_exact(row_bytes).zip(out_groups.into_remainder().chunks_exact_mut(n));
    for (row, out) in rest {
        rows_times_acts::<FORMAT, 1>([row], acts, out);
    }
}

/// `R` rows × every activation into `out` (`R` rows of `acts.len()` values).
#[inline]
#[target_feature(enable = "neon")]
fn rows_times_acts<const FORMAT: u8, const R: usize>(rows: [&[u8]; R], acts: &[Activation<'_>], out: &mut [f32]) {
    let n = acts.len();
    let mut groups = acts.chunks_exact(ACTS);
    for (j, group) in (&mut groups).enumerate() {
        let result = panel::<FORMAT, R, ACTS>(rows, std::array::from_fn(|a| group[a].x));
        for (r, values) in result.iter().enumerate() {
            out[r * n + ACTS * j..][..ACTS].copy_from_slice(values);
        }
    }
    let done = n - groups.remainder().len();
    for (c, act) in groups.remainder().iter().enumerate() {
        let result = panel::<FORMAT, R, 1>(rows, [act.x]);
        for (r, values) in result.iter().enumerate() {
            out[r * n + done + c] = values[0];
        }
    }
}

#[target_feature(enable = "neon")]
pub(super) fn tiles_f32(w: &[u8], row_bytes: usize, acts: &[Activation<'_>], out: &mut [f32]) {
    tiles::<F32>(w, row_bytes, acts, out);
}

#[target_feature(enable = "neon")]
pub(super) fn tiles_f16(w: &[u8], row_bytes: usize, acts: &[Activation<'_>], out: &mut [f32]) {
    tiles::<F16>(w, row_bytes, acts, out);
}

#[target_feature(enable = "neon")]
pub(super) fn tiles_bf16(w: &[u8], row_bytes: usize, acts: &[Activation<'_>], out: &mut [f32]) {
    tiles::<BF16>(w, row_bytes, acts, out);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every f16 bit pattern widens to `half`'s f32: zeros and subnormals exactly, infinities
    /// with their sign, NaNs as NaNs.
    #[test]
    fn every_f16_widens_as_half_converts_it() {
        for first in (0..=u16::MAX).step_by(4) {
            let halves = [first, first + 1, first + 2, first + 3];
            let bytes: Vec<u8> = halves.iter().flat_map(|h| h.to_le_bytes()).collect();
            // SAFETY: NEON is part of the aarch64 baseline.
            let got: [f32; 4] = unsafe { std::mem::transmute(widen::<F16>(&bytes)) };
            for (h, got) in halves.iter().zip(got) {
                let want = f16::from_bits(*h).to_f32();
                assert!(
                    got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                    "{h:#06x}: {got} vs {want}"
                );
            }
        }
    }
}
