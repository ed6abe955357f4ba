//! [`WgpuTensor`]: an activation in a pooled GPU buffer, and its allocation (checked against the
//! device's storage binding limit). The ops of `backend.rs` and `moe.rs` both allocate them.

use minerva_model::{ModelError, Result};

use crate::gpu::{Gpu, PooledBuffer};

/// An activation on the GPU: `rows × cols` f32, row-major.
pub struct WgpuTensor {
    buf: PooledBuffer,
    pub(crate) rows: usize,
    pub(crate) cols: usize,
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

    pub(crate) fn buffer(&self) -> &wgpu::Buffer {
        self.buf.buffer()
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
        Ok(WgpuTensor { buf: gpu.scratch(bytes), rows, cols })
    }

    /// An activation over `buf`, which holds `rows × cols` f32.
    pub(crate) fn from_buffer(buf: PooledBuffer, rows: usize, cols: usize) -> WgpuTensor {
        WgpuTensor { buf, rows, cols }
    }
}
