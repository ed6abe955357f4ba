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
//! hold the file's values; formats whose quants the file leaves at unaligned offsets (Q4_0,
//! Q4_1, Q5_0, Q8_0, Q6_K, MXFP4, MLX affine) are regrouped at upload so that every block's
//! quants start on a 16-byte boundary and are read as whole `vec4<u32>`s (see `src/layout.rs`
//! and `kernels/common.wgsl`). `docs/wgpu.md` describes the design and tolerances.

mod backend;
mod device;
mod error;
mod gpu;
mod kernels;
mod layout;
mod moe;
mod profile;
mod tables;
mod tensor;
mod weight;

pub use backend::{DEFAULT_TILED_FROM, WgpuBackend, WgpuCache, WgpuOptions};
pub use device::{DeviceInfo, list_adapters};
pub use error::WgpuError;
pub use gpu::RecordStats;
pub use kernels::tile::TileShape;
pub use kernels::{WEIGHT_DTYPES, gpu_row_bytes, supports};
pub use profile::{KernelTime, kernel_table};
pub use tensor::WgpuTensor;
pub use weight::{UploadProgress, WgpuWeight};

/// The README's example, compiled (and, unless marked `no_run`, run) as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
