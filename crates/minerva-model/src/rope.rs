//! Rotary frequencies: the geometric base series and its scalings, shared by every backend.
//!
//! Pair `i` of a head (of `rope.dim` rotated dimensions) turns by `pos · θᵢ`, with
//! `θᵢ = base^(−2i/dim)` and then, per [`RopeScaling`] (as in transformers' `modeling_rope_utils.py`):
//!
//! | scaling | θᵢ | cos/sin multiplied by |
//! |---|---|---|
//! | none | θᵢ | 1 |
//! | linear (`factor`) | θᵢ / factor | 1 |
//! | LLaMA-3 / `rope_freqs.weight` | θᵢ / factorsᵢ | 1 |
//! | long-rope (Phi-3) | θᵢ / shortᵢ, or θᵢ / longᵢ once a position reaches the original context | `attn_factor` |
//! | YaRN (GPT-OSS) | blend of θᵢ / factor and θᵢ over a ramp ([`crate::yarn`]) | `0.1·ln(factor) + 1` |

/// How rotary embeddings pair up the dimensions of a head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeStyle {
    /// Adjacent pairs `(2i, 2i+1)`: llama.cpp's mode 0, used for `llama` GGUF files (whose
    /// converter permuted the Q/K rows so that this equals Hugging Face's `rotate_half`).
    Normal,
    /// Half-split pairs `(i, i + d/2)`: GPT-NeoX / Hugging Face `rotate_half` on unpermuted weights.
    NeoX,
}

/// Position scaling of the rotary frequencies (formulas in [`crate::rope`]).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum RopeScaling {
    /// Positions used as they are.
    None,
    /// Positions divided by `factor` (`{arch}.rope.scaling.type = linear`).
    Linear {
        /// The scaling factor.
        factor: f32,
    },
    /// Per-frequency divisors (LLaMA-3 scaling), stored by llama.cpp's converter as the
    /// `rope_freqs.weight` tensor: θᵢ is divided by `factors[i]`.
    FreqFactors {
        /// One divisor per rotated pair (`rope_dim / 2`).
        factors: Vec<f32>,
    },
    /// Phi-3 long-rope: θᵢ divided by `short[i]`, or by `long[i]` in a forward step reaching
    /// beyond `original_context` positions; cos/sin multiplied by `attn_factor`. GGUF stores the
    /// factors as `rope_factors_short.weight` / `rope_factors_long.weight`.
    LongRope {
        /// Divisors for short contexts (`rope_dim / 2`).
        short: Vec<f32>,
        /// Divisors for long contexts (`rope_dim / 2`).
        long: Vec<f32>,
        /// The pre-training context (`original_max_position_embeddings`).
        original_context: usize,
        /// Multiplier of cos and sin (`attention_factor`).
        attn_factor: f32,
    },
    /// YaRN (GPT-OSS): per-frequency blend of interpolated (`θ / factor`) and extrapolated
    /// (`θ`) frequencies over a linear ramp between two correction dimensions, and cos/sin scaled
    /// by the attention factor `0.1·ln(factor) + 1`. See [`crate::yarn`].
    Yarn {
        /// Context extension factor (`rope_scaling.factor`).
        factor: f32,
        /// Trained context before extension (`original_max_position_embeddings`).
        original_context: usize,
        /// Rotations at which frequencies stop being extrapolated (`beta_fast`, 32).
        beta_fast: f32,
        /// Rotations below which frequencies are fully interpolated (`beta_slow`, 1).
        beta_slow: f32,
        /// Floor/ceil the correction dimensions (transformers' default when the key is absent;
        /// OpenAI's reference does not, and GPT-OSS's config says `false`).
        truncate: bool,
    },
}

/// Rotary position embedding parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct RopeConfig {
    /// Pairing of dimensions.
    pub style: RopeStyle,
    /// Base of the geometric frequency series (`{arch}.rope.freq_base`, default 10000).
    pub base: f32,
    /// Rotated dimensions per head (`{arch}.rope.dimension_count`, default the head dim).
    pub dim: usize,
    /// Position scaling.
    pub scaling: RopeScaling,
}

