//! The scalar reference row of each dtype ([`ROWS`]), and its dot kernels: one weight row × one
//! (quantized) activation, as ggml's generic `ggml_vec_dot_*` compute them — an exact integer sum per block (per sub-block for K-quants),
//! scaled by the block's f32 factors and summed in f32 in block order.

use bytemuck::pod_read_unaligned;
use half::f16;
use minerva_core::DType::{
    BF16, F16, F32, MLX_A4, MLX_A8, MXFP4, Q2_K, Q3_K, Q4_0, Q4_1, Q4_K, Q5_0, Q5_1, Q5_K, Q6_K, Q8_0, Q8_K,
};

use super::{DequantizeFn, Kernels};
use crate::activation::Activation;
use crate::ggml::k_quants::{get_scale_min_k4, nibble_k, q3_k_scales, two_bits};
use crate::ggml::mxfp4::{KVALUES_MXFP4, e8m0_to_f32_half};
use crate::ggml::q5::five_bit_quants;
use crate::{BlockQ2_K, BlockQ3_K, BlockQ4_K, BlockQ5_K, BlockQ6_K};

/// The reference row of every dtype this crate has kernels for: F32/F16/BF16, the 32-value
/// block formats (Q8_0 activations, and i16 ones), the K-quants (Q8_K activations; Q8_K itself
/// only converts).
pub(super) const ROWS: [Kernels; 17] = [
    Kernels::new(F32).dequantize(crate::dequantize_row_f32).dot(F32, dot_f32),
    // Read by the GPU's kernels; here for the values they must give.
    Kernels::new(MLX_A8).dequantize(crate::mlx::dequantize_row_mlx_a8),
    Kernels::new(MLX_A4).dequantize(crate::mlx::dequantize_row_mlx_a4),
    Kernels::new(F16).dequantize(crate::dequantize_row_f16).dot(F32, dot_f16),
    Kernels::new(BF16).dequantize(crate::dequantize_row_bf16).dot(F32, dot_bf16),
    Kernels::new(Q8_0)
        .dequantize(crate::dequantize_row_q8_0_ref)
        .quantize(crate::quantize_row_q8_0_ref)
        .dot(Q8_0, dot_q8_0)
        .dot_i16(|row, act| dot_i16_dequantized(row, act, crate::dequantize_row_q8_0_ref))
        .repacked(|group, _, acts, out| crate::repack::reference_kernel(Q8_0, group, acts, out)),
    Kernels::new(Q4_0)
        .dequantize(crate::dequantize_row_q4_0_ref)
        .quantize(crate::quantize_row_q4_0_ref)
        .dot(Q8_0, dot_q4_0)
        .dot_i16(|row, act| dot_i16_dequantized(row, act, crate::dequantize_row_q4_0_ref))
        .repacked(|group, _, acts, out| crate::repack::reference_kernel(Q4_0, group, acts, out)),
    Kernels::new(Q4_1)
        .dequantize(crate::dequantize_row_q4_1_ref)
        .quantize(crate::quantize_row_q4_1_ref)
        .dot(Q8_0, dot_q4_1)
        .dot_i16(|row, act| dot_i16_dequantized(row, act, crate::dequantize_row_q4_1_ref))
        .repacked(|group, _, acts, out| crate::repack::reference_kernel(Q4_1, group, acts, out)),
    Kernels::new(Q5_0)
        .dequantize(crate::dequantize_row_q5_0_ref)
        .quantize(crate::quantize_row_q5_0_ref)
        .dot(Q8_0, dot_q5_0)
        .dot_i16(|row, act| dot_i16_dequantized(row, act, crate::dequantize_row_q5_0_ref))
        .repacked(|group, _, acts, out| crate::repack::reference_kernel(Q5_0, group, acts, out)),
    Kernels::new(Q5_1)
        .dequantize(crate::dequantize_row_q5_1_ref)
        .quantize(crate::quantize_row_q5_1_ref)
        .dot(Q8_0, dot_q5_1)
        .dot_i16(|row, act| dot_i16_dequantized(row, act, crate::dequantize_row_q5_1_ref))
        .repacked(|group, _, acts, out| crate::repack::reference_kernel(Q5_1, group, acts, out)),
    Kernels::new(MXFP4)
        .dequantize(crate::dequantize_row_mxfp4_ref)
        .quantize(crate::quantize_row_mxfp4_ref)
        .dot(Q8_0, dot_mxfp4)
        .dot_i16(|row, act| dot_i16_dequantized(row, act, crate::dequantize_row_mxfp4_ref))
        .repacked(|group, _, acts, out| crate::repack::reference_kernel(MXFP4, group, acts, out)),
    Kernels::new(Q2_K)
        .dequantize(crate::dequantize_row_q2_k_ref)
        .dot(Q8_K, dot_q2_k)
        .repacked(|group, _, acts, out| crate::repack::reference_kernel(Q2_K, group, acts, out)),
    Kernels::new(Q3_K)
        .dequantize(crate::dequantize_row_q3_k_ref)
        .dot(Q8_K, dot_q3_k)
        .repacked(|group, _, acts, out| crate::repack::reference_kernel(Q3_K, group, acts, out)),
    Kernels::new(Q4_K)
        .dequantize(crate::dequantize_row_q4_k_ref)
        .quantize(crate::quantize_row_q4_k_ref)
        .dot(Q8_K, dot_q4_k)
        .repacked(|group, _, acts, out| crate::repack::reference_kernel(Q4_K, group, acts, out)),
    Kernels::new(Q5_K)
        .dequantize(crate::dequantize_row_q5_k_ref)
        .quantize(crate::quantize_row_q5_k_ref)
        .dot(Q8_K, dot_q5_k)
        .repacked(|group, _, acts, out| crate::repack::reference_kernel(Q5_K, group, acts, out)),
    Kernels::new(Q6_K)
        .dequantize(crate::dequantize_row_q6_k_ref)
        .quantize(crate::quantize_row_q6_k_ref)
        .dot(Q8_K, dot_q6_k)
        .repacked(|group, _, acts, out| crate::repack::reference_kernel(Q6_K, group, acts, out)),
    Kernels::new(Q8_K).dequantize(crate::dequantize_row_q8_k_ref).quantize(crate::quantize_row_q8_k_ref),
];

