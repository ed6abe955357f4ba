//! Backend parity, as llama.cpp's `test-backend-ops`: every op case runs on the `CpuBackend` and
//! on the `WgpuBackend` with the same random inputs, and the outputs are compared.
//!
//! These tests need a wgpu adapter (in CI: lavapipe, Mesa's software Vulkan) and FAIL without
//! one. Shapes are small (lavapipe is slow) and include sizes that are not multiples of the
//! workgroup sizes (64, 256) or of the 8-value load width.
//!
//! The error measure is `test-backend-ops`' own: the normalized mean squared error
//! Σ(gpu − cpu)² / Σ cpu² ≤ 1e-7 for every op (`common::assert_nmse`). The reference is computed in
//! f32 from the same dequantized weights (`CpuBackend::with_f32_activations`), so differences are
//! only f32 rounding from another summation order (tree reductions on the GPU); what each op
//! reaches on lavapipe is in `docs/wgpu.md`. `add` is exact and compared for equality.

use minerva_core::DType;
use minerva_model::{Backend, Batch, CacheShape, Mask, RopeConfig, RopeScaling, RopeStyle, SeqSpan};
use minerva_wgpu::{TileShape, WEIGHT_DTYPES, WgpuBackend, WgpuOptions};

mod common;

use common::{Rng, assert_nmse, both, cpu, gpu, nmse, random_weights, source, tensor, to_gpu, weight_bytes};

/// Columns per dtype: not a multiple of 8 where the format allows (the `load1` tail path).
fn cols_for(dtype: DType, base: usize) -> usize {
    match dtype.block_elems() {
        1 => base + 3,
        n => base.next_multiple_of(n),
    }
}

#[test]
fn matmul_every_dtype_decode_and_prefill() {
    let g = gpu(WgpuOptions::default());
    // Lavapipe offers subgroups of 8: the default run takes the subgroup reduction, the block
    // kernel for one row and the tiles from 8 rows (columns a multiple of 32).
    eprintln!("subgroup reduction: {}", g.uses_subgroups());
    matmul_cases(&g);
}

#[test]
fn matmul_without_subgroups_uses_the_workgroup_fallback() {
    let g = gpu(WgpuOptions { subgroups: false, ..WgpuOptions::default() });
    assert!(!g.uses_subgroups());
    matmul_cases(&g);
}

#[test]
fn matmul_eight_row_kernels() {
    // Neither the block kernel nor the tiles: every shape through mul_mat.wgsl, as on a device
    // with too little workgroup memory for the tiles (and for comparisons).
    matmul_cases(&gpu(WgpuOptions { block_decode: false, tiled_from: 0, ..WgpuOptions::default() }));
}

#[test]
fn matmul_tiles_from_two_rows() {
    // The tiles at their smallest batches: 5 rows fill 5 of a tile's 64.
    matmul_cases(&gpu(WgpuOptions { tiled_from: 2, ..WgpuOptions::default() }));
}

#[test]
fn matmul_every_tile_shape() {
    // Each shape the adapter can hold (lavapipe offers 32 KiB: all three) on every product of
    // two rows or more: tiles partly filled in rows and activations, and (150 × 140) several
    // tiles of each shape in both directions.
    for tile in TileShape::ALL {
        let g = gpu(WgpuOptions { tiled_from: 2, tile: Some(tile), ..WgpuOptions::default() });
        eprintln!("tile {tile}");
        matmul_cases(&g);
    }
}

