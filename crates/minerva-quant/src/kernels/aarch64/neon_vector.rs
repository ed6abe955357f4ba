//! f32 vector kernels (attention's dot products and weighted sums), 4 lanes with fused
//! multiply-add for the dot product.

use std::arch::aarch64::{float32x4_t, vaddq_f32, vaddvq_f32, vdupq_n_f32, vfmaq_f32, vld1q_f32, vmulq_f32, vst1q_f32};

/// Four f32 from `s[..4]` (panics if shorter: callers pass whole chunks).
#[inline]
#[target_feature(enable = "neon")]
fn load(s: &[f32]) -> float32x4_t {
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
