//! Weights on the GPU in their stored form, streamed from the memory map.

use std::sync::Arc;

use minerva_core::DType;
use minerva_model::checks::MatrixShape;
use minerva_model::{ModelError, Result, WeightSource};

use crate::gpu::Gpu;

/// Bytes written per `Queue::write_buffer` call while uploading.
const UPLOAD_PIECE: usize = 8 << 20;
/// Bytes of uploads after which the queue is flushed and drained, bounding staging memory.
const UPLOAD_FLUSH: usize = 64 << 20;

/// A callback told how many more weight bytes reached the GPU.
#[derive(Clone)]
pub struct UploadProgress(pub Arc<dyn Fn(u64) + Send + Sync>);

impl std::fmt::Debug for UploadProgress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("UploadProgress(..)")
    }
}

/// Whole rows of a weight in one buffer, no larger than the device's storage binding limit.
pub(crate) struct WeightChunk {
    pub buffer: wgpu::Buffer,
    pub row_start: usize,
    pub rows: usize,
}

/// A weight on the GPU: a matrix kept in its stored dtype (split into row chunks when larger
/// than one storage binding), or a vector (norm gains) converted to f32.
pub struct WgpuWeight {
    pub(crate) name: String,
    pub(crate) dtype: DType,
    pub(crate) rows: usize,
    pub(crate) cols: usize,
    /// Bytes of one row as stored on the GPU (layout.rs), which the kernels step rows by.
    pub(crate) row_bytes: usize,
    pub(crate) chunks: Vec<WeightChunk>,
    pub(crate) vector: Option<wgpu::Buffer>,
}

impl WgpuWeight {
    /// The tensor's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many buffers the matrix is split into (1 unless it exceeds one binding).
    pub fn chunk_count(&self) -> usize {
        self.chunks.len()
    }

    pub(crate) fn shape(&self) -> MatrixShape {
        MatrixShape { rows: self.rows, cols: self.cols, whole_rows: 1, vector: self.vector.is_some() }
    }
}

/// Uploads `source`: vectors as f32, matrices in their GPU layout (layout.rs) in chunks of at most `max_binding`
/// bytes, written in pieces of [`UPLOAD_PIECE`] with a drain every [`UPLOAD_FLUSH`] bytes.
pub(crate) fn upload(
    gpu: &Gpu,
    source: WeightSource,
    max_binding: u64,
    on_upload: Option<&UploadProgress>,
) -> Result<WgpuWeight> {
    let WeightSource { file, name, dtype, shape, range } = source;
    // Stacked experts `[n_expert, rows, cols]` are one matrix of every expert's rows, split only
    // between experts (`whole`: rows per expert) so each expert lies in one binding.
    let MatrixShape { rows, cols, whole_rows: whole, .. } = MatrixShape::of(&name, &shape)?;
    let bytes = file.bytes().get(range.clone()).ok_or_else(|| ModelError::BadTensor {
        tensor: name.clone(),
        message: format!("byte range {range:?} is outside the file"),
    })?;
    let row_bytes = dtype.row_bytes(cols).filter(|rb| rb.checked_mul(rows) == Some(bytes.len())).ok_or_else(|| {
        ModelError::BadTensor {
            tensor: name.clone(),
            message: format!("{} bytes do not hold {rows}×{cols} {dtype}", bytes.len()),
        }
    })?;
    if shape.len() == 1 {
        let mut values = vec![0.0f32; cols];
        minerva_quant::dequantize(dtype, bytes, &mut values)?;
        let buffer = gpu.init_buffer(&name, bytemuck::cast_slice(&values), wgpu::BufferUsages::STORAGE);
        if let Some(progress) = on_upload {
            (progress.0)(bytes.len() as u64);
        }
        return Ok(WgpuWeight { name, dtype, rows, cols, row_bytes, chunks: Vec::new(), vector: Some(buffer) });
    }
    let Some(layout) = crate::kernels::layout(dtype) else {
        return Err(ModelError::TensorDType { tensor: name, dtype, usage: "matmul on the wgpu backend" });
    };
    if cols > u32::MAX as usize / 8 {
        let message = format!("tensor {name}: {cols} columns are too many for the GPU kernels");
        return Err(ModelError::Resource { message });
    }
    // Rows as the kernels read them (layout.rs): regrouped for the formats whose quants the file
    // leaves unaligned, byte for byte otherwise.
    let gpu_row_bytes = layout.row_bytes(cols / dtype.block_elems()).ok_or_else(|| ModelError::Resource {
        message: format!("tensor {name}: rows of {cols} {dtype} values are too large for the GPU"),
    })?;
    let rows_per_chunk = (max_binding as usize / gpu_row_bytes).min(rows) / whole * whole;
    if rows_per_chunk == 0 {
        let message = format!(
            "tensor {name}: {whole} row(s) of {gpu_row_bytes} bytes exceed the GPU's storage binding limit of {max_binding}"
        );
        return Err(ModelError::Resource { message });
    }
    let regroup = !layout.is_whole();
    // Whole rows per write, a multiple of 4 so that every write starts on the 4-byte copy
    // alignment whatever the row size (an f16 row of odd length is 2 bytes off).
    let rows_per_piece = (UPLOAD_PIECE / gpu_row_bytes / 4).max(1) * 4;
    let mut staged = Vec::new();
    let mut chunks = Vec::new();
    let mut since_flush = 0usize;
    for row_start in (0..rows).step_by(rows_per_chunk) {
        let n = rows_per_chunk.min(rows - row_start);
        // Sizes are whole 16-byte words: the kernels read the weight as `array<vec4<u32>>`.
        let size = ((n * gpu_row_bytes) as u64).max(16).next_multiple_of(16);
        let buffer = gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(&name),
            size,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        for first in (0..n).step_by(rows_per_piece) {
            let count = rows_per_piece.min(n - first);
            let src = &bytes[(row_start + first) * row_bytes..(row_start + first + count) * row_bytes];
            let piece: &[u8] = if regroup {
                staged.resize(count * gpu_row_bytes, 0);
                for (from, to) in src.chunks_exact(row_bytes).zip(staged.chunks_exact_mut(gpu_row_bytes)) {
                    layout.write_row(from, to);
                }
                &staged
            } else {
                src
            };
            let offset = (first * gpu_row_bytes) as u64;
            if piece.len().is_multiple_of(4) {
                gpu.queue.write_buffer(&buffer, offset, piece);
            } else {
                // Only the last piece can be ragged; pad it to the 4-byte copy alignment.
                let mut padded = piece.to_vec();
                padded.resize(piece.len().next_multiple_of(4), 0);
                gpu.queue.write_buffer(&buffer, offset, &padded);
            }
            since_flush += piece.len();
            if let Some(progress) = on_upload {
                (progress.0)(src.len() as u64);
            }
            if since_flush >= UPLOAD_FLUSH {
                gpu.queue.submit([]);
                gpu.wait()?;
                since_flush = 0;
            }
        }
        chunks.push(WeightChunk { buffer, row_start, rows: n });
    }
    let row_bytes = gpu_row_bytes;
    Ok(WgpuWeight { name, dtype, rows, cols, row_bytes, chunks, vector: None })
}