fn matmul_cases(g: &WgpuBackend) {
    let c = cpu();
    let mut rng = Rng(1);
    for dtype in WEIGHT_DTYPES {
        // (out rows, columns, tokens): rows not a multiple of anything. Under `tiled_from` (32)
        // the block kernel takes columns that are a multiple of 32 (float dtypes take both
        // kinds of column count), in workgroups of 1 activation row (1 token), 4 (3 tokens) or 8
        // (5: one partial; 17: two full and a partial); otherwise 8-value loads in tiles of 8
        // tokens. 70 tokens: two tiles of 64 (over 9 steps of 32 columns where the blocks allow);
        // with `tiled_from: 2` the tiles take every batch. 1056 columns: every one of a row's
        // 32 threads has a block, and one has two.
        let aligned = |base: usize| base.next_multiple_of(dtype.block_elems().max(32));
        let cases = [
            (37, cols_for(dtype, 256), 1),
            (37, aligned(256), 1),
            (37, cols_for(dtype, 256), 5),
            (37, aligned(256), 3),
            (20, aligned(1056), 2),
            (70, cols_for(dtype, 512), 17),
            (37, aligned(256), 17),
            (70, aligned(288), 70),
            (150, aligned(64), 140),
        ];
        for (rows, cols, n_tok) in cases {
            let (cw, gw) = random_weights(&c, g, &mut rng, dtype, rows, cols);
            let x = tensor(&mut rng, n_tok, cols);
            let want = c.matmul_q(&cw, &x).unwrap();
            let got = g.download(&g.matmul_q(&gw, &to_gpu(g, &x)).unwrap()).unwrap();
            assert_nmse(&format!("matmul {dtype} {rows}×{cols} × {n_tok} tokens"), &want.data, &got);
        }
    }
}

#[test]
fn embed_every_dtype() {
    let (c, g) = (cpu(), gpu(WgpuOptions::default()));
    let mut rng = Rng(2);
    for dtype in WEIGHT_DTYPES {
        let (rows, cols) = (29, cols_for(dtype, 256));
        let (cw, gw) = random_weights(&c, &g, &mut rng, dtype, rows, cols);
        let tokens = [0, 28, 5, 5, 17];
        let want = c.embed(&cw, &tokens).unwrap();
        let got = g.download(&g.embed(&gw, &tokens).unwrap()).unwrap();
        assert_nmse(&format!("embed {dtype}"), &want.data, &got);
        assert!(g.embed(&gw, &[29]).is_err(), "an out-of-range token id is an error");
    }
}

#[test]
fn weights_upload_in_pieces_of_whole_rows_at_aligned_offsets() {
    // 4190 f16 rows of 1003 values (2006 bytes, 2 past a word): 8 MiB holds 4181 of them, an
    // odd count, so a piece of as many rows would end 2 bytes off the copy alignment; the rows
    // past the first piece embed as on the CPU.
    let (c, g) = (cpu(), gpu(WgpuOptions::default()));
    let mut rng = Rng(5);
    let (rows, cols) = (4190, 1003);
    let src = source("table", DType::F16, &[rows, cols], weight_bytes(&mut rng, DType::F16, rows, cols));
    let (cw, gw) = both(&c, &g, src);
    let tokens = [0, 4180, 4181, 4189, 17];
    let want = c.embed(&cw, &tokens).unwrap();
    let got = g.download(&g.embed(&gw, &tokens).unwrap()).unwrap();
    assert_nmse("embed f16 4190×1003", &want.data, &got);
}

#[test]
fn weights_split_across_bindings() {
    let c = cpu();
    // A binding limit of 4 rows of Q8_0 (4 × 8 blocks × 34 bytes, one group of 8 blocks as
    // stored on the GPU) splits 37 rows into 10 chunks, whose file offsets are not multiples of 4.
    let row_bytes = minerva_wgpu::gpu_row_bytes(DType::Q8_0, 256).unwrap() as u64;
    assert_eq!(row_bytes, DType::Q8_0.row_bytes(256).unwrap() as u64, "8 Q8_0 heads fill 16 bytes");
    let g = gpu(WgpuOptions { max_binding: Some(4 * row_bytes + 5), ..WgpuOptions::default() });
    let mut rng = Rng(3);
    for dtype in [DType::Q8_0, DType::MXFP4, DType::F16] {
        let (rows, cols) = (37, 256);
        let src = source("w", dtype, &[rows, cols], weight_bytes(&mut rng, dtype, rows, cols));
        let (cw, gw) = both(&c, &g, src);
        assert!(gw.chunk_count() > 1, "{dtype}: {} chunk(s)", gw.chunk_count());
        for n_tok in [1, 9] {
            let x = tensor(&mut rng, n_tok, cols);
            let want = c.matmul_q(&cw, &x).unwrap();
            let got = g.download(&g.matmul_q(&gw, &to_gpu(&g, &x)).unwrap()).unwrap();
            assert_nmse(&format!("split matmul {dtype} × {n_tok}"), &want.data, &got);
        }
        let tokens = [36, 0, 4, 3, 20];
        let want = c.embed(&cw, &tokens).unwrap();
        let got = g.download(&g.embed(&gw, &tokens).unwrap()).unwrap();
        assert_nmse(&format!("split embed {dtype}"), &want.data, &got);
    }
}

