//! Activations as the matmul kernels read them: one f32 vector quantized once per call to the
//! format its weight dtype's kernels multiply with (the `activation` column of the kernel table,
//! `crate::kernels`), or to i16 for the `matmul_i16` kernels.

use std::sync::Mutex;

use half::f16;
use minerva_core::DType;

use crate::quantize_row_q8_k_ref;
use crate::repack::ActBlock;

/// One activation vector as the dot and tile kernels read it.
///
/// For F32/F16/BF16 weights only `x` is used; for the others `qs` holds the quantized values
/// (i8 bit patterns), `d` one scale per activation block, and `sums` the sums of the quants, one
/// per 32-value block, for Q8_0 and i16; Q8_K keeps its `bsums` (one per 16 values) as the format
/// stores them, i16, which SIMD kernels multiply with `madd`. For Q8_0 and i16, `ds` holds
/// `d · sum` per block (what a weight block's minimum multiplies, as in llama.cpp's Q8_1). For
/// i16, `q16` holds the quants instead of `qs`.
pub(crate) struct Activation<'a> {
    /// Unique for the process's lifetime (never reused), so that a kernel may keep something it
    /// derived from these values per thread and know it still matches (`avx512_panel`'s layout).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(crate) id: u64,
    pub(crate) x: &'a [f32],
    pub(crate) d: Vec<f32>,
    pub(crate) qs: Vec<u8>,
    pub(crate) sums: Vec<i32>,
    pub(crate) ds: Vec<f32>,
    pub(crate) q16: Vec<i16>,
    pub(crate) bsums: Vec<i16>,
    /// For `Q8_1`: the repacked kernels' blocks (`crate::repack::ActBlock`), and nothing else.
    pub(crate) blocks: Vec<ActBlock>,
}

/// The vectors of a dropped [`Activation`], emptied, for the next one to fill: every matrix
/// product quantizes its input, a few hundred per decode step, and fresh vectors were most of a
/// step's allocations.
#[derive(Default)]
pub(crate) struct Buffers {
    d: Vec<f32>,
    qs: Vec<u8>,
    sums: Vec<i32>,
    ds: Vec<f32>,
    q16: Vec<i16>,
    bsums: Vec<i16>,
    blocks: Vec<ActBlock>,
}

/// Free [`Buffers`], at most [`KEEP`], for activations quantized one at a time (a batch's rows
/// keep theirs with the caller: `Activation::holding`).
static FREE: Mutex<Vec<Buffers>> = Mutex::new(Vec::new());

/// Buffers kept: a bound, not a size (one-at-a-time activations are a few per step; a batch's
/// rows keep theirs with the caller instead).
const KEEP: usize = 1024;

fn take_buffers() -> Buffers {
    FREE.lock().unwrap_or_else(|e| e.into_inner()).pop().unwrap_or_default()
}

impl Drop for Activation<'_> {
    fn drop(&mut self) {
        let buffers = self.take_buffers();
        if buffers.d.capacity() == 0 && buffers.blocks.capacity() == 0 {
            return; // F32 activations hold nothing, nor those whose vectors were taken.
        }
        let mut free = FREE.lock().unwrap_or_else(|e| e.into_inner());
        if free.len() < KEEP {
            free.push(buffers);
        }
    }
}

/// The next [`Activation::id`].
static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// `x.round()` (halves away from zero) for |x| < 2²³, without the libm call `round` is on
/// x86-64's baseline (no SSE4.1): `x - trunc(x)` is exact in that range.
pub(crate) fn round_half_away(x: f32) -> i32 {
    let t = x as i32;
    let frac = x - t as f32;
    t + i32::from(frac >= 0.5) - i32::from(frac <= -0.5)
}

/// An i16 block's scale `d = amax / 32767` and the factor its values are multiplied by, `1/d`;
/// both 0 where `1/d` is not finite (an all-zero block, or one so small that `1/d` overflows,
/// which would make every quant saturate).
pub(crate) fn i16_scale(amax: f32) -> (f32, f32) {
    let d = amax / 32767.0;
    let inverse = 1.0 / d;
    if inverse.is_finite() { (d, inverse) } else { (0.0, 0.0) }
}

