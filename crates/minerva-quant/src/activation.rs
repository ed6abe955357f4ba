//! Activations as the matmul kernels read them: one f32 vector quantized once per call to the
//! format its weight dtype's kernels multiply with (the `activation` column of the kernel table,
//! `crate::kernels`), or to i16 for the `matmul_i16` kernels.

use half::f16;
use minerva_core::DType;

use crate::{quantize_row_q8_0_ref, quantize_row_q8_k_ref};

/// One activation vector as the dot and tile kernels read it.
///
/// For F32/F16/BF16 weights only `x` is used; for the others `qs` holds the quantized values
/// (i8 bit patterns), `d` one scale per activation block, and `sums` the sums of the quants: one
/// per 32-value block for Q8_0 and i16, Q8_K's `bsums` (one per 16 values) for Q8_K. For Q8_0 and
/// i16, `ds` holds `d · sum` per block (what a weight block's minimum multiplies, as in llama.cpp's
/// Q8_1). For i16, `q16` holds the quants instead of `qs`.
pub(crate) struct Activation<'a> {
    pub(crate) x: &'a [f32],
    pub(crate) d: Vec<f32>,
    pub(crate) qs: Vec<u8>,
    pub(crate) sums: Vec<i32>,
    pub(crate) ds: Vec<f32>,
    pub(crate) q16: Vec<i16>,
}

/// `x.round()` (halves away from zero) for |x| < 2²³, without the libm call `round` is on
/// x86-64's baseline (no SSE4.1): `x - trunc(x)` is exact in that range.
fn round_half_away(x: f32) -> i32 {
    let t = x as i32;
    let frac = x - t as f32;
    t + i32::from(frac >= 0.5) - i32::from(frac <= -0.5)
}

impl<'a> Activation<'a> {
    /// Quantizes one activation vector (a whole number of activation blocks: checked by the
    /// caller, since every weight block size is a multiple of its activation block size) to
    /// `format` (`F32`: used as given, `Q8_0`, `Q8_K`), or to i16 when `i16` is set (`format` is
    /// then Q8_0's 32-value blocks, `d = amax / 32767` kept in f32).
    pub(crate) fn quantize(format: DType, i16: bool, x: &'a [f32]) -> Self {
        let mut act =
            Activation { x, d: Vec::new(), qs: Vec::new(), sums: Vec::new(), ds: Vec::new(), q16: Vec::new() };
        if format == DType::F32 {
            return act;
        }
        if i16 {
            act.q16.reserve(x.len());
            for block in x.chunks_exact(32) {
                let amax = block.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                let d = amax / 32767.0;
                let id = if d == 0.0 { 0.0 } else { 1.0 / d };
                let start = act.q16.len();
                act.q16.extend(block.iter().map(|v| round_half_away(v * id) as i16));
                let sum: i32 = act.q16[start..].iter().map(|&q| i32::from(q)).sum();
                act.d.push(d);
                act.sums.push(sum);
                act.ds.push(d * sum as f32);
            }
            return act;
        }
        let block_elems = format.block_elems();
        let block_bytes = format.block_bytes();
        let blocks = x.len() / block_elems;
        let mut bytes = vec![0u8; blocks * block_bytes];
        act.qs.reserve(x.len());
        if format == DType::Q8_0 {
            quantize_row_q8_0_ref(x, &mut bytes).expect("whole Q8_0 blocks, checked by the caller");
            for block in bytes.chunks_exact(block_bytes) {
                let (d, sum) = (
                    f16::from_le_bytes([block[0], block[1]]).to_f32(),
                    block[2..].iter().map(|&q| i32::from(q as i8)).sum(),
                );
                act.d.push(d);
                act.qs.extend_from_slice(&block[2..]);
                act.sums.push(sum);
                act.ds.push(d * sum as f32);
            }
        } else {
            quantize_row_q8_k_ref(x, &mut bytes).expect("whole Q8_K blocks, checked by the caller");
            for block in bytes.chunks_exact(block_bytes) {
                act.d.push(f32::from_le_bytes([block[0], block[1], block[2], block[3]]));
                act.qs.extend_from_slice(&block[4..260]);
                act.sums.extend(block[260..].chunks_exact(2).map(|s| i32::from(i16::from_le_bytes([s[0], s[1]]))));
            }
        }
        act
    }
}

#[cfg(test)]
mod tests {
    use super::round_half_away;

    #[test]
    fn round_half_away_is_round() {
        let specials = [0.0f32, -0.0, 0.5, -0.5, 1.5, -1.5, 2.5, 0.49999997, -0.49999997, 32767.0, -32767.0, 32766.5];
        let sweep = (-70_000..70_000).map(|i| i as f32 * 0.4999);
        for x in specials.into_iter().chain(sweep) {
            assert_eq!(round_half_away(x), x.round() as i32, "{x}");
        }
    }
}
