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

/// Uploads `source`: vectors as f32, matrices byte for byte in chunks of at most `max_binding`
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
    if !crate::kernels::supports(dtype) {
        return Err(ModelError::TensorDType { tensor: name, dtype, usage: "matmul on the wgpu backend" });
    }
    if cols > u32::MAX as usize / 8 {
        let message = format!("tensor {name}: {cols} columns are too many for the GPU kernels");
        return Err(ModelError::Resource { message });
    }
    let rows_per_chunk = (max_binding as usize / row_bytes).min(rows) / whole * whole;
    if rows_per_chunk == 0 {
        let message = format!(
            "tensor {name}: {whole} row(s) of {row_bytes} bytes exceed the GPU's storage binding limit of {max_binding}"
        );
        return Err(ModelError::Resource { message });
    }
    let mut chunks = Vec::new();
    let mut since_flush = 0usize;
    for row_start in (0..rows).step_by(rows_per_chunk) {
        let n = rows_per_chunk.min(rows - row_start);
        let data = &bytes[row_start * row_bytes..(row_start + n) * row_bytes];
        let size = (data.len() as u64).max(4).next_multiple_of(4);
        let buffer = gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(&name),
            size,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        for (i, piece) in data.chunks(UPLOAD_PIECE).enumerate() {
            let offset = (i * UPLOAD_PIECE) as u64;
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
                (progress.0)(piece.len() as u64);
            }
            if since_flush >= UPLOAD_FLUSH {
                gpu.queue.submit([]);
                gpu.wait()?;
                since_flush = 0;
            }
        }
        chunks.push(WeightChunk { buffer, row_start, rows: n });
    }
    Ok(WgpuWeight { name, dtype, rows, cols, row_bytes, chunks, vector: None })
}