/// The i16-activation kernel of the 32-value formats: each weight block is dequantized with the
/// reference dequantizer and dotted with the block's i16 quants in f32, then scaled by the
/// activation block's scale.
fn dot_i16_dequantized(row: &[u8], act: &Activation<'_>, dequantize: DequantizeFn) -> f32 {
    let mut w = vec![0.0f32; act.q16.len()];
    dequantize(row, &mut w).expect("whole blocks, checked by the caller");
    let blocks = w.chunks_exact(32).zip(act.q16.chunks_exact(32)).zip(&act.d);
    blocks.map(|((w, q), &d)| d * w.iter().zip(q).map(|(&w, &q)| w * f32::from(q)).sum::<f32>()).sum()
}

fn read_f16(b: &[u8]) -> f32 {
    f16::from_le_bytes([b[0], b[1]]).to_f32()
}

/// Σ w·x for one block of quants (as i32, any sign) and activation quants (i8 bit patterns).
fn isum(w: impl IntoIterator<Item = i32>, a: &[u8]) -> i32 {
    w.into_iter().zip(a).map(|(w, &a)| w * i32::from(a as i8)).sum()
}

fn dot_f32(row: &[u8], act: &Activation<'_>) -> f32 {
    row.chunks_exact(4).zip(act.x).map(|(w, x)| f32::from_le_bytes([w[0], w[1], w[2], w[3]]) * x).sum()
}

fn dot_f16(row: &[u8], act: &Activation<'_>) -> f32 {
    row.chunks_exact(2).zip(act.x).map(|(w, x)| read_f16(w) * x).sum()
}

fn dot_bf16(row: &[u8], act: &Activation<'_>) -> f32 {
    let widen = |w: &[u8]| f32::from_bits(u32::from(u16::from_le_bytes([w[0], w[1]])) << 16);
    row.chunks_exact(2).zip(act.x).map(|(w, x)| widen(w) * x).sum()
}

