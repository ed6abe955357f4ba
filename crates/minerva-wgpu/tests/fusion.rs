//! Fused kernels (`WgpuOptions::fuse`): RMS norms and SwiGLU / GeGLU computed by the decode
//! matrix products as they read their input, RoPE applied by the KV store. The fused steps must
//! give the unfused ones' logits bit for bit — every architecture, both cache types, decode,
//! small batches and a prefill long enough for the tiled kernels (which read the norm written
//! first) — and record fewer dispatches. Needs a wgpu adapter (lavapipe in CI) and fails without
//! one.

use std::path::{Path, PathBuf};

use minerva_core::DType;
use minerva_model::{LogitsFor, Model, SequenceInput};
use minerva_wgpu::{WgpuBackend, WgpuOptions};

fn fixture(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures").join(path)
}

/// Every row's logits of a `prompt_len`-token prefill, then the last row's of 4 decode steps, and
/// the dispatches each decode step recorded.
fn run(path: &Path, fuse: Option<bool>, kv_dtype: DType, prompt_len: usize) -> (Vec<u32>, Vec<u64>) {
    run_with(path, WgpuOptions { fuse, kv_dtype, ..WgpuOptions::default() }, prompt_len)
}

fn run_with(path: &Path, options: WgpuOptions, prompt_len: usize) -> (Vec<u32>, Vec<u64>) {
    let model = Model::load(path, WgpuBackend::new(options).expect("a wgpu adapter")).unwrap();
    let mut cache = model.new_cache(1, 64).unwrap();
    let prompt: Vec<u32> = (0..prompt_len as u32).map(|i| (i * 7 + 1) % 31 + 1).collect();
    let seq = SequenceInput { tokens: &prompt, start_pos: 0, slot: 0 };
    let mut logits = model.forward(&mut cache, &[seq], LogitsFor::All).unwrap().data;
    let mut dispatches = Vec::new();
    for step in 0..4 {
        let token = [(5 + 3 * step) as u32];
        let seq = SequenceInput { tokens: &token, start_pos: prompt.len() + step, slot: 0 };
        model.backend.take_record_stats();
        logits.extend(model.forward(&mut cache, &[seq], LogitsFor::Last).unwrap().data);
        let stats = model.backend.take_record_stats();
        assert_eq!(stats.source_copies, 0, "a decode step copied a deferred value's source");
        dispatches.push(stats.dispatches);
    }
    (logits.iter().map(|v| v.to_bits()).collect(), dispatches)
}

/// Fused and unfused runs agree bit for bit; returns the dispatches a fused decode step saves.
fn same_bits(path: &str, kv_dtype: DType, prompt_len: usize) -> u64 {
    let path = fixture(path);
    let (plain, plain_dispatches) = run(&path, Some(false), kv_dtype, prompt_len);
    let (fused, fused_dispatches) = run(&path, Some(true), kv_dtype, prompt_len);
    assert_eq!(plain.len(), fused.len());
    let differing = plain.iter().zip(&fused).filter(|(a, b)| a != b).count();
    assert_eq!(differing, 0, "{path:?} ({kv_dtype:?}, {prompt_len} tokens): {differing} logits differ");
    assert!(plain.iter().any(|&b| f32::from_bits(b) != 0.0), "the logits are not all zero");
    // Every decode step of a run records the same dispatches.
    assert!(plain_dispatches.windows(2).all(|w| w[0] == w[1]), "{plain_dispatches:?}");
    assert!(fused_dispatches.windows(2).all(|w| w[0] == w[1]), "{fused_dispatches:?}");
    plain_dispatches[0] - fused_dispatches[0]
}

#[test]
fn llama_fused_steps_equal_unfused_ones() {
    // Per layer: both norms into Q/K/V and gate/up, SwiGLU into down, RoPE of Q and K into the
    // store: five dispatches fewer. The output norm feeds a copy of the picked rows, not a
    // product: written as before.
    let layers = 2;
    assert_eq!(same_bits("model/tiny/llama", DType::F16, 7), 5 * layers);
    assert_eq!(same_bits("model/tiny/llama", DType::F32, 40), 5 * layers);
}

#[test]
fn a_cpu_adapter_fuses_only_what_repeats_no_work_by_default() {
    // Lavapipe: the default folds RoPE into the store (two dispatches a layer) and biases into
    // the products (GPT-OSS: five a layer), and leaves the norms and SwiGLU to their own kernels.
    for (path, saved_per_layer, layers) in [("model/tiny/llama", 2, 2), ("gpt_oss/gpt_oss.gguf", 2 + 5, 3)] {
        let path = fixture(path);
        let (plain, plain_dispatches) = run(&path, Some(false), DType::F16, 7);
        let (default, default_dispatches) = run(&path, None, DType::F16, 7);
        assert_eq!(plain, default);
        assert_eq!(plain_dispatches[0] - default_dispatches[0], saved_per_layer * layers, "{path:?}");
    }
}

#[test]
fn fused_steps_without_subgroups_equal_unfused_ones() {
    // The workgroup-memory row sums (devices without subgroups) beside the fused inputs' own
    // workgroup memory.
    for path in ["model/tiny/llama", "model/tiny/gemma3/model.gguf"] {
        let path = fixture(path);
        let options = |fuse| WgpuOptions { fuse: Some(fuse), subgroups: false, ..WgpuOptions::default() };
        let (plain, _) = run_with(&path, options(false), 7);
        let (fused, _) = run_with(&path, options(true), 7);
        assert_eq!(plain, fused, "{path:?}");
    }
}

