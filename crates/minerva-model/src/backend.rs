//! The backend interface: coarse ops over backend-owned tensor handles.
//!
//! An architecture graph (see `arch/`) calls only these ops, never touching elements itself, so
//! a GPU backend can record a whole forward step into one submission: nothing here reads a tensor
//! back except [`Backend::logits`], which returns the requested rows of logits to the host.
//!
//! Activations are 2-D: `rows × cols` f32, one row per token of the batch (the sequences of a
//! [`Batch`] concatenated). Weights are [`Backend::Weight`] handles made once from the file's
//! bytes in their stored (quantized) form.

use std::ops::Range;
use std::sync::Arc;

use minerva_core::DType;

use crate::error::{ModelError, Result};
use crate::kv_blocks::KV_BLOCK_SIZE;
use crate::rope::RopeConfig;

/// Bytes a weight handle may borrow for as long as it lives (a mapped GGUF file, or a buffer).
pub trait ByteSource: Send + Sync {
    /// The whole file.
    fn bytes(&self) -> &[u8];

    /// Lets the system drop the pages of `range` from memory, where the bytes are a file's map
    /// (they read the same afterwards): a backend that copied a tensor into its own layout calls
    /// it. The default does nothing.
    fn release(&self, range: Range<usize>) {
        let _ = range;
    }
}

impl<D: minerva_gguf::Backing + Send + Sync> ByteSource for minerva_gguf::Gguf<D> {
    fn bytes(&self) -> &[u8] {
        minerva_gguf::Gguf::bytes(self)
    }

    fn release(&self, range: Range<usize>) {
        minerva_gguf::Gguf::release(self, range);
    }
}

/// Where a weight tensor lives: a byte range of a shared file, with its dtype and shape.
#[derive(Clone)]
pub struct WeightSource {
    /// The file.
    pub file: Arc<dyn ByteSource>,
    /// The tensor's name (for messages).
    pub name: String,
    /// Element type as stored.
    pub dtype: DType,
    /// Numpy-order shape: `[rows, cols]` for a matrix, `[cols]` for a vector.
    pub shape: Vec<usize>,
    /// Absolute byte range within `file`.
    pub range: Range<usize>,
}

/// Where an MXFP4 matrix stored as Hugging Face and MLX store it lives: its nibbles (16 bytes per
/// 32 values, two values per byte, interleaved) and its E8M0 scales (a byte per 32 values) as two
/// byte ranges, possibly of two files (`minerva_quant::Matrix::Mxfp4Split`). Row `r` of the
/// weight is physical row `r · row_stride` from the ranges' starts: stride 2 picks one half of
/// GPT-OSS's interleaved gate/up rows.
#[derive(Clone)]
pub struct SplitMxfp4Source {
    /// The file holding the nibbles.
    pub nibbles: Arc<dyn ByteSource>,
    /// Byte range of the nibbles within `nibbles`, from the weight's first row.
    pub nibbles_range: Range<usize>,
    /// The file holding the scales.
    pub scales: Arc<dyn ByteSource>,
    /// Byte range of the scales within `scales`, from the weight's first row.
    pub scales_range: Range<usize>,
    /// Physical rows from one of the weight's rows to the next.
    pub row_stride: usize,
    /// The tensor's name (for messages).
    pub name: String,
    /// Numpy-order shape of the weight (its rows only).
    pub shape: Vec<usize>,
}

