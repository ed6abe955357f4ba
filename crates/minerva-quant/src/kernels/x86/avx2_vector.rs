//! f32 vector kernels (attention's dot products and weighted sums), 8 lanes with FMA.

use std::arch::x86_64::*;

use bytemuck::pod_read_unaligned;

/// Horizontal sum of 8 lanes.
#[target_feature(enable = "avx2,fma")]
fn sum_lanes(v: __m256) -> f32 {
    let quad = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let pair = _mm_add_ps(quad, _mm_movehl_ps(quad, quad));
    _mm_cvtss_f32(_mm_add_ss(pair, _mm_movehdup_ps(pair)))
}

/// `Σ a[i]·b[i]` over the common length, in four 8-lane partial sums.
#[target_feature(enable = "avx2,fma")]
pub(super) fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let len = a.len().min(b.len());
    let (a, b) = (&a[..len], &b[..len]);
    let load = |s: &[f32]| pod_read_unaligned::<__m256>(bytemuck::cast_slice(&s[..8]));
    let mut acc = [_mm256_setzero_ps(); 4];
    let (a32, a_rest) = a.as_chunks::<32>();
    let (b32, b_rest) = b.as_chunks::<32>();
    for (x, y) in a32.iter().zip(b32) {
        for (k, acc) in acc.iter_mut().enumerate() {
            *acc = _mm256_fmadd_ps(load(&x[8 * k..]), load(&y[8 * k..]), *acc);
        }
    }
    let (a8, a_tail) = a_rest.as_chunks::<8>();
    let (b8, b_tail) = b_rest.as_chunks::<8>();
    for (x, y) in a8.iter().zip(b8) {
        acc[0] = _mm256_fmadd_ps(load(x), load(y), acc[0]);
    }
    let total = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    sum_lanes(total) + a_tail.iter().zip(b_tail).map(|(x, y)| x * y).sum::<f32>()
}

/// `y[i] += a·x[i]` over the common length, rounded as the scalar loop rounds (a product, then a
/// sum: no fused multiply-add), so that it equals [`super::super::reference`]'s bit for bit.
#[target_feature(enable = "avx2,fma")]
pub(super) fn axpy_f32(y: &mut [f32], a: f32, x: &[f32]) {
    let len = y.len().min(x.len());
    let (y, x) = (&mut y[..len], &x[..len]);
    let scale = _mm256_set1_ps(a);
    let (y8, y_tail) = y.as_chunks_mut::<8>();
    let (x8, x_tail) = x.as_chunks::<8>();
    for (yc, xc) in y8.iter_mut().zip(x8) {
        let xv = pod_read_unaligned::<__m256>(bytemuck::cast_slice(xc));
        let yv = pod_read_unaligned::<__m256>(bytemuck::cast_slice(&yc[..]));
        let sum: [f32; 8] = bytemuck::cast(_mm256_add_ps(yv, _mm256_mul_ps(scale, xv)));
        *yc = sum;
    }
    for (yv, xv) in y_tail.iter_mut().zip(x_tail) {
        *yv += a * xv;
    }
}