#[test]
fn gemma3_fused_steps_equal_unfused_ones() {
    // GeGLU, QK-norm before RoPE, local and global RoPE tables, post-norms (not fused: an add
    // reads them).
    let saved = same_bits("model/tiny/gemma3/model.gguf", DType::F16, 7);
    assert!(saved > 0);
    same_bits("model/tiny/gemma3/model.gguf", DType::F32, 40);
}

#[test]
fn gpt_oss_fused_steps_equal_unfused_ones() {
    // Per layer: the attention norm and both RoPEs, and the biases of Q, K, V, O and the router
    // added as the products store their sums: eight dispatches fewer (the feed-forward norm
    // feeds the experts, which read it written). Three layers.
    assert_eq!(same_bits("gpt_oss/gpt_oss.gguf", DType::F16, 9), 8 * 3);
    same_bits("gpt_oss/gpt_oss.gguf", DType::F32, 40);
}

#[test]
fn other_architectures_fused_steps_equal_unfused_ones() {
    for path in ["model/tiny/mistral", "model/tiny/phi3", "model/tiny/qwen2", "model/tiny/qwen3"] {
        assert!(same_bits(path, DType::F16, 9) > 0, "{path}: nothing fused");
    }
}

mod common;

use minerva_model::{Backend, RopeConfig, RopeScaling, RopeStyle};

/// The ops below on a fusing and a non-fusing backend, each result read back, and the sources
/// copied.
fn deferred_values(fuse: bool) -> (Vec<Vec<u32>>, u64) {
    let g = common::gpu(WgpuOptions { fuse: Some(fuse), ..WgpuOptions::default() });
    let mut rng = common::Rng(7);
    let (rows, cols) = (3, 64);
    let gain = g.weight(common::source("g", DType::F32, &[cols], bytemuck_bytes(&rng.vec(cols)))).unwrap();
    let w_bytes = common::weight_bytes(&mut rng, DType::Q8_0, 40, cols);
    let w = g.weight(common::source("w", DType::Q8_0, &[40, cols], w_bytes)).unwrap();
    let mut x = g.upload(&rng.vec(rows * cols), rows, cols).unwrap();
    let y = g.upload(&rng.vec(rows * cols), rows, cols).unwrap();
    let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<u32>>();
    let mut out = Vec::new();
    // A norm of x read by a product after x is written in place: the norm of the old x.
    let h = g.rms_norm(&x, &gain, 1e-5).unwrap();
    g.add(&mut x, &y).unwrap();
    out.push(bits(g.download(&g.matmul_q(&w, &h).unwrap()).unwrap()));
    out.push(bits(g.download(&h).unwrap()));
    out.push(bits(g.download(&x).unwrap()));
    // A gated product read by anything but a product, and then by a product.
    let act = g.swiglu(&x, &y).unwrap();
    out.push(bits(g.download(&act).unwrap()));
    out.push(bits(g.download(&g.matmul_q(&w, &act).unwrap()).unwrap()));
    // Products of deferred inputs over 2080 columns: three passes of the staged kernel, the last
    // partial; one and two activation rows.
    let wide = 2080;
    let w_bytes = common::weight_bytes(&mut rng, DType::Q4_0, 24, wide);
    let w_wide = g.weight(common::source("w_wide", DType::Q4_0, &[24, wide], w_bytes)).unwrap();
    let gain_wide = g.weight(common::source("g_wide", DType::F32, &[wide], bytemuck_bytes(&rng.vec(wide)))).unwrap();
    for n in [1, 2] {
        let gate = g.upload(&rng.vec(n * wide), n, wide).unwrap();
        let up = g.upload(&rng.vec(n * wide), n, wide).unwrap();
        for act in
            [g.swiglu(&gate, &up).unwrap(), g.geglu(&gate, &up).unwrap(), g.rms_norm(&gate, &gain_wide, 1e-6).unwrap()]
        {
            out.push(bits(g.download(&g.matmul_q(&w_wide, &act).unwrap()).unwrap()));
        }
    }
    // A deferred rotation resolved by another op (a scale), and one read back as it is.
    let rope = RopeConfig { style: RopeStyle::NeoX, base: 10000.0, dim: 16, scaling: RopeScaling::None };
    let mut q = g.upload(&rng.vec(rows * cols), rows, cols).unwrap();
    g.rope(&mut q, 4, &[3, 9, 27], &rope).unwrap();
    g.scale(&mut q, 0.5).unwrap();
    out.push(bits(g.download(&q).unwrap()));
    let mut k = g.upload(&rng.vec(rows * cols), rows, cols).unwrap();
    g.rope(&mut k, 4, &[3, 9, 27], &rope).unwrap();
    out.push(bits(g.download(&k).unwrap()));
    (out, g.take_record_stats().source_copies)
}

fn bytemuck_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[test]
fn deferred_values_read_by_other_ops_equal_the_unfused_ones() {
    let ((fused, fused_copies), (plain, plain_copies)) = (deferred_values(true), deferred_values(false));
    // x written while its deferred norm lived: copied once, and only where the norm is deferred.
    assert_eq!((fused_copies, plain_copies), (1, 0));
    for (i, (a, b)) in fused.iter().zip(&plain).enumerate() {
        assert_eq!(a, b, "result {i}");
    }
    // The norm read after x was written is not the norm of the new x.
    assert_ne!(plain[1], plain[2]);
}
