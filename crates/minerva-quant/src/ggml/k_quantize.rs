//! Reference quantizers of the K-quants llama.cpp's `llama-quantize` writes without an importance
//! matrix: Q4_K, Q5_K (a scale and a minimum per 32 values, fitted by weighted least squares over
//! a sweep of candidate scales) and Q6_K (a signed scale per 16 values, the best of 19 candidate
//! scales). The arithmetic follows ggml's `quantize_row_q{4,5,6}_K_ref` and their helpers
//! `make_qkx2_quants`, `make_qx_quants` and `nearest_int` operation for operation, in f32 and in
//! the same order, so the blocks are bit-identical (`tests/k_quantize.rs` compares with blocks
//! `llama-quantize` wrote).

use half::f16;

use super::k_quants::{BlockQ4_K, BlockQ5_K, BlockQ6_K, get_scale_min_k4};
use crate::QuantError;
use crate::blocks::quantize_blocks;

/// ggml's `GROUP_MAX_EPS`: below this magnitude a group is all zeros.
const GROUP_MAX_EPS: f32 = 1e-15;

/// ggml's `nearest_int`: round half to even through the float's mantissa (valid for |v| < 2²²,
/// which every caller's range keeps).
fn nearest_int(v: f32) -> i32 {
    let shifted = v + 12_582_912.0;
    (shifted.to_bits() & 0x007f_ffff) as i32 - 0x0040_0000
}

