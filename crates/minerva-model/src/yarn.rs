//! YaRN rotary scaling ("YaRN: Efficient Context Window Extension", arXiv 2309.00071) as OpenAI's
//! GPT-OSS reference computes it (`gpt_oss/torch/model.py`, `RotaryEmbedding`):
//!
//! ```text
//! θᵢ = base^(-2i/d)                          i = 0 .. d/2
//! low  = d/2 · ln(L / (β_fast·2π)) / ln(base)   (floor when truncating)
//! high = d/2 · ln(L / (β_slow·2π)) / ln(base)   (ceil when truncating)
//! ramp = clamp((i − low) / (high − low), 0, 1)
//! inv_freqᵢ = θᵢ/factor · ramp + θᵢ · (1 − ramp)   (fast-rotating dims keep θ, slow ones are interpolated)
//! cos, sin scaled by  0.1·ln(factor) + 1         (the "concentration" / attention factor)
//! ```
//!
//! transformers' `_compute_yarn_parameters` is the same with `truncate: false`; with `truncate`
//! (its default when the key is absent, and what llama.cpp's `ggml_rope_yarn_corr_dims` does)
//! `low`/`high` are floored/ceiled first.

/// The inverse frequency of pair `i` (of `dim / 2`), given the unscaled `theta = base^(-2i/dim)`.
#[allow(clippy::too_many_arguments)]
pub fn yarn_inv_freq(
    i: usize,
    theta: f32,
    dim: usize,
    base: f32,
    factor: f32,
    original_context: usize,
    beta_fast: f32,
    beta_slow: f32,
    truncate: bool,
) -> f32 {
    if factor <= 1.0 {
        return theta;
    }
    let (low, high) = correction_range(dim, base, original_context, beta_fast, beta_slow, truncate);
    // transformers' linear_ramp_factor nudges an empty range open; OpenAI asserts low < high.
    let high = if high == low { high + 0.001 } else { high };
    let ramp = ((i as f64 - low) / (high - low)).clamp(0.0, 1.0) as f32;
    (theta / factor) * ramp + theta * (1.0 - ramp)
}

/// `(low, high)` correction dimensions for `beta_fast` / `beta_slow` rotations.
fn correction_range(
    dim: usize,
    base: f32,
    original_context: usize,
    beta_fast: f32,
    beta_slow: f32,
    truncate: bool,
) -> (f64, f64) {
    let corr = |rotations: f32| {
        dim as f64 / 2.0 * (original_context as f64 / (f64::from(rotations) * 2.0 * std::f64::consts::PI)).ln()
            / f64::from(base).ln()
    };
    let (low, high) = (corr(beta_fast), corr(beta_slow));
    if truncate { (low.floor().max(0.0), high.ceil().min(dim as f64 / 2.0 - 1.0)) } else { (low, high) }
}

/// The factor YaRN multiplies cos and sin by: `0.1·ln(factor) + 1` (1 when `factor <= 1`).
pub fn yarn_attention_factor(factor: f32) -> f32 {
    if factor <= 1.0 { 1.0 } else { (0.1 * f64::from(factor).ln() + 1.0) as f32 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpt_oss_20b_ramp_bounds_match_the_reference_formula() {
        // d = 64, base 150000, L = 4096, β 32 / 1: OpenAI's low ≈ 8.093, high ≈ 17.398.
        let (low, high) = correction_range(64, 150000.0, 4096, 32.0, 1.0, false);
        assert!((low - 8.0927).abs() < 1e-3 && (high - 17.3980).abs() < 1e-3, "{low} {high}");
        assert_eq!(correction_range(64, 150000.0, 4096, 32.0, 1.0, true), (8.0, 18.0));
        // Below the ramp a frequency is kept, above it divided by the factor.
        assert_eq!(yarn_inv_freq(0, 1.0, 64, 150000.0, 32.0, 4096, 32.0, 1.0, false), 1.0);
        assert_eq!(yarn_inv_freq(31, 1.0, 64, 150000.0, 32.0, 4096, 32.0, 1.0, false), 1.0 / 32.0);
        assert!((yarn_attention_factor(32.0) - 1.346_574).abs() < 1e-6);
    }
}