impl SplitMxfp4Source {
    /// The weight's values as GGML MXFP4 blocks (llama.cpp's conversion), in anonymous memory: what
    /// [`Backend::split_mxfp4_weight`] uploads on a backend that does not read this layout.
    pub fn to_ggml_blocks(&self) -> Result<WeightSource> {
        let bad = |message: String| ModelError::BadTensor { tensor: self.name.clone(), message };
        let cols = *self.shape.last().ok_or_else(|| bad("a split MXFP4 weight needs a shape".into()))?;
        let rows = self.shape[..self.shape.len() - 1].iter().try_fold(1usize, |a, &b| a.checked_mul(b));
        let rows = rows.ok_or_else(|| bad(format!("shape {:?} overflows", self.shape)))?;
        let nibbles = self.nibbles.bytes().get(self.nibbles_range.clone());
        let scales = self.scales.bytes().get(self.scales_range.clone());
        let (Some(nibbles), Some(scales)) = (nibbles, scales) else {
            return Err(bad("byte range outside the file".into()));
        };
        let matrix = minerva_quant::Matrix::Mxfp4Split { nibbles, scales, row_stride: self.row_stride };
        let row_bytes =
            DType::MXFP4.row_bytes(cols).ok_or_else(|| bad(format!("{cols} columns are not whole blocks")))?;
        let len = rows.checked_mul(row_bytes).ok_or_else(|| bad(format!("shape {:?} overflows", self.shape)))?;
        let mut out = crate::owned::OwnedBytes::zeroed(len);
        matrix.to_ggml_blocks(rows, cols, out.as_mut())?;
        Ok(WeightSource {
            file: Arc::new(out),
            name: self.name.clone(),
            dtype: DType::MXFP4,
            shape: self.shape.clone(),
            range: 0..len,
        })
    }
}

/// Where an MLX affine matrix (`mode="affine"`: mlx-lm's `convert -q`) lives: its codes, scales
/// and biases as byte ranges, possibly of different files, and its parameters
/// (`minerva_quant::Matrix::MlxAffine`).
#[derive(Clone)]
pub struct MlxAffineSource {
    /// The file holding the codes (the u32 words' little-endian bytes).
    pub weight: Arc<dyn ByteSource>,
    /// Byte range of the codes within `weight`.
    pub weight_range: Range<usize>,
    /// The file holding the scales.
    pub scales: Arc<dyn ByteSource>,
    /// Byte range of the scales within `scales`.
    pub scales_range: Range<usize>,
    /// The file holding the biases.
    pub biases: Arc<dyn ByteSource>,
    /// Byte range of the biases within `biases`.
    pub biases_range: Range<usize>,
    /// Bits, group size and the scales' dtype.
    pub params: minerva_quant::MlxAffine,
    /// The tensor's name (for messages).
    pub name: String,
    /// Numpy-order shape of the values.
    pub shape: Vec<usize>,
}

/// The parameters of a checkpoint's MLX affine tensor (`minerva_safetensors::Encoding::MlxAffine`'s
/// `bits`, `group_size` and `scales`): what the loaders and `convert` multiply or dequantize it
/// with.
pub(crate) fn mlx_affine_params(
    bits: u32,
    group_size: u32,
    scales: &minerva_core::TensorView<'_>,
) -> minerva_quant::MlxAffine {
    minerva_quant::MlxAffine { bits, group_size: group_size as usize, scale_dtype: scales.dtype }
}

impl MlxAffineSource {
    /// The three components' bytes, or the error naming the one whose range is outside its file.
    pub fn parts(&self) -> Result<(&[u8], &[u8], &[u8])> {
        Ok((
            self.part(&self.weight, &self.weight_range, "codes")?,
            self.part(&self.scales, &self.scales_range, "scales")?,
            self.part(&self.biases, &self.biases_range, "biases")?,
        ))
    }

