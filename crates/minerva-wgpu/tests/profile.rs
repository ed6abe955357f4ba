//! Kernel timestamps (`WgpuOptions::profile`, `set_profiling`): every dispatch is timed under its
//! kernel's key, a submission longer than one query set is split without losing a dispatch or
//! reordering the parameter ring, and profiling changes no result. Needs a wgpu adapter with
//! timestamp queries (lavapipe offers them) and fails without one.

mod common;

use std::path::Path;

use minerva_core::DType;

use minerva_model::{Backend, LogitsFor, Model, SequenceInput};
use minerva_wgpu::{WgpuBackend, WgpuError, WgpuOptions};

fn profiling_backend() -> WgpuBackend {
    WgpuBackend::new(WgpuOptions { profile: true, ..WgpuOptions::default() }).expect("a wgpu adapter")
}

/// Every row's logits of a 5-token prefill, then the last row's of 3 decode steps.
fn logits(model: &Model<WgpuBackend>) -> Vec<f32> {
    let mut cache = model.new_cache(1, 16).unwrap();
    let prompt = [1u32, 17, 250, 3, 99];
    let seq = SequenceInput { tokens: &prompt, start_pos: 0, slot: 0 };
    let mut all = model.forward(&mut cache, &[seq], LogitsFor::All).unwrap().data;
    for step in 0..3 {
        let token = [(7 + step) as u32];
        let seq = SequenceInput { tokens: &token, start_pos: prompt.len() + step, slot: 0 };
        all.extend(model.forward(&mut cache, &[seq], LogitsFor::Last).unwrap().data);
    }
    all
}

#[test]
fn profiled_steps_time_every_dispatch_and_change_no_result() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/gpt_oss/gpt_oss.gguf");
    let model = Model::load(&path, profiling_backend()).unwrap();
    let plain = logits(&model);
    assert!(model.backend.take_kernel_times().is_empty(), "nothing is timed before profiling is on");

    model.backend.set_profiling(true).unwrap();
    model.backend.take_record_stats();
    let profiled = logits(&model);
    let recorded = model.backend.take_record_stats().dispatches;
    let times = model.backend.take_kernel_times();
    assert_eq!(plain, profiled, "profiling changes no result");
    let timed: u64 = times.iter().map(|t| t.dispatches).sum();
    assert_eq!(timed, recorded, "every recorded dispatch is timed once: {times:?}");
    for kernel in ["mul_mat_id_vec/MXFP4", "attention", "moe_route", "rms_norm"] {
        assert!(times.iter().any(|t| t.kernel.starts_with(kernel)), "{kernel} missing from {times:?}");
    }
    assert!(times.iter().map(|t| t.gpu).sum::<std::time::Duration>() > std::time::Duration::ZERO);
    assert!(times.windows(2).all(|w| w[0].gpu >= w[1].gpu), "longest first");

    model.backend.set_profiling(false).unwrap();
    assert_eq!(logits(&model), plain);
    assert!(model.backend.take_kernel_times().is_empty(), "nothing is timed once profiling is off");
}

#[test]
fn steps_submitted_in_parts_give_the_same_results() {
    // Parts of 7 dispatches cut a GPT-OSS step (about 100 dispatches) mid-layer: the parameter
    // ring is rewritten between parts and pooled buffers are reused across them.
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/gpt_oss/gpt_oss.gguf");
    let model = |submit_every| {
        let options = WgpuOptions { submit_every, ..WgpuOptions::default() };
        Model::load(&path, WgpuBackend::new(options).expect("a wgpu adapter")).unwrap()
    };
    let submissions = |m: &Model<WgpuBackend>| {
        m.backend.take_record_stats();
        let out = logits(m);
        (out, m.backend.take_record_stats().submissions)
    };
    let (whole, steps) = submissions(&model(Some(0)));
    let (parts, submitted) = submissions(&model(Some(7)));
    assert_eq!(parts, whole);
    assert!(submitted > 4 * steps, "{submitted} submissions for {steps} whole steps");
    assert_eq!(logits(&model(Some(1))), whole);
}

#[test]
fn a_submission_longer_than_one_query_set_is_timed_whole() {
    let gpu = profiling_backend();
    gpu.set_profiling(true).unwrap();
    let n = 3 * 1024 + 5; // more than the 2048 dispatches one query set times
    let mut x = gpu.upload(&[1.0, 2.0, 3.0, 4.0], 1, 4).unwrap();
    for i in 0..n {
        // Each addend differs, so a dispatch reading another's parameters or lost in the split
        // changes the sum.
        let y = gpu.upload(&[i as f32, 0.0, 1.0, -1.0], 1, 4).unwrap();
        gpu.add(&mut x, &y).unwrap();
    }
    let sum = gpu.download(&x).unwrap();
    let total = (n * (n - 1) / 2) as f32;
    assert_eq!(sum, vec![1.0 + total, 2.0, 3.0 + n as f32, 4.0 - n as f32]);
    let times = gpu.take_kernel_times();
    assert_eq!(times.len(), 1, "{times:?}");
    assert_eq!((times[0].kernel.as_str(), times[0].dispatches), ("add", n as u64));
    // Each add reads two rows of 4 f32 and writes one.
    assert_eq!(times[0].bytes, n as u64 * 3 * 4 * 4);
    assert!(times[0].gigabytes_per_second().is_some());
}

#[test]
fn matrix_kernels_count_the_bytes_they_must_move() {
    let gpu = profiling_backend();
    // 70 rows of 256 Q8_0 values (8 blocks of 34 bytes a row, one regrouped group of 8 on the
    // GPU: as many bytes), times 1, 20 and 40 activation rows: the block kernel by 1 and by 8
    // rows, and the tiles (64 × 64: the larger ones would make a single workgroup).
    let (rows, cols, row_bytes) = (70, 256, 8 * 34);
    let bytes: Vec<u8> = (0..rows * row_bytes).map(|i| (i * 7 % 251) as u8 & 0x3f).collect();
    let w = gpu.weight(common::source("w", DType::Q8_0, &[rows, cols], bytes)).unwrap();
    gpu.set_profiling(true).unwrap();
    let kernels =
        [(1, "mul_mat_vec/Q8_0/1/subgroup"), (20, "mul_mat_vec/Q8_0/8/subgroup"), (40, "mul_mat_tiled/Q8_0/64x64")];
    for (n_tok, kernel) in kernels {
        let x = gpu.upload(&vec![0.5; n_tok * cols], n_tok, cols).unwrap();
        gpu.download(&gpu.matmul_q(&w, &x).unwrap()).unwrap();
        let times = gpu.take_kernel_times();
        let t = times.iter().find(|t| t.kernel == kernel).unwrap_or_else(|| panic!("{kernel} in {times:?}"));
        assert_eq!(t.bytes, (rows * row_bytes + 4 * n_tok * (cols + rows)) as u64, "{kernel}");
    }
}

#[test]
fn profiling_needs_a_device_opened_for_it() {
    let gpu = WgpuBackend::new(WgpuOptions::default()).expect("a wgpu adapter");
    assert!(!gpu.info().timestamps);
    assert!(matches!(gpu.set_profiling(true), Err(WgpuError::NoTimestamps)));
    gpu.set_profiling(false).expect("turning profiling off is always possible");
    assert!(gpu.take_kernel_times().is_empty());
}