#[test]
fn rms_norm_add_swiglu() {
    let (c, g) = (cpu(), gpu(WgpuOptions::default()));
    let mut rng = Rng(4);
    for (rows, cols) in [(1, 576), (3, 67), (5, 1000)] {
        let gain = rng.vec(cols);
        let src = source("norm", DType::F32, &[cols], gain.iter().flat_map(|v| v.to_le_bytes()).collect());
        let (cw, gw) = both(&c, &g, src);
        let x = tensor(&mut rng, rows, cols);
        let want = c.rms_norm(&x, &cw, 1e-5).unwrap();
        let got = g.download(&g.rms_norm(&to_gpu(&g, &x), &gw, 1e-5).unwrap()).unwrap();
        assert_nmse(&format!("rms_norm {rows}×{cols}"), &want.data, &got);

        let y = tensor(&mut rng, rows, cols);
        let mut want = x.clone();
        c.add(&mut want, &y).unwrap();
        let mut gx = to_gpu(&g, &x);
        g.add(&mut gx, &to_gpu(&g, &y)).unwrap();
        // One correctly rounded f32 add per element on both backends: equal, not merely close.
        assert_eq!(want.data, g.download(&gx).unwrap(), "add {rows}×{cols}");

        let want = c.swiglu(&x, &y).unwrap();
        let got = g.download(&g.swiglu(&to_gpu(&g, &x), &to_gpu(&g, &y)).unwrap()).unwrap();
        assert_nmse(&format!("swiglu {rows}×{cols}"), &want.data, &got);
    }
    let x = tensor(&mut rng, 2, 8);
    assert!(g.add(&mut to_gpu(&g, &x), &to_gpu(&g, &tensor(&mut rng, 2, 9))).is_err(), "shapes must match");
}

#[test]
fn scale_and_geglu() {
    let (c, g) = (cpu(), gpu(WgpuOptions::default()));
    let mut rng = Rng(12);
    for (rows, cols) in [(1, 640), (3, 67), (5, 2048)] {
        let mut x = tensor(&mut rng, rows, cols);
        // Gate values over ±6: GELU's tails (≈ 0 and ≈ identity) as well as its bend.
        x.data.iter_mut().for_each(|v| *v *= 12.0);
        let y = tensor(&mut rng, rows, cols);
        let want = c.geglu(&x, &y).unwrap();
        let got = g.download(&g.geglu(&to_gpu(&g, &x), &to_gpu(&g, &y)).unwrap()).unwrap();
        assert_nmse(&format!("geglu {rows}×{cols}"), &want.data, &got);

        let mut want = x.clone();
        c.scale(&mut want, 25.3).unwrap();
        let mut gx = to_gpu(&g, &x);
        g.scale(&mut gx, 25.3).unwrap();
        // One correctly rounded f32 product per element on both backends.
        assert_eq!(want.data, g.download(&gx).unwrap(), "scale {rows}×{cols}");
    }
    let x = tensor(&mut rng, 2, 8);
    assert!(g.geglu(&to_gpu(&g, &x), &to_gpu(&g, &tensor(&mut rng, 2, 9))).is_err(), "shapes must match");
}

