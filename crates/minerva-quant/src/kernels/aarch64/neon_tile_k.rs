//! NEON matmul kernels for the K-quants Q2_K…Q6_K against Q8_K activations (what the popular
//! `Q4_K_M` and `Q5_K_M` mixes are made of): one weight row against [`ACTS`] activations at a time,
//! each super-block's 256 quants unpacked once for all of them, as `x86/avx2_tile_k.rs` does.
//!
//! Per super-block and activation the integer sums are exact: quants times activation quants by
//! `vmull_s8` + `vmlal_high_s8` (pairs summed in i16, at most 2·63·128 = 16 128), widened to i32
//! lanes by `vpaddlq_s16`, times the sub-block scales by `vmlaq_n_s32` (a super-block's sum stays
//! below 2³¹: at most 256·63·128·127 for Q6_K). They become f32 by the scalar kernels' expression
//! and are summed over super-blocks in their order, so the results are the reference's bit for
//! bit (and so the same whatever the batch).
//!
//! `dotprod`'s `sdot` would do in one instruction what `vmull` + `vmlal` + `vpaddl` do here; its
//! intrinsics are not stable in the Rust this project pins, so it is not used yet.

use std::arch::aarch64::{
    int8x16_t, int32x4_t, uint8x16_t, vaddvq_s32, vandq_u8, vdupq_n_s32, vdupq_n_u8, vget_low_s8, vld1q_u8,
    vmlal_high_s8, vmlaq_n_s32, vmull_s8, vorrq_u8, vpaddlq_s16, vreinterpretq_s8_u8, vshlq_n_u8, vshrq_n_u8, vtstq_u8,
};

use half::f16;

use crate::activation::Activation;
use crate::ggml::k_quants::{get_scale_min_k4, q3_k_scales};

/// Activations per pass over a row.
const ACTS: usize = 4;

/// Values per K-quant super-block.
const QK_K: usize = 256;

/// A super-block's 256 quants in value order, 16 per vector (Q3_K's plus 4: 0..8, Q6_K's plus
/// 32: 0..64).
type Quants = [int8x16_t; 16];

#[inline]
#[target_feature(enable = "neon")]
fn load16(b: &[u8]) -> uint8x16_t {
    let b = &b[..16];
    // SAFETY: `b` holds 16 bytes; `vld1q_u8` has no alignment requirement.
    unsafe { vld1q_u8(b.as_ptr()) }
}

/// The little-endian f16 at `b[..2]`, as f32.
fn f16_at(b: &[u8]) -> f32 {
    f16::from_le_bytes([b[0], b[1]]).to_f32()
}

/// `Σ q·a` over each 16 values of a super-block (`a`: its 256 activation quants, i8 bit patterns),
/// as four i32 partial sums per 16.
#[inline]
#[target_feature(enable = "neon")]
fn sums16(q: &Quants, a: &[u8]) -> [int32x4_t; 16] {
    std::array::from_fn(|i| {
        let a = vreinterpretq_s8_u8(load16(&a[16 * i..]));
        vpaddlq_s16(vmlal_high_s8(vmull_s8(vget_low_s8(q[i]), vget_low_s8(a)), q[i], a))
    })
}

/// 128 bytes of K-quant nibbles (per 32 bytes: values 0..32 in the low nibbles, 32..64 in the
/// high ones) as 256 quants in value order.
#[inline]
#[target_feature(enable = "neon")]
fn nibbles(qs: &[u8]) -> [uint8x16_t; 16] {
    let mask = vdupq_n_u8(0x0F);
    let mut q = [vdupq_n_u8(0); 16];
    for (c, quarter) in q.chunks_exact_mut(4).enumerate() {
        let (b0, b1) = (load16(&qs[32 * c..]), load16(&qs[32 * c + 16..]));
        quarter.copy_from_slice(&[vandq_u8(b0, mask), vandq_u8(b1, mask), vshrq_n_u8::<4>(b0), vshrq_n_u8::<4>(b1)]);
    }
    q
}

