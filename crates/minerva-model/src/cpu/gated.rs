//! The gated activations of the feed-forward blocks, `act(gate) ⊙ up`, on the CPU: both reduce to
//! `g / (1 + e^{-z})` for some `z`, so each chunk fills a stack buffer with `-z`, exponentiates it
//! with the vector `exp` kernel and finishes in one pass (libm's scalar `expf`/`tanhf` were most of
//! the element-wise time of a prefill). Chunks go to the compute pool.

use minerva_quant::{pool, vector};

/// Values per pool task and per stack buffer: large enough that a task is worth a wake-up, small
/// enough that a decode step (one row) stays one task on the calling thread.
const CHUNK: usize = 4096;
/// Values exponentiated per `exp` call (one stack buffer, in L1).
const STRIP: usize = 256;

/// √(2/π), as in [`crate::backend::gelu_tanh`].
const SQRT_2_OVER_PI: f32 = 0.797_884_6;

/// `out[i] = silu(gate[i]) * up[i]` (SwiGLU): `silu(g) = g / (1 + e^{-g})`.
pub(super) fn swiglu(gate: &[f32], up: &[f32], out: &mut [f32]) {
    gated(gate, up, out, |g| -g);
}

/// `out[i] = gelu_tanh(gate[i]) * up[i]` (GeGLU): `0.5·g·(1 + tanh(y)) = g / (1 + e^{-2y})` with
/// `y = √(2/π)·(g + 0.044715·g³)`, [`crate::backend::gelu_tanh`] written through `exp`.
pub(super) fn geglu(gate: &[f32], up: &[f32], out: &mut [f32]) {
    gated(gate, up, out, |g| -2.0 * SQRT_2_OVER_PI * (g + 0.044_715 * g * g * g));
}

/// `out[i] = gate[i] / (1 + e^{neg_z(gate[i])}) * up[i]`; all three have the same length. Written
/// into a separate output by the pool's tasks, so that no thread first copies the whole gate.
fn gated(gate: &[f32], up: &[f32], out: &mut [f32], neg_z: impl Fn(f32) -> f32 + Sync) {
    debug_assert!(gate.len() == out.len() && up.len() == out.len());
    pool::for_each_chunk_mut(out, CHUNK, |i, out| {
        let gate = &gate[i * CHUNK..][..out.len()];
        let up = &up[i * CHUNK..][..out.len()];
        let mut e = [0.0f32; STRIP];
        for ((out, gate), up) in out.chunks_mut(STRIP).zip(gate.chunks(STRIP)).zip(up.chunks(STRIP)) {
            let e = &mut e[..out.len()];
            e.iter_mut().zip(gate).for_each(|(e, &g)| *e = neg_z(g));
            vector::exp(e);
            for (((o, &g), &u), &e) in out.iter_mut().zip(gate).zip(up).zip(e.iter()) {
                *o = g / (1.0 + e) * u;
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::gelu_tanh;

    /// Gates over the range the activations see, including the saturated ends and zero.
    fn gates() -> Vec<f32> {
        (-4000..=4000).map(|i| i as f32 * 0.01).chain([-1e4, -100.0, 100.0, 1e4, 0.0]).collect()
    }

    /// Agreement with the scalar definitions: relative error within a few f32 ulps, or an absolute
    /// one far below any activation's scale where the result is tiny.
    fn assert_close(got: f32, want: f32, g: f32) {
        let err = (got - want).abs();
        assert!(err <= 8.0 * f32::EPSILON * want.abs() || err <= 1e-30, "g = {g}: {got} vs {want}");
    }

    #[test]
    fn swiglu_equals_the_scalar_definition() {
        let gate = gates();
        let up: Vec<f32> = (0..gate.len()).map(|i| 0.5 + (i % 7) as f32 * 0.25).collect();
        let want: Vec<f32> = gate.iter().zip(&up).map(|(&g, &u)| g / (1.0 + (-g).exp()) * u).collect();
        let mut out = vec![f32::NAN; gate.len()];
        swiglu(&gate, &up, &mut out);
        for ((&got, &want), &g) in out.iter().zip(&want).zip(&gate) {
            assert_close(got, want, g);
        }
    }

    #[test]
    fn geglu_equals_the_tanh_definition() {
        let gate = gates();
        let up: Vec<f32> = (0..gate.len()).map(|i| 1.0 - (i % 5) as f32 * 0.3).collect();
        let mut out = vec![f32::NAN; gate.len()];
        geglu(&gate, &up, &mut out);
        for ((&got, &g), &u) in out.iter().zip(&gate).zip(&up) {
            // The tanh form in f32 loses digits where 1 + tanh(y) nears 0 (g below about -3):
            // against it, an absolute bound at the scale of g·u; against f64, a relative one.
            let tanh_form = gelu_tanh(g) * u;
            assert!(
                (got - tanh_form).abs() <= 4.0 * f32::EPSILON * (g * u).abs().max(1e-30),
                "g = {g}: {got} vs {tanh_form}"
            );
            let (g64, u64) = (f64::from(g), f64::from(u));
            let y = (2.0 / std::f64::consts::PI).sqrt() * (g64 + 0.044_715 * g64.powi(3));
            // z = -2y carries f32 rounding, which e^z scales by |z|: the bound grows with it.
            // (1 + tanh y)/2 = 1/(1 + e^{-2y}): the same in f64 without tanh's cancellation.
            let want = g64 / (1.0 + (-2.0 * y).exp()) * u64;
            let bound = (4.0 + 2.0 * y.abs()) * f64::from(f32::EPSILON) * want.abs();
            assert!((f64::from(got) - want).abs() <= bound.max(1e-30), "g = {g}: {got} vs {want}");
        }
    }
}