impl RopeConfig {
    /// The first position whose presence in a forward step changes the frequencies of every
    /// position in it (long-rope's switch to its long factors, [`inv_freq`]); `None` where a
    /// position's rotation never depends on the others in its step. A step that runs positions on
    /// both sides of it rotates the earlier ones differently than one-at-a-time decoding does
    /// (speculative decoding keeps its verification passes on one side).
    pub fn step_dependent_from(&self) -> Option<usize> {
        match self.scaling {
            RopeScaling::LongRope { original_context, .. } => Some(original_context),
            _ => None,
        }
    }
}

/// The inverse frequencies (`rope.dim / 2` values) and the cos/sin multiplier for a forward step
/// whose largest position is `max_pos`.
///
/// Long-rope picks its factor set per step as transformers does (`longrope_frequency_update`):
/// the long factors when `max_pos + 1` exceeds the original context, else the short ones.
pub fn inv_freq(rope: &RopeConfig, max_pos: u32) -> (Vec<f32>, f32) {
    let mut freqs = Vec::new();
    let mscale = inv_freq_into(rope, max_pos, &mut freqs);
    (freqs, mscale)
}

/// [`inv_freq`] into `freqs` (its old values replaced, its allocation kept); returns the
/// multiplier.
pub fn inv_freq_into(rope: &RopeConfig, max_pos: u32, freqs: &mut Vec<f32>) -> f32 {
    let half = rope.dim / 2;
    let base = |i: usize| (f64::from(rope.base).powf(-2.0 * i as f64 / rope.dim as f64)) as f32;
    freqs.clear();
    let mut scaled = |divisors: &[f32]| freqs.extend((0..half).map(|i| base(i) / divisors[i]));
    match &rope.scaling {
        RopeScaling::None => {
            freqs.extend((0..half).map(base));
            1.0
        }
        RopeScaling::Linear { factor } => {
            freqs.extend((0..half).map(|i| base(i) / factor));
            1.0
        }
        RopeScaling::FreqFactors { factors } => {
            scaled(factors);
            1.0
        }
        RopeScaling::LongRope { short, long, original_context, attn_factor } => {
            scaled(if max_pos as usize + 1 > *original_context { long } else { short });
            *attn_factor
        }
        &RopeScaling::Yarn { factor, original_context, beta_fast, beta_slow, truncate } => {
            freqs.extend((0..half).map(|i| {
                let theta = base(i);
                crate::yarn::yarn_inv_freq(
                    i,
                    theta,
                    rope.dim,
                    rope.base,
                    factor,
                    original_context,
                    beta_fast,
                    beta_slow,
                    truncate,
                )
            }));
            crate::yarn::yarn_attention_factor(factor)
        }
    }
}

/// LLaMA-3 scaling as per-frequency divisors (what llama.cpp's converter stores as
/// `rope_freqs.weight`): long wavelengths (> `original_context / low_freq_factor`) are divided by
/// `factor`, short ones (< `original_context / high_freq_factor`) kept, and the band between
/// interpolated smoothly (transformers' `_compute_llama3_parameters`).
pub fn llama3_factors(
    base: f32,
    dim: usize,
    factor: f32,
    low_freq_factor: f32,
    high_freq_factor: f32,
    original_context: usize,
) -> Vec<f32> {
    let old = original_context as f64;
    let (low, high, factor) = (f64::from(low_freq_factor), f64::from(high_freq_factor), f64::from(factor));
    let (low_freq_wavelen, high_freq_wavelen) = (old / low, old / high);
    (0..dim / 2)
        .map(|i| {
            let theta = f64::from(base).powf(-2.0 * i as f64 / dim as f64);
            let wavelen = 2.0 * std::f64::consts::PI / theta;
            let divisor = if wavelen < high_freq_wavelen {
                1.0
            } else if wavelen > low_freq_wavelen {
                factor
            } else {
                let smooth = (old / wavelen - low) / (high - low);
                1.0 / ((1.0 - smooth) / factor + smooth)
            };
            divisor as f32
        })
        .collect()
}

/// Long-rope's default attention factor for a context stretched by `factor` over an original
/// context of `original_context` positions: `√(1 + ln factor / ln original_context)`, or 1 when
/// `factor ≤ 1` (transformers' `_compute_longrope_parameters`).
pub fn longrope_attention_factor(factor: f32, original_context: usize) -> f32 {
    if factor <= 1.0 || original_context < 2 {
        return 1.0;
    }
    (1.0 + f64::from(factor).ln() / (original_context as f64).ln()).sqrt() as f32
}