/// `quantize_row_q8_0_ref`'s blocks, value for value, as the kernels read them: quants (i8 bit
/// patterns), the f16 scale as f32, and each block's quant sum. Rounding by [`round_half_away`]
/// of the value clamped to the i8 range (what `round() as i8` does, NaN giving 0) instead of
/// libm's `roundf`, so that the loop compiles to straight vector code; `tests` checks it against
/// the reference.
pub(crate) fn quantize_q8_0_blocks(x: &[f32], qs: &mut [u8], d: &mut [f32], sums: &mut [i32]) {
    let (x_blocks, _) = x.as_chunks::<32>();
    let (q_blocks, _) = qs.as_chunks_mut::<32>();
    for (((x, q), d), sum) in x_blocks.iter().zip(q_blocks).zip(d).zip(sums) {
        let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let scale = amax / 127.0;
        let inverse = if scale == 0.0 { 0.0 } else { 1.0 / scale };
        let mut total = 0i32;
        for (q, &v) in q.iter_mut().zip(x) {
            let rounded = round_half_away((v * inverse).clamp(-128.0, 127.0));
            total += rounded;
            *q = rounded as i8 as u8;
        }
        *sum = total;
        *d = f16::from_f32(scale).to_f32();
    }
}

/// `quantize_row_q8_k_ref`'s blocks split as the kernels read them (quants as i8 bit patterns,
/// the scale, the sums of 16): the scalar reference of the vector kernels' `quantize_q8_k`.
pub(crate) fn quantize_q8_k_blocks(x: &[f32], qs: &mut [u8], d: &mut [f32], bsums: &mut [i16]) {
    let mut bytes = [0u8; 292];
    let blocks = x.chunks_exact(256).zip(qs.chunks_exact_mut(256)).zip(d).zip(bsums.chunks_exact_mut(16));
    for (((x, q), d), sums) in blocks {
        quantize_row_q8_k_ref(x, &mut bytes).expect("one whole Q8_K block");
        *d = f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        q.copy_from_slice(&bytes[4..260]);
        for (sum, pair) in sums.iter_mut().zip(bytes[260..].chunks_exact(2)) {
            *sum = i16::from_le_bytes([pair[0], pair[1]]);
        }
    }
}

/// [`quantize_q8_0_blocks`] into [`ActBlock`]s (with `ds = d · Σq`): the scalar reference of
/// the vector kernels' `quantize_q8_1`.
pub(crate) fn quantize_act_blocks(x: &[f32], out: &mut [ActBlock]) {
    for (x, block) in x.chunks_exact(32).zip(out) {
        let (mut d, mut sum) = ([0.0f32], [0i32]);
        quantize_q8_0_blocks(x, &mut block.qs, &mut d, &mut sum);
        (block.d, block.sum, block.ds) = (d[0], sum[0], d[0] * sum[0] as f32);
    }
}

impl<'a> Activation<'a> {
    /// Quantizes one activation vector (a whole number of activation blocks: checked by the
    /// caller, since every weight block size is a multiple of its activation block size) to
    /// `format` (`F32`: used as given, `Q8_0`, `Q8_K`, or `Q8_1`: Q8_0's values as the repacked
    /// kernels read them, [`ActBlock`]s), or to i16 when `i16` is set (`format` is then Q8_0's
    /// 32-value blocks, `d = amax / 32767` kept in f32).
    pub(crate) fn quantize(format: DType, i16: bool, x: &'a [f32]) -> Self {
        let buffers = if format == DType::F32 { Buffers::default() } else { take_buffers() };
        let mut act = Activation::holding(x, buffers);
        act.quantize_in_place(format, i16);
        act
    }

    /// `x`, not yet quantized, holding `buffers` (emptied) for [`Self::quantize_in_place`] to
    /// fill: a batch's rows take the vectors its caller's last batch had (`Self::take_buffers`)
    /// rather than from [`FREE`], whose lock and cache lines the pool's threads would contend
    /// for row by row.
    pub(crate) fn holding(x: &'a [f32], buffers: Buffers) -> Self {
        let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let Buffers { d, qs, sums, ds, q16, bsums, blocks } = buffers;
        Activation { id, x, d, qs, sums, ds, q16, bsums, blocks }
    }