/// 64 bytes of 2-bit quants (bytes `32·half + lane`, bits `2·quarter`, as `two_bits` reads them)
/// as 256 quants in value order.
#[inline]
#[target_feature(enable = "neon")]
fn two_bit_quants(qs: &[u8]) -> [uint8x16_t; 16] {
    let mask = vdupq_n_u8(0x03);
    let bytes: [uint8x16_t; 4] = std::array::from_fn(|i| load16(&qs[16 * i..]));
    std::array::from_fn(|g| {
        // Values 16g..16g+16: half g/8, quarter (g%8)/2, lanes 16(g%2)..16(g%2)+16.
        let v = bytes[2 * (g / 8) + g % 2];
        match (g % 8) / 2 {
            0 => vandq_u8(v, mask),
            1 => vandq_u8(vshrq_n_u8::<2>(v), mask),
            2 => vandq_u8(vshrq_n_u8::<4>(v), mask),
            _ => vshrq_n_u8::<6>(v),
        }
    })
}

/// Q2_K's quants (bytes 16..80).
#[inline]
#[target_feature(enable = "neon")]
fn quants_q2_k(w: &[u8]) -> Quants {
    two_bit_quants(&w[16..80]).map(|v| vreinterpretq_s8_u8(v))
}

/// Q3_K's quants plus 4: the 2-bit quants of bytes 32..96 with 4 added where the `hmask` bit
/// (bit `e / 32` of byte `e % 32`, bytes 0..32) is set.
#[inline]
#[target_feature(enable = "neon")]
fn quants_q3_k(w: &[u8]) -> Quants {
    let hmask = [load16(w), load16(&w[16..])];
    let mut q = two_bit_quants(&w[32..96]);
    for (g, q) in q.iter_mut().enumerate() {
        let set = vtstq_u8(hmask[g % 2], vdupq_n_u8(1 << (g / 2)));
        *q = vorrq_u8(*q, vandq_u8(set, vdupq_n_u8(0x04)));
    }
    q.map(|v| vreinterpretq_s8_u8(v))
}

/// Q4_K's quants (bytes 16..144).
#[inline]
#[target_feature(enable = "neon")]
fn quants_q4_k(w: &[u8]) -> Quants {
    nibbles(&w[16..144]).map(|v| vreinterpretq_s8_u8(v))
}

/// Q5_K's quants: the nibbles of bytes 48..176 with the fifth bits of bytes 16..48 (bit `e / 32`
/// of byte `e % 32` for value `e`) as 16.
#[inline]
#[target_feature(enable = "neon")]
fn quants_q5_k(w: &[u8]) -> Quants {
    let qh = [load16(&w[16..]), load16(&w[32..])];
    let mut q = nibbles(&w[48..176]);
    for (g, q) in q.iter_mut().enumerate() {
        // Values 16g..16g+16: bit g/2 of bytes 16(g%2)..16(g%2)+16.
        let set = vtstq_u8(qh[g % 2], vdupq_n_u8(1 << (g / 2)));
        *q = vorrq_u8(*q, vandq_u8(set, vdupq_n_u8(0x10)));
    }
    q.map(|v| vreinterpretq_s8_u8(v))
}

