//! Parity of the GPT-OSS ops (`add_bias`, `attention_with_sinks`, `moe`) between the CPU
//! backend's f32 reference mode and the wgpu backend, on random inputs, as `backend_ops.rs` does
//! for the other ops. Needs a wgpu adapter (lavapipe in CI) and fails without one.
//!
//! The measure is `backend_ops.rs`' (llama.cpp's normalized MSE ≤ 1e-7; figures in `docs/wgpu.md`);
//! the bias add is exact and compared for equality.

use minerva_core::DType;
use minerva_model::{Backend, Batch, CacheShape, Mask, MoeExperts, MoeParams, SeqSpan, WeightSource};
use minerva_wgpu::{TileShape, WgpuBackend, WgpuOptions};

mod common;

use common::{Rng, assert_nmse, both, cpu, gpu, source, tensor, to_gpu, weight_bytes};

fn f32_source(name: &str, values: &[f32]) -> WeightSource {
    source(name, DType::F32, &[values.len()], values.iter().flat_map(|v| v.to_le_bytes()).collect())
}

#[test]
fn add_bias_rows() {
    let (c, g) = (cpu(), gpu(WgpuOptions::default()));
    let mut rng = Rng(11);
    for (rows, cols) in [(1, 64), (3, 67), (5, 1000)] {
        let (cb, gb) = both(&c, &g, f32_source("bias", &rng.vec(cols)));
        let x = tensor(&mut rng, rows, cols);
        let mut want = x.clone();
        c.add_bias(&mut want, &cb).unwrap();
        let mut gx = to_gpu(&g, &x);
        g.add_bias(&mut gx, &gb).unwrap();
        // One correctly rounded f32 add per element on both backends: equal, not merely close.
        assert_eq!(want.data, g.download(&gx).unwrap(), "add_bias {rows}×{cols}");
    }
    let (_, wrong) = both(&c, &g, f32_source("bias", &[1.0; 5]));
    assert!(g.add_bias(&mut to_gpu(&g, &tensor(&mut rng, 2, 6)), &wrong).is_err(), "widths must match");
}

/// A 37-row prefill of one sequence and 5 rows of another, then decode steps, with sinks.
fn sinks_case(g: &WgpuBackend, head_dim: usize, mask: Mask, sinks: &[f32], seed: u64) {
    let c = cpu();
    let mut rng = Rng(seed);
    let (n_head, n_kv) = (sinks.len(), 2);
    let shape = CacheShape::contiguous(2, 1, n_kv, head_dim, 48);
    let (mut cc, mut gc) = (c.new_cache(shape).unwrap(), g.new_cache(shape).unwrap());
    let (cs, gs) = both(&c, g, f32_source("sinks", sinks));
    let mut steps = vec![Batch {
        seqs: vec![SeqSpan { rows: 0..37, start_pos: 0, slot: 0 }, SeqSpan { rows: 37..42, start_pos: 0, slot: 1 }],
        positions: (0..37).chain(0..5).collect(),
    }];
    for i in 0..3u32 {
        steps.push(Batch {
            seqs: vec![
                SeqSpan { rows: 0..1, start_pos: 37 + i as usize, slot: 0 },
                SeqSpan { rows: 1..2, start_pos: 5 + i as usize, slot: 1 },
            ],
            positions: vec![37 + i, 5 + i],
        });
    }
    for (step, batch) in steps.iter().enumerate() {
        let rows = batch.n_tokens();
        let q = tensor(&mut rng, rows, n_head * head_dim);
        let k = tensor(&mut rng, rows, n_kv * head_dim);
        let v = tensor(&mut rng, rows, n_kv * head_dim);
        let want = c.attention_with_sinks(&q, &k, &v, &mut cc, 0, batch, mask, &cs).unwrap();
        let (gq, gk, gv) = (to_gpu(g, &q), to_gpu(g, &k), to_gpu(g, &v));
        let got = g.attention_with_sinks(&gq, &gk, &gv, &mut gc, 0, batch, mask, &gs).unwrap();
        let what = format!("attention with sinks hd {head_dim} {mask:?} step {step}");
        assert_nmse(&what, &want.data, &g.download(&got).unwrap());
        // The sinks matter: without them the output differs.
        if step == 0 {
            let plain = c.attention(&q, &k, &v, &mut c.new_cache(shape).unwrap(), 0, batch, mask).unwrap();
            let diff = plain.data.iter().zip(&want.data).fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
            assert!(diff > 1e-3, "sinks changed nothing ({diff})");
        }
    }
}

#[test]
fn attention_with_sinks_prefill_and_decode() {
    // Sinks below, near and far above the scores (a sink of 6 takes most of the weight).
    let sinks = [-2.0, 0.3, 1.5, 6.0];
    // Split length 16: decode merges up to 3 partial softmaxes plus the sink.
    for split in [256, 16] {
        let g = gpu(WgpuOptions { attention_split: split, ..WgpuOptions::default() });
        sinks_case(&g, 16, Mask::Causal, &sinks, 12);
        sinks_case(&g, 64, Mask::SlidingWindow(8), &sinks, 13);
    }
    // Head dims over 128 take the split kernels for prefill too.
    sinks_case(&gpu(WgpuOptions::default()), 144, Mask::Causal, &sinks, 14);
}

