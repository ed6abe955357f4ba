//! NEON tile kernels for Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 and MXFP4 against i16 activations
//! (`Activation::q16`): `R`
//! weight rows × `C` activations per step, as `x86/avx2_tile.rs` does, so that each weight block
//! is unpacked once for `C` activations and each activation block loaded once for `R` rows.
//!
//! Per block, the 32 weight quants are widened to i16 and multiplied with the activation's 32 i16
//! quants by widening multiply-accumulates (`vmull`/`vmlal`, i16 × i16 → i32); the block's integer
//! sum is scaled once (`d_w · d_a`) in f32. A symmetric format's offset `k` is subtracted in the
//! integer sum (`Σ(q − k)·a = Σq·a − k·Σa`), Q4_1's minimum is added as `m · d_a·Σa`, as the
//! scalar kernels do. A block's sum stays below 2³¹: 32 products of at most 127 · 32767. MXFP4's
//! nibbles are looked up (`vqtbl1q_s8`) as their doubled E2M1 values, signed, with half the E8M0
//! scale, as on x86.

use std::arch::aarch64::{
    float32x4_t, int8x16_t, int16x8_t, int32x4_t, uint8x8_t, uint8x16_t, vaddvq_f32, vandq_u8, vandq_u16,
    vcvtq_f32_s32, vdupq_n_f32, vdupq_n_u8, vdupq_n_u16, vfmaq_f32, vget_high_u8, vget_low_s8, vget_low_s16,
    vget_low_u8, vgetq_lane_s32, vld1q_s8, vld1q_s16, vld1q_u8, vld1q_u16, vmlal_high_s16, vmlal_s16, vmovl_high_s8,
    vmovl_s8, vmovl_u8, vmull_s16, vorrq_s16, vqtbl1q_s8, vreinterpretq_s8_u8, vreinterpretq_s16_u16, vsetq_lane_s32,
    vshrq_n_u8, vtstq_u16,
};

use half::f16;

use crate::activation::Activation;
use crate::ggml::mxfp4::{KVALUES_MXFP4, e8m0_to_f32_half};
use crate::kernels::BlockKind as Kind;

/// A block's 32 weight quants widened to i16, in value order.
type Quants = [int16x8_t; 4];

/// The little-endian f16 at `b[..2]`.
#[inline]
#[target_feature(enable = "neon")]
fn f16_at(b: &[u8]) -> f32 {
    f16::from_le_bytes([b[0], b[1]]).to_f32()
}

#[inline]
#[target_feature(enable = "neon")]
fn load_i16x8(s: &[i16]) -> int16x8_t {
    let s = &s[..8];
    // SAFETY: `s` holds 8 i16; `vld1q_s16` has no alignment requirement.
    unsafe { vld1q_s16(s.as_ptr()) }
}

#[inline]
#[target_feature(enable = "neon")]
fn load_u8x16(s: &[u8]) -> uint8x16_t {
    let s = &s[..16];
    // SAFETY: `s` holds 16 bytes; `vld1q_u8` has no alignment requirement.
    unsafe { vld1q_u8(s.as_ptr()) }
}

#[inline]
#[target_feature(enable = "neon")]
fn widen_u8(v: uint8x8_t) -> int16x8_t {
    vreinterpretq_s16_u16(vmovl_u8(v))
}

/// 16 bytes of Q4 nibbles: the low nibble of byte j is value j, the high nibble value j + 16.
#[inline]
#[target_feature(enable = "neon")]
fn nibbles(qs: &[u8]) -> Quants {
    let bytes = load_u8x16(qs);
    let lo = vandq_u8(bytes, vdupq_n_u8(0x0F));
    let hi = vshrq_n_u8::<4>(bytes);
    [widen_u8(vget_low_u8(lo)), widen_u8(vget_high_u8(lo)), widen_u8(vget_low_u8(hi)), widen_u8(vget_high_u8(hi))]
}

/// 32 signed bytes (Q8_0 quants).
#[inline]
#[target_feature(enable = "neon")]
fn signed_bytes(qs: &[u8]) -> Quants {
    let (a, b) = (vreinterpretq_s8_u8(load_u8x16(qs)), vreinterpretq_s8_u8(load_u8x16(&qs[16..])));
    [vmovl_s8(vget_low_s8(a)), vmovl_high_s8(a), vmovl_s8(vget_low_s8(b)), vmovl_high_s8(b)]
}

