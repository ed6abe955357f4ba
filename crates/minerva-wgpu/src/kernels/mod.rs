//! The WGSL kernels, one `.wgsl` beside each wrapper of the same name, embedded at build time.
//!
//! Kernels that read a weight are assembled as `common.wgsl` (16-byte and byte-addressed loads,
//! f16/bf16 unpack, E8M0) + the dtype's block size and GPU layout (`crate::layout`) +
//! `dequant/<dtype>.wgsl` (`load8`/`load1`: 8 or 1 dequantized values of a row; one
//! [`WEIGHT_FORMATS`] row per dtype) + the kernel, and compiled once per (kernel, dtype, variant)
//! by [`crate::gpu::Gpu`].

pub(crate) mod add;
pub(crate) mod add_bias;
pub(crate) mod argmax;
pub(crate) mod attention;
pub(crate) mod embed;
pub(crate) mod expert_bias;
pub(crate) mod geglu;
pub(crate) mod kv_store;
pub(crate) mod moe_route;
pub(crate) mod moe_sum;
pub(crate) mod mul_mat;
pub(crate) mod mul_mat_id;
pub(crate) mod mul_mat_id_grouped;
pub(crate) mod rms_norm;
pub(crate) mod rms_norm_heads;
pub(crate) mod rope;
pub(crate) mod sample;
pub(crate) mod scale;
pub(crate) mod swiglu;
pub(crate) mod swiglu_oai;
pub(crate) mod tile;

use minerva_core::DType;

use crate::layout::BlockSplit;
use tile::{TilePlan, TileShape};

const COMMON: &str = include_str!("common.wgsl");

/// How the KV cache stores keys and values on the GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum KvElem {
    F32,
    /// Two f16 values per u32 (`pack2x16float`): half the memory and bandwidth of f32.
    F16,
}

impl KvElem {
    /// Bytes per cached value.
    pub(crate) fn bytes(self) -> usize {
        match self {
            KvElem::F32 => 4,
            KvElem::F16 => 2,
        }
    }

    /// A kernel that reads the cache (`kc`, `vc` as `array<KV>`, read with `k_at` / `v_at`) with
    /// this element type's definitions.
    pub(crate) fn source(self, kernel: &str) -> String {
        let access = match self {
            KvElem::F32 => include_str!("kv_f32.wgsl"),
            KvElem::F16 => include_str!("kv_f16.wgsl"),
        };
        format!("{access}\n{kernel}")
    }
}

/// How the kernels read one weight dtype: its GPU row layout ([`BlockSplit`]) and its
/// `load8`/`load1` (8 or 1 dequantized values of a row at a value index), which every
/// weight-reading kernel is assembled with. The loaders find a value's block through
/// `BLOCK_ELEMS` and the layout's `head_at` / `body_at` (common.wgsl).
struct WeightFormat {
    dtype: DType,
    layout: BlockSplit,
    dequant_wgsl: &'static str,
    /// `block32` (32 dequantized weights of a row as vec4s) reading the whole block in aligned
    /// loads, for the block kernels; `None`: the generic one through `load8`.
    block32_wgsl: Option<&'static str>,
}

/// A regrouped layout: the body (quants) from `body_start`, `body_bytes` long, `group` blocks a
/// group (their heads fill one 16-byte word, or three for Q5_0's 6-byte heads).
const fn split(block_bytes: usize, body_start: usize, body_bytes: usize, group: usize) -> BlockSplit {
    BlockSplit { block_bytes, body_start, body_bytes, group }
}

