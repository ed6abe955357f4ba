//! Helpers shared by the test binaries: reproducible random inputs, in-memory weights, both
//! backends and the CPU-vs-GPU comparison.
#![allow(dead_code)]

use std::sync::Arc;

use minerva_core::DType;
use minerva_model::{
    Backend, ByteSource, CpuBackend, CpuTensor, LogitsFor, MlxAffineSource, Model, SequenceInput, WeightSource,
};
use minerva_wgpu::{WgpuBackend, WgpuOptions};

/// Bytes in memory as a weight's file.
pub struct Bytes(pub Vec<u8>);

impl ByteSource for Bytes {
    fn bytes(&self) -> &[u8] {
        &self.0
    }
}

/// xorshift64*: reproducible inputs without a dependency.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u32(&mut self) -> u32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) as u32
    }

    /// Uniform in [-1, 1).
    pub fn f32(&mut self) -> f32 {
        self.next_u32() as f32 / 2_147_483_648.0 - 1.0
    }

    pub fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.f32()).collect()
    }
}

pub fn f16_bits(x: f32) -> u16 {
    half::f16::from_f32(x).to_bits()
}

/// `rows × cols` random weights stored as `dtype`. Formats with a quantizer here are quantized
/// from random values; Q5_0, Q4_K and Q6_K (no quantizer in minerva-quant) get random bytes with
/// sane f16 scales, which exercise every bit of their layouts.
pub fn weight_bytes(rng: &mut Rng, dtype: DType, rows: usize, cols: usize) -> Vec<u8> {
    let values = rng.vec(rows * cols);
    match dtype {
        DType::F32 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DType::F16 => values.iter().flat_map(|&v| f16_bits(v).to_le_bytes()).collect(),
        DType::BF16 => values.iter().flat_map(|&v| half::bf16::from_f32(v).to_bits().to_le_bytes()).collect(),
        DType::Q5_0 | DType::Q4_K | DType::Q6_K => {
            let n_blocks = rows * cols / dtype.block_elems();
            let mut out: Vec<u8> = (0..n_blocks * dtype.block_bytes()).map(|_| rng.next_u32() as u8).collect();
            for block in out.chunks_exact_mut(dtype.block_bytes()) {
                let d = f16_bits(0.01 + 0.01 * rng.f32()).to_le_bytes();
                if dtype == DType::Q5_0 {
                    block[..2].copy_from_slice(&d);
                } else if dtype == DType::Q4_K {
                    let dmin = f16_bits(0.005 * rng.f32()).to_le_bytes();
                    block[..2].copy_from_slice(&d);
                    block[2..4].copy_from_slice(&dmin);
                } else {
                    block[208..].copy_from_slice(&d);
                }
            }
            out
        }
        _ => {
            let mut out = vec![0u8; dtype.row_bytes(cols).unwrap() * rows];
            minerva_quant::quantize(dtype, &values, &mut out).unwrap();
            out
        }
    }
}

/// A weight held in memory.
pub fn source(name: &str, dtype: DType, shape: &[usize], bytes: Vec<u8>) -> WeightSource {
    let len = bytes.len();
    WeightSource { file: Arc::new(Bytes(bytes)), name: name.into(), dtype, shape: shape.to_vec(), range: 0..len }
}

/// The wgpu backend; these tests fail (not skip) without an adapter.
pub fn gpu(options: WgpuOptions) -> WgpuBackend {
    WgpuBackend::new(options)
        .expect("these tests need a wgpu adapter; on Debian/Ubuntu install mesa-vulkan-drivers (lavapipe)")
}

/// The CPU backend in its f32 reference mode, one thread.
pub fn cpu() -> CpuBackend {
    CpuBackend::new(Some(1)).unwrap().with_f32_activations(true)
}

/// The same weight on both backends.
pub fn both<C, G>(c: &CpuBackend, g: &WgpuBackend, src: WeightSource) -> (C, G)
where
    CpuBackend: Backend<Weight = C>,
    WgpuBackend: Backend<Weight = G>,
{
    (c.weight(src.clone()).unwrap(), g.weight(src).unwrap())
}