#[test]
fn rms_norm_heads_in_place() {
    let (c, g) = (cpu(), gpu(WgpuOptions::default()));
    let mut rng = Rng(11);
    // (rows, heads, head_dim): Qwen 3's 128, Gemma 3 270M's 256, and widths that are not
    // multiples of the workgroup size (64).
    for (rows, n_heads, head_dim) in [(1, 4, 128), (3, 2, 256), (5, 3, 67), (2, 1, 40)] {
        let gain = rng.vec(head_dim);
        let src = source("q_norm", DType::F32, &[head_dim], gain.iter().flat_map(|v| v.to_le_bytes()).collect());
        let (cw, gw) = both(&c, &g, src);
        let x = tensor(&mut rng, rows, n_heads * head_dim);
        let mut want = x.clone();
        c.rms_norm_heads(&mut want, n_heads, &cw, 1e-6).unwrap();
        let mut gx = to_gpu(&g, &x);
        g.rms_norm_heads(&mut gx, n_heads, &gw, 1e-6).unwrap();
        assert_nmse(&format!("rms_norm_heads {rows}×{n_heads}×{head_dim}"), &want.data, &g.download(&gx).unwrap());
        assert!(g.rms_norm_heads(&mut gx, n_heads + 1, &gw, 1e-6).is_err(), "heads must match the weight");
    }
}

#[test]
fn rope_styles_and_scalings() {
    let (c, g) = (cpu(), gpu(WgpuOptions::default()));
    let mut rng = Rng(5);
    let positions = [0u32, 1, 7, 100, 4095];
    for style in [RopeStyle::Normal, RopeStyle::NeoX] {
        for scaling in [
            RopeScaling::None,
            RopeScaling::Linear { factor: 4.0 },
            RopeScaling::FreqFactors { factors: vec![1.0, 2.0, 4.0, 8.0] },
        ] {
            // head_dim 10 with 8 rotated dims: the last two of each head are left alone.
            let rope = RopeConfig { style, base: 10000.0, dim: 8, scaling: scaling.clone() };
            let x = tensor(&mut rng, positions.len(), 3 * 10);
            let mut want = x.clone();
            c.rope(&mut want, 3, &positions, &rope).unwrap();
            let mut gx = to_gpu(&g, &x);
            g.rope(&mut gx, 3, &positions, &rope).unwrap();
            assert_nmse(&format!("rope {style:?} {scaling:?}"), &want.data, &g.download(&gx).unwrap());
        }
    }
}