/// Walks 32-value weight blocks of `block_bytes` with their Q8_0 activation blocks:
/// `f(block, activation quants, activation scale, activation quant sum)`, summed.
fn sum_blocks32(
    row: &[u8],
    act: &Activation<'_>,
    block_bytes: usize,
    f: impl Fn(&[u8], &[u8], f32, i32) -> f32,
) -> f32 {
    let blocks = row.chunks_exact(block_bytes).zip(act.qs.chunks_exact(32));
    blocks.zip(act.d.iter().zip(&act.sums)).map(|((w, a), (&d, &s))| f(w, a, d, s)).sum()
}

/// The 32 nibbles of a Q4_0/Q4_1/MXFP4 block in value order (low nibbles, then high nibbles).
fn nibbles(qs: &[u8]) -> impl Iterator<Item = usize> + '_ {
    let low = qs[..16].iter().map(|&b| usize::from(b & 0x0F));
    low.chain(qs[..16].iter().map(|&b| usize::from(b >> 4)))
}

fn dot_q8_0(row: &[u8], act: &Activation<'_>) -> f32 {
    sum_blocks32(row, act, 34, |w, a, d, _| {
        read_f16(w) * d * isum(w[2..].iter().map(|&q| i32::from(q as i8)), a) as f32
    })
}

fn dot_q4_0(row: &[u8], act: &Activation<'_>) -> f32 {
    sum_blocks32(row, act, 18, |w, a, d, _| read_f16(w) * d * isum(nibbles(&w[2..]).map(|q| q as i32 - 8), a) as f32)
}

fn dot_q4_1(row: &[u8], act: &Activation<'_>) -> f32 {
    sum_blocks32(row, act, 20, |w, a, d, s| {
        read_f16(w) * d * isum(nibbles(&w[4..]).map(|q| q as i32), a) as f32 + read_f16(&w[2..]) * d * s as f32
    })
}

fn dot_q5_0(row: &[u8], act: &Activation<'_>) -> f32 {
    sum_blocks32(row, act, 22, |w, a, d, _| {
        let q = five_bit_quants(w[2..6].try_into().expect("4 bytes"), w[6..22].try_into().expect("16 bytes"));
        read_f16(w) * d * isum(q.map(|q| i32::from(q) - 16), a) as f32
    })
}

fn dot_q5_1(row: &[u8], act: &Activation<'_>) -> f32 {
    sum_blocks32(row, act, 24, |w, a, d, s| {
        let q = five_bit_quants(w[4..8].try_into().expect("4 bytes"), w[8..24].try_into().expect("16 bytes"));
        read_f16(w) * d * isum(q.map(i32::from), a) as f32 + read_f16(&w[2..]) * d * s as f32
    })
}

fn dot_mxfp4(row: &[u8], act: &Activation<'_>) -> f32 {
    sum_blocks32(row, act, 17, |w, a, d, _| {
        let q = nibbles(&w[1..]).map(|q| i32::from(KVALUES_MXFP4[q]));
        e8m0_to_f32_half(w[0]) * d * isum(q, a) as f32
    })
}

/// Walks K-quant super-blocks `B` with their Q8_K activation blocks: `f(block, quants, scale,
/// bsums)` returns the block's (scaled integer sum, scaled minimum correction), summed as
/// `Σ sum - Σ correction`.
fn sum_super_blocks<B: bytemuck::Pod>(
    row: &[u8],
    act: &Activation<'_>,
    f: impl Fn(&B, &[u8], f32, &[i32]) -> f32,
) -> f32 {
    let blocks = row.chunks_exact(size_of::<B>()).zip(act.qs.chunks_exact(256));
    let blocks = blocks.zip(act.d.iter().zip(act.bsums.chunks_exact(16)));
    blocks
        .map(|((w, a), (&d, bsums))| {
            let bsums: [i32; 16] = std::array::from_fn(|i| i32::from(bsums[i]));
            f(&pod_read_unaligned::<B>(w), a, d, &bsums)
        })
        .sum()
}

fn dot_q2_k(row: &[u8], act: &Activation<'_>) -> f32 {
    sum_super_blocks::<BlockQ2_K>(row, act, |b, a, d, bsums| {
        let (mut sum, mut mins) = (0i32, 0i32);
        for (sub, (&sc, &bsum)) in b.scales.iter().zip(bsums).enumerate() {
            let q = (16 * sub..16 * sub + 16).map(|e| i32::from(two_bits(&b.qs, e)));
            sum += i32::from(sc & 0x0F) * isum(q, &a[16 * sub..]);
            mins += i32::from(sc >> 4) * bsum;
        }
        b.d.to_f32() * d * sum as f32 - b.dmin.to_f32() * d * mins as f32
    })
}