/// A random `rows × cols` weight of `dtype` on both backends. The MLX block dtypes (`MLX_A8`,
/// `MLX_A4`) come from an MLX affine matrix (random codes, bf16 scales and biases, groups of 64 for
/// 8 bits where the columns allow, else 32) through `Backend::mlx_affine_weight`: read in place on the CPU, uploaded as
/// blocks to the GPU.
pub fn random_weights<C, G>(
    c: &CpuBackend,
    g: &WgpuBackend,
    rng: &mut Rng,
    dtype: DType,
    rows: usize,
    cols: usize,
) -> (C, G)
where
    CpuBackend: Backend<Weight = C>,
    WgpuBackend: Backend<Weight = G>,
{
    let bits = match dtype {
        DType::MLX_A8 => 8,
        DType::MLX_A4 => 4,
        _ => return both(c, g, source("w", dtype, &[rows, cols], weight_bytes(rng, dtype, rows, cols))),
    };
    let group_size = if bits == 8 && cols.is_multiple_of(64) { 64 } else { 32 };
    let source = mlx_affine_source(rng, bits, group_size, rows, cols);
    (c.mlx_affine_weight(source.clone()).unwrap(), g.mlx_affine_weight(source).unwrap())
}

/// An MLX affine matrix in memory: random codes, bf16 scales (0.01…0.02) and biases (±0.3).
pub fn mlx_affine_source(rng: &mut Rng, bits: u32, group_size: usize, rows: usize, cols: usize) -> MlxAffineSource {
    let groups = rows * cols / group_size;
    let codes: Vec<u8> = (0..rows * cols * bits as usize / 8).map(|_| rng.next_u32() as u8).collect();
    let bf16 = |v: f32| half::bf16::from_f32(v).to_le_bytes();
    let scales: Vec<u8> = (0..groups).flat_map(|_| bf16(0.015 + 0.005 * rng.f32())).collect();
    let biases: Vec<u8> = (0..groups).flat_map(|_| bf16(0.3 * rng.f32())).collect();
    let part = |bytes: Vec<u8>| {
        let len = bytes.len();
        (Arc::new(Bytes(bytes)) as Arc<dyn ByteSource>, 0..len)
    };
    let ((weight, weight_range), (scales, scales_range), (biases, biases_range)) =
        (part(codes), part(scales), part(biases));
    MlxAffineSource {
        weight,
        weight_range,
        scales,
        scales_range,
        biases,
        biases_range,
        params: minerva_quant::MlxAffine { bits, group_size, scale_dtype: DType::BF16 },
        name: format!("mlx affine {bits}-bit"),
        shape: vec![rows, cols],
    }
}

/// The bound llama.cpp's `test-backend-ops` puts on every op's [`nmse`].
pub const MAX_NMSE: f64 = 1e-7;

/// llama.cpp's `test-backend-ops` error measure, the normalized mean squared error
/// Σ(gpu − cpu)² / Σ cpu², summed in f64 (0 when both are all zeros; NaN if either has a NaN).
pub fn nmse(cpu: &[f32], gpu: &[f32]) -> f64 {
    let (mut err, mut norm) = (0.0f64, 0.0f64);
    for (&a, &b) in cpu.iter().zip(gpu) {
        err += (f64::from(b) - f64::from(a)).powi(2);
        norm += f64::from(a).powi(2);
    }
    if err == 0.0 { 0.0 } else { err / norm }
}

/// [`nmse`] ≤ [`MAX_NMSE`] (a NaN fails), naming the worst element if not; prints the figure.
#[track_caller]
pub fn assert_nmse(what: &str, cpu: &[f32], gpu: &[f32]) {
    assert_eq!(cpu.len(), gpu.len(), "{what}: lengths");
    let e = nmse(cpu, gpu);
    let (i, err) = cpu
        .iter()
        .zip(gpu)
        .map(|(a, b)| (a - b).abs())
        .enumerate()
        .fold((0, 0.0f32), |best, (i, e)| if e > best.1 || e.is_nan() { (i, e) } else { best });
    eprintln!("NMSE {e:.1e} (max |Δ| {err:.1e}): {what}");
    assert!(e <= MAX_NMSE, "{what}: NMSE {e:e} > {MAX_NMSE:e}; worst element {i}: cpu {}, gpu {}", cpu[i], gpu[i]);
}