/// `make_qkx2_quants` for one sub-block of 32 values: the quants `l` (0..=`nmax`) in `levels`, and
/// `(scale, minimum)` with value ≈ `scale · l − minimum` (`minimum` ≥ 0), minimizing the weighted
/// squared error over `nstep + 1` candidate inverse scales `(rmin + rdelta·is + nmax) / range`.
fn fit_scale_and_min(
    x: &[f32; 32],
    weights: &[f32; 32],
    nmax: i32,
    levels: &mut [u8; 32],
    (rmin, rdelta, nstep): (f32, f32, i32),
) -> (f32, f32) {
    let (mut min, mut max) = (x[0], x[0]);
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..32 {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        sum_w += weights[i];
        sum_x += weights[i] * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        levels.fill(0);
        return (0.0, -min);
    }
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0.0f32;
    for i in 0..32 {
        let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
        levels[i] = l as u8;
        let diff = scale * l as f32 + min - x[i];
        best_error += weights[i] * (diff * diff);
    }
    let mut trial = [0u8; 32];
    for is in 0..=nstep {
        iscale = (rmin + rdelta * is as f32 + nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
        for i in 0..32 {
            let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            trial[i] = l as u8;
            let (w, l) = (weights[i], l as f32);
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut error = 0.0f32;
            for i in 0..32 {
                let diff = this_scale * f32::from(trial[i]) + this_min - x[i];
                error += weights[i] * (diff * diff);
            }
            if error < best_error {
                *levels = trial;
                best_error = error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// The 6-bit sub-block scales and minimums of a Q4_K/Q5_K super-block, packed as
/// `get_scale_min_k4` reads them, with the f16 `d` and `dmin` they multiply; then every value's
/// quant (0..=`nmax`) against the packed factors.
fn k4_super_block(x: &[f32], nmax: i32, sweep: (f32, f32, i32)) -> (f16, f16, [u8; 12], [u8; 256]) {
    let mut levels = [0u8; 256];
    let (mut scales, mut mins) = ([0.0f32; 8], [0.0f32; 8]);
    let (mut max_scale, mut max_min) = (0.0f32, 0.0f32);
    for j in 0..8 {
        let sub: &[f32; 32] = x[32 * j..32 * j + 32].try_into().expect("32 values");
        let mut sum_x2 = 0.0f32;
        for v in sub {
            sum_x2 += v * v;
        }
        let av_x = (sum_x2 / 32.0).sqrt();
        let weights: [f32; 32] = std::array::from_fn(|l| av_x + sub[l].abs());
        let sub_levels: &mut [u8; 32] = (&mut levels[32 * j..32 * j + 32]).try_into().expect("32 quants");
        (scales[j], mins[j]) = fit_scale_and_min(sub, &weights, nmax, sub_levels, sweep);
        if scales[j] > max_scale {
            max_scale = scales[j];
        }
        if mins[j] > max_min {
            max_min = mins[j];
        }
    }
    let inv_scale = if max_scale > 0.0 { 63.0 / max_scale } else { 0.0 };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let mut packed = [0u8; 12];
    for j in 0..8 {
        // ggml stores the rounded value in a u8 before taking the minimum with 63.
        let ls = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        let lm = (nearest_int(inv_min * mins[j]) as u8).min(63);
        if j < 4 {
            packed[j] = ls;
            packed[j + 4] = lm;
        } else {
            packed[j + 4] = (ls & 0x0F) | ((lm & 0x0F) << 4);
            packed[j - 4] |= (ls >> 4) << 6;
            packed[j] |= (lm >> 4) << 6;
        }
    }
    let d = f16::from_f32(max_scale / 63.0);
    let dmin = f16::from_f32(max_min / 63.0);
    for j in 0..8 {
        let (sc, m) = get_scale_min_k4(j, &packed);
        let scale = d.to_f32() * f32::from(sc);
        if scale == 0.0 {
            continue;
        }
        let offset = dmin.to_f32() * f32::from(m);
        for i in 32 * j..32 * j + 32 {
            levels[i] = nearest_int((x[i] + offset) / scale).clamp(0, nmax) as u8;
        }
    }
    (d, dmin, packed, levels)
}

/// Quantizes `values` (whole super-blocks of 256) into Q4_K blocks as ggml's
/// `quantize_row_q4_K_ref`.
pub fn quantize_row_q4_k_ref(values: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    quantize_blocks(values, out, |x| {
        let (d, dmin, scales, levels) = k4_super_block(x, 15, (-1.0, 0.1, 20));
        let mut qs = [0u8; 128];
        for chunk in 0..4 {
            for lane in 0..32 {
                let e = 64 * chunk + lane;
                qs[32 * chunk + lane] = levels[e] | (levels[e + 32] << 4);
            }
        }
        BlockQ4_K { d, dmin, scales, qs }
    })
}

/// Quantizes `values` (whole super-blocks of 256) into Q5_K blocks as ggml's
/// `quantize_row_q5_K_ref`.
pub fn quantize_row_q5_k_ref(values: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    quantize_blocks(values, out, |x| {
        let (d, dmin, scales, levels) = k4_super_block(x, 31, (-0.5, 0.1, 15));
        let (mut qh, mut qs) = ([0u8; 32], [0u8; 128]);
        for chunk in 0..4 {
            for lane in 0..32 {
                let e = 64 * chunk + lane;
                let (lo, hi) = (levels[e], levels[e + 32]);
                qh[lane] |= ((lo >> 4) & 1) << (2 * chunk) | ((hi >> 4) & 1) << (2 * chunk + 1);
                qs[32 * chunk + lane] = (lo & 0x0F) | ((hi & 0x0F) << 4);
            }
        }
        BlockQ5_K { d, dmin, scales, qh, qs }
    })
}

/// `make_qx_quants(16, 32, x, L, rmse_type = 1, NULL)`: a signed scale for 16 values (quants
/// `l + 32`, `l` in −32..32) weighted by x², the best of the first guess and 18 neighbours.
fn fit_signed_scale(x: &[f32], levels: &mut [u8]) -> f32 {
    const NMAX: i32 = 32;
    let (mut max, mut amax) = (0.0f32, 0.0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        levels.fill(0);
        return 0.0;
    }
    let sums = |iscale: f32| {
        let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
        for &v in x {
            let l = nearest_int(iscale * v).clamp(-NMAX, NMAX - 1) as f32;
            let w = v * v;
            sumlx += w * v * l;
            suml2 += w * l * l;
        }
        (sumlx, suml2)
    };
    let assign = |iscale: f32, levels: &mut [u8]| {
        for (q, &v) in levels.iter_mut().zip(x) {
            *q = (nearest_int(iscale * v).clamp(-NMAX, NMAX - 1) + NMAX) as u8;
        }
    };
    let iscale = -NMAX as f32 / max;
    assign(iscale, levels);
    let (sumlx, suml2) = sums(iscale);
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in (-9..=9).filter(|&is| is != 0) {
        let iscale = -(NMAX as f32 + 0.1 * is as f32) / max;
        let (sumlx, suml2) = sums(iscale);
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            assign(iscale, levels);
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// Quantizes `values` (whole super-blocks of 256) into Q6_K blocks as ggml's
/// `quantize_row_q6_K_ref`.
pub fn quantize_row_q6_k_ref(values: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    quantize_blocks(values, out, |x| {
        let mut levels = [0u8; 256];
        let mut scales = [0.0f32; 16];
        let (mut max_scale, mut max_abs_scale) = (0.0f32, 0.0f32);
        for ib in 0..16 {
            scales[ib] = fit_signed_scale(&x[16 * ib..16 * ib + 16], &mut levels[16 * ib..16 * ib + 16]);
            if scales[ib].abs() > max_abs_scale {
                max_abs_scale = scales[ib].abs();
                max_scale = scales[ib];
            }
        }
        if max_abs_scale < GROUP_MAX_EPS {
            return BlockQ6_K { ql: [0; 128], qh: [0; 64], scales: [0; 16], d: f16::from_f32(0.0) };
        }
        let iscale = -128.0 / max_scale;
        let d = f16::from_f32(1.0 / iscale);
        let packed: [i8; 16] = std::array::from_fn(|ib| nearest_int(iscale * scales[ib]).min(127) as i8);
        for (j, &sub_scale) in packed.iter().enumerate() {
            let scale = d.to_f32() * f32::from(sub_scale);
            if scale == 0.0 {
                continue;
            }
            for i in 16 * j..16 * j + 16 {
                levels[i] = (nearest_int(x[i] / scale).clamp(-32, 31) + 32) as u8;
            }
        }
        let (mut ql, mut qh) = ([0u8; 128], [0u8; 64]);
        for half in 0..2 {
            let (base, l4) = (128 * half, |l: u8| l & 0x0F);
            for lane in 0..32 {
                let q = |k: usize| levels[base + lane + 32 * k];
                ql[64 * half + lane] = l4(q(0)) | (l4(q(2)) << 4);
                ql[64 * half + 32 + lane] = l4(q(1)) | (l4(q(3)) << 4);
                qh[32 * half + lane] = (q(0) >> 4) | ((q(1) >> 4) << 2) | ((q(2) >> 4) << 4) | ((q(3) >> 4) << 6);
            }
        }
        BlockQ6_K { ql, qh, scales: packed, d }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_int_rounds_half_to_even() {
        let cases = [(0.5, 0), (1.5, 2), (2.5, 2), (-0.5, 0), (-1.5, -2), (3.49, 3), (-7.51, -8), (0.0, 0)];
        for (v, expected) in cases {
            assert_eq!(nearest_int(v), expected, "{v}");
        }
    }

    #[test]
    fn quantized_super_blocks_dequantize_near_the_input() {
        let values: Vec<f32> = (0..512).map(|i| ((i * 37 % 101) as f32 - 50.0) / 40.0).collect();
        for (dtype, quantize, bound) in [
            (minerva_core::DType::Q4_K, quantize_row_q4_k_ref as crate::QuantizeFn, 0.09),
            (minerva_core::DType::Q5_K, quantize_row_q5_k_ref, 0.045),
            (minerva_core::DType::Q6_K, quantize_row_q6_k_ref, 0.025),
        ] {
            let mut bytes = vec![0u8; 2 * dtype.block_bytes()];
            quantize(&values, &mut bytes).unwrap();
            let mut back = vec![0.0; 512];
            crate::dequantize(dtype, &bytes, &mut back).unwrap();
            let worst = values.iter().zip(&back).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
            assert!(worst <= bound, "{dtype}: {worst}");
            // Zeros stay zeros, exactly.
            quantize(&[0.0; 256], &mut bytes[..dtype.block_bytes()]).unwrap();
            crate::dequantize(dtype, &bytes[..dtype.block_bytes()], &mut back[..256]).unwrap();
            assert!(back[..256].iter().all(|&v| v == 0.0), "{dtype}");
        }
    }
}