fn dot_q3_k(row: &[u8], act: &Activation<'_>) -> f32 {
    sum_super_blocks::<BlockQ3_K>(row, act, |b, a, d, _| {
        let mut sum = 0i32;
        for (sub, &sc) in q3_k_scales(&b.scales).iter().enumerate() {
            let q = (16 * sub..16 * sub + 16).map(|e| {
                let high_bit_set = (b.hmask[e % 32] >> (e / 32)) & 1 == 1;
                i32::from(two_bits(&b.qs, e)) - if high_bit_set { 0 } else { 4 }
            });
            sum += i32::from(sc) * isum(q, &a[16 * sub..]);
        }
        b.d.to_f32() * d * sum as f32
    })
}

/// Σ over the 8 sub-blocks of Q4_K/Q5_K: (Σ sc·Σq·a, Σ m·bsums), `quant(e)` giving value e's quant.
fn k4_sums(scales: &[u8; 12], a: &[u8], bsums: &[i32], quant: impl Fn(usize) -> i32) -> (i32, i32) {
    let (mut sum, mut mins) = (0i32, 0i32);
    for j in 0..8 {
        let (sc, m) = get_scale_min_k4(j, scales);
        sum += i32::from(sc) * isum((32 * j..32 * j + 32).map(&quant), &a[32 * j..]);
        mins += i32::from(m) * (bsums[2 * j] + bsums[2 * j + 1]);
    }
    (sum, mins)
}

fn dot_q4_k(row: &[u8], act: &Activation<'_>) -> f32 {
    sum_super_blocks::<BlockQ4_K>(row, act, |b, a, d, bsums| {
        let (sum, mins) = k4_sums(&b.scales, a, bsums, |e| i32::from(nibble_k(&b.qs, e)));
        b.d.to_f32() * d * sum as f32 - b.dmin.to_f32() * d * mins as f32
    })
}

fn dot_q5_k(row: &[u8], act: &Activation<'_>) -> f32 {
    sum_super_blocks::<BlockQ5_K>(row, act, |b, a, d, bsums| {
        let (sum, mins) = k4_sums(&b.scales, a, bsums, |e| {
            let high_bit = (b.qh[e % 32] >> (e / 32)) & 1;
            i32::from(nibble_k(&b.qs, e) | (high_bit << 4))
        });
        b.d.to_f32() * d * sum as f32 - b.dmin.to_f32() * d * mins as f32
    })
}

fn dot_q6_k(row: &[u8], act: &Activation<'_>) -> f32 {
    sum_super_blocks::<BlockQ6_K>(row, act, |b, a, d, _| {
        let mut sum = 0i32;
        for (sub, &sc) in b.scales.iter().enumerate() {
            let q = (16 * sub..16 * sub + 16).map(|e| {
                let (half, upper) = (e / 128, (e % 128) / 64);
                let low4 = (b.ql[64 * half + e % 64] >> (4 * upper)) & 0x0F;
                i32::from(low4 | (two_bits(&b.qh, e) << 4)) - 32
            });
            sum += i32::from(sc) * isum(q, &a[16 * sub..]);
        }
        b.d.to_f32() * d * sum as f32
    })
}