    /// Quantizes its `x` as [`Self::quantize`] does, into the vectors it holds. Once per
    /// activation: `id` names these values.
    pub(crate) fn quantize_in_place(&mut self, format: DType, i16: bool) {
        let x = self.x;
        if format == DType::F32 {
            return;
        }
        if format == DType::Q8_1 {
            self.blocks.resize(x.len() / 32, ActBlock::default());
            (crate::kernels::vector_kernels().quantize_q8_1)(x, &mut self.blocks);
            return;
        }
        if i16 {
            let blocks = x.len() / 32;
            self.q16.resize(32 * blocks, 0);
            self.d.resize(blocks, 0.0);
            self.sums.resize(blocks, 0);
            (crate::kernels::vector_kernels().quantize_i16)(x, &mut self.q16, &mut self.d, &mut self.sums);
            self.ds.extend(self.d.iter().zip(&self.sums).map(|(&d, &sum)| d * sum as f32));
            return;
        }
        let blocks = x.len() / format.block_elems();
        if format == DType::Q8_0 {
            self.qs.resize(32 * blocks, 0);
            self.d.resize(blocks, 0.0);
            self.sums.resize(blocks, 0);
            quantize_q8_0_blocks(x, &mut self.qs, &mut self.d, &mut self.sums);
            self.ds.extend(self.d.iter().zip(&self.sums).map(|(&d, &sum)| d * sum as f32));
            return;
        }
        // Q8_K: quants, scales and the sums of 16 as the kernels read them.
        self.qs.resize(256 * blocks, 0);
        self.d.resize(blocks, 0.0);
        self.bsums.resize(16 * blocks, 0);
        (crate::kernels::vector_kernels().quantize_q8_k)(x, &mut self.qs, &mut self.d, &mut self.bsums);
    }

    /// Its vectors, emptied (it then holds none, and its drop returns nothing to [`FREE`]).
    pub(crate) fn take_buffers(&mut self) -> Buffers {
        let mut buffers = Buffers {
            d: std::mem::take(&mut self.d),
            qs: std::mem::take(&mut self.qs),
            sums: std::mem::take(&mut self.sums),
            ds: std::mem::take(&mut self.ds),
            q16: std::mem::take(&mut self.q16),
            bsums: std::mem::take(&mut self.bsums),
            blocks: std::mem::take(&mut self.blocks),
        };
        buffers.d.clear();
        buffers.qs.clear();
        buffers.sums.clear();
        buffers.ds.clear();
        buffers.q16.clear();
        buffers.bsums.clear();
        buffers.blocks.clear();
        buffers
    }
}

#[cfg(test)]
mod tests {
    use super::round_half_away;
    use crate::kernels::{reference, vector_kernels};