/// Runs the same steps (a prefill of two sequences, then decode steps) through both backends,
/// over a paged cache whose block tables jump about; then copies blocks of one sequence and
/// attends to the copies from the other.
fn attention_case(g: &WgpuBackend, head_dim: usize, mask: Mask, seed: u64) {
    let c = cpu();
    let kv_dtype = g.new_cache(CacheShape::contiguous(1, 1, 1, head_dim, 1)).unwrap().dtype();
    // The same cache element type on both sides: f16 caches round the same inputs alike.
    let c = c.with_kv_dtype(kv_dtype).unwrap();
    let mut rng = Rng(seed);
    let (n_head, n_kv) = (4, 2);
    let shape =
        CacheShape { slots: 2, n_layer: 2, n_head_kv: n_kv, head_dim, capacity: 80, block_size: 16, blocks: 20 };
    let (mut cc, mut gc) = (c.new_cache(shape).unwrap(), g.new_cache(shape).unwrap());
    for (slot, table) in [(1, [9, 3, 4, 17, 0]), (0, [12, 5, 6, 7, 1])] {
        c.set_blocks(&mut cc, slot, &table).unwrap();
        g.set_blocks(&mut gc, slot, &table).unwrap();
    }
    // Prefill: slot 1 gets 70 tokens, slot 0 gets 3; then three decode steps of both.
    let mut steps = vec![Batch {
        seqs: vec![SeqSpan { rows: 0..70, start_pos: 0, slot: 1 }, SeqSpan { rows: 70..73, start_pos: 0, slot: 0 }],
        positions: (0..70).chain(0..3).collect(),
    }];
    for i in 0..3u32 {
        steps.push(Batch {
            seqs: vec![
                SeqSpan { rows: 0..1, start_pos: 3 + i as usize, slot: 0 },
                SeqSpan { rows: 1..2, start_pos: 70 + i as usize, slot: 1 },
            ],
            positions: vec![3 + i, 70 + i],
        });
    }
    for (step, batch) in steps.iter().enumerate() {
        let rows = batch.n_tokens();
        for layer in [1, 0] {
            let q = tensor(&mut rng, rows, n_head * head_dim);
            let k = tensor(&mut rng, rows, n_kv * head_dim);
            let v = tensor(&mut rng, rows, n_kv * head_dim);
            let want = c.attention(&q, &k, &v, &mut cc, layer, batch, mask).unwrap();
            let (gq, gk, gv) = (to_gpu(g, &q), to_gpu(g, &k), to_gpu(g, &v));
            let got = g.download(&g.attention(&gq, &gk, &gv, &mut gc, layer, batch, mask).unwrap()).unwrap();
            let what = format!("attention {kv_dtype} cache, hd {head_dim} {mask:?} step {step} layer {layer}");
            eprintln!("{what}: nmse {:.2e}", nmse(&want.data, &got));
            assert_nmse(&what, &want.data, &got);
        }
    }
    // Slot 1's first two blocks copied (to blocks 2 and 8), and slot 0 reading them: its query at
    // position 32 attends to slot 1's first 32 keys and values and its own new one.
    let batch = Batch { seqs: vec![SeqSpan { rows: 0..1, start_pos: 32, slot: 0 }], positions: vec![32] };
    let q = tensor(&mut rng, 1, n_head * head_dim);
    let (k, v) = (tensor(&mut rng, 1, n_kv * head_dim), tensor(&mut rng, 1, n_kv * head_dim));
    c.set_blocks(&mut cc, 0, &[9, 3, 10]).unwrap();
    let from_originals = c.attention(&q, &k, &v, &mut cc, 1, &batch, mask).unwrap();
    c.copy_blocks(&mut cc, &[(9, 2), (3, 8)]).unwrap();
    g.copy_blocks(&mut gc, &[(9, 2), (3, 8)]).unwrap();
    c.set_blocks(&mut cc, 0, &[2, 8, 10]).unwrap();
    g.set_blocks(&mut gc, 0, &[2, 8, 10]).unwrap();
    let want = c.attention(&q, &k, &v, &mut cc, 1, &batch, mask).unwrap();
    assert_eq!(want, from_originals, "the copies hold what the originals do");
    let (gq, gk, gv) = (to_gpu(g, &q), to_gpu(g, &k), to_gpu(g, &v));
    let got = g.download(&g.attention(&gq, &gk, &gv, &mut gc, 1, &batch, mask).unwrap()).unwrap();
    assert_nmse(&format!("attention to copied blocks {kv_dtype} hd {head_dim} {mask:?}"), &want.data, &got);
    // A position past the table is an error on both.
    let past = Batch { seqs: vec![SeqSpan { rows: 0..1, start_pos: 48, slot: 0 }], positions: vec![48] };
    assert!(c.attention(&q, &k, &v, &mut cc, 1, &past, mask).is_err());
    assert!(g.attention(&gq, &gk, &gv, &mut gc, 1, &past, mask).is_err());
}