    fn part<'a>(&self, file: &'a Arc<dyn ByteSource>, range: &Range<usize>, what: &str) -> Result<&'a [u8]> {
        file.bytes().get(range.clone()).ok_or_else(|| ModelError::BadTensor {
            tensor: self.name.clone(),
            message: format!("the {what}' byte range is outside the file"),
        })
    }

    /// The matrix as minerva-quant reads it, its `(rows, cols)` checked against the components.
    pub fn matrix(&self) -> Result<(minerva_quant::Matrix<'_>, usize, usize)> {
        let bad = |message: String| ModelError::BadTensor { tensor: self.name.clone(), message };
        let cols = *self.shape.last().ok_or_else(|| bad("an MLX affine weight needs a shape".into()))?;
        let rows = self.shape[..self.shape.len() - 1].iter().try_fold(1usize, |a, &b| a.checked_mul(b));
        let rows = rows.ok_or_else(|| bad(format!("shape {:?} overflows", self.shape)))?;
        let (weight, scales, biases) = self.parts()?;
        let matrix = minerva_quant::Matrix::MlxAffine { weight, scales, biases, params: self.params };
        matrix.check_shape(rows, cols).map_err(|e| bad(e.to_string()))?;
        Ok((matrix, rows, cols))
    }

    /// Rows `first..first + count` as a source of their own (a block of a fused matrix).
    pub fn rows(&self, first: usize, count: usize) -> Result<MlxAffineSource> {
        let (matrix, _, cols) = self.matrix()?;
        // Checks the rows are inside the matrix (so the offsets below cannot overflow).
        matrix.rows(first, count, cols).map_err(|e| ModelError::BadTensor {
            tensor: self.name.clone(),
            message: format!("rows {first}..{}: {e}", first.saturating_add(count)),
        })?;
        // `matrix()` has checked the parameters against `cols`.
        let row = self
            .params
            .row_bytes(cols)
            .map_err(|e| ModelError::BadTensor { tensor: self.name.clone(), message: e.to_string() })?;
        let (code_row, scale_row) = (row.codes, row.scales);
        let offset = |range: &Range<usize>, per_row: usize| {
            let start = range.start + first * per_row;
            start..start + count * per_row
        };
        let mut shape = self.shape.clone();
        shape.splice(..shape.len() - 1, [count]);
        Ok(MlxAffineSource {
            weight_range: offset(&self.weight_range, code_row),
            scales_range: offset(&self.scales_range, scale_row),
            biases_range: offset(&self.biases_range, scale_row),
            name: format!("{}[rows {first}..{}]", self.name, first + count),
            shape,
            ..self.clone()
        })
    }

    /// The matrix as blocks of its block dtype (`minerva_quant::MlxAffine::block_dtype`: 8- or
    /// 4-bit codes with bf16 scales), in anonymous memory, lossless: what a backend whose kernels
    /// read whole blocks uploads. `None` for a layout without one.
    pub fn to_blocks(&self) -> Result<Option<WeightSource>> {
        let Some(dtype) = self.params.block_dtype() else { return Ok(None) };
        let (_, rows, cols) = self.matrix()?;
        let bad = |message: String| ModelError::BadTensor { tensor: self.name.clone(), message };
        let row_bytes = dtype.row_bytes(cols).ok_or_else(|| bad(format!("{cols} columns are not whole blocks")))?;
        let len = rows.checked_mul(row_bytes).ok_or_else(|| bad(format!("shape {:?} overflows", self.shape)))?;
        let mut out = crate::owned::OwnedBytes::zeroed(len);
        let (weight, scales, biases) = self.parts()?;
        self.params.to_blocks(weight, scales, biases, out.as_mut())?;
        let (name, shape) = (self.name.clone(), self.shape.clone());
        Ok(Some(WeightSource { file: Arc::new(out), name, dtype, shape, range: 0..len }))
    }

    /// The values as `mx.dequantize` computes them, in the scales' float type, in anonymous
    /// memory (twice the bytes of 8-bit codes): what [`Backend::mlx_affine_weight`] uploads on a
    /// backend without a kernel for the layout.
    pub fn to_values(&self) -> Result<WeightSource> {
        let (matrix, rows, cols) = self.matrix()?;
        let dtype = self.params.scale_dtype;
        let too_large = || ModelError::BadTensor { tensor: self.name.clone(), message: "too large".into() };
        let len = rows.checked_mul(cols).and_then(|n| n.checked_mul(dtype.block_bytes())).ok_or_else(too_large)?;
        let mut out = crate::owned::OwnedBytes::zeroed(len);
        matrix.to_ggml_blocks(rows, cols, out.as_mut())?;
        Ok(WeightSource {
            file: Arc::new(out),
            name: self.name.clone(),
            dtype,
            shape: self.shape.clone(),
            range: 0..len,
        })
    }
}

/// One sequence's rows in a batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeqSpan {
    /// Its rows of the batch's activations.
    pub rows: Range<usize>,
    /// Position of its first row.
    pub start_pos: usize,
    /// Its KV-cache slot.
    pub slot: usize,
}

/// The layout of a forward step: which rows belong to which sequence, at which positions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Batch {
    /// The sequences, in row order.
    pub seqs: Vec<SeqSpan>,
    /// Position of every row.
    pub positions: Vec<u32>,
}