    /// The detected i16 quantizer against the scalar one, each block also checked against the
    /// definition.
    fn check_i16_blocks(x: &[f32]) {
        let blocks = x.len() / 32;
        let run = |f: crate::kernels::QuantizeI16Fn| {
            let (mut q, mut d, mut sums) = (vec![7i16; 32 * blocks], vec![7.0f32; blocks], vec![7i32; blocks]);
            f(x, &mut q, &mut d, &mut sums);
            (q, d, sums)
        };
        let (q, d, sums) = run(reference::quantize_i16_blocks);
        let fast = run(vector_kernels().quantize_i16);
        assert_eq!(fast.0, q, "{} quants", vector_kernels().isa);
        assert_eq!(
            fast.1.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            d.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
        assert_eq!(fast.2, sums);
        for (b, x) in x.chunks_exact(32).enumerate() {
            let q = &q[32 * b..32 * b + 32];
            assert_eq!(sums[b], q.iter().map(|&v| i32::from(v)).sum::<i32>());
            let amax = x.iter().filter(|v| v.is_finite()).fold(0.0f32, |m, v| m.max(v.abs()));
            if x.iter().all(|v| v.is_finite()) && amax > 1e-30 {
                assert_eq!(q.iter().map(|v| v.unsigned_abs()).max(), Some(32767), "block {b}: {x:?}");
                for (&v, &q) in x.iter().zip(q) {
                    // Half a step, and the rounding of `1/d` and of `x · (1/d)`: 2⁻²³ relative
                    // on a value of at most 32767, under 0.004 steps.
                    let error = (f64::from(v) - f64::from(q) * f64::from(d[b])).abs();
                    assert!(error <= 0.504 * f64::from(d[b]), "{v} as {q} × {}", d[b]);
                }
            }
        }
    }

    #[test]
    fn i16_quantizers_agree_with_the_reference() {
        let mut next = crate::test_rng::xorshift(0x2545_f491_4f6c_dd1d);
        for magnitude in [1e-3f32, 1.0, 7.5, 3e4, 1e20] {
            let x: Vec<f32> = (0..32 * 40).map(|_| ((next() % 20001) as f32 / 10000.0 - 1.0) * magnitude).collect();
            check_i16_blocks(&x);
        }
        // Values on rounding ties (k + 0.5 quant steps) and exact multiples.
        let ties: Vec<f32> = (0..64).map(|i| if i % 32 == 0 { 32767.0 } else { (i as f32 - 20.0) + 0.5 }).collect();
        check_i16_blocks(&ties);
        // Zero, tiny (1/d overflows: flushed to zero), NaN and infinite blocks.
        let mut special = vec![0.0f32; 32];
        special.extend([1e-36f32; 32]);
        special.extend((0..32).map(|i| if i == 3 { f32::NAN } else { i as f32 }));
        special.extend((0..32).map(|i| if i == 5 { f32::INFINITY } else { -(i as f32) }));
        special.extend((0..32).map(|i| if i % 2 == 0 { -0.0 } else { 1e-38 }));
        check_i16_blocks(&special);
        let (mut q, mut d, mut sums) = (vec![1i16; 64], vec![1.0f32; 2], vec![1i32; 2]);
        (vector_kernels().quantize_i16)(&special[..64], &mut q, &mut d, &mut sums);
        assert_eq!((q, d, sums), (vec![0; 64], vec![0.0; 2], vec![0; 2]), "zero and tiny blocks");
    }

    #[test]
    fn q8_0_blocks_equal_the_reference_quantizer() {
        let mut next = crate::test_rng::xorshift(0x9e37_79b9_7f4a_7c15);
        let mut x: Vec<f32> = Vec::new();
        for magnitude in [1e-3f32, 1.0, 7.5, 3e4, 1e20, 1e-37] {
            x.extend((0..32 * 8).map(|_| ((next() % 20001) as f32 / 10000.0 - 1.0) * magnitude));
        }
        // Ties, zeros, NaN, infinities, subnormals, the largest values; three times, so that they meet
        // a kernel's batches of blocks (sixteen with AVX-512) and its blocks one at a time.
        let start = x.len();
        x.extend([0.0f32; 32]);
        x.extend((0..32).map(|i| if i == 3 { f32::NAN } else { i as f32 }));
        x.extend((0..32).map(|i| if i == 5 { f32::INFINITY } else { -(i as f32) }));
        x.extend((0..32).map(|i| if i == 7 { f32::NEG_INFINITY } else { i as f32 }));
        x.extend((0..32).map(|i| if i % 2 == 0 { -0.0 } else { 1e-45 }));
        x.extend((0..32).map(|i| if i % 3 == 0 { f32::MAX } else { -f32::MAX / (i as f32) }));
        x.extend((0..32).map(|i| 127.0 * (i as f32 - 16.0) / 16.0));
        x.extend((0..32).map(|i| (i as f32 - 16.0) * 0.5 + 0.25));
        let specials = x[start..].to_vec();
        x.splice(0..0, specials.iter().copied());
        x.extend(&specials);
        let blocks = x.len() / 32;
        let mut bytes = vec![0u8; 34 * blocks];
        crate::quantize_row_q8_0_ref(&x, &mut bytes).unwrap();
        let (mut qs, mut d, mut sums) = (vec![0u8; 32 * blocks], vec![0.0f32; blocks], vec![0i32; blocks]);
        super::quantize_q8_0_blocks(&x, &mut qs, &mut d, &mut sums);
        for (b, block) in bytes.chunks_exact(34).enumerate() {
            assert_eq!(&qs[32 * b..32 * b + 32], &block[2..], "block {b}");
            let want = half::f16::from_le_bytes([block[0], block[1]]).to_f32();
            assert_eq!(d[b].to_bits(), want.to_bits(), "block {b}");
            assert_eq!(sums[b], block[2..].iter().map(|&q| i32::from(q as i8)).sum::<i32>());
        }
        // The repacked kernels' blocks: the same values, from the reference and the vector set.
        for quantize in [super::quantize_act_blocks, vector_kernels().quantize_q8_1] {
            let mut blocks = vec![crate::repack::ActBlock::default(); blocks];
            quantize(&x, &mut blocks);
            for (b, block) in blocks.iter().enumerate() {
                assert_eq!(&block.qs[..], &qs[32 * b..32 * b + 32], "{} block {b}", vector_kernels().isa);
                assert_eq!((block.d.to_bits(), block.sum), (d[b].to_bits(), sums[b]), "block {b}");
                assert_eq!(block.ds.to_bits(), (d[b] * sums[b] as f32).to_bits(), "block {b}");
            }
        }
    }

    #[test]
    fn q8_k_blocks_equal_the_reference_quantizer() {
        let mut next = crate::test_rng::xorshift(0x6a09_e667_f3bc_c908);
        let mut x: Vec<f32> = Vec::new();
        for magnitude in [1e-3f32, 1.0, 7.5, 3e4, 1e20, 1e-37] {
            x.extend((0..256 * 3).map(|_| ((next() % 20001) as f32 / 10000.0 - 1.0) * magnitude));
        }
        // The largest magnitude twice with both signs, either first (the first sets the sign),
        // in one group of eight lanes and far apart.
        for (sign, second) in [(1.0f32, 43), (-1.0, 43), (1.0, 200), (-1.0, 200)] {
            x.extend((0..256).map(|i| match i {
                40 => 9.0 * sign,
                _ if i == second => -9.0 * sign,
                _ => (i % 17) as f32 - 8.0,
            }));
        }
        // Ties: with max = −127, iscale = 1 and k + 0.5 rounds to even; quants reaching ±127.
        x.extend((0..256).map(|i| if i == 0 { -127.0 } else { (i % 64) as f32 - 32.5 }));
        x.extend((0..256).map(|i| if i % 2 == 0 { 127.0 } else { -127.0 + (i % 5) as f32 }));
        // Zeros (both signs), a NaN, infinities, subnormals (iscale overflows), the largest values.
        x.extend((0..256).map(|i| if i % 2 == 0 { 0.0 } else { -0.0 }));
        x.extend((0..256).map(|i| if i == 3 { f32::NAN } else { i as f32 }));
        x.extend((0..256).map(|i| if i == 5 { f32::INFINITY } else { -(i as f32) }));
        x.extend((0..256).map(|i| if i == 7 { f32::NEG_INFINITY } else { i as f32 }));
        x.extend((0..256).map(|i| if i % 2 == 0 { -0.0 } else { 1e-45 }));
        x.extend((0..256).map(|i| if i % 3 == 0 { f32::MAX } else { -f32::MAX / (i as f32) }));
        let blocks = x.len() / 256;
        let run = |f: crate::kernels::QuantizeQ8KFn| {
            let (mut qs, mut d, mut bsums) = (vec![7u8; 256 * blocks], vec![7.0f32; blocks], vec![7i16; 16 * blocks]);
            f(&x, &mut qs, &mut d, &mut bsums);
            (qs, d.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), bsums)
        };
        let (qs, d, bsums) = run(super::quantize_q8_k_blocks);
        let fast = run(vector_kernels().quantize_q8_k);
        for b in 0..blocks {
            let isa = vector_kernels().isa;
            assert_eq!(&fast.0[256 * b..256 * (b + 1)], &qs[256 * b..256 * (b + 1)], "{isa} block {b} quants");
            assert_eq!(fast.1[b], d[b], "{isa} block {b} scale");
            assert_eq!(&fast.2[16 * b..16 * (b + 1)], &bsums[16 * b..16 * (b + 1)], "{isa} block {b} sums");
        }
        // The reference's split of ggml's block bytes.
        let mut bytes = vec![0u8; 292 * blocks];
        crate::quantize_row_q8_k_ref(&x, &mut bytes).unwrap();
        for (b, block) in bytes.chunks_exact(292).enumerate() {
            assert_eq!(d[b], u32::from_le_bytes([block[0], block[1], block[2], block[3]]), "block {b}");
            assert_eq!(&qs[256 * b..256 * (b + 1)], &block[4..260], "block {b}");
            let sums = block[260..].chunks_exact(2).map(|s| i16::from_le_bytes([s[0], s[1]]));
            assert!(sums.eq(bsums[16 * b..16 * (b + 1)].iter().copied()), "block {b}");
        }
    }

    #[test]
    fn round_half_away_is_round() {
        let specials = [0.0f32, -0.0, 0.5, -0.5, 1.5, -1.5, 2.5, 0.49999997, -0.49999997, 32767.0, -32767.0, 32766.5];
        let sweep = (-70_000..70_000).map(|i| i as f32 * 0.4999);
        for x in specials.into_iter().chain(sweep) {
            assert_eq!(round_half_away(x), x.round() as i32, "{x}");
        }
    }
}
