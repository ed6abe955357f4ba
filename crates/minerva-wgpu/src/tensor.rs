//! [`WgpuTensor`]: an activation in a pooled GPU buffer, and its allocation (checked against the
//! device's storage binding limit). The ops of `backend.rs` and `moe.rs` both allocate them.
//!
//! An activation may be *deferred*: `rms_norm`, `swiglu` and `geglu` return one whose values are
//! not written yet, and `rope` marks one to be rotated, so that the op that consumes it can do
//! that work as it reads it (the decode matrix kernels normalise or gate their input as they load
//! it; the KV store rotates the keys it writes), one dispatch instead of two. Any other consumer
//! gets the values written first ([`WgpuTensor::read`]), by the same kernels as without
//! deferral. A deferred value keeps its sources alive; an op that writes a source in place while
//! a deferred value still reads it writes a copy instead ([`WgpuTensor::write`]).

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use minerva_model::{ModelError, Result};

use crate::gpu::{Gpu, PooledBuffer};
use crate::kernels;
use crate::kernels::rope::RopeShape;

/// An activation on the GPU: `rows × cols` f32, row-major.
pub struct WgpuTensor {
    buf: Arc<PooledBuffer>,
    pub(crate) rows: usize,
    pub(crate) cols: usize,
    deferred: Mutex<Option<Deferred>>,
}

/// Work on a tensor's values left for its consumer.
#[derive(Clone)]
pub(crate) enum Deferred {
    /// The values are `input` applied to its sources, not yet written.
    Input(DeferredInput),
    /// The values are written; they are still to be rotated in place by `table`.
    Rope { table: wgpu::Buffer, shape: RopeShape },
}

/// A matrix product's input computed from other activations as it is loaded.
#[derive(Clone)]
pub(crate) enum DeferredInput {
    /// `rms_norm(x, g, eps)`.
    RmsNorm { x: Arc<PooledBuffer>, g: wgpu::Buffer, eps: f32 },
    /// `silu(gate) · up` or `gelu_tanh(gate) · up`.
    Gated { gate: Arc<PooledBuffer>, up: Arc<PooledBuffer>, gelu: bool },
}

impl WgpuTensor {
    /// Rows (tokens).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Values per row.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The buffer of a tensor this op has just made (nothing deferred on it).
    pub(crate) fn buffer(&self) -> &wgpu::Buffer {
        debug_assert!(self.pending().is_none(), "a fresh tensor has nothing deferred");
        self.buf.buffer()
    }

    /// The buffer, its values written: deferred work is recorded first.
    pub(crate) fn read(&self, gpu: &Gpu) -> &wgpu::Buffer {
        let mut deferred = self.pending();
        if let Some(work) = deferred.take() {
            let out = self.buf.buffer();
            match work {
                Deferred::Input(DeferredInput::RmsNorm { x, g, eps }) => {
                    kernels::rms_norm::rms_norm(gpu, x.buffer(), &g, out, self.rows, self.cols, eps);
                }
                Deferred::Input(DeferredInput::Gated { gate, up, gelu: false }) => {
                    kernels::swiglu::swiglu(gpu, gate.buffer(), up.buffer(), out, self.rows * self.cols);
                }
                Deferred::Input(DeferredInput::Gated { gate, up, gelu: true }) => {
                    kernels::geglu::geglu(gpu, gate.buffer(), up.buffer(), out, self.rows * self.cols);
                }
                Deferred::Rope { table, shape } => kernels::rope::rope(gpu, out, &table, &shape),
            }
        }
        self.buf.buffer()
    }

    /// The buffer, its values written, for an op that writes it in place: when a deferred value
    /// of another tensor still reads this one, this tensor moves to a copy first.
    pub(crate) fn write(&mut self, gpu: &Gpu) -> &wgpu::Buffer {
        self.read(gpu);
        if Arc::strong_count(&self.buf) > 1 {
            let bytes = (self.rows * self.cols * 4) as u64;
            gpu.count_source_copy();
            let copy = gpu.scratch(bytes);
            gpu.record(|encoder| encoder.copy_buffer_to_buffer(self.buf.buffer(), 0, copy.buffer(), 0, bytes));
            self.buf = Arc::new(copy);
        }
        self.buf.buffer()
    }

    /// The deferred input, if the values are one (left deferred: the caller computes them as it
    /// reads them).
    pub(crate) fn deferred_input(&self) -> Option<DeferredInput> {
        match &*self.pending() {
            Some(Deferred::Input(input)) => Some(input.clone()),
            _ => None,
        }
    }

    /// The deferred rotation, if any, now the caller's to apply.
    pub(crate) fn take_rope(&self) -> Option<(wgpu::Buffer, RopeShape)> {
        let mut deferred = self.pending();
        match deferred.take() {
            Some(Deferred::Rope { table, shape }) => Some((table, shape)),
            other => {
                *deferred = other;
                None
            }
        }
    }

    /// Defers `work` on this tensor; work already deferred is recorded first.
    pub(crate) fn defer(&mut self, gpu: &Gpu, work: Deferred) {
        self.write(gpu);
        *self.pending() = Some(work);
    }

    /// This tensor's own buffer, shared with a deferred value made from it.
    pub(crate) fn source(&self, gpu: &Gpu) -> Arc<PooledBuffer> {
        self.read(gpu);
        self.buf.clone()
    }

    fn pending(&self) -> MutexGuard<'_, Option<Deferred>> {
        self.deferred.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl WgpuTensor {
    /// A new activation of `rows × cols`, or an error when it would not fit one storage binding.
    pub(crate) fn new(gpu: &Gpu, rows: usize, cols: usize) -> Result<WgpuTensor> {
        let bytes = rows.checked_mul(cols).and_then(|n| n.checked_mul(4)).unwrap_or(usize::MAX) as u64;
        let limit = gpu.info.max_storage_binding;
        if bytes > limit {
            let message =
                format!("a {rows}×{cols} activation exceeds the GPU's storage binding limit of {limit} bytes");
            return Err(ModelError::Resource { message });
        }
        Ok(WgpuTensor::from_buffer(gpu.scratch(bytes), rows, cols))
    }

    /// A new activation whose values are `input`, computed when it is read.
    pub(crate) fn deferred(gpu: &Gpu, rows: usize, cols: usize, input: DeferredInput) -> Result<WgpuTensor> {
        let t = WgpuTensor::new(gpu, rows, cols)?;
        *t.pending() = Some(Deferred::Input(input));
        Ok(t)
    }

    /// An activation over `buf`, which holds `rows × cols` f32.
    pub(crate) fn from_buffer(buf: PooledBuffer, rows: usize, cols: usize) -> WgpuTensor {
        WgpuTensor { buf: Arc::new(buf), rows, cols, deferred: Mutex::new(None) }
    }
}
