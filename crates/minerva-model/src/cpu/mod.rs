//! The CPU backend: minerva-quant's kernels run straight on the memory-mapped weights, activations
//! in f32, work spread over a [`ComputePool`].

mod aligned;
mod attention;
mod buffers;
mod gated;
mod moe;
mod repacking;
mod rope_tables;

use std::sync::Arc;

use minerva_core::DType;
use minerva_quant::{ComputePool, Matrix, pool};

use crate::arch::Int8Activations;
use crate::backend::{
    Backend, Batch, ByteSource, CacheShape, Mask, MlxAffineSource, MoeExperts, MoeParams, SplitMxfp4Source,
    WeightSource,
};
use crate::checks::{self, MatrixShape};
use crate::error::{ModelError, Result};
use crate::kv_blocks::BlockTables;
use crate::rope::{RopeConfig, RopeStyle};
use aligned::LineAligned;
pub use repacking::{Repack, RepackMemory, available_memory};

/// An activation: `rows × cols` f32, row-major. Its buffer is recycled when it is dropped (see
/// `buffers.rs`).
#[derive(Debug, PartialEq)]
pub struct CpuTensor {
    /// The values.
    pub data: Vec<f32>,
    /// Rows (tokens).
    pub rows: usize,
    /// Values per row.
    pub cols: usize,
}

impl CpuTensor {
    fn zeros(rows: usize, cols: usize) -> CpuTensor {
        CpuTensor { data: buffers::zeros(rows * cols), rows, cols }
    }

    /// A tensor whose every value the caller writes (its buffer is not cleared first).
    fn for_output(rows: usize, cols: usize) -> CpuTensor {
        CpuTensor { data: buffers::stale(rows * cols), rows, cols }
    }
}

impl Clone for CpuTensor {
    fn clone(&self) -> CpuTensor {
        CpuTensor { data: buffers::copy_of(&self.data), rows: self.rows, cols: self.cols }
    }
}

impl Drop for CpuTensor {
    fn drop(&mut self) {
        buffers::recycle(std::mem::take(&mut self.data));
    }
}

/// A weight: a byte range of the mapped file, used in its stored dtype. Vectors (norm weights,
/// a few KiB) are also kept as f32. A split MXFP4 weight (HF's, MLX's) is its nibbles' range, and
/// its scales' in its [`Layout`], read where they lie by minerva-quant's [`Matrix::Mxfp4Split`];
/// an MLX affine one its codes' range, with its scales and biases in its layout
/// ([`Matrix::MlxAffine`], `dtype` its scales' float type, the kernels it runs on).
pub struct CpuWeight {
    file: Arc<dyn ByteSource>,
    range: std::ops::Range<usize>,
    name: String,
    dtype: DType,
    rows: usize,
    cols: usize,
    vector: Option<Vec<f32>>,
    layout: Layout,
    /// The repacked copy (`Repack`), made at the first product (the model's warm-up token at load).
    repacked: repacking::RepackedCopy,
}

/// How a weight's bytes hold its values, beyond its own byte range.
enum Layout {
    /// Rows of whole blocks of `dtype`.
    Blocks,
    /// Split MXFP4: the range holds the nibbles.
    Mxfp4Split(SplitScales),
    /// MLX affine: the range holds the codes.
    MlxAffine(AffineParts),
}

/// The scales of a split MXFP4 weight and its row stride.
struct SplitScales {
    file: Arc<dyn ByteSource>,
    range: std::ops::Range<usize>,
    row_stride: usize,
}

/// The scales, biases and parameters of an MLX affine weight.
struct AffineParts {
    scales: (Arc<dyn ByteSource>, std::ops::Range<usize>),
    biases: (Arc<dyn ByteSource>, std::ops::Range<usize>),
    params: minerva_quant::MlxAffine,
}

impl CpuWeight {
    fn bytes(&self) -> &[u8] {
        &self.file.bytes()[self.range.clone()]
    }