/// Q6_K's quants plus 32 (0..64): per 128 values, four nibbles from `ql` (bytes 0..128, 64 per
/// half) and two bits from `qh` (bytes 128..192, 32 per half), as `two_bits` reads them.
#[inline]
#[target_feature(enable = "neon")]
fn quants_q6_k(w: &[u8]) -> Quants {
    let (mask4, mask2) = (vdupq_n_u8(0x0F), vdupq_n_u8(0x03));
    let mut q = [vreinterpretq_s8_u8(vdupq_n_u8(0)); 16];
    for (half, out) in q.chunks_exact_mut(8).enumerate() {
        let l: [uint8x16_t; 4] = std::array::from_fn(|i| load16(&w[64 * half + 16 * i..]));
        let h = [load16(&w[128 + 32 * half..]), load16(&w[144 + 32 * half..])];
        // Groups of 16 in value order: low nibbles of l0..l3 with bits 0-1 then 2-3 of h0, h1;
        // high nibbles of l0..l3 with bits 4-5 then 6-7.
        let low = [vandq_u8(l[0], mask4), vandq_u8(l[1], mask4), vandq_u8(l[2], mask4), vandq_u8(l[3], mask4)];
        let high = [vshrq_n_u8::<4>(l[0]), vshrq_n_u8::<4>(l[1]), vshrq_n_u8::<4>(l[2]), vshrq_n_u8::<4>(l[3])];
        let bits = [
            vandq_u8(h[0], mask2),
            vandq_u8(h[1], mask2),
            vandq_u8(vshrq_n_u8::<2>(h[0]), mask2),
            vandq_u8(vshrq_n_u8::<2>(h[1]), mask2),
            vandq_u8(vshrq_n_u8::<4>(h[0]), mask2),
            vandq_u8(vshrq_n_u8::<4>(h[1]), mask2),
            vshrq_n_u8::<6>(h[0]),
            vshrq_n_u8::<6>(h[1]),
        ];
        for (g, out) in out.iter_mut().enumerate() {
            let nibble = if g < 4 { low[g] } else { high[g - 4] };
            *out = vreinterpretq_s8_u8(vorrq_u8(nibble, vshlq_n_u8::<4>(bits[g])));
        }
    }
    q
}

/// A super-block unpacked once for all the activations of a pass: its quants, one scale and one
/// minimum per 16 values (the K4 formats' per 32 repeated), the offset its quants carry, and its
/// f16 scales (`dmin` only where the format has minimums).
struct SuperBlock {
    q: Quants,
    scales: [i32; 16],
    mins: [i32; 16],
    offset: i32,
    d: f32,
    dmin: Option<f32>,
}

/// Q4_K's and Q5_K's 6-bit scales and minimums (bytes 4..16), each for its 32 values.
fn k4_scales_mins(w: &[u8]) -> ([i32; 16], [i32; 16]) {
    let packed: &[u8; 12] = w[4..16].try_into().expect("12 bytes of scales");
    let pairs: [(u8, u8); 8] = std::array::from_fn(|j| get_scale_min_k4(j, packed));
    (std::array::from_fn(|g| i32::from(pairs[g / 2].0)), std::array::from_fn(|g| i32::from(pairs[g / 2].1)))
}

#[inline]
#[target_feature(enable = "neon")]
fn unpack_q2_k(w: &[u8]) -> SuperBlock {
    SuperBlock {
        q: quants_q2_k(w),
        scales: std::array::from_fn(|g| i32::from(w[g] & 0x0F)),
        mins: std::array::from_fn(|g| i32::from(w[g] >> 4)),
        offset: 0,
        d: f16_at(&w[80..]),
        dmin: Some(f16_at(&w[82..])),
    }
}

#[inline]
#[target_feature(enable = "neon")]
fn unpack_q3_k(w: &[u8]) -> SuperBlock {
    let scales = q3_k_scales(w[96..108].try_into().expect("12 bytes of scales"));
    SuperBlock {
        q: quants_q3_k(w),
        scales: scales.map(i32::from),
        mins: [0; 16],
        offset: 4,
        d: f16_at(&w[108..]),
        dmin: None,
    }
}

#[inline]
#[target_feature(enable = "neon")]
fn unpack_q4_k(w: &[u8]) -> SuperBlock {
    let (scales, mins) = k4_scales_mins(w);
    SuperBlock { q: quants_q4_k(w), scales, mins, offset: 0, d: f16_at(w), dmin: Some(f16_at(&w[2..])) }
}

#[inline]
#[target_feature(enable = "neon")]
fn unpack_q5_k(w: &[u8]) -> SuperBlock {
    let (scales, mins) = k4_scales_mins(w);
    SuperBlock { q: quants_q5_k(w), scales, mins, offset: 0, d: f16_at(w), dmin: Some(f16_at(&w[2..])) }
}

#[inline]
#[target_feature(enable = "neon")]
fn unpack_q6_k(w: &[u8]) -> SuperBlock {
    SuperBlock {
        q: quants_q6_k(w),
        scales: std::array::from_fn(|g| i32::from(w[192 + g] as i8)),
        mins: [0; 16],
        offset: 32,
        d: f16_at(&w[208..]),
        dmin: None,
    }
}

