//! f32 vector kernels (attention's dot products and weighted sums, `exp` and softmax), 4 lanes
//! with fused multiply-add for the dot product.

use std::arch::aarch64::{
    float32x4_t, int32x4_t, vaddq_f32, vaddq_s32, vaddvq_f32, vbslq_f32, vcgtq_f32, vcltq_f32, vcvtq_s32_f32,
    vdivq_f32, vdupq_n_f32, vdupq_n_s32, vfmaq_f32, vfmsq_f32, vld1q_f32, vmaxnmq_f32, vmaxnmvq_f32, vmaxq_f32,
    vminq_f32, vmulq_f32, vreinterpretq_f32_s32, vrndnq_f32, vshlq_n_s32, vshrq_n_s32, vst1q_f32, vsubq_f32, vsubq_s32,
};

/// Four f32 from `s[..4]` (panics if shorter: callers pass whole chunks).
#[inline]
#[target_feature(enable = "neon")]
pub(super) fn load(s: &[f32]) -> float32x4_t {
    let s = &s[..4];
    // SAFETY: `s` holds 4 f32; `vld1q_f32` has no alignment requirement.
    unsafe { vld1q_f32(s.as_ptr()) }
}

/// `Σ a[i]·b[i]` over the common length, in four 4-lane partial sums.
#[inline]
#[target_feature(enable = "neon")]
pub(super) fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let len = a.len().min(b.len());
    let (a, b) = (&a[..len], &b[..len]);
    let mut acc = [vdupq_n_f32(0.0); 4];
    let (a16, a_rest) = a.as_chunks::<16>();
    let (b16, b_rest) = b.as_chunks::<16>();
    for (x, y) in a16.iter().zip(b16) {
        for (k, acc) in acc.iter_mut().enumerate() {
            *acc = vfmaq_f32(*acc, load(&x[4 * k..]), load(&y[4 * k..]));
        }
    }
    let (a4, a_tail) = a_rest.as_chunks::<4>();
    let (b4, b_tail) = b_rest.as_chunks::<4>();
    for (x, y) in a4.iter().zip(b4) {
        acc[0] = vfmaq_f32(acc[0], load(x), load(y));
    }
    let total = vaddq_f32(vaddq_f32(acc[0], acc[1]), vaddq_f32(acc[2], acc[3]));
    vaddvq_f32(total) + a_tail.iter().zip(b_tail).map(|(x, y)| x * y).sum::<f32>()
}

/// `y[i] += a·x[i]` over the common length, a product then a sum (no fused multiply-add), so that
/// it equals the scalar loop bit for bit.
#[target_feature(enable = "neon")]
pub(super) fn axpy_f32(y: &mut [f32], a: f32, x: &[f32]) {
    let len = y.len().min(x.len());
    let (y, x) = (&mut y[..len], &x[..len]);
    let scale = vdupq_n_f32(a);
    let (y4, y_tail) = y.as_chunks_mut::<4>();
    let (x4, x_tail) = x.as_chunks::<4>();
    for (yc, xc) in y4.iter_mut().zip(x4) {
        let sum = vaddq_f32(load(&yc[..]), vmulq_f32(scale, load(xc)));
        // SAFETY: `yc` holds 4 f32; `vst1q_f32` has no alignment requirement.
        unsafe { vst1q_f32(yc.as_mut_ptr(), sum) };
    }
    for (yv, xv) in y_tail.iter_mut().zip(x_tail) {
        *yv += a * xv;
    }
}

/// [`dot_f32`] of `x` with each row of `rows` (inlined: one call for all of attention's keys).
#[target_feature(enable = "neon")]
pub(super) fn dots_f32(out: &mut [f32], x: &[f32], rows: &[f32]) {
    crate::kernels::reference::dots_with(out, x, rows, |x, row| dot_f32(row, x));
}

/// Four f32 into `s[..4]`.
#[inline]
#[target_feature(enable = "neon")]
fn store(s: &mut [f32], v: float32x4_t) {
    let s = &mut s[..4];
    // SAFETY: `s` holds 4 f32; `vst1q_f32` has no alignment requirement.
    unsafe { vst1q_f32(s.as_mut_ptr(), v) }
}