/// A CPU tensor copied to the GPU.
pub fn to_gpu(g: &WgpuBackend, t: &CpuTensor) -> minerva_wgpu::WgpuTensor {
    g.upload(&t.data, t.rows, t.cols).unwrap()
}

/// A random `rows × cols` activation.
pub fn tensor(rng: &mut Rng, rows: usize, cols: usize) -> CpuTensor {
    CpuTensor { data: rng.vec(rows * cols), rows, cols }
}

/// (index of the max, margin to the runner-up).
pub fn top(row: &[f32]) -> (u32, f32) {
    let best = row.iter().enumerate().fold(0, |b, (i, &v)| if v > row[b] { i } else { b });
    let second = row.iter().enumerate().filter(|&(i, _)| i != best).fold(f32::NEG_INFINITY, |m, (_, &v)| m.max(v));
    (best as u32, row[best] - second)
}

/// Prefill of `prompt` (every row's logits) and 32 greedy decode steps on both models.
///
/// Logits must agree within `rel_tol` · max |logit| at every step. Greedy tokens: the CPU's choice
/// is fed to both (teacher forcing, so one disagreement cannot derail the rest), and the GPU's
/// argmax must equal it at every step whose CPU top-2 margin exceeds twice the largest logit
/// difference measured at that step (only then can the two swap; with random weights an exact
/// near-tie is possible; at most 2 are allowed). `Model::forward_greedy` runs
/// alongside on its own caches and must equal each backend's own argmax.
#[track_caller]
pub fn greedy_parity(label: &str, cpu: &Model<CpuBackend>, gpu: &Model<WgpuBackend>, prompt: &[u32], rel_tol: f32) {
    let steps = 32;
    let capacity = prompt.len() + steps;
    let (mut cc, mut gc) = (cpu.new_cache(1, capacity).unwrap(), gpu.new_cache(1, capacity).unwrap());
    let (mut cgc, mut ggc) = (cpu.new_cache(1, capacity).unwrap(), gpu.new_cache(1, capacity).unwrap());
    let mut tokens = prompt.to_vec();
    let (mut start, mut near_ties, mut worst) = (0, 0, 0.0f32);
    for step in 0..=steps {
        let seq = SequenceInput { tokens: &tokens[start..], start_pos: start, slot: 0 };
        let which = if step == 0 { LogitsFor::All } else { LogitsFor::Last };
        let want = cpu.forward(&mut cc, &[seq], which).unwrap();
        let got = gpu.forward(&mut gc, &[seq], which).unwrap();
        let scale = want.data.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let err = want.data.iter().zip(&got.data).fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
        let tol = rel_tol * scale;
        assert!(err <= tol, "{label} step {step}: max |Δlogit| {err} > {rel_tol} × {scale}");
        worst = worst.max(err / scale);
        let last = want.rows.len() - 1;
        let (next, margin) = top(want.row(last));
        assert_eq!(cpu.forward_greedy(&mut cgc, &[seq]).unwrap(), [next], "{label}: CPU forward_greedy, step {step}");
        let gpu_next = top(got.row(last)).0;
        assert_eq!(
            gpu.forward_greedy(&mut ggc, &[seq]).unwrap(),
            [gpu_next],
            "{label}: GPU forward_greedy, step {step}"
        );
        if margin > 2.0 * err {
            assert_eq!(gpu_next, next, "{label}: greedy token at step {step}");
        } else {
            near_ties += 1;
        }
        start = tokens.len();
        tokens.push(next);
    }
    eprintln!("{label}: worst |Δlogit| / max |logit| {worst:.2e}, {near_ties} near-ties, tokens {tokens:?}");
    assert!(near_ties <= 2, "{label}: {near_ties} of {steps} steps were near-ties");
}
