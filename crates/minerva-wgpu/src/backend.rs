//! [`WgpuBackend`]: minerva-model's [`Backend`] on a wgpu device.
//!
//! Every op records its dispatches into one pending command encoder and returns at once; the
//! step is submitted as one command buffer when something is read back ([`Backend::logits`],
//! [`Backend::greedy`], [`WgpuBackend::download`]).

use std::sync::{Mutex, PoisonError};

use minerva_core::DType;

use minerva_model::checks;
use minerva_model::kv_blocks::BlockTables;
use minerva_model::{
    Backend, Batch, CacheShape, DeviceSampling, MAX_DEVICE_TOP_K, Mask, MlxAffineSource, ModelError, MoeExperts,
    MoeParams, Result, RopeConfig, RopeStyle, WeightSource,
};

use crate::device::{self, DeviceInfo};
use crate::error::WgpuError;
use crate::gpu::{Gpu, RecordStats, StepTable};
use crate::kernels::attention::{AttentionShape, Paging};
use crate::kernels::tile::{TilePlan, TileShape};
use crate::kernels::{self, KvElem, rope::RopeShape};
use crate::profile::KernelTime;
use crate::tables::StepTables;
use crate::tensor::{Deferred, DeferredInput, WgpuTensor};
use crate::weight::{self, UploadProgress, WgpuWeight};

/// How to open the backend.
#[derive(Clone, Debug)]
pub struct WgpuOptions {
    /// Pick the first adapter whose name contains this (case-insensitive); default: the
    /// `MINERVA_ADAPTER` environment variable, else the most capable kind (discrete GPU first).
    pub adapter: Option<String>,
    /// Use at most this many bytes per storage binding (default: the device's limit). Tests
    /// lower it to exercise weights split across bindings.
    pub max_binding: Option<u64>,
    /// Keys per attention workgroup (flash-decoding split length); 0 (the default) picks by
    /// device: 64 on a GPU, so that a decode step's few (head, query) pairs still fill its many
    /// compute units, 256 on a CPU adapter (lavapipe), where each workgroup has a fixed cost.
    pub attention_split: usize,
    /// Use subgroup operations where the device offers them (`false`: the workgroup-memory
    /// fallbacks everywhere, as on a device without subgroups).
    pub subgroups: bool,
    /// Matrix products of fewer activation rows than `tiled_from` (decode, small batches) read
    /// whole blocks per thread where the columns are a multiple of 32 (`false`: the
    /// 8-values-per-load kernels, for comparisons).
    pub block_decode: bool,
    /// Matrix products of at least this many activation rows (prefill, batched decode, the
    /// tokens of an expert matmul) run on shared-memory tiles where the columns are a multiple
    /// of 32 and the adapter's workgroup memory holds a tile; 0: never (tiles of 8 rows, for
    /// comparisons).
    pub tiled_from: usize,
    /// The tiles' shape: `None` (the default) picks per product from the shapes the adapter's
    /// workgroup memory holds — the largest that still makes enough workgroups to fill the device
    /// (docs/wgpu.md); `Some(shape)` runs every tiled product on it (an error at
    /// [`WgpuBackend::new`] if the adapter cannot hold it; an expert product whose kernel needs
    /// more than the adapter offers runs untiled).
    pub tile: Option<TileShape>,
    /// Submit a step in parts of this many dispatches, so the GPU runs each part while the host
    /// records the next; `Some(0)` submits whole steps (at the read-back); `None` (the default)
    /// picks by device: 128 on a GPU, whole steps on a CPU adapter, which shares the host's cores.
    pub submit_every: Option<usize>,
    /// Called with the byte count of every piece of weight data written to the GPU (a progress
    /// bar while a model uploads).
    pub on_upload: Option<UploadProgress>,
    /// The KV cache's element type: `F16` (the default: half the memory and the bandwidth of
    /// attention, keys and values rounded to f16 as llama.cpp's default cache does) or `F32`
    /// (exact, for comparisons with the CPU's f32 reference).
    pub kv_dtype: DType,
    /// Draw sampled tokens on the GPU (`Backend::sample`: one id read back per sequence); `false`
    /// reads back the logits for the host sampler instead (for comparisons).
    pub device_sampling: bool,
    /// Open the device with timestamp queries where the adapter offers them, so that
    /// [`WgpuBackend::set_profiling`] can time every kernel.
    pub profile: bool,
    /// Fold work into the kernel that consumes its result: RMS norms and SwiGLU / GeGLU into the
    /// decode matrix products that read them, RoPE into the KV store, biases into the products
    /// (`Some(true)`), or run each op as a kernel of its own (`Some(false)`). Results are the same
    /// bit for bit. `None` (the default) picks by device: everything on a GPU, where a small
    /// kernel's dispatch costs more than the consumers' extra work; on a CPU adapter (lavapipe),
    /// whose workgroup barriers are costly, only the fusions that repeat no work (RoPE, biases)
    /// (docs/wgpu.md, "Fused kernels").
    pub fuse: Option<bool>,
}