    /// `self` and `up` as one matrix of twice the rows, stride 1, when they are the gate and up
    /// halves of one interleaved HF tensor (every other row of the same bytes, `up` one row in):
    /// a product over it reads the tensor front to back, where two stride-2 passes skip a row at
    /// every step and the prefetchers fetch the skipped rows anyway.
    fn interleaved_with(&self, up: &CpuWeight) -> Option<Matrix<'_>> {
        let (Layout::Mxfp4Split(g), Layout::Mxfp4Split(u)) = (&self.layout, &up.layout) else { return None };
        let groups = self.cols / 32;
        let halves = g.row_stride == 2
            && u.row_stride == 2
            && self.cols == up.cols
            && self.rows == up.rows
            && Arc::ptr_eq(&self.file, &up.file)
            && Arc::ptr_eq(&g.file, &u.file)
            && up.range.start == self.range.start + groups * 16
            && u.range.start == g.range.start + groups;
        halves.then(|| Matrix::Mxfp4Split {
            nibbles: self.bytes(),
            scales: &g.file.bytes()[g.range.clone()],
            row_stride: 1,
        })
    }

    /// The weight as the fused products read it.
    fn matrix(&self) -> Matrix<'_> {
        match &self.layout {
            Layout::Blocks => Matrix::Blocks { dtype: self.dtype, bytes: self.bytes() },
            Layout::Mxfp4Split(s) => Matrix::Mxfp4Split {
                nibbles: self.bytes(),
                scales: &s.file.bytes()[s.range.clone()],
                row_stride: s.row_stride,
            },
            Layout::MlxAffine(AffineParts { scales, biases, params }) => Matrix::MlxAffine {
                weight: self.bytes(),
                scales: &scales.0.bytes()[scales.1.clone()],
                biases: &biases.0.bytes()[biases.1.clone()],
                params: *params,
            },
        }
    }

    /// The weight as the fused products read it under `repack`: its repacked copy where the mode
    /// and the dtype call for one (made now if it was not yet), else [`CpuWeight::matrix`].
    fn product_matrix(
        &self,
        (repack, int8): (Repack, Int8Activations),
        (counts, memory): (&repacking::RepackCounts, RepackMemory),
    ) -> Matrix<'_> {
        let int8 = int8.allows();
        // Only `auto` weighs the copies against memory: `on` was asked for whatever they cost.
        let budget = (repack == Repack::Auto).then_some(memory);
        let repacked = (matches!(self.layout, Layout::Blocks) && repack.applies(self.dtype, int8))
            .then(|| {
                let release = || self.file.release(self.range.clone());
                self.repacked.get(self.dtype, self.bytes(), (self.rows, self.cols), (counts, budget), release)
            })
            .flatten();
        repacked.unwrap_or_else(|| self.matrix())
    }

    fn shape(&self) -> MatrixShape {
        MatrixShape { rows: self.rows, cols: self.cols, whole_rows: 1, vector: self.vector.is_some() }
    }
}

/// Cached keys or values, in the cache's dtype. Offsets count values in every dtype; a Q8_0
/// cache keeps each 32 values as one 34-byte block (an f16 scale and 32 `i8`, llama.cpp's
/// `-ctk q8_0`), so its offsets are multiples of 32 (head dims are, checked at creation).
enum KvData {
    F32(LineAligned<f32>),
    F16(LineAligned<half::f16>),
    Q8_0(LineAligned<u8>),
}

impl KvData {
    /// `len` zeros, or `None` if their bytes overflow `usize`.
    fn zeros(dtype: DType, len: usize) -> Option<KvData> {
        match dtype {
            DType::F16 => LineAligned::zeroed(len).map(KvData::F16),
            DType::Q8_0 => LineAligned::zeroed(len.div_ceil(32).checked_mul(34)?).map(KvData::Q8_0),
            _ => LineAligned::zeroed(len).map(KvData::F32),
        }
    }

    /// Bytes held.
    fn byte_len(&self) -> usize {
        match self {
            KvData::F32(v) => v.len() * 4,
            KvData::F16(v) => v.len() * 2,
            KvData::Q8_0(v) => v.len(),
        }
    }

    /// Copies `len` values from offset `src` to offset `dst`.
    fn copy_within(&mut self, src: usize, dst: usize, len: usize) {
        match self {
            KvData::F32(d) => d.copy_within(src..src + len, dst),
            KvData::F16(d) => d.copy_within(src..src + len, dst),
            KvData::Q8_0(d) => d.copy_within(src / 32 * 34..(src + len) / 32 * 34, dst / 32 * 34),
        }
    }
}

/// Bytes of `values` cached values of `dtype` (the CPU's KV types).
fn kv_bytes(dtype: DType, values: usize) -> usize {
    match dtype {
        DType::F16 => values * 2,
        DType::Q8_0 => values.div_ceil(32) * 34,
        _ => values * 4,
    }
}

/// A paged KV cache in f32, f16 or Q8_0 ([`CpuBackend::with_kv_dtype`]): a pool of blocks laid out
/// `[layer][kv_head][block][position in block][head_dim]`, read through each slot's block table
/// (see [`crate::kv_blocks`]).
pub struct CpuCache {
    shape: CacheShape,
    tables: BlockTables,
    k: KvData,
    v: KvData,
}

impl CpuCache {
    /// The cache's shape.
    pub fn shape(&self) -> CacheShape {
        self.shape
    }

    /// The element type of the cached keys and values (`F32`, `F16` or `Q8_0`).
    pub fn dtype(&self) -> DType {
        match self.k {
            KvData::F32(_) => DType::F32,
            KvData::F16(_) => DType::F16,
            KvData::Q8_0(_) => DType::Q8_0,
        }
    }