impl Batch {
    /// Total rows (tokens).
    pub fn n_tokens(&self) -> usize {
        self.positions.len()
    }
}

/// Which cached positions a query may attend to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mask {
    /// Every position up to and including its own.
    Causal,
    /// The last `n` positions up to and including its own (Mistral).
    SlidingWindow(usize),
}

/// The most candidates [`DeviceSampling::top_k`] may keep: a device sampler holds them in one
/// workgroup's memory.
pub const MAX_DEVICE_TOP_K: usize = 256;

/// One row's sampling as a device runs it, the chain of minerva-generate's `Sampler`: logit bias,
/// then repetition / frequency / presence penalties, then top-k (ties: lower id first), top-p (over
/// probabilities at temperature 1), min-p, temperature, softmax, and the first candidate whose
/// running probability exceeds the draw `u`.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceSampling {
    /// Temperature (> 0).
    pub temperature: f32,
    /// Candidates kept by top-k, 1..=[`MAX_DEVICE_TOP_K`].
    pub top_k: usize,
    /// Top-p (1: off).
    pub top_p: f32,
    /// Min-p (0: off).
    pub min_p: f32,
    /// Repetition penalty (1: off).
    pub repeat_penalty: f32,
    /// Frequency penalty (0: off).
    pub frequency_penalty: f32,
    /// Presence penalty (0: off).
    pub presence_penalty: f32,
    /// The tokens the bias or the penalties touch, each once: (token, occurrences in the penalty
    /// window, bias to add).
    pub adjust: Vec<(u32, u32, f32)>,
    /// The uniform draw in [0, 1).
    pub u: f64,
}

/// The shape of a KV cache: a pool of `blocks` blocks of `block_size` positions, each holding
/// `n_layer` layers × `n_head_kv` heads × `head_dim` values of keys and of values, read by
/// `slots` sequences of up to `capacity` positions through their block tables (see
/// [`crate::kv_blocks`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheShape {
    /// Independent sequences.
    pub slots: usize,
    /// Layers.
    pub n_layer: usize,
    /// Key/value heads.
    pub n_head_kv: usize,
    /// Dimensions per head.
    pub head_dim: usize,
    /// Positions per sequence, at most.
    pub capacity: usize,
    /// Positions per block.
    pub block_size: usize,
    /// Blocks in the pool.
    pub blocks: usize,
}

impl CacheShape {
    /// A cache in which every slot has blocks of [`KV_BLOCK_SIZE`] for all `capacity` positions
    /// from the start (the tables of [`BlockTables::contiguous`](crate::kv_blocks::BlockTables)).
    pub fn contiguous(slots: usize, n_layer: usize, n_head_kv: usize, head_dim: usize, capacity: usize) -> CacheShape {
        let blocks = slots.saturating_mul(capacity.div_ceil(KV_BLOCK_SIZE));
        CacheShape { slots, n_layer, n_head_kv, head_dim, capacity, block_size: KV_BLOCK_SIZE, blocks }
    }

    /// Blocks a slot's table holds at most: enough for `capacity` positions.
    pub fn blocks_per_slot(&self) -> Result<usize> {
        if self.block_size == 0 {
            return Err(ModelError::Resource { message: "a KV cache needs blocks of at least one position".into() });
        }
        Ok(self.capacity.div_ceil(self.block_size))
    }

    /// Values of keys (or of values) in the pool, or `None` if the count overflows.
    pub fn pool_values(&self) -> Option<usize> {
        [self.n_layer, self.n_head_kv, self.block_size, self.head_dim]
            .iter()
            .try_fold(self.blocks, |a, &b| a.checked_mul(b))
    }
}

/// One layer's experts for [`Backend::moe`]: stacked `[n_expert, rows, cols]` matrices in their
/// stored dtype (MXFP4 for GPT-OSS) and `[n_expert, rows]` biases. Gate and up are separate
/// (de-interleaved) matrices, as llama.cpp stores them.
pub struct MoeExperts<'a, W> {
    /// `[n_expert, n_ff, n_embd]`.
    pub gate: &'a W,
    /// `[n_expert, n_ff]`.
    pub gate_bias: &'a W,
    /// `[n_expert, n_ff, n_embd]`.
    pub up: &'a W,
    /// `[n_expert, n_ff]`.
    pub up_bias: &'a W,
    /// `[n_expert, n_embd, n_ff]`.
    pub down: &'a W,
    /// `[n_expert, n_embd]`.
    pub down_bias: &'a W,
}