impl Default for WgpuOptions {
    fn default() -> Self {
        WgpuOptions {
            adapter: std::env::var("MINERVA_ADAPTER").ok().filter(|s| !s.is_empty()),
            max_binding: None,
            attention_split: 0,
            subgroups: true,
            block_decode: true,
            tiled_from: DEFAULT_TILED_FROM,
            tile: None,
            submit_every: None,
            on_upload: None,
            kv_dtype: DType::F16,
            device_sampling: true,
            profile: false,
            fuse: None,
        }
    }
}

/// A paged KV cache on the GPU: per layer one key and one value buffer laid out
/// `[kv_head][block][position in block][head_dim]`, f16 or f32 ([`WgpuOptions::kv_dtype`]),
/// allocated (zeroed) once, and every slot's block table (see `minerva_model::kv_blocks`), kept
/// on the host and in a buffer the kernels read.
pub struct WgpuCache {
    shape: CacheShape,
    elem: KvElem,
    k: Vec<wgpu::Buffer>,
    v: Vec<wgpu::Buffer>,
    tables: BlockTables,
    table_buffer: wgpu::Buffer,
}

impl WgpuCache {
    /// The cache's shape.
    pub fn shape(&self) -> CacheShape {
        self.shape
    }

    /// The element type of the cached keys and values (`F16` or `F32`).
    pub fn dtype(&self) -> DType {
        match self.elem {
            KvElem::F32 => DType::F32,
            KvElem::F16 => DType::F16,
        }
    }

    fn paging(&self) -> Paging {
        Paging { block_size: self.shape.block_size, per_slot: self.tables.per_slot(), blocks: self.shape.blocks }
    }
}

/// The wgpu backend.
pub struct WgpuBackend {
    gpu: Gpu,
    /// Bytes per weight chunk ([`WgpuOptions::max_binding`], at most the device's limit).
    max_binding: u64,
    attention_split: usize,
    /// Which matrix kernels to record; its `subgroups`: whether kernels use subgroup shuffles
    /// (offered, wanted, and subgroups of at least 8).
    matmul: kernels::MatmulPlan,
    tables: Mutex<StepTables>,
    /// Bound in place of attention sinks when a model has none.
    no_sinks: wgpu::Buffer,
    on_upload: Option<UploadProgress>,
    kv: KvElem,
    device_sampling: bool,
    /// The step's token ids, for `embed`.
    token_ids: StepTable,
    /// [`WgpuOptions::fuse`]: norms and gated products into the products that read them.
    fuse_inputs: bool,
    /// [`WgpuOptions::fuse`]: fusions that repeat no work — RoPE into the KV store, biases into
    /// the products' stores.
    fuse_free: bool,
    /// Device sampling's per-row settings and penalty entries.
    sampling: kernels::sample::SamplingTables,
}

/// [`WgpuOptions::tiled_from`]'s default: below it the block kernels (each weight dequantized
/// once for up to 8 activation rows, many workgroups), from it the tiles (each weight dequantized
/// once per 64 or 128 rows, fewer workgroups). Measured on an H200 with the 64 × 64 tiles
/// (docs/wgpu.md).
pub const DEFAULT_TILED_FROM: usize = 32;

/// Dispatches per submitted part of a step on a GPU ([`WgpuOptions::submit_every`]'s default).
const SUBMIT_EVERY: usize = 128;

/// The most rows (tokens) a batch may have: WebGPU's minimum for workgroups per dimension, which
/// row-per-workgroup kernels (embed, rms_norm, attention, argmax) dispatch along.
const MAX_ROWS: usize = 65535;

/// A limit of the device (binding size, workgroup counts) that a request exceeds.
fn resource(message: String) -> ModelError {
    ModelError::Resource { message }
}