    /// Bytes held by the keys and values.
    pub fn byte_len(&self) -> usize {
        self.k.byte_len() + self.v.byte_len()
    }

    /// Offset of the first value of `block` for `(layer, kv_head)`.
    fn offset(&self, layer: usize, head: usize, block: usize) -> usize {
        let s = &self.shape;
        ((layer * s.n_head_kv + head) * s.blocks + block) * s.block_size * s.head_dim
    }

    /// Offset of `(slot, layer, kv_head, pos)`, a position inside the slot's table.
    fn index(&self, slot: usize, layer: usize, head: usize, pos: usize) -> usize {
        let (block, at) = self.tables.locate(slot, pos);
        self.offset(layer, head, block) + at * self.shape.head_dim
    }
}

/// The CPU backend. Ops run on its own [`ComputePool`] (`threads`), or on the pool current where
/// they are called (the process-wide one unless the caller installed another).
pub struct CpuBackend {
    pool: Option<ComputePool>,
    f32_activations: bool,
    kv_dtype: DType,
    rope_tables: rope_tables::RopeTables,
    /// Convert split MXFP4 (HF, MLX) to GGML blocks at load instead of reading it in place.
    mxfp4_copies: bool,
    /// Dequantize MLX affine matrices at load instead of reading them in place.
    mlx_affine_copies: bool,
    repack: Repack,
    repack_memory: RepackMemory,
    /// Which matrices of the loaded architecture take 8-bit activations (`Backend::prepare_for`):
    /// what `Repack::Auto` asks.
    int8_activations: repacking::Int8Scope,
    repacked: repacking::RepackCounts,
}

impl CpuBackend {
    /// A backend running on `threads` threads, the calling one included (`None`: the current
    /// pool of the calling thread, by default one thread per core).
    pub fn new(threads: Option<usize>) -> Result<CpuBackend> {
        let pool = match threads {
            None => None,
            Some(n) => Some(
                ComputePool::new(n)
                    .map_err(|e| ModelError::Resource { message: format!("cannot start {n} threads: {e}") })?,
            ),
        };
        Ok(CpuBackend {
            pool,
            f32_activations: false,
            kv_dtype: DType::F32,
            rope_tables: Default::default(),
            mxfp4_copies: false,
            mlx_affine_copies: false,
            repack: Repack::Off,
            repack_memory: RepackMemory::default(),
            int8_activations: Default::default(),
            repacked: Default::default(),
        })
    }

    /// Reference mode: `matmul_q` dequantizes each weight to f32 and multiplies f32 activations
    /// (no Q8 activation quantization). Slow — it dequantizes every matrix on every call — but
    /// it computes what an f32 framework computes from the same weights, for exact comparisons.
    pub fn with_f32_activations(mut self, on: bool) -> CpuBackend {
        self.f32_activations = on;
        self
    }

    /// With `on`, HF's and MLX's MXFP4 matrices are converted to GGML blocks at load, in
    /// anonymous memory (as much again as the experts: 10.2 GB for GPT-OSS-20B), instead of being
    /// read in place. The products are the same bit for bit; the copy saves the per-row
    /// conversion that reading in place does in cache, which costs decode speed where the MXFP4
    /// kernel is compute-bound (few cores: 0.74× GGUF's on 2 Zen 3 cores, docs/benchmarks.md).
    pub fn with_mxfp4_copies(mut self, on: bool) -> CpuBackend {
        self.mxfp4_copies = on;
        self
    }

    /// With `on`, MLX affine matrices are dequantized at load, as `mx.dequantize` computes them,
    /// into their scales' float type in anonymous memory (twice the bytes of 8-bit codes), instead
    /// of being read in place. The products are the same bit for bit; the copy saves the per-row
    /// dequantization that reading in place does in cache and reads twice the bytes per token.
    pub fn with_mlx_affine_copies(mut self, on: bool) -> CpuBackend {
        self.mlx_affine_copies = on;
        self
    }

    /// Whether Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4 and Q2_K…Q6_K matrices (a mixture's expert
    /// stacks too) are repacked into
    /// row-interleaved groups at their first product (when the model loads: `Model` runs a
    /// warm-up token through it) and multiplied with 8-bit activations
    /// (`Repack::Auto`: where this CPU has a SIMD kernel for them and either the format keeps its
    /// activations' precision, the K-quants, or the model's architecture lets the matrix take
    /// 8-bit activations, see `ArchSpec::int8_activations`), or read in place (`Repack::Off`, the
    /// default: what the reference tests compare against).
    pub fn with_repack(mut self, repack: Repack) -> CpuBackend {
        self.repack = repack;
        self
    }

    /// How much memory `Repack::Auto`'s copies may take (by default half of what the system has
    /// available at the first copy): matrices whose copies would go past it are read in place,
    /// and counted in `Backend::repack_declined`.
    pub fn with_repack_memory(mut self, memory: RepackMemory) -> CpuBackend {
        self.repack_memory = memory;
        self
    }