/// Super-block `sb` (index `b` in its row) · one activation, as the scalar kernels compute it:
/// `Σ sc·Σ(q - offset)·a` and `Σ m·Σa` exact, then `d·d_a·sum - dmin·d_a·mins` in f32.
#[inline]
#[target_feature(enable = "neon")]
fn value(sb: &SuperBlock, b: usize, act: &Activation<'_>) -> f32 {
    let s = sums16(&sb.q, &act.qs[QK_K * b..QK_K * (b + 1)]);
    let bsums = &act.bsums[16 * b..16 * (b + 1)];
    let mut acc = vdupq_n_s32(0);
    for (s, &sc) in s.iter().zip(&sb.scales) {
        acc = vmlaq_n_s32(acc, *s, sc);
    }
    let scaled_bsum = |weights: &[i32; 16]| -> i32 { weights.iter().zip(bsums).map(|(&w, &a)| w * i32::from(a)).sum() };
    let mut sum = vaddvq_s32(acc);
    if sb.offset != 0 {
        sum -= sb.offset * scaled_bsum(&sb.scales);
    }
    let ad = act.d[b];
    match sb.dmin {
        Some(dmin) => sb.d * ad * sum as f32 - dmin * ad * scaled_bsum(&sb.mins) as f32,
        None => sb.d * ad * sum as f32,
    }
}

/// Every row of `weights` (whole rows of `row_bytes`, super-blocks of `block_bytes`) against every
/// activation, [`ACTS`] at a time: `unpack` takes a super-block apart once per pass, [`value`]
/// gives each (super-block, activation) pair's f32 term, summed per output from -0.0 in
/// super-block order as the scalar kernels' `sum()` does.
#[inline]
#[target_feature(enable = "neon")]
fn tiles(
    weights: &[u8],
    row_bytes: usize,
    acts: &[Activation<'_>],
    out: &mut [f32],
    block_bytes: usize,
    unpack: impl Fn(&[u8]) -> SuperBlock,
) {
    let n = acts.len();
    for (row, y) in weights.chunks_exact(row_bytes).zip(out.chunks_exact_mut(n)) {
        for (group, ys) in acts.chunks(ACTS).zip(y.chunks_mut(ACTS)) {
            let mut totals = [-0.0f32; ACTS];
            for (b, w) in row.chunks_exact(block_bytes).enumerate() {
                let sb = unpack(w);
                for (total, act) in totals.iter_mut().zip(group) {
                    *total += value(&sb, b, act);
                }
            }
            ys.copy_from_slice(&totals[..ys.len()]);
        }
    }
}

#[target_feature(enable = "neon")]
pub(super) fn tiles_q2_k(w: &[u8], row_bytes: usize, acts: &[Activation<'_>], out: &mut [f32]) {
    tiles(w, row_bytes, acts, out, 84, |w| unpack_q2_k(w));
}

#[target_feature(enable = "neon")]
pub(super) fn tiles_q3_k(w: &[u8], row_bytes: usize, acts: &[Activation<'_>], out: &mut [f32]) {
    tiles(w, row_bytes, acts, out, 110, |w| unpack_q3_k(w));
}

#[target_feature(enable = "neon")]
pub(super) fn tiles_q4_k(w: &[u8], row_bytes: usize, acts: &[Activation<'_>], out: &mut [f32]) {
    tiles(w, row_bytes, acts, out, 144, |w| unpack_q4_k(w));
}

#[target_feature(enable = "neon")]
pub(super) fn tiles_q5_k(w: &[u8], row_bytes: usize, acts: &[Activation<'_>], out: &mut [f32]) {
    tiles(w, row_bytes, acts, out, 176, |w| unpack_q5_k(w));
}

#[target_feature(enable = "neon")]
pub(super) fn tiles_q6_k(w: &[u8], row_bytes: usize, acts: &[Activation<'_>], out: &mut [f32]) {
    tiles(w, row_bytes, acts, out, 210, |w| unpack_q6_k(w));
}