impl WgpuBackend {
    /// Opens the adapter `options` pick (see [`WgpuOptions::adapter`]) with its own limits.
    pub fn new(options: WgpuOptions) -> std::result::Result<WgpuBackend, WgpuError> {
        let (_instance, adapters, backends) = device::list_adapters();
        let adapter = device::select(adapters, backends, options.adapter.as_deref())?;
        let on_cpu = adapter.get_info().device_type == wgpu::DeviceType::Cpu;
        let (dev, queue, info) = device::open(&adapter, options.profile)?;
        // Kernels address a weight chunk's bytes with u32: keep chunks under 2 GiB.
        let device_limit = info.max_storage_binding.min(1 << 31);
        let max_binding = options.max_binding.map_or(device_limit, |m| m.min(device_limit));
        let subgroups = options.subgroups && info.subgroups && info.subgroup_min_size >= 8;
        let kv = match options.kv_dtype {
            DType::F32 => KvElem::F32,
            DType::F16 => KvElem::F16,
            other => return Err(WgpuError::KvDtype(other)),
        };
        let info_storage = info.max_workgroup_storage as usize;
        if let Some(tile) = options.tile
            && tile.tile_bytes() > info_storage
        {
            return Err(WgpuError::TileTooLarge { tile, needs: tile.tile_bytes(), has: info_storage });
        }
        let submit_every = options.submit_every.unwrap_or(if on_cpu { 0 } else { SUBMIT_EVERY });
        let gpu = Gpu::new(dev, queue, info, submit_every);
        let no_sinks = gpu.init_buffer("no sinks", &[0; 4], wgpu::BufferUsages::STORAGE);
        Ok(WgpuBackend {
            gpu,
            no_sinks,
            max_binding,
            attention_split: match options.attention_split {
                0 if on_cpu => 256,
                0 => 64,
                split => split,
            },
            matmul: kernels::MatmulPlan {
                subgroups,
                block_decode: options.block_decode,
                tiled_from: options.tiled_from,
                tiles: TilePlan::new(options.tile, info_storage, on_cpu),
            },
            tables: Mutex::new(StepTables::default()),
            on_upload: options.on_upload,
            kv,
            device_sampling: options.device_sampling,
            token_ids: StepTable::new("token ids"),
            fuse_inputs: options.fuse.unwrap_or(!on_cpu),
            fuse_free: options.fuse.unwrap_or(true),
            sampling: kernels::sample::SamplingTables::default(),
        })
    }

    /// The device's description.
    pub fn info(&self) -> &DeviceInfo {
        &self.gpu.info
    }

    /// Times every kernel dispatched from now on (`true`, each dispatch in a timed pass of its
    /// own: slower) or stops (`false`, always possible). Turning it on fails when the device was
    /// not opened with [`WgpuOptions::profile`] or the adapter offers no timestamp queries.
    pub fn set_profiling(&self, on: bool) -> std::result::Result<(), WgpuError> {
        if on && !self.gpu.info.timestamps {
            return Err(WgpuError::NoTimestamps);
        }
        self.gpu.set_profiling(on);
        Ok(())
    }

    /// GPU time per kernel kind of the profiled dispatches submitted since the last call (then
    /// reset), longest first.
    pub fn take_kernel_times(&self) -> Vec<KernelTime> {
        self.gpu.take_kernel_times()
    }

    /// The host-side cost of the dispatches recorded since the last call (then reset): divide by
    /// the steps run to get the CPU time per recorded step.
    pub fn take_record_stats(&self) -> RecordStats {
        self.gpu.take_record_stats()
    }

    /// Whether the kernels use subgroup operations on this device.
    pub fn uses_subgroups(&self) -> bool {
        self.matmul.subgroups
    }

    /// A tensor holding `data` (`rows × cols`).
    pub fn upload(&self, data: &[f32], rows: usize, cols: usize) -> Result<WgpuTensor> {
        if data.len() != rows * cols {
            return Err(checks::operands("upload", format!("{} values for {rows}×{cols}", data.len())));
        }
        Ok(WgpuTensor::from_buffer(self.gpu.upload(bytemuck::cast_slice(data)), rows, cols))
    }

    /// Submits the pending step and reads `t` back.
    pub fn download(&self, t: &WgpuTensor) -> Result<Vec<f32>> {
        let bytes = self.gpu.read_back(t.read(&self.gpu), (t.rows * t.cols * 4) as u64)?;
        Ok(bytemuck::pod_collect_to_vec(&bytes))
    }

    /// The argmax of every row of `x`.
    pub fn argmax(&self, x: &WgpuTensor) -> Result<Vec<u32>> {
        let out = self.gpu.scratch((x.rows * 4) as u64);
        kernels::argmax::argmax(&self.gpu, x.read(&self.gpu), out.buffer(), x.rows, x.cols);
        let bytes = self.gpu.read_back(out.buffer(), (x.rows * 4) as u64)?;
        Ok(bytemuck::pod_collect_to_vec(&bytes))
    }