/// Q5's 16-bit quants: `nibbles(qs)` with 0x10 added where bit `j` of the little-endian `qh` is
/// set, for value `j`.
#[inline]
#[target_feature(enable = "neon")]
fn q5(qh: &[u8], qs: &[u8]) -> Quants {
    const LANES: [u16; 8] = [1, 2, 4, 8, 16, 32, 64, 128];
    let lanes = {
        // SAFETY: `LANES` holds 8 u16; `vld1q_u16` has no alignment requirement.
        unsafe { vld1q_u16(LANES.as_ptr()) }
    };
    let mut q = nibbles(qs);
    for (k, q) in q.iter_mut().enumerate() {
        // Values 8k..8k+8 take their fifth bits from byte k of `qh`.
        let set = vtstq_u16(vdupq_n_u16(u16::from(qh[k])), lanes);
        *q = vorrq_s16(*q, vreinterpretq_s16_u16(vandq_u16(set, vdupq_n_u16(0x10))));
    }
    q
}

/// MXFP4's 32 nibbles (`qs`, as Q4_0's) as their doubled E2M1 values.
#[inline]
#[target_feature(enable = "neon")]
fn e2m1(qs: &[u8]) -> Quants {
    let table: int8x16_t = {
        // SAFETY: `KVALUES_MXFP4` holds 16 i8; `vld1q_s8` has no alignment requirement.
        unsafe { vld1q_s8(KVALUES_MXFP4.as_ptr()) }
    };
    let bytes = load_u8x16(qs);
    let (low, high) = (vqtbl1q_s8(table, vandq_u8(bytes, vdupq_n_u8(0x0F))), vqtbl1q_s8(table, vshrq_n_u8::<4>(bytes)));
    [vmovl_s8(vget_low_s8(low)), vmovl_high_s8(low), vmovl_s8(vget_low_s8(high)), vmovl_high_s8(high)]
}

/// `Σ q·a` over one block, in four i32 lanes.
#[inline]
#[target_feature(enable = "neon")]
fn block_dot(q: &Quants, a: &Quants) -> int32x4_t {
    let mut s = vmull_s16(vget_low_s16(q[0]), vget_low_s16(a[0]));
    s = vmlal_high_s16(s, q[0], a[0]);
    for k in 1..4 {
        s = vmlal_s16(s, vget_low_s16(q[k]), vget_low_s16(a[k]));
        s = vmlal_high_s16(s, q[k], a[k]);
    }
    s
}