/// Experts in `dtype` with biases in `bias_dtype`; `rows` tokens; `max_binding` to split them.
fn moe_case(dtype: DType, bias_dtype: DType, rows: usize, options: WgpuOptions, seed: u64) {
    let (c, g) = (cpu(), gpu(options));
    let mut rng = Rng(seed);
    // 5 experts, top 2; n_embd 64, n_ff 96: rows per expert not multiples of the 8-row workgroup.
    let (n_expert, k, n_embd, n_ff) = (5, 2, 64, 96);
    let mut stacked = |name: &str, rows: usize, cols: usize| {
        let bytes = weight_bytes(&mut rng, dtype, n_expert * rows, cols);
        both::<_, _>(&c, &g, source(name, dtype, &[n_expert, rows, cols], bytes))
    };
    let (cgate, ggate) = stacked("gate", n_ff, n_embd);
    let (cup, gup) = stacked("up", n_ff, n_embd);
    let (cdown, gdown) = stacked("down", n_embd, n_ff);
    let mut bias = |name: &str, len: usize| {
        let bytes = weight_bytes(&mut rng, bias_dtype, n_expert, len);
        both::<_, _>(&c, &g, source(name, bias_dtype, &[n_expert, len], bytes))
    };
    let (cgb, ggb) = bias("gate_bias", n_ff);
    let (cub, gub) = bias("up_bias", n_ff);
    let (cdb, gdb) = bias("down_bias", n_embd);
    let mut router = tensor(&mut rng, rows, n_expert);
    // Row 0: a three-way tie for the top (the lower indices win on both backends).
    router.data[..n_expert].copy_from_slice(&[0.1, 0.7, 0.7, -0.3, 0.7]);
    // Large activations drive the gate past the clamp (limit 7).
    let mut x = tensor(&mut rng, rows, n_embd);
    x.data.iter_mut().for_each(|v| *v *= 8.0);
    let params = MoeParams { n_expert, n_expert_used: k, alpha: 1.702, limit: 7.0 };
    let ce = MoeExperts { gate: &cgate, gate_bias: &cgb, up: &cup, up_bias: &cub, down: &cdown, down_bias: &cdb };
    let ge = MoeExperts { gate: &ggate, gate_bias: &ggb, up: &gup, up_bias: &gub, down: &gdown, down_bias: &gdb };
    let want = c.moe(&x, &router, &ce, &params).unwrap();
    let got = g.moe(&to_gpu(&g, &x), &to_gpu(&g, &router), &ge, &params).unwrap();
    let chunks = ggate.chunk_count();
    assert_nmse(
        &format!("moe {dtype}/{bias_dtype} × {rows} in {chunks} chunk(s)"),
        &want.data,
        &g.download(&got).unwrap(),
    );
}

#[test]
fn moe_decode_and_prefill() {
    // 37 rows × top 2 over 5 experts: about 15 pairs per expert, one group of the tiled kernel;
    // 7 rows stay under `tiled_from` (8-pair groups).
    for rows in [1, 7, 37] {
        // GGUF: MXFP4 experts, f32 biases; MLX: affine experts dequantized to bf16, bf16 biases.
        moe_case(DType::MXFP4, DType::F32, rows, WgpuOptions::default(), 20 + rows as u64);
        moe_case(DType::BF16, DType::BF16, rows, WgpuOptions::default(), 30 + rows as u64);
    }
    // The decode kernel's workgroup-memory reduction (devices without subgroups).
    moe_case(DType::MXFP4, DType::F32, 1, WgpuOptions { subgroups: false, ..WgpuOptions::default() }, 50);
}

#[test]
fn moe_tiles_and_eight_row_kernels() {
    // 200 rows × top 2 over 5 experts: about 80 pairs per expert, so the tiled kernel's experts
    // take two groups of 64 pairs, and some groups find none.
    moe_case(DType::MXFP4, DType::F32, 200, WgpuOptions::default(), 60);
    moe_case(DType::BF16, DType::BF16, 200, WgpuOptions::default(), 61);
    // Each tile shape the expert kernel fits in lavapipe's 32 KiB with its pair list and counts
    // (128 × 128 does not: that product runs untiled): 96-row experts fill part of a 128-row
    // tile; 80 pairs an expert, two tiles of 64 pairs.
    for (tile, seed) in [(TileShape::Rows64Acts64, 62), (TileShape::Rows128Acts64, 63)] {
        let options = WgpuOptions { tile: Some(tile), ..WgpuOptions::default() };
        moe_case(DType::MXFP4, DType::F32, 200, options.clone(), seed);
        moe_case(DType::BF16, DType::BF16, 200, options, seed + 10);
    }
    // The kernels the tiles replace: 8 values per load in decode, 8-pair groups in prefill.
    let old = WgpuOptions { block_decode: false, tiled_from: 0, ..WgpuOptions::default() };
    for rows in [1, 37] {
        moe_case(DType::MXFP4, DType::F32, rows, old.clone(), 70 + rows as u64);
        moe_case(DType::BF16, DType::BF16, rows, old.clone(), 80 + rows as u64);
    }
}

#[test]
fn moe_experts_split_across_bindings() {
    // Room for 2.5 experts of gate (96 rows of MXFP4 as stored on the GPU): chunks of 2 whole
    // experts.
    let gpu_row_bytes = minerva_wgpu::gpu_row_bytes(DType::MXFP4, 64).unwrap() as u64;
    let options = WgpuOptions { max_binding: Some(96 * gpu_row_bytes * 5 / 2), ..WgpuOptions::default() };
    let g = gpu(options.clone());
    let row_bytes = DType::MXFP4.row_bytes(64).unwrap();
    let w = g.weight(source("gate", DType::MXFP4, &[5, 96, 64], vec![0; 5 * 96 * row_bytes])).unwrap();
    assert_eq!(w.chunk_count(), 3, "5 experts in chunks of 2");
    moe_case(DType::MXFP4, DType::F32, 1, options.clone(), 41);
    moe_case(DType::MXFP4, DType::F32, 37, options, 40);
}
