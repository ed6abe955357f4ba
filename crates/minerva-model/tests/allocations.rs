//! A warm forward step allocates nothing but the logits it returns: activation tensors, quantized
//! activations, task lists, the batch's layout, RoPE tables and the experts' working vectors are
//! all kept from one step to the next (docs/benchmarks-history.md, "No allocation per layer").
//!
//! Counted by a global allocator over every thread of the process, so this file holds one test
//! (the harness runs the tests of one binary on parallel threads).

// The counting allocator is `unsafe` by the trait's contract; it only forwards to `System`.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use minerva_model::{CpuBackend, LogitsFor, Model, SequenceInput, argmax};

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every method forwards its arguments unchanged to `System`, which upholds the contract;
// counting touches only an atomic.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's layout is passed on as given.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` with this layout (every allocation goes through it).
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as `dealloc`; `new_size` is the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations a warm step may make: the returned logits' values and rows.
const PER_STEP: usize = 2;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Allocations made by `f`.
fn count<R>(f: impl FnOnce() -> R) -> (usize, R) {
    let before = ALLOCATIONS.load(Ordering::SeqCst);
    let result = f();
    (ALLOCATIONS.load(Ordering::SeqCst) - before, result)
}

#[test]
fn warm_steps_allocate_nothing_per_layer() {
    let models = [
        // 30 layers: one allocation per layer and op was 1303 per decode step before.
        "models/SmolLM2-135M-Instruct.Q4_1.gguf",
        // 18 layers, two RoPE settings, K-quants.
        "models/gemma-3-270m-q4_k_m.gguf",
        // Mixture of experts (MXFP4), attention sinks; GGUF in place, HF and MLX converted.
        "fixtures/gpt_oss/gpt_oss.gguf",
        "fixtures/gpt_oss/hf",
        "fixtures/gpt_oss/mlx",
    ];
    for path in models {
        for threads in [1, 2] {
            let model = Model::load(root().join(path), CpuBackend::new(Some(threads)).unwrap())
                .unwrap_or_else(|e| panic!("{path}: {e}"));
            let n_layer = model.config.n_layer;
            let vocab = model.config.vocab as u32;
            let prompt: Vec<u32> = (0..40u32).map(|i| (i * 31 + 7) % vocab).collect();
            let mut cache = model.new_cache(2, 64).unwrap();
            let prefill = |cache: &mut _, slot| {
                let input = SequenceInput { tokens: &prompt, start_pos: 0, slot };
                model.forward(cache, &[input], LogitsFor::Last).unwrap()
            };
            // Warm-up: the first steps size the kept buffers (per thread, as tasks land on them).
            let mut token = argmax(prefill(&mut cache, 0).row(0));
            let mut decode_counts = Vec::new();
            for pos in prompt.len()..prompt.len() + 12 {
                let input = SequenceInput { tokens: &[token], start_pos: pos, slot: 0 };
                let (allocations, logits) = count(|| model.forward(&mut cache, &[input], LogitsFor::Last).unwrap());
                token = argmax(logits.row(0));
                decode_counts.push(allocations);
            }
            let prefill_counts: Vec<usize> = (0..4).map(|_| count(|| prefill(&mut cache, 1)).0).collect();
            // The fewest of the warm steps: a kept buffer may still grow now and then (a longer
            // context's scores, a thread's first task of some kind), one allocation once, not
            // one per layer every step.
            let decode = decode_counts[4..].iter().min().unwrap();
            let prefill = prefill_counts[1..].iter().min().unwrap();
            assert!(
                *decode <= PER_STEP && *prefill <= PER_STEP,
                "{path} ({n_layer} layers), {threads} thread(s): a warm step allocated {decode} times \
                 (decode steps: {decode_counts:?}) or {prefill} (prefills of 40 tokens: {prefill_counts:?})"
            );
        }
    }
}
