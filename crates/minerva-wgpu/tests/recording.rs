//! Recording a step: after the first decode steps, a steady decode makes no device object —
//! activations come from the pool, per-step tables (token ids, RoPE angles, row positions,
//! sampling settings) are rewritten in the buffers kept for them, bind groups and pipelines are
//! found cached, and the read-back reuses its staging buffer. Needs a wgpu adapter (lavapipe in
//! CI) and fails without one.

use std::path::{Path, PathBuf};

use minerva_model::{DeviceSampling, LogitsFor, Model, SequenceInput};
use minerva_wgpu::{WgpuBackend, WgpuOptions};

fn fixture(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures").join(path)
}

fn sampling(step: usize, adjust: bool) -> DeviceSampling {
    DeviceSampling {
        temperature: 0.8,
        top_k: 40,
        top_p: 0.95,
        min_p: 0.0,
        repeat_penalty: if adjust { 1.1 } else { 1.0 },
        frequency_penalty: 0.0,
        presence_penalty: 0.0,
        adjust: if adjust { vec![(3, 1, 0.0), (17, 2, 0.5)] } else { Vec::new() },
        u: (step as f64 * 0.37) % 1.0,
    }
}

/// Objects created by `steps` decode steps after `warm_up` ones, greedy or sampled on the device,
/// and the dispatches those steps recorded.
fn created_by_steady_decode(path: &Path, sampled: bool, options: WgpuOptions) -> (u64, u64) {
    let model = Model::load(path, WgpuBackend::new(options).expect("a wgpu adapter")).unwrap();
    let mut cache = model.new_cache(1, 64).unwrap();
    let prompt = [1u32, 17, 25, 3, 9, 4, 8];
    let seq = SequenceInput { tokens: &prompt, start_pos: 0, slot: 0 };
    let mut token = model.forward_greedy(&mut cache, &[seq]).unwrap()[0];
    let (warm_up, steps) = (3, 6);
    let mut measured = (0, 0);
    for step in 0..warm_up + steps {
        if step == warm_up {
            model.backend.take_record_stats();
        }
        let tokens = [token];
        let seq = [SequenceInput { tokens: &tokens, start_pos: prompt.len() + step, slot: 0 }];
        token = if sampled {
            // Penalty entries in every other step: the adjust table comes and goes.
            model.forward_sample(&mut cache, &seq, LogitsFor::Last, &[sampling(step, step % 2 == 0)]).unwrap()[0]
        } else {
            model.forward_greedy(&mut cache, &seq).unwrap()[0]
        };
        if step == warm_up + steps - 1 {
            let stats = model.backend.take_record_stats();
            measured = (stats.objects_created, stats.dispatches);
        }
    }
    measured
}

fn assert_steady(path: &str, sampled: bool, options: WgpuOptions) {
    let (created, dispatches) = created_by_steady_decode(&fixture(path), sampled, options);
    assert!(dispatches > 6 * 10, "{path}: {dispatches} dispatches recorded in 6 steps");
    assert_eq!(created, 0, "{path} (sampled: {sampled}): device objects made in 6 steady decode steps");
}

#[test]
fn steady_gpt_oss_decode_creates_no_device_objects() {
    assert_steady("gpt_oss/gpt_oss.gguf", false, WgpuOptions::default());
    assert_steady("gpt_oss/gpt_oss.gguf", true, WgpuOptions::default());
    // Every fusion on (a GPU's default): deferred tensors' buffers come from the pool too.
    assert_steady("gpt_oss/gpt_oss.gguf", true, WgpuOptions { fuse: Some(true), ..WgpuOptions::default() });
}

#[test]
fn steady_gemma3_decode_creates_no_device_objects() {
    // Two RoPE tables a step (local and global layers), sliding-window and global attention.
    assert_steady("model/tiny/gemma3/model.gguf", false, WgpuOptions::default());
    assert_steady("model/tiny/gemma3/model.gguf", false, WgpuOptions { fuse: Some(true), ..WgpuOptions::default() });
}

#[test]
fn steady_llama_decode_in_parts_creates_no_device_objects() {
    // Submitted in parts of 5 dispatches: tables rewritten while earlier parts may still run.
    let options = WgpuOptions { submit_every: Some(5), ..WgpuOptions::default() };
    assert_steady("model/tiny/llama", true, options);
}

#[test]
fn the_first_steps_do_create_them() {
    // The counter counts: a fresh device compiles pipelines and allocates buffers on its first
    // step.
    let path = fixture("model/tiny/llama");
    let model = Model::load(&path, WgpuBackend::new(WgpuOptions::default()).expect("a wgpu adapter")).unwrap();
    model.backend.take_record_stats();
    let mut cache = model.new_cache(1, 16).unwrap();
    let seq = SequenceInput { tokens: &[1, 2, 3], start_pos: 0, slot: 0 };
    model.forward_greedy(&mut cache, &[seq]).unwrap();
    assert!(model.backend.take_record_stats().objects_created > 10);
}