#[test]
fn attention_gqa_causal_and_sliding_window() {
    // Prefill (73 rows) runs the tiled prefill kernel: 16-query blocks, a partial last block.
    // Decode runs flash-decoding with one split per query (the default split length) and with
    // splits of 16 keys, so that a query at position 72 is reduced from 5 partial softmaxes.
    // Both cache element types.
    for split in [256, 16] {
        for kv_dtype in [DType::F16, DType::F32] {
            let g = gpu(WgpuOptions { attention_split: split, kv_dtype, ..WgpuOptions::default() });
            attention_case(&g, 64, Mask::Causal, 6);
            attention_case(&g, 80, Mask::SlidingWindow(20), 7);
        }
    }
    let g = gpu(WgpuOptions::default());
    attention_case(&g, 16, Mask::SlidingWindow(1), 8);
    // Head dims over 128 take the split kernel for prefill too.
    attention_case(&g, 144, Mask::Causal, 9);
    // An odd head dim keeps an f32 cache; the decode kernel's keys come in pairs and one more.
    attention_case(&g, 33, Mask::Causal, 10);
}

#[test]
fn argmax_rows() {
    let g = gpu(WgpuOptions::default());
    let mut rng = Rng(9);
    // 5001 columns: three parts of 2048 read by three workgroups, then reduced.
    let (rows, cols) = (3, 5001);
    let mut data = rng.vec(rows * cols);
    // Row 0: the maximum is the last value of a part; row 1: a tie between 400 and 4500 (other
    // parts) resolves to the first, as does one within a part (900); row 2: the maximum is the
    // last.
    data[2047] = 6.0;
    data[cols + 400] = 5.0;
    data[cols + 900] = 5.0;
    data[cols + 4500] = 5.0;
    data[2 * cols + cols - 1] = 7.0;
    let first_max = |row: &[f32]| row.iter().enumerate().fold(0, |b, (i, &v)| if v > row[b] { i } else { b }) as u32;
    let want: Vec<u32> = data.chunks_exact(cols).map(first_max).collect();
    assert_eq!(want, [2047, 400, cols as u32 - 1]);
    assert_eq!(g.argmax(&g.upload(&data, rows, cols).unwrap()).unwrap(), want);
    // 301 parts: the reduction's threads take two parts each (part 44 and part 300 tie).
    let cols = 301 * 2048;
    let mut data = rng.vec(cols);
    data[44 * 2048 + 5] = 9.0;
    data[300 * 2048 + 5] = 9.0;
    assert_eq!(g.argmax(&g.upload(&data, 1, cols).unwrap()).unwrap(), [44 * 2048 + 5]);
}

#[test]
fn oversized_batches_are_errors_not_panics() {
    let g = gpu(WgpuOptions::default());
    let limit = g.info().max_storage_binding;
    // 60000 tokens × 1024 values × 4 bytes = 234 MiB: more than lavapipe's 128 MiB binding.
    let table = g.weight(source("table", DType::F32, &[2, 1024], vec![0; 2 * 1024 * 4])).unwrap();
    let err = g.embed(&table, &vec![1u32; 60000]).err().expect("an activation larger than one binding");
    assert!(limit < 234 << 20 && err.to_string().contains("storage binding limit"), "{err}");
    // More rows than workgroups per dimension.
    let table = g.weight(source("table", DType::F32, &[2, 8], vec![0; 2 * 8 * 4])).unwrap();
    let err = g.embed(&table, &vec![1u32; 70000]).err().expect("more rows than one dispatch dimension");
    assert!(err.to_string().contains("70000 tokens exceeds the GPU limit"), "{err}");
}

#[test]
fn a_step_longer_than_the_parameter_ring_is_submitted_in_parts() {
    // The ring holds 8192 dispatches' parameters; 9000 recorded adds overflow it once.
    let g = gpu(WgpuOptions::default());
    let n = 1000;
    let mut x = g.upload(&vec![0.0; n], 1, n).unwrap();
    let y = g.upload(&(0..n).map(|i| i as f32 / 1024.0).collect::<Vec<_>>(), 1, n).unwrap();
    for _ in 0..9000 {
        g.add(&mut x, &y).unwrap();
    }
    let got = g.download(&x).unwrap();
    // i/1024 · 9000 is exact in f32 at every partial sum (multiples of 1/1024 below 2^14).
    let want: Vec<f32> = (0..n).map(|i| i as f32 / 1024.0 * 9000.0).collect();
    assert_eq!(got, want);
}
