//! Minerva's GPU backend: [`minerva_model::Backend`] over [wgpu](https://wgpu.rs) (Vulkan,
//! Metal, DX12, GL), with WGSL kernels.
//!
//! ```text
//! WgpuBackend::new ─► adapter (MINERVA_ADAPTER, else discrete GPU first) ─► device with the
//!                     adapter's limits (+ SHADER_F16 / SUBGROUP when offered)
//! Backend::weight  ─► stored bytes streamed from the mmap into storage buffers, split by rows
//!                     when a matrix exceeds max_storage_buffer_binding_size
//! ops              ─► one dispatch (or a few) recorded into the pending command encoder
//! logits / greedy  ─► the only submission of a step, then one read-back
//! ```
//!
//! Kernels live in `src/kernels/`: one `.wgsl` beside a Rust wrapper of the same name. Weights
//! are read with byte-addressed loads from `array<u32>` (see `kernels/common.wgsl`), so the
//! buffers hold exactly the file's bytes. `docs/wgpu.md` describes the design and tolerances.

mod backend;
mod device;
mod error;
mod gpu;
mod kernels;
mod moe;
mod profile;
mod tables;
mod tensor;
mod weight;

pub use backend::{DEFAULT_TILED_FROM, WgpuBackend, WgpuCache, WgpuOptions};
pub use device::{DeviceInfo, list_adapters};
pub use error::WgpuError;
pub use gpu::RecordStats;
pub use kernels::{WEIGHT_DTYPES, supports};
pub use profile::KernelTime;
pub use tensor::WgpuTensor;
pub use weight::{UploadProgress, WgpuWeight};

/// The README's example, compiled (and, unless marked `no_run`, run) as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