/// `gelu_tanh(g)`: GELU with its tanh approximation, the one definition both backends follow.
pub fn gelu_tanh(g: f32) -> f32 {
    // √(2/π)
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    0.5 * g * (1.0 + (SQRT_2_OVER_PI * (g + 0.044_715 * g * g * g)).tanh())
}

/// Routing and activation parameters of a GPT-OSS mixture-of-experts block.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MoeParams {
    /// Experts in the layer.
    pub n_expert: usize,
    /// Experts each token is routed to (top-k).
    pub n_expert_used: usize,
    /// SwiGLU slope: `gate · σ(alpha · gate)` (1.702).
    pub alpha: f32,
    /// Clamp: gate to `(-∞, limit]`, up to `[-limit, limit]` (7.0).
    pub limit: f32,
}

/// The ops an architecture graph is written in. Every op a registered architecture uses is
/// required, so a backend that lacks one does not compile rather than failing in the middle of a
/// model; the one optional op, [`Backend::sample`], comes with its capability
/// ([`Backend::samples_on_device`]), which callers ask first. A backend owns what it uses (no
/// borrowed state: `'static`), so its models can be shared, as a server shares its draft model.
pub trait Backend: Send + Sync + 'static {
    /// An activation tensor (`rows × cols` f32).
    type Tensor;
    /// A weight, kept in its stored dtype.
    type Weight;
    /// A KV cache for all layers of [`CacheShape::slots`] sequences.
    type Cache;

    /// Makes a weight handle from its bytes in the file.
    fn weight(&self, source: WeightSource) -> Result<Self::Weight>;
    /// Makes a weight handle from an MXFP4 matrix in Hugging Face's and MLX's split layout. By
    /// default it is converted to GGML blocks ([`SplitMxfp4Source::to_ggml_blocks`]) for
    /// [`Backend::weight`]; a backend whose kernels read the layout where it lies keeps it.
    fn split_mxfp4_weight(&self, source: SplitMxfp4Source) -> Result<Self::Weight> {
        self.weight(source.to_ggml_blocks()?)
    }
    /// Makes a weight handle from an MLX affine matrix. By default its values are dequantized as
    /// `mx.dequantize` computes them ([`MlxAffineSource::to_values`]) for [`Backend::weight`]; a
    /// backend whose kernels read the layout where it lies keeps it.
    fn mlx_affine_weight(&self, source: MlxAffineSource) -> Result<Self::Weight> {
        self.weight(source.to_values()?)
    }
    /// A preallocated, zeroed KV cache.
    fn new_cache(&self, shape: CacheShape) -> Result<Self::Cache>;

    /// Rows `tokens` of the embedding table `table` (`vocab × n_embd`): `tokens.len() × n_embd`.
    fn embed(&self, table: &Self::Weight, tokens: &[u32]) -> Result<Self::Tensor>;
    /// Row-wise `x / rms(x) * w`.
    fn rms_norm(&self, x: &Self::Tensor, w: &Self::Weight, eps: f32) -> Result<Self::Tensor>;
    /// `x · wᵀ` for a weight of `out × in`: `rows × out`.
    fn matmul_q(&self, w: &Self::Weight, x: &Self::Tensor) -> Result<Self::Tensor>;
    /// [`Backend::matmul_q`] of each of `ws` with the same `x`, in order (a layer's query, key
    /// and value projections; its gate and up projections). The CPU quantizes `x` once for all.
    fn matmul_q_each<const N: usize>(&self, ws: [&Self::Weight; N], x: &Self::Tensor) -> Result<[Self::Tensor; N]> {
        matmul_q_one_by_one(self, ws, x)
    }
    /// `x · Wᵀ + b`: [`Backend::matmul_q`], then [`Backend::add_bias`] when a bias is given. A
    /// backend may add the bias as the product is stored (the wgpu backend does, one dispatch
    /// fewer), with the same result.
    fn matmul_q_bias(&self, w: &Self::Weight, bias: Option<&Self::Weight>, x: &Self::Tensor) -> Result<Self::Tensor> {
        let mut y = self.matmul_q(w, x)?;
        if let Some(bias) = bias {
            self.add_bias(&mut y, bias)?;
        }
        Ok(y)
    }
    /// `x · Wᵀ + b` for each weight and its optional bias: [`Backend::matmul_q_each`], then
    /// [`Backend::add_bias`] where a bias is given. A backend may add each bias as its product is
    /// stored (the wgpu backend does, one dispatch fewer per bias), with the same result.
    fn matmul_q_each_bias<const N: usize>(
        &self,
        ws: [&Self::Weight; N],
        biases: [Option<&Self::Weight>; N],
        x: &Self::Tensor,
    ) -> Result<[Self::Tensor; N]> {
        let mut ys = self.matmul_q_each(ws, x)?;
        for (y, bias) in ys.iter_mut().zip(biases) {
            if let Some(bias) = bias {
                self.add_bias(y, bias)?;
            }
        }
        Ok(ys)
    }
    /// Rotates each of the `n_heads` heads of every row by its position in place.
    fn rope(&self, x: &mut Self::Tensor, n_heads: usize, positions: &[u32], rope: &RopeConfig) -> Result<()>;
    /// Writes `k`, `v` (`rows × n_head_kv·head_dim`) into `cache` at layer `layer` (each row at
    /// its sequence's slot and position), then attends each query row (`n_head` heads) to its
    /// sequence's cached positions allowed by `mask`, scaled by `1/√head_dim`. Returns
    /// `rows × n_head·head_dim`.
    #[allow(clippy::too_many_arguments)]
    fn attention(
        &self,
        q: &Self::Tensor,
        k: &Self::Tensor,
        v: &Self::Tensor,
        cache: &mut Self::Cache,
        layer: usize,
        batch: &Batch,
        mask: Mask,
    ) -> Result<Self::Tensor>;
    /// `x += y`.
    fn add(&self, x: &mut Self::Tensor, y: &Self::Tensor) -> Result<()>;
    /// `silu(gate) * up`.
    fn swiglu(&self, gate: &Self::Tensor, up: &Self::Tensor) -> Result<Self::Tensor>;
    /// The logits `x[rows] · headᵀ`, read back to the host row-major (`rows.len() × vocab`).
    fn logits(&self, x: &Self::Tensor, head: &Self::Weight, rows: &[usize]) -> Result<Vec<f32>>;
    /// The rows `x[rows]` themselves, read back to the host row-major (embeddings: the final
    /// hidden states).
    fn read_rows(&self, x: &Self::Tensor, rows: &[usize]) -> Result<Vec<f32>>;

    /// Matrices this backend has copied into another layout for its kernels so far (the CPU's
    /// repacking), and their bytes; the default: none.
    fn repacked(&self) -> (usize, usize) {
        (0, 0)
    }

    /// Matrices this backend left in their own layout because copying them would have gone past
    /// its memory budget (the CPU's `Repack::Auto`), and the bytes those copies would have taken;
    /// the default: none.
    fn repack_declined(&self) -> (usize, usize) {
        (0, 0)
    }

    /// Whether this backend makes something of a weight at its first product (the CPU's
    /// repacked copies): [`crate::Model`] then runs one token through the model when it is
    /// loaded, so that the copies are made while loading, not in the first request's time. The
    /// default: no.
    fn makes_copies_at_first_product(&self) -> bool {
        false
    }

    /// Called once by [`crate::Model`] when its weights are loaded, with its architecture's row:
    /// a backend may choose kernels by it before the first forward pass (the CPU backend's
    /// `Repack::Auto` repacks the 32-value formats only where `int8_activations` says 8-bit
    /// activations hold). The default does nothing.
    fn prepare_for(&self, arch: &crate::arch::ArchSpec) {
        let _ = arch;
    }

    /// Bytes that `values` cached keys or values take in the caches [`Backend::new_cache`] makes
    /// (4 each in f32, 2 in f16, 34 per 32 in Q8_0): what a KV block costs.
    fn kv_bytes(&self, values: usize) -> usize {
        values.saturating_mul(4)
    }

    /// Makes `blocks` the block table of cache slot `slot`: its position `p` is then read and
    /// written at block `blocks[p / block_size]` (see [`crate::kv_blocks`]). Several slots may
    /// name the same block; the caller sees that no two write to it.
    fn set_blocks(&self, cache: &mut Self::Cache, slot: usize, blocks: &[u32]) -> Result<()>;

    /// Copies whole blocks of the pool, every layer's keys and values: for each `(from, to)`,
    /// block `to` becomes a copy of block `from` (a shared block copied before one of its
    /// sequences writes to it).
    fn copy_blocks(&self, cache: &mut Self::Cache, pairs: &[(u32, u32)]) -> Result<()>;

    /// Greedy decoding: for each row `r` of `rows`, the index of the largest logit of
    /// `x[r] · headᵀ` (the first on ties). The default computes [`Backend::logits`] and takes the
    /// argmax on the host; a GPU backend reads back only the ids.
    fn greedy(&self, x: &Self::Tensor, head: &Self::Weight, rows: &[usize]) -> Result<Vec<u32>> {
        let logits = self.logits(x, head, rows)?;
        let vocab = logits.len() / rows.len().max(1);
        Ok(logits.chunks_exact(vocab.max(1)).map(argmax).collect())
    }

    /// Whether [`Backend::sample`] runs here (the default: no; the caller then samples the
    /// [`Backend::logits`] on the host with the same draw).
    fn samples_on_device(&self) -> bool {
        false
    }

    /// Sampling on the device: for each row `r` of `rows`, a token drawn from the logits
    /// `x[r] · headᵀ` as its [`DeviceSampling`] describes, reading back one id per row instead of
    /// the vocabulary's logits.
    fn sample(
        &self,
        x: &Self::Tensor,
        head: &Self::Weight,
        rows: &[usize],
        params: &[DeviceSampling],
    ) -> Result<Vec<u32>> {
        let _ = (x, head, rows, params);
        Err(ModelError::UnsupportedOp { op: "sample" })
    }

    /// RMS normalisation of each head in place (QK-norm: Qwen 3, Gemma 3): every row of `x` is
    /// `n_heads` heads of `head_dim = cols / n_heads` values, and each head becomes
    /// `head / rms(head) * w` with the one weight `w` (a vector of `head_dim`) shared by all heads.
    fn rms_norm_heads(&self, x: &mut Self::Tensor, n_heads: usize, w: &Self::Weight, eps: f32) -> Result<()>;

    /// `x[r] += bias` for every row (`bias`: a vector of `x`'s width).
    fn add_bias(&self, x: &mut Self::Tensor, bias: &Self::Weight) -> Result<()>;

    /// `x *= factor`, every element (Gemma scales its embeddings by √n_embd).
    fn scale(&self, x: &mut Self::Tensor, factor: f32) -> Result<()>;

    /// `gelu_tanh(gate) * up` (GeGLU, Gemma), with the tanh approximation of GELU:
    /// `0.5·g·(1 + tanh(√(2/π)·(g + 0.044715·g³)))`, as PyTorch's `gelu(approximate="tanh")`.
    fn geglu(&self, gate: &Self::Tensor, up: &Self::Tensor) -> Result<Self::Tensor>;

    /// [`Backend::attention`] with a learned per-head *sink* logit `sinks[h]` (GPT-OSS): it joins
    /// every softmax of head `h` as one more score and takes its share of the weight, attending to
    /// nothing. `sinks` is a vector of `n_head` values.
    #[allow(clippy::too_many_arguments)]
    fn attention_with_sinks(
        &self,
        q: &Self::Tensor,
        k: &Self::Tensor,
        v: &Self::Tensor,
        cache: &mut Self::Cache,
        layer: usize,
        batch: &Batch,
        mask: Mask,
        sinks: &Self::Weight,
    ) -> Result<Self::Tensor>;

    /// GPT-OSS mixture of experts. For each row of `x` (`rows × n_embd`): the top
    /// `n_expert_used` of its `router_logits` (`rows × n_expert`) pick experts, weighted by the
    /// softmax over those k logits; each picked expert computes
    /// `down · swiglu_oai(gate·x + b_gate, up·x + b_up) + b_down`, with
    /// `swiglu_oai(g, u) = min(g, limit) · σ(alpha · min(g, limit)) · (clamp(u, ±limit) + 1)`,
    /// and the row's output is the weighted sum. Only the picked experts' weights are read.
    fn moe(
        &self,
        x: &Self::Tensor,
        router_logits: &Self::Tensor,
        experts: &MoeExperts<'_, Self::Weight>,
        params: &MoeParams,
    ) -> Result<Self::Tensor>;
}