    /// The element type of new KV caches: `F32` (the default, exact), `F16` (half the memory;
    /// keys and values rounded to 11 significant bits) or `Q8_0` (about a quarter: each 32 values
    /// of a head as 8-bit integers and one f16 scale, as llama.cpp's `-ctk/-ctv q8_0`; head dims
    /// must be multiples of 32). Other dtypes are refused.
    pub fn with_kv_dtype(mut self, dtype: DType) -> Result<CpuBackend> {
        if !matches!(dtype, DType::F32 | DType::F16 | DType::Q8_0) {
            return Err(ModelError::KvDType { dtype });
        }
        self.kv_dtype = dtype;
        Ok(self)
    }

    /// The repack mode products run under, and which matrices the model's architecture lets take
    /// 8-bit activations (`Repack::applies`).
    fn repack_mode(&self) -> (Repack, Int8Activations) {
        (self.repack, self.int8_activations.get())
    }

    fn install<R>(&self, f: impl FnOnce() -> R) -> R {
        match &self.pool {
            Some(pool) => pool.install(f),
            None => f(),
        }
    }
}

/// `v = v / rms(v) * weight`, the sum of squares in f64.
fn rms_norm_in_place(v: &mut [f32], weight: &[f32], eps: f32) {
    let scale = rms_scale(v, eps);
    for (a, &g) in v.iter_mut().zip(weight) {
        *a = *a * scale * g;
    }
}

/// `out = v / rms(v) * weight`: [`rms_norm_in_place`] into another buffer, the same bits.
fn rms_norm_into(v: &[f32], out: &mut [f32], weight: &[f32], eps: f32) {
    let scale = rms_scale(v, eps);
    for ((o, &a), &g) in out.iter_mut().zip(v).zip(weight) {
        *o = a * scale * g;
    }
}

/// `1 / sqrt(mean(v²) + eps)`, the squares summed in f64 in eight running sums (element `i` into
/// sum `i % 8`, added in order at the end), which the compiler keeps in vector lanes: one
/// running sum waits on each add in turn, about a microsecond for a 576-wide row.
fn rms_scale(v: &[f32], eps: f32) -> f32 {
    let mut sums = [0.0f64; 8];
    let (chunks, rest) = v.as_chunks::<8>();
    for chunk in chunks {
        for (sum, &a) in sums.iter_mut().zip(chunk) {
            *sum += f64::from(a) * f64::from(a);
        }
    }
    for (sum, &a) in sums.iter_mut().zip(rest) {
        *sum += f64::from(a) * f64::from(a);
    }
    let sum: f64 = sums.iter().sum();
    1.0 / ((sum / v.len() as f64) as f32 + eps).sqrt()
}

/// Rows per task when a row-wise step (a norm, a residual add) is shared out over the pool: a
/// prefill's hundreds of rows in a few tasks per thread; a decode's single row stays on the
/// calling thread (one task runs without waking the pool).
const ROWS_PER_TASK: usize = 32;

impl Backend for CpuBackend {
    type Tensor = CpuTensor;
    type Weight = CpuWeight;
    type Cache = CpuCache;

    fn weight(&self, source: WeightSource) -> Result<CpuWeight> {
        let WeightSource { file, name, dtype, shape, range } = source;
        let MatrixShape { rows, cols, vector: is_vector, .. } = MatrixShape::of(&name, &shape)?;
        let vector = if is_vector {
            let mut values = vec![0.0; cols];
            minerva_quant::dequantize(dtype, &file.bytes()[range.clone()], &mut values)?;
            Some(values)
        } else if minerva_quant::activation_dtype(dtype).is_none() {
            return Err(ModelError::TensorDType { tensor: name, dtype, usage: "matmul" });
        } else {
            None
        };
        Ok(CpuWeight {
            file,
            range,
            name,
            dtype,
            rows,
            cols,
            vector,
            layout: Layout::Blocks,
            repacked: Default::default(),
        })
    }

    fn split_mxfp4_weight(&self, source: SplitMxfp4Source) -> Result<CpuWeight> {
        if self.mxfp4_copies {
            let blocks = self.install(|| source.to_ggml_blocks())?;
            return self.weight(blocks);
        }
        let SplitMxfp4Source { nibbles, nibbles_range, scales, scales_range, row_stride, name, shape } = source;
        let MatrixShape { rows, cols, vector, .. } = MatrixShape::of(&name, &shape)?;
        let outside = |part: &str| ModelError::BadTensor {
            tensor: name.clone(),
            message: format!("the {part}' byte range is outside the file"),
        };
        let nibble_bytes = nibbles.bytes().get(nibbles_range.clone()).ok_or_else(|| outside("nibbles"))?;
        let scale_bytes = scales.bytes().get(scales_range.clone()).ok_or_else(|| outside("scales"))?;
        if vector {
            return Err(ModelError::TensorDType { tensor: name, dtype: DType::MXFP4, usage: "a vector" });
        }
        Matrix::Mxfp4Split { nibbles: nibble_bytes, scales: scale_bytes, row_stride }.check_shape(rows, cols)?;
        let layout = Layout::Mxfp4Split(SplitScales { file: scales, range: scales_range, row_stride });
        Ok(CpuWeight {
            file: nibbles,
            range: nibbles_range,
            name,
            dtype: DType::MXFP4,
            rows,
            cols,
            vector: None,
            layout,
            repacked: Default::default(),
        })
    }

