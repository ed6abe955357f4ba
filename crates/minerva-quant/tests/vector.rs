//! The f32 vector kernels against their scalar loops, at every length around the SIMD widths.

use minerva_quant::vector::{axpy, axpy_ref, dot, dot_ref, vector_isa};
use proptest::prelude::*;

proptest! {
    #[test]
    fn dot_matches_the_scalar_sum(values in prop::collection::vec((-4.0f32..4.0, -4.0f32..4.0), 0..300)) {
        let (a, b): (Vec<f32>, Vec<f32>) = values.into_iter().unzip();
        let fast = dot(&a, &b);
        let exact: f64 = a.iter().zip(&b).map(|(x, y)| f64::from(*x) * f64::from(*y)).sum();
        let magnitude: f64 = a.iter().zip(&b).map(|(x, y)| f64::from((x * y).abs())).sum();
        // Both orders of summation are within n·ε·Σ|a·b| of the exact sum.
        let bound = a.len() as f64 * f64::from(f32::EPSILON) * magnitude + 1e-30;
        prop_assert!((f64::from(fast) - exact).abs() <= bound, "{} ({}): {fast} vs {exact}", vector_isa(), a.len());
        prop_assert!((f64::from(dot_ref(&a, &b)) - exact).abs() <= bound);
    }

    #[test]
    fn axpy_equals_the_scalar_loop(values in prop::collection::vec((-4.0f32..4.0, -4.0f32..4.0), 0..100), a in -2.0f32..2.0) {
        let (x, y0): (Vec<f32>, Vec<f32>) = values.into_iter().unzip();
        let (mut fast, mut reference) = (y0.clone(), y0.clone());
        axpy(&mut fast, a, &x);
        axpy_ref(&mut reference, a, &x);
        prop_assert_eq!(fast, reference, "{}", vector_isa());
    }
}

#[test]
fn lengths_may_differ_and_be_empty() {
    assert_eq!(dot(&[], &[1.0]), 0.0);
    assert_eq!(dot(&[2.0; 20], &[3.0; 17]), 17.0 * 6.0);
    let mut y = vec![1.0f32; 9];
    axpy(&mut y, 2.0, &[1.0; 40]);
    assert_eq!(y, vec![3.0; 9]);
}

#[cfg(target_arch = "aarch64")]
#[test]
fn aarch64_machines_use_the_neon_kernels() {
    assert_eq!(vector_isa(), "neon");
}

#[cfg(target_arch = "x86_64")]
#[test]
fn avx2_machines_use_the_simd_kernels() {
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        assert_eq!(vector_isa(), "avx2+fma");
    } else {
        assert_eq!(vector_isa(), "scalar");
    }
}