/// `e^x` in 4 lanes, as `x86/avx2_vector.rs`'s 8-lane `exp8` computes it: `2^n · e^r` with
/// `n = round(x·log₂e)` (ties to even), `r = x − n·ln 2` (ln 2 in two parts, so `r` is exact to
/// f32), `e^r` by its Taylor series to degree 7, `2^n` as two powers of two so that results down to
/// the subnormals come out right. Above ln(f32::MAX) +∞, below −104 +0, NaN stays NaN.
#[inline]
#[target_feature(enable = "neon")]
fn exp4(x: float32x4_t) -> float32x4_t {
    const MAX_ARG: f32 = 88.722_83;
    const MIN_ARG: f32 = -104.0;
    // ln 2 = LN2_HI + LN2_LO with LN2_HI's low 12 bits zero, so n·LN2_HI is exact for |n| < 2^12.
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    let clamped = vminq_f32(vmaxq_f32(x, vdupq_n_f32(MIN_ARG)), vdupq_n_f32(MAX_ARG));
    let n = vrndnq_f32(vmulq_f32(clamped, vdupq_n_f32(std::f32::consts::LOG2_E)));
    let r = vfmsq_f32(clamped, n, vdupq_n_f32(LN2_HI));
    let r = vfmsq_f32(r, n, vdupq_n_f32(LN2_LO));
    let mut p = vdupq_n_f32(1.0 / 5040.0);
    for c in [1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0] {
        p = vfmaq_f32(vdupq_n_f32(c), p, r);
    }
    // 2^n = 2^half · 2^(n − half), each factor a normal f32 for n in −150..=128.
    let n = vcvtq_s32_f32(n);
    let half = vshrq_n_s32::<1>(n);
    let pow2 = |k: int32x4_t| vreinterpretq_f32_s32(vshlq_n_s32::<23>(vaddq_s32(k, vdupq_n_s32(127))));
    let y = vmulq_f32(vmulq_f32(p, pow2(half)), pow2(vsubq_s32(n, half)));
    let y = vbslq_f32(vcgtq_f32(x, vdupq_n_f32(MAX_ARG)), vdupq_n_f32(f32::INFINITY), y);
    // A NaN went through `vmaxq`/`vminq` (which return NaN for a NaN operand) and stays NaN.
    vbslq_f32(vcltq_f32(x, vdupq_n_f32(MIN_ARG)), vdupq_n_f32(0.0), y)
}

/// `x[i] = e^x[i]`, 4 lanes at a time; the last (< 4) values go through the same lanes, padded, so
/// a value's result does not depend on where in the slice it sits.
#[target_feature(enable = "neon")]
pub(super) fn exp_f32(xs: &mut [f32]) {
    let (x4, tail) = xs.as_chunks_mut::<4>();
    for chunk in x4 {
        let e = exp4(load(&chunk[..]));
        store(chunk, e);
    }
    if !tail.is_empty() {
        let mut padded = [0.0f32; 4];
        padded[..tail.len()].copy_from_slice(tail);
        let e = exp4(load(&padded));
        store(&mut padded, e);
        tail.copy_from_slice(&padded[..tail.len()]);
    }
}

/// `crate::vector::softmax` in 4 lanes: the scaling, the maximum and the division as the scalar
/// loops do them (the same values), `e^x` by [`exp4`] (the last < 4 values padded, as [`exp_f32`]
/// does), the total in 4 partial sums.
#[target_feature(enable = "neon")]
pub(super) fn softmax_f32(xs: &mut [f32], scale: f32, sink: Option<f32>) {
    let (x4, tail) = xs.as_chunks_mut::<4>();
    let factor = vdupq_n_f32(scale);
    // `vmaxnmq` ignores a NaN operand, as `f32::max` does.
    let mut lanes_max = vdupq_n_f32(sink.unwrap_or(f32::NEG_INFINITY));
    for chunk in x4.iter_mut() {
        let v = vmulq_f32(load(&chunk[..]), factor);
        store(chunk, v);
        lanes_max = vmaxnmq_f32(v, lanes_max);
    }
    let mut max = vmaxnmvq_f32(lanes_max);
    for x in tail.iter_mut() {
        *x *= scale;
        max = max.max(*x);
    }
    let shift = vdupq_n_f32(max);
    let mut sums = vdupq_n_f32(0.0);
    for chunk in x4.iter_mut() {
        let e = exp4(vsubq_f32(load(&chunk[..]), shift));
        store(chunk, e);
        sums = vaddq_f32(sums, e);
    }
    let mut total = sink.map_or(0.0, |sink| (sink - max).exp()) + vaddvq_f32(sums);
    if !tail.is_empty() {
        let mut padded = [0.0f32; 4];
        for (p, x) in padded.iter_mut().zip(tail.iter()) {
            *p = x - max;
        }
        let e = exp4(load(&padded));
        store(&mut padded, e);
        tail.copy_from_slice(&padded[..tail.len()]);
        total += tail.iter().sum::<f32>();
    }
    let divisor = vdupq_n_f32(total);
    for chunk in x4.iter_mut() {
        let v = vdivq_f32(load(&chunk[..]), divisor);
        store(chunk, v);
    }
    for x in tail.iter_mut() {
        *x /= total;
    }
}