/// One row per dtype the kernels read directly (matmul and embedding).
const WEIGHT_FORMATS: [WeightFormat; 12] = [
    WeightFormat {
        dtype: DType::F32,
        layout: BlockSplit::whole(4),
        dequant_wgsl: include_str!("dequant/f32.wgsl"),
        block32_wgsl: Some(include_str!("dequant/block32_f32.wgsl")),
    },
    WeightFormat {
        dtype: DType::F16,
        layout: BlockSplit::whole(2),
        dequant_wgsl: include_str!("dequant/f16.wgsl"),
        block32_wgsl: Some(include_str!("dequant/block32_f16.wgsl")),
    },
    WeightFormat {
        dtype: DType::BF16,
        layout: BlockSplit::whole(2),
        dequant_wgsl: include_str!("dequant/bf16.wgsl"),
        block32_wgsl: Some(include_str!("dequant/block32_bf16.wgsl")),
    },
    WeightFormat {
        dtype: DType::Q8_0,
        layout: split(34, 2, 32, 8),
        dequant_wgsl: include_str!("dequant/q8_0.wgsl"),
        block32_wgsl: Some(include_str!("dequant/block32_q8_0.wgsl")),
    },
    WeightFormat {
        dtype: DType::Q4_0,
        layout: split(18, 2, 16, 8),
        dequant_wgsl: include_str!("dequant/q4_0.wgsl"),
        block32_wgsl: Some(include_str!("dequant/block32_q4_0.wgsl")),
    },
    WeightFormat {
        dtype: DType::Q4_1,
        layout: split(20, 4, 16, 4),
        dequant_wgsl: include_str!("dequant/q4_1.wgsl"),
        block32_wgsl: Some(include_str!("dequant/block32_q4_1.wgsl")),
    },
    WeightFormat {
        dtype: DType::Q5_0,
        layout: split(22, 6, 16, 8),
        dequant_wgsl: include_str!("dequant/q5_0.wgsl"),
        block32_wgsl: Some(include_str!("dequant/block32_q5_0.wgsl")),
    },
    // 144-byte super-blocks: already 16-byte aligned, with the quants at byte 16.
    WeightFormat {
        dtype: DType::Q4_K,
        layout: BlockSplit::whole(144),
        dequant_wgsl: include_str!("dequant/q4_k.wgsl"),
        block32_wgsl: Some(include_str!("dequant/block32_q4_k.wgsl")),
    },
    // ql, qh and the scales (208 bytes) as the body, d as the head.
    WeightFormat {
        dtype: DType::Q6_K,
        layout: split(210, 0, 208, 8),
        dequant_wgsl: include_str!("dequant/q6_k.wgsl"),
        block32_wgsl: None,
    },
    WeightFormat {
        dtype: DType::MXFP4,
        layout: split(17, 1, 16, 16),
        dequant_wgsl: include_str!("dequant/mxfp4.wgsl"),
        block32_wgsl: Some(include_str!("dequant/block32_mxfp4.wgsl")),
    },
    // MLX affine matrices as uploaded (`Backend::mlx_affine_weight`): bf16 scale and bias, then
    // the quants.
    WeightFormat {
        dtype: DType::MLX_A8,
        layout: split(36, 4, 32, 4),
        dequant_wgsl: concat!(include_str!("dequant/mlx_affine.wgsl"), include_str!("dequant/mlx_a8.wgsl")),
        block32_wgsl: None,
    },
    WeightFormat {
        dtype: DType::MLX_A4,
        layout: split(20, 4, 16, 4),
        dequant_wgsl: concat!(include_str!("dequant/mlx_affine.wgsl"), include_str!("dequant/mlx_a4.wgsl")),
        block32_wgsl: None,
    },
];

/// The dtypes whose weights the kernels read directly (matmul and embedding).
pub const WEIGHT_DTYPES: [DType; WEIGHT_FORMATS.len()] = {
    let mut dtypes = [DType::F32; WEIGHT_FORMATS.len()];
    let mut i = 0;
    while i < dtypes.len() {
        dtypes[i] = WEIGHT_FORMATS[i].dtype;
        i += 1;
    }
    dtypes
};

fn weight_format(dtype: DType) -> Option<&'static WeightFormat> {
    WEIGHT_FORMATS.iter().find(|f| f.dtype == dtype)
}

/// Whether the kernels can read weights of `dtype`.
pub fn supports(dtype: DType) -> bool {
    weight_format(dtype).is_some()
}

/// How rows of `dtype` are stored on the GPU (checked by [`supports`] at upload).
pub(crate) fn layout(dtype: DType) -> Option<BlockSplit> {
    weight_format(dtype).map(|f| f.layout)
}