    /// Kept where it lies: products stage a few rows at a time as `mx.dequantize`'s values in L1
    /// (minerva-quant's `Matrix::MlxAffine`), equal to products on the dequantized copy, which
    /// would take twice the codes' memory at 8 bits.
    fn mlx_affine_weight(&self, source: MlxAffineSource) -> Result<CpuWeight> {
        let (_, rows, cols) = source.matrix()?;
        let MatrixShape { vector, .. } = MatrixShape::of(&source.name, &source.shape)?;
        if vector || self.mlx_affine_copies {
            // A vector is read as f32 values: dequantize it once.
            let values = self.install(|| source.to_values())?;
            return self.weight(values);
        }
        let MlxAffineSource { weight, weight_range, scales, scales_range, biases, biases_range, params, name, .. } =
            source;
        let layout =
            Layout::MlxAffine(AffineParts { scales: (scales, scales_range), biases: (biases, biases_range), params });
        Ok(CpuWeight {
            file: weight,
            range: weight_range,
            name,
            dtype: params.scale_dtype,
            rows,
            cols,
            vector: None,
            layout,
            repacked: Default::default(),
        })
    }

    fn new_cache(&self, shape: CacheShape) -> Result<CpuCache> {
        let too_large = || ModelError::Resource { message: format!("KV cache {shape:?} is too large") };
        let tables = BlockTables::contiguous(&shape)?;
        let len = shape.pool_values().ok_or_else(too_large)?;
        if self.kv_dtype == DType::Q8_0 && !shape.head_dim.is_multiple_of(32) {
            let message = format!("a Q8_0 KV cache needs head dims that are multiples of 32, not {}", shape.head_dim);
            return Err(ModelError::Resource { message });
        }
        // Zeroed pages the system maps on first touch: a pool sized for the whole of memory
        // costs only what the sequences have written.
        let zeros = || KvData::zeros(self.kv_dtype, len).ok_or_else(too_large);
        Ok(CpuCache { shape, tables, k: zeros()?, v: zeros()? })
    }

    fn kv_bytes(&self, values: usize) -> usize {
        kv_bytes(self.kv_dtype, values)
    }

    fn repacked(&self) -> (usize, usize) {
        self.repacked.get()
    }

    fn repack_declined(&self) -> (usize, usize) {
        self.repacked.declined()
    }

    fn makes_copies_at_first_product(&self) -> bool {
        self.repack != Repack::Off && !self.f32_activations
    }

    fn prepare_for(&self, arch: &crate::arch::ArchSpec) {
        self.int8_activations.set(arch.int8_activations);
    }

    fn set_blocks(&self, cache: &mut CpuCache, slot: usize, blocks: &[u32]) -> Result<()> {
        cache.tables.set(slot, blocks)
    }

    fn copy_blocks(&self, cache: &mut CpuCache, pairs: &[(u32, u32)]) -> Result<()> {
        let s = cache.shape;
        checks::copy_blocks(&s, pairs)?;
        let len = s.block_size * s.head_dim;
        for &(from, to) in pairs.iter().filter(|(from, to)| from != to) {
            for layer in 0..s.n_layer {
                for head in 0..s.n_head_kv {
                    let (src, dst) = (cache.offset(layer, head, from as usize), cache.offset(layer, head, to as usize));
                    cache.k.copy_within(src, dst, len);
                    cache.v.copy_within(src, dst, len);
                }
            }
        }
        Ok(())
    }

    fn embed(&self, table: &CpuWeight, tokens: &[u32]) -> Result<CpuTensor> {
        let mut out = CpuTensor::for_output(tokens.len(), table.cols);
        let (matrix, bytes) = (table.matrix(), table.bytes());
        for (&t, row) in tokens.iter().zip(out.data.chunks_exact_mut(table.cols)) {
            let t = t as usize;
            if t >= table.rows {
                let message = format!("token id {t} is outside the vocabulary of {}", table.rows);
                return Err(ModelError::BadBatch { message });
            }
            match table.layout {
                Layout::Blocks => {
                    let row_bytes = table.dtype.row_bytes(table.cols).expect("checked when the weights were loaded");
                    minerva_quant::dequantize_fast(table.dtype, &bytes[t * row_bytes..(t + 1) * row_bytes], row)?;
                }
                // The one row, as the layout's products read it.
                _ => matrix.rows(t, 1, table.cols)?.dequantize(1, table.cols, row)?,
            }
        }
        Ok(out)
    }