/// `Σ a[i]·b[i]` over the common length, in order.
pub(crate) fn vector_dot_f32(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// [`vector_dot_f32`] of `x` with each whole `x.len()`-row of `rows`, into `out`.
pub(crate) fn vector_dots_f32(out: &mut [f32], x: &[f32], rows: &[f32]) {
    dots_with(out, x, rows, vector_dot_f32);
}

/// `out[j] = dot(x, row j)` for each whole `x.len()`-row of `rows` (zeros past them, and all
/// zeros for an empty `x`): the scalar `dots`, and NEON's over its `dot`.
#[inline]
pub(crate) fn dots_with(out: &mut [f32], x: &[f32], rows: &[f32], dot: impl Fn(&[f32], &[f32]) -> f32) {
    let written = if x.is_empty() { 0 } else { out.len().min(rows.len() / x.len()) };
    for (y, row) in out[..written].iter_mut().zip(rows.chunks_exact(x.len().max(1))) {
        *y = dot(x, row);
    }
    out[written..].fill(0.0);
}

/// `y[i] += a·x[i]` over the common length.
pub(crate) fn vector_axpy_f32(y: &mut [f32], a: f32, x: &[f32]) {
    y.iter_mut().zip(x).for_each(|(y, x)| *y += a * x);
}

/// `out[i] += Σ_j weights[j]·rows[j·len + i]`: [`vector_axpy_f32`] row by row.
pub(crate) fn vector_weighted_sum_add_f32(out: &mut [f32], weights: &[f32], rows: &[f32]) {
    for (&w, row) in weights.iter().zip(rows.chunks_exact(out.len().max(1))) {
        vector_axpy_f32(out, w, row);
    }
}

/// [`vector_weighted_sum_add_f32`] for each query (`outs[q]` with `weights[q]`) over the same rows.
pub(crate) fn vector_weighted_sums_add_f32(outs: &mut [&mut [f32]], weights: &[&[f32]], rows: &[f32]) {
    for (out, weights) in outs.iter_mut().zip(weights) {
        vector_weighted_sum_add_f32(out, weights, rows);
    }
}

/// Whole 32-value blocks of `x` as i16: per block `d = amax / 32767` (0, with zero quants, when
/// `1/d` would overflow: an all-zero block, or one below about 1e-34), `q = round(x / d)` (halves
/// away from zero, as `x · (1/d)`), and the quants' sum. NaN quantizes to 0.
pub(crate) fn quantize_i16_blocks(x: &[f32], q: &mut [i16], d: &mut [f32], sums: &mut [i32]) {
    let blocks = x.chunks_exact(32).zip(q.chunks_exact_mut(32));
    for (((x, q), d), sum) in blocks.zip(d).zip(sums) {
        let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let (scale, inverse) = crate::activation::i16_scale(amax);
        for (q, v) in q.iter_mut().zip(x) {
            *q = crate::activation::round_half_away(v * inverse) as i16;
        }
        *d = scale;
        *sum = q.iter().map(|&q| i32::from(q)).sum();
    }
}

/// `x[i] = e^x[i]` (libm).
pub(crate) fn vector_exp_f32(xs: &mut [f32]) {
    xs.iter_mut().for_each(|x| *x = x.exp());
}

/// Softmax of `scale · x` in place, with `sink` (a logit whose value row is zero) as one more term
/// of the total: scale, take the maximum, `e^(x − max)` (libm), sum in order, divide.
pub(crate) fn vector_softmax_f32(xs: &mut [f32], scale: f32, sink: Option<f32>) {
    let mut max = sink.unwrap_or(f32::NEG_INFINITY);
    for x in xs.iter_mut() {
        *x *= scale;
        max = max.max(*x);
    }
    let mut total = sink.map_or(0.0, |sink| (sink - max).exp());
    for x in xs.iter_mut() {
        *x = (*x - max).exp();
        total += *x;
    }
    xs.iter_mut().for_each(|x| *x /= total);
}

/// Columns `first_col..` of `src` (`rows × cols`) transposed into `dst` (`dst[k]`, at least `rows`
/// long, gets column `first_col + k`), in square tiles so that both sides stay in cache (a
/// prefill's output is megabytes; a plain loop misses on every strided access).
pub(crate) fn vector_transpose_f32(src: &[f32], rows: usize, cols: usize, first_col: usize, dst: &mut [&mut [f32]]) {
    const TILE: usize = 16;
    for r0 in (0..rows).step_by(TILE) {
        let r1 = (r0 + TILE).min(rows);
        for (t, tile) in dst.chunks_mut(TILE).enumerate() {
            // Writes run along `dst` (strided writes cost more than strided reads here).
            for (k, row) in tile.iter_mut().enumerate() {
                let c = first_col + TILE * t + k;
                for (r, d) in (r0..r1).zip(&mut row[r0..r1]) {
                    *d = src[r * cols + c];
                }
            }
        }
    }
}