/// Bytes one row of `cols` values of `dtype` takes on the GPU (its blocks regrouped so that the
/// quants are 16-byte aligned, where the file leaves them unaligned): what a weight's memory and
/// its split across storage bindings are counted in. `None` if the kernels do not read `dtype`
/// or `cols` is not a whole number of its blocks.
pub fn gpu_row_bytes(dtype: DType, cols: usize) -> Option<usize> {
    dtype.row_bytes(cols)?;
    layout(dtype)?.row_bytes(cols / dtype.block_elems())
}

/// A weight-reading kernel's full source for `dtype` (checked by [`supports`] at upload).
fn with_dequant(dtype: DType, kernel: &str) -> String {
    let format = weight_format(dtype).expect("weights are checked at upload");
    let (dequant, layout, elems) = (format.dequant_wgsl, format.layout.wgsl(), dtype.block_elems());
    format!("{COMMON}\nconst BLOCK_ELEMS: u32 = {elems}u;\n{layout}{dequant}\n{kernel}")
}

/// [`with_dequant`] plus the dtype's `block32` and the row-sum snippet, for the block kernels.
fn with_block32(dtype: DType, kernel: &str, plan: &MatmulPlan) -> String {
    let format = weight_format(dtype).expect("weights are checked at upload");
    let block32 = format.block32_wgsl.unwrap_or(include_str!("dequant/block32_generic.wgsl"));
    let reduce = if plan.subgroups {
        include_str!("mul_mat_vec_reduce_subgroup.wgsl")
    } else {
        include_str!("mul_mat_vec_reduce_workgroup.wgsl")
    };
    with_dequant(dtype, &format!("{block32}\n{kernel}\n{reduce}"))
}

/// Which matrix kernels the backend records ([`crate::WgpuOptions`]), so that benchmarks and
/// tests can run each against the others.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MatmulPlan {
    /// Row reductions by subgroup shuffles instead of workgroup memory.
    pub subgroups: bool,
    /// Products of fewer rows than `tiled_from` (decode, small batches) read whole blocks per
    /// thread (`mul_mat_vec`, `mul_mat_id_vec`) where the columns are a multiple of 32.
    pub block_decode: bool,
    /// Products of at least this many activation rows use the shared-memory tiles
    /// (`mul_mat_tiled`, `mul_mat_id_tiled`) where the columns are a multiple of 32; 0: never.
    pub tiled_from: usize,
    /// Which tile shape those products take.
    pub tiles: TilePlan,
}

impl MatmulPlan {
    /// The tile a product of `rows` weight rows with `n_tok` activation rows over `cols` columns
    /// runs on, in a kernel declaring `extra(shape)` bytes of workgroup memory besides the tiles;
    /// `None`: an untiled kernel.
    fn tile(&self, rows: usize, n_tok: usize, cols: usize, extra: impl Fn(TileShape) -> usize) -> Option<TileShape> {
        if self.tiled_from == 0 || n_tok < self.tiled_from || !cols.is_multiple_of(32) {
            return None;
        }
        self.tiles.pick(rows, n_tok, extra)
    }

    fn block(&self, cols: usize) -> bool {
        self.block_decode && cols.is_multiple_of(32)
    }

    /// The row-reduction snippet and its name (for pipeline keys).
    fn reduce(&self) -> (&'static str, &'static str) {
        if self.subgroups {
            (include_str!("mul_mat_reduce_subgroup.wgsl"), "subgroup")
        } else {
            (include_str!("mul_mat_reduce_workgroup.wgsl"), "workgroup")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_layout_splits_blocks_into_aligned_bodies() {
        for format in &WEIGHT_FORMATS {
            let (dtype, split) = (format.dtype, format.layout);
            assert_eq!(split.block_bytes, dtype.block_bytes(), "{dtype}");
            assert!(split.body_start + split.body_bytes <= split.block_bytes, "{dtype}");
            // Regrouped: quants in whole 16-byte words, and a full group's heads filling whole
            // words, so a full group costs no byte over the file's. Stored whole: rows of whole
            // blocks start 16-byte aligned where the block kernels run (32 values a block32).
            if !split.is_whole() {
                assert_eq!(split.body_bytes % 16, 0, "{dtype}");
                assert_eq!(split.row_bytes(split.group), Some(split.group * split.block_bytes), "{dtype}");
            } else {
                assert_eq!((32 / dtype.block_elems().min(32)) * dtype.block_bytes() % 16, 0, "{dtype}");
            }
        }
    }
}