    /// `silu(gate) · up` (or `gelu_tanh(gate) · up`), deferred to the product that reads it when
    /// fusing.
    fn gated(&self, gate: &WgpuTensor, up: &WgpuTensor, gelu: bool) -> Result<WgpuTensor> {
        let input = DeferredInput::Gated { gate: gate.source(&self.gpu), up: up.source(&self.gpu), gelu };
        let out = WgpuTensor::deferred(&self.gpu, gate.rows, gate.cols, input)?;
        if !self.fuse_inputs {
            out.read(&self.gpu);
        }
        Ok(out)
    }

    /// `x · Wᵀ (+ bias)`: the bias added as the product stores its sums when fusing, else by
    /// `add_bias`; a deferred input computed as the product reads it where the kernel can.
    fn product(&self, w: &WgpuWeight, bias: Option<&WgpuWeight>, x: &WgpuTensor) -> Result<WgpuTensor> {
        checks::matmul(&w.name, w.shape(), x.cols)?;
        if let Some(b) = bias {
            checks::vector_of("add_bias", &b.name, b.vector.is_some(), b.cols, w.rows)?;
        }
        let mut out = self.tensor(x.rows, w.rows)?;
        let vector = bias.map(|b| b.vector.as_ref().expect("checked: a vector"));
        let stored_bias = vector.filter(|_| self.fuse_free);
        match x.deferred_input() {
            Some(input) if kernels::mul_mat::fuses(w, &input, x.rows, &self.matmul) => {
                let y = out.buffer();
                kernels::mul_mat::mul_mat_deferred(&self.gpu, w, &input, x.rows, y, stored_bias, &self.matmul);
            }
            _ => {
                let x = x.read(&self.gpu);
                kernels::mul_mat::mul_mat(&self.gpu, w, x, out.rows, out.buffer(), stored_bias, &self.matmul);
            }
        }
        if let Some(b) = vector.filter(|_| !self.fuse_free) {
            let (rows, cols) = (out.rows, out.cols);
            kernels::add_bias::add_bias(&self.gpu, out.write(&self.gpu), b, rows, cols);
        }
        Ok(out)
    }

    /// A new activation, or an error when it would not fit one storage binding.
    fn tensor(&self, rows: usize, cols: usize) -> Result<WgpuTensor> {
        WgpuTensor::new(&self.gpu, rows, cols)
    }

    /// Gathers rows `rows` of `x` and multiplies them by the LM head (recorded, not read back).
    fn head_logits(&self, x: &WgpuTensor, head: &WgpuWeight, rows: &[usize]) -> Result<WgpuTensor> {
        if let Some(&r) = rows.iter().find(|&&r| r >= x.rows) {
            return Err(checks::operands("logits", format!("no row {r} in {} rows", x.rows)));
        }
        let picked = self.tensor(rows.len(), x.cols)?;
        let row_bytes = (x.cols * 4) as u64;
        // Written before the copies are recorded (the encoder is held while they are).
        let x = x.read(&self.gpu);
        self.gpu.record(|enc| {
            for (i, &r) in rows.iter().enumerate() {
                enc.copy_buffer_to_buffer(x, r as u64 * row_bytes, picked.buffer(), i as u64 * row_bytes, row_bytes);
            }
        });
        self.matmul_q(head, &picked)
    }

    fn rope_table(&self, positions: &[u32], rope: &RopeConfig) -> wgpu::Buffer {
        self.tables.lock().unwrap_or_else(PoisonError::into_inner).rope(&self.gpu, positions, rope)
    }

    fn row_table(&self, batch: &Batch) -> (wgpu::Buffer, wgpu::Buffer, usize) {
        self.tables.lock().unwrap_or_else(PoisonError::into_inner).rows(&self.gpu, batch)
    }
}