    fn rms_norm(&self, x: &CpuTensor, w: &CpuWeight, eps: f32) -> Result<CpuTensor> {
        let weight = w.vector.as_deref().unwrap_or_default();
        checks::vector_of("rms_norm", &w.name, w.vector.is_some(), weight.len(), x.cols)?;
        let mut out = CpuTensor::for_output(x.rows, x.cols);
        let cols = x.cols;
        if cols > 0 {
            self.install(|| {
                pool::for_each_chunk_mut(&mut out.data, ROWS_PER_TASK * cols, |t, out| {
                    let rows = x.data[t * ROWS_PER_TASK * cols..].chunks_exact(cols);
                    for (row, out) in rows.zip(out.chunks_exact_mut(cols)) {
                        rms_norm_into(row, out, weight, eps);
                    }
                })
            });
        }
        Ok(out)
    }

    fn rms_norm_heads(&self, x: &mut CpuTensor, n_heads: usize, w: &CpuWeight, eps: f32) -> Result<()> {
        let weight = w.vector.as_deref().unwrap_or_default();
        let head_dim = checks::rms_norm_heads(x.cols, n_heads, &w.name, w.vector.is_some(), weight.len())?;
        // Heads are contiguous within a row, so the heads of all rows are one run of head_dim chunks.
        if head_dim > 0 {
            let row_len = x.cols;
            self.install(|| {
                pool::for_each_chunk_mut(&mut x.data, ROWS_PER_TASK * row_len.max(1), |_, rows| {
                    rows.chunks_exact_mut(head_dim).for_each(|head| rms_norm_in_place(head, weight, eps));
                })
            });
        }
        Ok(())
    }

    fn matmul_q(&self, w: &CpuWeight, x: &CpuTensor) -> Result<CpuTensor> {
        checks::matmul(&w.name, w.shape(), x.cols)?;
        // The matrix product writes every value.
        let mut out = CpuTensor::for_output(x.rows, w.rows);
        if self.f32_activations && w.dtype != DType::F32 {
            let mut values = vec![0.0f32; w.rows * w.cols];
            w.matrix().dequantize(w.rows, w.cols, &mut values)?;
            let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
            self.install(|| minerva_quant::matmul(DType::F32, &bytes, w.rows, w.cols, &x.data, x.rows, &mut out.data))?;
            return Ok(out);
        }
        // i16 activations for the 32-value block formats (Q8_0 activations cost SmolLM2 two points
        // of top-1 agreement with an f32 reference; i16 matches it), Q8_K for the K-quants.
        let (matrix, rows, cols) = (
            self.install(|| w.product_matrix(self.repack_mode(), (&self.repacked, self.repack_memory))),
            w.rows,
            w.cols,
        );
        self.install(|| minerva_quant::matmul_i16_matrix(matrix, rows, cols, &x.data, x.rows, &mut out.data))?;
        Ok(out)
    }

    fn matmul_q_each<const N: usize>(&self, ws: [&CpuWeight; N], x: &CpuTensor) -> Result<[CpuTensor; N]> {
        if self.f32_activations {
            return crate::backend::matmul_q_one_by_one(self, ws, x);
        }
        for w in ws {
            checks::matmul(&w.name, w.shape(), x.cols)?;
        }
        // Every product writes every value of its output.
        let mut outs = ws.map(|w| CpuTensor::for_output(x.rows, w.rows));
        let mut out_iter = outs.iter_mut();
        let mut products = ws.map(|w| minerva_quant::Product {
            matrix: self.install(|| w.product_matrix(self.repack_mode(), (&self.repacked, self.repack_memory))),
            rows: w.rows,
            ys: &mut out_iter.next().expect("one output per weight").data,
        });
        self.install(|| minerva_quant::matmul_i16_each(&mut products, x.cols, &x.data, x.rows))?;
        Ok(outs)
    }

    fn rope(&self, x: &mut CpuTensor, n_heads: usize, positions: &[u32], rope: &RopeConfig) -> Result<()> {
        checks::rope(x.rows, x.cols, n_heads, positions, rope)?;
        let head_dim = x.cols / n_heads;
        let half = rope.dim / 2;
        let cols = x.cols;
        let table_row = 2 * half.max(1);
        self.rope_tables.with(positions, rope, |table| {
            self.install(|| {
                pool::for_each_chunk_mut(&mut x.data, cols, |r, row| {
                    // `half` pairs per row (none when RoPE covers no dimension and the table is empty).
                    let cos_sin = table.get(r * table_row..).unwrap_or_default();
                    for head in row.chunks_exact_mut(head_dim) {
                        for i in 0..half {
                            let (a, b) = match rope.style {
                                RopeStyle::Normal => (2 * i, 2 * i + 1),
                                RopeStyle::NeoX => (i, i + half),
                            };
                            let (cos, sin) = (cos_sin[2 * i], cos_sin[2 * i + 1]);
                            let (x0, x1) = (head[a], head[b]);
                            head[a] = x0 * cos - x1 * sin;
                            head[b] = x0 * sin + x1 * cos;
                        }
                    }
                })
            })
        });
        Ok(())
    }