/// The index of the largest value: the first on ties (as `torch.argmax`), and NaN never wins (a
/// row of NaN gives 0). The one argmax of the host side: greedy decoding, the sampler, `bench`.
///
/// Two passes the compiler vectorizes, the largest value then where it first is, rather than one
/// compare-and-branch per value: a 262 144-token vocabulary's (Gemma 3) serial argmax was 3 % of
/// a two-thread decode step with the other thread idle.
pub fn argmax(row: &[f32]) -> u32 {
    /// Values per step: lanes the compiler keeps in vectors.
    const LANES: usize = 16;
    let (chunks, tail) = row.as_chunks::<LANES>();
    // `f32::max` ignores NaN; the lanes' maxima meet at the end.
    let mut lanes = [f32::NAN; LANES];
    for chunk in chunks {
        for (lane, &v) in lanes.iter_mut().zip(chunk) {
            *lane = lane.max(v);
        }
    }
    let largest = lanes.iter().chain(tail).fold(f32::NAN, |m, &v| m.max(v));
    if largest.is_nan() {
        return 0; // Empty, or NaN throughout.
    }
    // The first value equal to it (`+0 == -0`: the first zero of either sign, as one pass of
    // `>` from the first value would keep), found a chunk at a time.
    let first_chunk = chunks.iter().position(|chunk| chunk.iter().fold(false, |hit, &v| hit | (v == largest)));
    let start = first_chunk.map_or(chunks.len() * LANES, |c| c * LANES);
    let offset = row[start..].iter().position(|&v| v == largest).expect("the largest value is in the row");
    (start + offset) as u32
}