impl WgpuBackend {
    /// [`Backend::attention`], with per-head sink logits when `sinks` is set.
    #[allow(clippy::too_many_arguments)]
    fn attention_impl(
        &self,
        q: &WgpuTensor,
        k: &WgpuTensor,
        v: &WgpuTensor,
        cache: &mut WgpuCache,
        layer: usize,
        batch: &Batch,
        mask: Mask,
        sinks: Option<&wgpu::Buffer>,
    ) -> Result<WgpuTensor> {
        let s = cache.shape;
        let hd = s.head_dim;
        let rows = batch.n_tokens();
        let shape = |t: &WgpuTensor| (t.rows, t.cols);
        checks::attention(shape(q), shape(k), shape(v), &s, layer, batch, None)?;
        cache.tables.check_batch(batch)?;
        if hd > kernels::attention::MAX_HEAD_DIM {
            let max = kernels::attention::MAX_HEAD_DIM;
            return Err(resource(format!("attention: head dim {hd} exceeds the kernel's {max}")));
        }
        let window = match mask {
            Mask::Causal => 0,
            Mask::SlidingWindow(w) => w.max(1),
        };
        let max_span = batch
            .positions
            .iter()
            .map(|&p| if window == 0 { p as usize + 1 } else { (p as usize + 1).min(window) })
            .max()
            .unwrap_or(1);
        let (info, blocks, n_blocks) = self.row_table(batch);
        let (kc, vc, tables) = (&cache.k[layer], &cache.v[layer], &cache.table_buffer);
        let paging = cache.paging();
        // Q and K rotated by the same deferred RoPE: the store applies it (one kernel for three).
        let rope = match (q.take_rope(), k.take_rope()) {
            (Some((qt, qs)), Some((kt, ks))) if qt == kt && (qs.half, qs.neox) == (ks.half, ks.neox) => Some((qt, qs)),
            (q_rope, k_rope) => {
                for (t, rope) in [(q, q_rope), (k, k_rope)] {
                    if let Some((table, shape)) = rope {
                        kernels::rope::rope(&self.gpu, t.read(&self.gpu), &table, &shape);
                    }
                }
                None
            }
        };
        let store_rope = rope.as_ref().map(|(table, shape)| kernels::kv_store::StoreRope {
            q: q.read(&self.gpu),
            table,
            n_head: shape.n_heads,
            half: shape.half,
            neox: shape.neox,
        });
        kernels::kv_store::kv_store(
            &self.gpu,
            k.read(&self.gpu),
            v.read(&self.gpu),
            kc,
            vc,
            &info,
            tables,
            rows,
            s.n_head_kv,
            hd,
            paging,
            cache.elem,
            store_rope,
        );
        let shape = AttentionShape {
            rows,
            n_head: q.cols / hd,
            n_kv: s.n_head_kv,
            head_dim: hd,
            paging,
            split_len: self.attention_split,
            max_span,
            window,
            sinks: sinks.cloned(),
            no_sinks: self.no_sinks.clone(),
            kv: cache.elem,
        };
        let out = self.tensor(rows, q.cols)?;
        let prefill = batch.seqs.iter().any(|seq| seq.rows.len() > 1);
        let fits = self.gpu.info.max_workgroup_storage as usize >= kernels::attention::PREFILL_WORKGROUP_BYTES;
        if prefill && fits && hd <= kernels::attention::PREFILL_MAX_HEAD_DIM {
            let (qb, ob) = (q.read(&self.gpu), out.buffer());
            kernels::attention::attention_prefill(&self.gpu, qb, kc, vc, &info, &blocks, n_blocks, tables, ob, &shape);
        } else {
            let part = self.tensor(kernels::attention::partial_len(&shape), 1)?;
            let (qb, pb, ob) = (q.read(&self.gpu), part.buffer(), out.buffer());
            kernels::attention::attention(&self.gpu, qb, kc, vc, &info, tables, pb, ob, &shape);
        }
        Ok(out)
    }
}

fn same_shape(op: &'static str, a: &WgpuTensor, b: &WgpuTensor) -> Result<()> {
    checks::same_shape(op, (a.rows, a.cols), (b.rows, b.cols))
}

impl Backend for WgpuBackend {
    type Tensor = WgpuTensor;
    type Weight = WgpuWeight;
    type Cache = WgpuCache;

    fn weight(&self, source: WeightSource) -> Result<WgpuWeight> {
        weight::upload(&self.gpu, source, self.max_binding, self.on_upload.as_ref())
    }

    /// 8- and 4-bit codes with bf16 scales go up as `MLX_A8` / `MLX_A4` blocks (1.125 / 0.625
    /// bytes per value: codes, and each 32 values' scale and bias), which the kernels dequantize
    /// as `mx.dequantize` does; other layouts as their dequantized values.
    fn mlx_affine_weight(&self, source: MlxAffineSource) -> Result<WgpuWeight> {
        match source.to_blocks()? {
            Some(blocks) => self.weight(blocks),
            None => self.weight(source.to_values()?),
        }
    }