    fn attention(
        &self,
        q: &CpuTensor,
        k: &CpuTensor,
        v: &CpuTensor,
        cache: &mut CpuCache,
        layer: usize,
        batch: &Batch,
        mask: Mask,
    ) -> Result<CpuTensor> {
        self.install(|| attention::attention(q, k, v, cache, layer, batch, mask, None))
    }

    fn attention_with_sinks(
        &self,
        q: &CpuTensor,
        k: &CpuTensor,
        v: &CpuTensor,
        cache: &mut CpuCache,
        layer: usize,
        batch: &Batch,
        mask: Mask,
        sinks: &CpuWeight,
    ) -> Result<CpuTensor> {
        let n_head = q.cols / cache.shape.head_dim.max(1);
        let values = sinks.vector.as_deref().unwrap_or_default();
        checks::vector_of("attention", &sinks.name, sinks.vector.is_some(), values.len(), n_head)?;
        let sinks = values;
        self.install(|| attention::attention(q, k, v, cache, layer, batch, mask, Some(sinks)))
    }

    fn add_bias(&self, x: &mut CpuTensor, bias: &CpuWeight) -> Result<()> {
        let b = bias.vector.as_deref().unwrap_or_default();
        checks::vector_of("add_bias", &bias.name, bias.vector.is_some(), b.len(), x.cols)?;
        x.data.chunks_exact_mut(x.cols).for_each(|row| row.iter_mut().zip(b).for_each(|(v, b)| *v += b));
        Ok(())
    }

    fn moe(
        &self,
        x: &CpuTensor,
        router_logits: &CpuTensor,
        experts: &MoeExperts<'_, CpuWeight>,
        params: &MoeParams,
    ) -> Result<CpuTensor> {
        self.install(|| moe::moe(self, x, router_logits, experts, params))
    }

    fn add(&self, x: &mut CpuTensor, y: &CpuTensor) -> Result<()> {
        checks::same_shape("add", (x.rows, x.cols), (y.rows, y.cols))?;
        let chunk = ROWS_PER_TASK * x.cols.max(1);
        self.install(|| {
            pool::for_each_chunk_mut(&mut x.data, chunk, |t, xs| {
                xs.iter_mut().zip(&y.data[t * chunk..]).for_each(|(a, b)| *a += b);
            })
        });
        Ok(())
    }

    fn swiglu(&self, gate: &CpuTensor, up: &CpuTensor) -> Result<CpuTensor> {
        checks::same_shape("swiglu", (gate.rows, gate.cols), (up.rows, up.cols))?;
        // The gated activation writes every value.
        let mut out = CpuTensor::for_output(gate.rows, gate.cols);
        self.install(|| gated::swiglu(&gate.data, &up.data, &mut out.data));
        Ok(out)
    }

    fn scale(&self, x: &mut CpuTensor, factor: f32) -> Result<()> {
        x.data.iter_mut().for_each(|v| *v *= factor);
        Ok(())
    }

    fn geglu(&self, gate: &CpuTensor, up: &CpuTensor) -> Result<CpuTensor> {
        checks::same_shape("geglu", (gate.rows, gate.cols), (up.rows, up.cols))?;
        let mut out = CpuTensor::for_output(gate.rows, gate.cols);
        self.install(|| gated::geglu(&gate.data, &up.data, &mut out.data));
        Ok(out)
    }

    fn logits(&self, x: &CpuTensor, head: &CpuWeight, rows: &[usize]) -> Result<Vec<f32>> {
        // The picked rows in a kept buffer: a warm decode step allocates nothing per layer.
        let mut picked = CpuTensor::for_output(rows.len(), x.cols);
        copy_rows("logits", x, rows, &mut picked.data)?;
        Ok(std::mem::take(&mut self.matmul_q(head, &picked)?.data))
    }

    fn read_rows(&self, x: &CpuTensor, rows: &[usize]) -> Result<Vec<f32>> {
        let mut out = vec![0.0; rows.len() * x.cols];
        copy_rows("read_rows", x, rows, &mut out)?;
        Ok(out)
    }
}