/// [`argmax`] one value at a time: its definition, against which it is tested.
#[cfg(test)]
pub(crate) fn argmax_by_one(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] || row[best].is_nan() && !v.is_nan() {
            best = i;
        }
    }
    best as u32
}

/// [`Backend::matmul_q`] of each of `ws` in turn: [`Backend::matmul_q_each`] where a backend
/// shares nothing between the products.
pub(crate) fn matmul_q_one_by_one<B: Backend + ?Sized, const N: usize>(
    backend: &B,
    ws: [&B::Weight; N],
    x: &B::Tensor,
) -> Result<[B::Tensor; N]> {
    let mut out = Vec::with_capacity(N);
    for w in ws {
        out.push(backend.matmul_q(w, x)?);
    }
    Ok(out.try_into().unwrap_or_else(|_| unreachable!("one product per weight")))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::{argmax, argmax_by_one};

    /// Values drawn from a few, so that ties, NaN, infinities and zeros of both signs meet.
    fn value() -> impl Strategy<Value = f32> {
        prop_oneof![
            4 => prop::sample::select(vec![1.0f32, 2.0, -3.0, 0.0, -0.0, f32::NAN, f32::INFINITY, f32::NEG_INFINITY, f32::MAX]),
            1 => any::<f32>(),
        ]
    }

    proptest! {
        #[test]
        fn argmax_is_the_first_largest_as_one_value_at_a_time(row in prop::collection::vec(value(), 0..80)) {
            prop_assert_eq!(argmax(&row), argmax_by_one(&row), "{:?}", row);
        }
    }

    #[test]
    fn argmax_finds_the_first_largest_in_a_large_vocabulary() {
        let mut row: Vec<f32> = (0..262_144).map(|i| ((i * 7919) % 1000) as f32 / 100.0).collect();
        row[200_003] = 12.5;
        row[250_000] = 12.5;
        row[17] = f32::NAN;
        assert_eq!(argmax(&row), 200_003);
        assert_eq!(argmax(&row), argmax_by_one(&row));
        assert_eq!(argmax(&[f32::NAN; 40]), 0);
        assert_eq!(argmax(&[]), 0);
    }
}