    fn new_cache(&self, shape: CacheShape) -> Result<WgpuCache> {
        // f16 pairs never cross a head (and copies stay 4-byte aligned) with an even head_dim.
        let elem = if shape.head_dim % 2 == 1 { KvElem::F32 } else { self.kv };
        let tables = BlockTables::contiguous(&shape)?;
        let bytes = [shape.n_head_kv, shape.blocks, shape.block_size, shape.head_dim, elem.bytes()]
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d as u64))
            .filter(|&b| b <= self.max_binding)
            .ok_or_else(|| {
                resource(format!(
                    "KV cache {shape:?}: one layer's keys exceed the GPU's storage binding limit of {} bytes",
                    self.max_binding
                ))
            })?;
        let make = |label: &str| {
            self.gpu.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size: bytes.max(4),
                // Copies: a shared block copied before it is written (`copy_blocks`).
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            })
        };
        let k = (0..shape.n_layer).map(|_| make("k cache")).collect();
        let v = (0..shape.n_layer).map(|_| make("v cache")).collect();
        let ids: &[u8] = bytemuck::cast_slice(tables.ids());
        let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST;
        let table_buffer = if ids.is_empty() {
            self.gpu.init_buffer("block tables", &[0; 4], usage)
        } else {
            self.gpu.init_buffer("block tables", ids, usage)
        };
        Ok(WgpuCache { shape, elem, k, v, tables, table_buffer })
    }

    fn kv_bytes(&self, values: usize) -> usize {
        values.saturating_mul(self.kv.bytes())
    }

    fn set_blocks(&self, cache: &mut WgpuCache, slot: usize, blocks: &[u32]) -> Result<()> {
        cache.tables.set(slot, blocks)?;
        if !blocks.is_empty() {
            // Steps recorded before this one read the old table: they go first.
            self.gpu.submit();
            let at = (slot * cache.tables.per_slot() * 4) as u64;
            self.gpu.queue.write_buffer(&cache.table_buffer, at, bytemuck::cast_slice(blocks));
        }
        Ok(())
    }

    fn copy_blocks(&self, cache: &mut WgpuCache, pairs: &[(u32, u32)]) -> Result<()> {
        let s = cache.shape;
        checks::copy_blocks(&s, pairs)?;
        let pairs: Vec<(u32, u32)> = pairs.iter().copied().filter(|(from, to)| from != to).collect();
        if pairs.is_empty() {
            return Ok(());
        }
        // WebGPU copies never read and write one buffer: through a scratch buffer holding one
        // block of every head.
        let block = (s.block_size * s.head_dim * cache.elem.bytes()) as u64;
        let head_stride = block * s.blocks as u64;
        let scratch = self.gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("copy_blocks scratch"),
            size: block * s.n_head_kv as u64,
            usage: wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        self.gpu.record(|encoder| {
            for &(from, to) in &pairs {
                for buffer in cache.k.iter().chain(&cache.v) {
                    for head in 0..s.n_head_kv as u64 {
                        let src = head * head_stride + from as u64 * block;
                        encoder.copy_buffer_to_buffer(buffer, src, &scratch, head * block, block);
                    }
                    for head in 0..s.n_head_kv as u64 {
                        let dst = head * head_stride + to as u64 * block;
                        encoder.copy_buffer_to_buffer(&scratch, head * block, buffer, dst, block);
                    }
                }
            }
        });
        Ok(())
    }

    fn embed(&self, table: &WgpuWeight, tokens: &[u32]) -> Result<WgpuTensor> {
        if table.vector.is_some() || tokens.is_empty() {
            return Err(checks::operands("embed", format!("{} is not a table, or no tokens", table.name)));
        }
        // Row-per-workgroup kernels dispatch one workgroup per token along one dimension.
        if tokens.len() > MAX_ROWS {
            return Err(resource(format!("a batch of {} tokens exceeds the GPU limit of {MAX_ROWS}", tokens.len())));
        }
        if let Some(&t) = tokens.iter().find(|&&t| t as usize >= table.rows) {
            let message = format!("token id {t} is outside the vocabulary of {}", table.rows);
            return Err(ModelError::BadBatch { message });
        }
        let out = self.tensor(tokens.len(), table.cols)?;
        let ids = self.gpu.write_table(&self.token_ids, bytemuck::cast_slice(tokens));
        kernels::embed::embed(&self.gpu, table, &ids, tokens.len(), out.buffer());
        Ok(out)
    }

    fn rms_norm(&self, x: &WgpuTensor, w: &WgpuWeight, eps: f32) -> Result<WgpuTensor> {
        checks::vector_of("rms_norm", &w.name, w.vector.is_some(), w.cols, x.cols)?;
        let g = w.vector.as_ref().expect("checked: a vector");
        if self.fuse_inputs {
            let input = DeferredInput::RmsNorm { x: x.source(&self.gpu), g: g.clone(), eps };
            return WgpuTensor::deferred(&self.gpu, x.rows, x.cols, input);
        }
        let out = self.tensor(x.rows, x.cols)?;
        kernels::rms_norm::rms_norm(&self.gpu, x.read(&self.gpu), g, out.buffer(), x.rows, x.cols, eps);
        Ok(out)
    }

    fn rms_norm_heads(&self, x: &mut WgpuTensor, n_heads: usize, w: &WgpuWeight, eps: f32) -> Result<()> {
        let head_dim = checks::rms_norm_heads(x.cols, n_heads, &w.name, w.vector.is_some(), w.cols)?;
        // One workgroup per (row, head), each along its own dispatch dimension.
        if x.rows > MAX_ROWS || n_heads > MAX_ROWS {
            return Err(resource(format!("{} rows of {n_heads} heads exceed the GPU limit of {MAX_ROWS}", x.rows)));
        }
        let g = w.vector.as_ref().expect("checked: a vector");
        let rows = x.rows;
        kernels::rms_norm_heads::rms_norm_heads(&self.gpu, x.write(&self.gpu), g, rows, n_heads, head_dim, eps);
        Ok(())
    }

    fn matmul_q(&self, w: &WgpuWeight, x: &WgpuTensor) -> Result<WgpuTensor> {
        self.product(w, None, x)
    }

    fn matmul_q_bias(&self, w: &WgpuWeight, bias: Option<&WgpuWeight>, x: &WgpuTensor) -> Result<WgpuTensor> {
        self.product(w, bias, x)
    }

    fn matmul_q_each_bias<const N: usize>(
        &self,
        ws: [&WgpuWeight; N],
        biases: [Option<&WgpuWeight>; N],
        x: &WgpuTensor,
    ) -> Result<[WgpuTensor; N]> {
        let ys = ws.iter().zip(biases).map(|(w, bias)| self.product(w, bias, x)).collect::<Result<Vec<_>>>()?;
        Ok(ys.try_into().unwrap_or_else(|_| unreachable!("one product per weight")))
    }

    fn rope(&self, x: &mut WgpuTensor, n_heads: usize, positions: &[u32], rope: &RopeConfig) -> Result<()> {
        checks::rope(x.rows, x.cols, n_heads, positions, rope)?;
        let table = self.rope_table(positions, rope);
        let shape = RopeShape {
            rows: x.rows,
            n_heads,
            head_dim: x.cols / n_heads,
            half: rope.dim / 2,
            neox: rope.style == RopeStyle::NeoX,
        };
        if self.fuse_free {
            // Left for the KV store, which rotates Q and K as attention stores the keys.
            x.defer(&self.gpu, Deferred::Rope { table, shape });
        } else {
            kernels::rope::rope(&self.gpu, x.write(&self.gpu), &table, &shape);
        }
        Ok(())
    }

    fn attention(
        &self,
        q: &WgpuTensor,
        k: &WgpuTensor,
        v: &WgpuTensor,
        cache: &mut WgpuCache,
        layer: usize,
        batch: &Batch,
        mask: Mask,
    ) -> Result<WgpuTensor> {
        self.attention_impl(q, k, v, cache, layer, batch, mask, None)
    }

    fn attention_with_sinks(
        &self,
        q: &WgpuTensor,
        k: &WgpuTensor,
        v: &WgpuTensor,
        cache: &mut WgpuCache,
        layer: usize,
        batch: &Batch,
        mask: Mask,
        sinks: &WgpuWeight,
    ) -> Result<WgpuTensor> {
        let n_head = q.cols / cache.shape.head_dim.max(1);
        checks::vector_of("attention", &sinks.name, sinks.vector.is_some(), sinks.cols, n_head)?;
        let buffer = sinks.vector.as_ref().expect("checked: a vector");
        self.attention_impl(q, k, v, cache, layer, batch, mask, Some(buffer))
    }

    /// Greedy decoding on the GPU: the LM head and an argmax kernel are recorded into the step,
    /// and only one u32 per row comes back to the host.
    fn greedy(&self, x: &WgpuTensor, head: &WgpuWeight, rows: &[usize]) -> Result<Vec<u32>> {
        let logits = self.head_logits(x, head, rows)?;
        let out = self.gpu.scratch((rows.len() * 4) as u64);
        kernels::argmax::argmax(&self.gpu, logits.buffer(), out.buffer(), rows.len(), head.rows);
        let bytes = self.gpu.read_back(out.buffer(), (rows.len() * 4) as u64)?;
        Ok(bytemuck::pod_collect_to_vec(&bytes))
    }

    fn samples_on_device(&self) -> bool {
        self.device_sampling
    }

    fn sample(&self, x: &WgpuTensor, head: &WgpuWeight, rows: &[usize], params: &[DeviceSampling]) -> Result<Vec<u32>> {
        if params.len() != rows.len() {
            let message = format!("{} sampling settings for {} rows", params.len(), rows.len());
            return Err(ModelError::BadBatch { message });
        }
        if let Some(s) = params
            .iter()
            .find(|s| !(1..=MAX_DEVICE_TOP_K).contains(&s.top_k) || s.temperature.is_nan() || s.temperature <= 0.0)
        {
            let message = format!("device sampling needs top_k in 1..={MAX_DEVICE_TOP_K} and temperature > 0: {s:?}");
            return Err(ModelError::BadBatch { message });
        }
        let logits = self.head_logits(x, head, rows)?;
        let out = self.gpu.scratch((rows.len() * 4) as u64);
        kernels::sample::sample(&self.gpu, &self.sampling, logits.buffer(), out.buffer(), head.rows, params);
        let bytes = self.gpu.read_back(out.buffer(), (rows.len() * 4) as u64)?;
        Ok(bytemuck::pod_collect_to_vec(&bytes))
    }

    fn add_bias(&self, x: &mut WgpuTensor, bias: &WgpuWeight) -> Result<()> {
        checks::vector_of("add_bias", &bias.name, bias.vector.is_some(), bias.cols, x.cols)?;
        let b = bias.vector.as_ref().expect("checked: a vector");
        let (rows, cols) = (x.rows, x.cols);
        kernels::add_bias::add_bias(&self.gpu, x.write(&self.gpu), b, rows, cols);
        Ok(())
    }

    fn moe(
        &self,
        x: &WgpuTensor,
        router_logits: &WgpuTensor,
        experts: &MoeExperts<'_, WgpuWeight>,
        params: &MoeParams,
    ) -> Result<WgpuTensor> {
        crate::moe::moe(&self.gpu, &self.matmul, x, router_logits, experts, params)
    }

    fn add(&self, x: &mut WgpuTensor, y: &WgpuTensor) -> Result<()> {
        same_shape("add", x, y)?;
        let y = y.read(&self.gpu);
        let n = x.rows * x.cols;
        kernels::add::add(&self.gpu, x.write(&self.gpu), y, n);
        Ok(())
    }

    fn swiglu(&self, gate: &WgpuTensor, up: &WgpuTensor) -> Result<WgpuTensor> {
        same_shape("swiglu", gate, up)?;
        self.gated(gate, up, false)
    }

    fn scale(&self, x: &mut WgpuTensor, factor: f32) -> Result<()> {
        let n = x.rows * x.cols;
        kernels::scale::scale(&self.gpu, x.write(&self.gpu), factor, n);
        Ok(())
    }

    fn geglu(&self, gate: &WgpuTensor, up: &WgpuTensor) -> Result<WgpuTensor> {
        same_shape("geglu", gate, up)?;
        self.gated(gate, up, true)
    }

    fn logits(&self, x: &WgpuTensor, head: &WgpuWeight, rows: &[usize]) -> Result<Vec<f32>> {
        // Many rows of a large vocabulary (512 × 201088 f32 = 411 MB) exceed one binding: compute
        // and read back as many rows at a time as fit.
        let per_pass = (self.gpu.info.max_storage_binding / (head.rows as u64 * 4).max(1)).max(1) as usize;
        let mut out = Vec::with_capacity(rows.len() * head.rows);
        for group in rows.chunks(per_pass) {
            let logits = self.head_logits(x, head, group)?;
            out.extend(self.download(&logits)?);
        }
        Ok(out)
    }

    fn read_rows(&self, x: &WgpuTensor, rows: &[usize]) -> Result<Vec<f32>> {
        let all = self.download(x)?;
        let mut out = Vec::with_capacity(rows.len() * x.cols);
        for &r in rows {
            let src = all
                .get(r * x.cols..(r + 1) * x.cols)
                .ok_or_else(|| ModelError::BadBatch { message: format!("read_rows: no row {r} in {} rows", x.rows) })?;
            out.extend_from_slice(src);
        }
        Ok(out)
    }
}