/// Copies rows `rows` of `x` into `out` (`rows.len() × x.cols`); a row past `x` is an operand
/// error of `op`.
fn copy_rows(op: &'static str, x: &CpuTensor, rows: &[usize], out: &mut [f32]) -> Result<()> {
    for (dst, &r) in out.chunks_exact_mut(x.cols.max(1)).zip(rows) {
        let src = x.data.get(r * x.cols..(r + 1) * x.cols);
        dst.copy_from_slice(src.ok_or_else(|| checks::operands(op, format!("no row {r} in {} rows", x.rows)))?);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Bytes(Vec<u8>);

    impl ByteSource for Bytes {
        fn bytes(&self) -> &[u8] {
            &self.0
        }
    }

    fn vector(name: &str, values: &[f32]) -> WeightSource {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let len = bytes.len();
        WeightSource {
            file: Arc::new(Bytes(bytes)),
            name: name.into(),
            dtype: DType::F32,
            shape: vec![values.len()],
            range: 0..len,
        }
    }

    #[test]
    fn rms_norm_heads_normalises_each_head_with_the_shared_weight() {
        let cpu = CpuBackend::new(Some(1)).unwrap();
        let w = cpu.weight(vector("q_norm", &[1.0, 2.0])).unwrap();
        // Two rows of two heads of two values.
        let mut x = CpuTensor { data: vec![3.0, 4.0, 1.0, 1.0, -6.0, 8.0, 0.0, 2.0], rows: 2, cols: 4 };
        cpu.rms_norm_heads(&mut x, 2, &w, 0.0).unwrap();
        // By hand: rms(3, 4) = √12.5, rms(1, 1) = 1, rms(-6, 8) = √50, rms(0, 2) = √2.
        let (a, b, c) = (12.5f32.sqrt(), 50f32.sqrt(), 2f32.sqrt());
        let want = [3.0 / a, 2.0 * 4.0 / a, 1.0, 2.0, -6.0 / b, 2.0 * 8.0 / b, 0.0, 2.0 * 2.0 / c];
        for (i, (got, want)) in x.data.iter().zip(want).enumerate() {
            assert!((got - want).abs() <= 1e-6 * want.abs().max(1.0), "value {i}: {got} vs {want}");
        }
    }

    /// A prefill's rows are normalised (and residuals added) in tasks on the pool: 70 rows on three
    /// threads, with a last partial task, equal each row alone bit for bit, and the norm is
    /// within a few ulp of an f64 reference.
    #[test]
    fn row_steps_on_the_pool_equal_each_row_alone() {
        let (rows, cols) = (70, 45);
        let weights: Vec<f32> = (0..cols).map(|i| 0.5 + (i % 7) as f32 / 4.0).collect();
        let data: Vec<f32> = (0..rows * cols).map(|i| ((i * 37 % 101) as f32 - 50.0) / 9.0).collect();
        let many = CpuBackend::new(Some(3)).unwrap();
        let one = CpuBackend::new(Some(1)).unwrap();
        let w = many.weight(vector("norm", &weights)).unwrap();
        let x = CpuTensor { data: data.clone(), rows, cols };
        let normed = many.rms_norm(&x, &w, 1e-5).unwrap();
        let mut summed = CpuTensor { data: data.clone(), rows, cols };
        many.add(&mut summed, &normed).unwrap();
        for r in 0..rows {
            let row = CpuTensor { data: data[r * cols..(r + 1) * cols].to_vec(), rows: 1, cols };
            let alone = one.rms_norm(&row, &w, 1e-5).unwrap();
            assert_eq!(alone.data, normed.data[r * cols..(r + 1) * cols], "row {r}");
            let mean: f64 = row.data.iter().map(|&a| f64::from(a) * f64::from(a)).sum::<f64>() / cols as f64;
            let scale = 1.0 / (mean + 1e-5).sqrt();
            for (i, &got) in alone.data.iter().enumerate() {
                let want = f64::from(row.data[i]) * scale * f64::from(weights[i]);
                assert!((f64::from(got) - want).abs() <= 4.0 * f64::from(f32::EPSILON) * want.abs(), "{r}/{i}");
                assert_eq!(summed.data[r * cols + i], row.data[i] + got, "add {r}/{i}");
            }
        }
    }

    #[test]
    fn rms_norm_heads_refuses_mismatched_operands() {
        let cpu = CpuBackend::new(Some(1)).unwrap();
        let w = cpu.weight(vector("k_norm", &[1.0, 1.0, 1.0])).unwrap();
        let mut x = CpuTensor::zeros(1, 8);
        let err = cpu.rms_norm_heads(&mut x, 2, &w, 1e-6).unwrap_err();
        assert_eq!(err.to_string(), "rms_norm_heads: k_norm is not a vector of 4 values");
        let err = cpu.rms_norm_heads(&mut x, 3, &w, 1e-6).unwrap_err();
        assert_eq!(err.to_string(), "rms_norm_heads: 8 columns do not split into 3 heads");
    }
}