/// `R` rows × `C` activations of 32-value blocks of `block_bytes`: `out[r][c]` = row r · act c.
#[inline]
#[target_feature(enable = "neon")]
fn tile<const R: usize, const C: usize>(
    rows: [&[u8]; R],
    acts: [&Activation<'_>; C],
    block_bytes: usize,
    kind: Kind,
    decode: &impl Fn(&[u8]) -> (Quants, f32, f32),
) -> [[f32; C]; R] {
    let mut acc: [[float32x4_t; C]; R] = [[vdupq_n_f32(0.0); C]; R];
    let mut offset = [[0.0f32; C]; R];
    for b in 0..acts[0].d.len() {
        let a: [Quants; C] = std::array::from_fn(|c| {
            let q = &acts[c].q16[32 * b..32 * b + 32];
            [load_i16x8(q), load_i16x8(&q[8..]), load_i16x8(&q[16..]), load_i16x8(&q[24..])]
        });
        for r in 0..R {
            let (q, d, m) = decode(&rows[r][block_bytes * b..block_bytes * (b + 1)]);
            for c in 0..C {
                let mut sum = block_dot(&q, &a[c]);
                if let Kind::Offset(k) = kind {
                    sum = vsetq_lane_s32::<0>(vgetq_lane_s32::<0>(sum) - k * acts[c].sums[b], sum);
                }
                acc[r][c] = vfmaq_f32(acc[r][c], vcvtq_f32_s32(sum), vdupq_n_f32(d * acts[c].d[b]));
                if kind == Kind::Min {
                    offset[r][c] += m * acts[c].ds[b];
                }
            }
        }
    }
    std::array::from_fn(|r| std::array::from_fn(|c| vaddvq_f32(acc[r][c]) + offset[r][c]))
}

/// Rows per tile.
const TILE_ROWS: usize = 4;
/// Activations per tile.
const TILE_ACTS: usize = 2;

/// Walks all rows of `w` (whole rows of `row_bytes`) × all activations in tiles, writing `out`
/// row-major (rows × acts).
#[target_feature(enable = "neon")]
fn tiles(
    w: &[u8],
    row_bytes: usize,
    acts: &[Activation<'_>],
    out: &mut [f32],
    block_bytes: usize,
    kind: Kind,
    decode: impl Fn(&[u8]) -> (Quants, f32, f32),
) {
    const R: usize = TILE_ROWS;
    const C: usize = TILE_ACTS;
    let n = acts.len();
    let mut row_groups = w.chunks_exact(R * row_bytes);
    let mut out_groups = out.chunks_exact_mut(R * n);
    for (rows, out) in (&mut row_groups).zip(&mut out_groups) {
        let rows: [&[u8]; R] = std::array::from_fn(|r| &rows[r * row_bytes..(r + 1) * row_bytes]);
        let mut groups = acts.chunks_exact(C);
        for (j, group) in (&mut groups).enumerate() {
            let result = tile::<R, C>(rows, std::array::from_fn(|c| &group[c]), block_bytes, kind, &decode);
            for (r, values) in result.iter().enumerate() {
                out[r * n + C * j..r * n + C * (j + 1)].copy_from_slice(values);
            }
        }
        let done = n - groups.remainder().len();
        for (c, act) in groups.remainder().iter().enumerate() {
            let result = tile::<R, 1>(rows, [act], block_bytes, kind, &decode);
            for (r, values) in result.iter().enumerate() {
                out[r * n + done + c] = values[0];
            }
        }
    }
    let rest = row_groups.remainder().chunks_exact(row_bytes).zip(out_groups.into_remainder().chunks_exact_mut(n));
    for (row, out) in rest {
        for (act, y) in acts.iter().zip(out) {
            *y = tile::<1, 1>([row], [act], block_bytes, kind, &decode)[0][0];
        }
    }
}

#[target_feature(enable = "neon")]
pub(super) fn tiles_i16_q8_0(w: &[u8], row_bytes: usize, acts: &[Activation<'_>], out: &mut [f32]) {
    tiles(w, row_bytes, acts, out, 34, Kind::Signed, |b| (signed_bytes(&b[2..34]), f16_at(b), 0.0));
}

#[target_feature(enable = "neon")]
pub(super) fn tiles_i16_q4_0(w: &[u8], row_bytes: usize, acts: &[Activation<'_>], out: &mut [f32]) {
    tiles(w, row_bytes, acts, out, 18, Kind::Offset(8), |b| (nibbles(&b[2..18]), f16_at(b), 0.0));
}

#[target_feature(enable = "neon")]
pub(super) fn tiles_i16_q4_1(w: &[u8], row_bytes: usize, acts: &[Activation<'_>], out: &mut [f32]) {
    tiles(w, row_bytes, acts, out, 20, Kind::Min, |b| (nibbles(&b[4..20]), f16_at(b), f16_at(&b[2..])));
}

#[target_feature(enable = "neon")]
pub(super) fn tiles_i16_q5_0(w: &[u8], row_bytes: usize, acts: &[Activation<'_>], out: &mut [f32]) {
    tiles(w, row_bytes, acts, out, 22, Kind::Offset(16), |b| (q5(&b[2..6], &b[6..22]), f16_at(b), 0.0));
}

#[target_feature(enable = "neon")]
pub(super) fn tiles_i16_q5_1(w: &[u8], row_bytes: usize, acts: &[Activation<'_>], out: &mut [f32]) {
    tiles(w, row_bytes, acts, out, 24, Kind::Min, |b| (q5(&b[4..8], &b[8..24]), f16_at(b), f16_at(&b[2..])));
}

#[target_feature(enable = "neon")]
pub(super) fn tiles_i16_mxfp4(w: &[u8], row_bytes: usize, acts: &[Activation<'_>], out: &mut [f32]) {
    tiles(w, row_bytes, acts, out, 17, Kind::Signed, |b| (e2m1(&b[1..17]), e8m0_to_f32_half(b[0]), 0.0));
}
