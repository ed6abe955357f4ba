//! `y = x · Wᵀ` straight from the stored (quantized) weight, by one of three kernels:
//! `mul_mat_vec.wgsl` (decode and small batches: whole blocks per thread, up to 8 activation
//! rows per workgroup), `mul_mat_tiled.wgsl` (many rows: shared-memory tiles, `tile.rs`) and
//! `mul_mat.wgsl` (columns not a multiple of 32, or both others turned off).

use super::MatmulPlan;
use super::tile::TileShape;
use crate::gpu::{Gpu, PipelineKey, groups_1d};
use crate::tensor::DeferredInput;
use crate::weight::WgpuWeight;

/// Tokens per workgroup in `mul_mat.wgsl`'s prefill path: each dequantized weight chunk is used
/// this many times.
pub(crate) const PREFILL_TILE: usize = 8;

/// Threads per weight row (`TPR` in the shader) in a decode step (one token): a row's 32 threads
/// read 256 consecutive values at a time. Prefill keeps 8, each dequantized chunk serving a tile
/// of tokens.
pub(crate) const DECODE_LANES: usize = 32;

/// Threads per weight row in prefill.
const PREFILL_LANES: usize = 8;

/// Threads per workgroup in the matrix kernels (`WG` in the shaders).
pub(crate) const WORKGROUP: usize = 64;

/// The matrix kernels' shared `Params` and bindings (filled by [`params`]).
const PARAMS: &str = include_str!("mul_mat_params.wgsl");

/// Activation rows per workgroup of `mul_mat_vec.wgsl` at most: each dequantized block serves
/// this many.
const VEC_ROWS: usize = 8;

/// Weight rows per workgroup of the block kernels (`RPW` in `mul_mat_vec.wgsl`).
pub(crate) const VEC_WEIGHT_ROWS: usize = 8;

/// Records `y[n_tok × w.rows] = x[n_tok × w.cols] · Wᵀ (+ bias)`, one dispatch per chunk of the
/// weight, with the kernel `plan` picks for this shape. The block and tiled kernels add the bias
/// as they store each sum; the 8-value kernels leave it to an `add_bias` dispatch.
pub(crate) fn mul_mat(
    gpu: &Gpu,
    w: &WgpuWeight,
    x: &wgpu::Buffer,
    n_tok: usize,
    y: &wgpu::Buffer,
    bias: Option<&wgpu::Buffer>,
    plan: &MatmulPlan,
) {
    if let Some(shape) = plan.tile(w.rows, n_tok, w.cols, |_| 0) {
        return mul_mat_tiled(gpu, w, x, n_tok, y, bias, shape);
    }
    if plan.block(w.cols) {
        return block_kernel(gpu, w, VecInput::Stored(x), n_tok, y, bias, plan);
    }
    let (tile, lanes) = if n_tok == 1 { (1, DECODE_LANES) } else { (PREFILL_TILE, PREFILL_LANES) };
    let (reduce, reduce_name) = plan.reduce();
    let key = PipelineKey::named("mul_mat").dtype(w.dtype).size(tile).variant(reduce_name);
    for chunk in &w.chunks {
        let [gx, gy, _] = groups_1d(chunk.rows.div_ceil(WORKGROUP / lanes) as u32);
        let params = params(w, chunk.rows, chunk.row_start, n_tok, gx);
        let source = || {
            let kernel = format!("{PARAMS}\n{}\n{reduce}", include_str!("mul_mat.wgsl"));
            let kernel = kernel.replace("{{TILE_T}}", &tile.to_string()).replace("{{TPR}}", &lanes.to_string());
            super::with_dequant(w.dtype, &kernel)
        };
        gpu.dispatch(key, source, &[&chunk.buffer, x, y], &params, [gx, gy, n_tok.div_ceil(tile) as u32]);
        gpu.moved(moved(w, chunk.rows, n_tok));
    }
    if let Some(bias) = bias {
        super::add_bias::add_bias(gpu, y, bias, n_tok, w.rows);
    }
}

/// Activation rows per workgroup at most where `mul_mat_vec.wgsl` stages a gated input (4 KiB
/// of workgroup memory per row).
const STAGED_ROWS: usize = 2;

/// Whether [`mul_mat_deferred`] can compute `n_tok` rows of `input` as it reads them: products
/// the block kernel runs (decode and small batches), and for the staged gated inputs at most
/// [`STAGED_ROWS`] rows (a decode step's one per sequence).
pub(crate) fn fuses(w: &WgpuWeight, input: &DeferredInput, n_tok: usize, plan: &MatmulPlan) -> bool {
    let rows_fit = match input {
        DeferredInput::RmsNorm { .. } => true,
        DeferredInput::Gated { .. } => n_tok <= STAGED_ROWS,
    };
    rows_fit && plan.tile(w.rows, n_tok, w.cols, |_| 0).is_none() && plan.block(w.cols)
}

/// `y = input · Wᵀ` by the block kernel, the deferred `input` (a norm or a gated product of
/// other activations) computed as each workgroup reads it: one dispatch where the input's own
/// kernel and the product were two. Only where [`fuses`] holds.
pub(crate) fn mul_mat_deferred(
    gpu: &Gpu,
    w: &WgpuWeight,
    input: &DeferredInput,
    n_tok: usize,
    y: &wgpu::Buffer,
    bias: Option<&wgpu::Buffer>,
    plan: &MatmulPlan,
) {
    debug_assert!(fuses(w, input, n_tok, plan));
    let input = match input {
        DeferredInput::RmsNorm { x, g, eps } => VecInput::RmsNorm { x: x.buffer(), g, eps: *eps },
        DeferredInput::Gated { gate, up, gelu } => {
            VecInput::Gated { gate: gate.buffer(), up: up.buffer(), gelu: *gelu }
        }
    };
    block_kernel(gpu, w, input, n_tok, y, bias, plan);
}

/// What the block kernel reads as its input.
enum VecInput<'a> {
    Stored(&'a wgpu::Buffer),
    RmsNorm { x: &'a wgpu::Buffer, g: &'a wgpu::Buffer, eps: f32 },
    Gated { gate: &'a wgpu::Buffer, up: &'a wgpu::Buffer, gelu: bool },
}

impl VecInput<'_> {
    /// The input's snippet (`prepare`, `stage`, `xin`) and the kernel's name with it, without
    /// and with a bias (pipeline keys).
    fn snippet(&self) -> (&'static str, [&'static str; 2]) {
        match self {
            VecInput::Stored(_) => (include_str!("mul_mat_vec_input_plain.wgsl"), ["mul_mat_vec", "mul_mat_vec_bias"]),
            VecInput::RmsNorm { .. } => {
                (include_str!("mul_mat_vec_input_rms_norm.wgsl"), ["mul_mat_vec_rms_norm", "mul_mat_vec_rms_norm_bias"])
            }
            VecInput::Gated { gelu: false, .. } => (
                concat!(include_str!("mul_mat_vec_glu_silu.wgsl"), include_str!("mul_mat_vec_input_gated.wgsl")),
                ["mul_mat_vec_swiglu", "mul_mat_vec_swiglu_bias"],
            ),
            VecInput::Gated { gelu: true, .. } => (
                concat!(include_str!("mul_mat_vec_glu_gelu.wgsl"), include_str!("mul_mat_vec_input_gated.wgsl")),
                ["mul_mat_vec_geglu", "mul_mat_vec_geglu_bias"],
            ),
        }
    }
}

/// The block kernel over every chunk of `w`: 8 weight rows × up to 8 activation rows per
/// workgroup (2 with a staged input).
fn block_kernel(
    gpu: &Gpu,
    w: &WgpuWeight,
    input: VecInput<'_>,
    n_tok: usize,
    y: &wgpu::Buffer,
    bias: Option<&wgpu::Buffer>,
    plan: &MatmulPlan,
) {
    let staged = matches!(input, VecInput::Gated { .. });
    let nt = n_tok.next_power_of_two().min(if staged { STAGED_ROWS } else { VEC_ROWS });
    let (_, reduce_name) = plan.reduce();
    let (snippet, kernels) = input.snippet();
    let key = PipelineKey::named(kernels[usize::from(bias.is_some())]).dtype(w.dtype).size(nt).variant(reduce_name);
    // The deferred inputs bind one more buffer (the norm's gain, or `up`) at 3; a bias comes
    // next, then the parameters.
    let (x, extra, aux, extra_bytes) = match input {
        VecInput::Stored(x) => (x, None, 0, 0),
        VecInput::RmsNorm { x, g, eps } => (x, Some(g), eps.to_bits(), 4 * w.cols),
        VecInput::Gated { gate, up, .. } => (gate, Some(up), 0, 4 * n_tok * w.cols),
    };
    let bias_binding = 3 + usize::from(extra.is_some());
    let params_binding = bias_binding + usize::from(bias.is_some());
    for chunk in &w.chunks {
        let [gx, gy, _] = groups_1d(chunk.rows.div_ceil(VEC_WEIGHT_ROWS) as u32);
        let mut params = params(w, chunk.rows, chunk.row_start, n_tok, gx);
        params[7] = aux;
        let source = || {
            let barrier = if staged { "workgroupBarrier()" } else { "" };
            let kernel = format!("{}\n{snippet}\n{}", params_at(params_binding), include_str!("mul_mat_vec.wgsl"))
                .replace("{{NT}}", &nt.to_string())
                .replace("{{PASS_BARRIER}}", barrier);
            super::with_block32(
                w.dtype,
                &with_bias(&kernel, bias.is_some(), bias_binding, "p.y_offset + out_row"),
                plan,
            )
        };
        let groups = [gx, gy, n_tok.div_ceil(nt) as u32];
        let mut buffers = [&chunk.buffer, x, y, y, y];
        let mut bound = 3;
        for b in [extra, bias].into_iter().flatten() {
            buffers[bound] = b;
            bound += 1;
        }
        gpu.dispatch(key, source, &buffers[..bound], &params, groups);
        gpu.moved(moved(w, chunk.rows, n_tok) + extra_bytes as u64 + bias.map_or(0, |_| 4 * chunk.rows as u64));
    }
}

/// The matrix kernels' parameters and bindings (`mul_mat_params.wgsl`) with the parameters at
/// binding `binding`.
fn params_at(binding: usize) -> String {
    PARAMS.replace("@binding(3) var<uniform>", &format!("@binding({binding}) var<uniform>"))
}

/// `kernel` with its `{{BIAS_DECL}}` / `{{BIAS}}` filled: `bias` at `binding`, added at
/// `bias[index]` as each sum is stored, or nothing.
fn with_bias(kernel: &str, bias: bool, binding: usize, index: &str) -> String {
    if bias {
        kernel
            .replace("{{BIAS_DECL}}", &format!("@group(0) @binding({binding}) var<storage, read> bias: array<f32>;"))
            .replace("{{BIAS}}", &format!(" + bias[{index}]"))
    } else {
        kernel.replace("{{BIAS_DECL}}", "").replace("{{BIAS}}", "")
    }
}

/// `mul_mat` through the shared-memory tiles: one workgroup per tile of `shape`.
fn mul_mat_tiled(
    gpu: &Gpu,
    w: &WgpuWeight,
    x: &wgpu::Buffer,
    n_tok: usize,
    y: &wgpu::Buffer,
    bias: Option<&wgpu::Buffer>,
    shape: TileShape,
) {
    let kernel = if bias.is_some() { "mul_mat_tiled_bias" } else { "mul_mat_tiled" };
    let key = PipelineKey::named(kernel).dtype(w.dtype).variant(shape.name());
    for chunk in &w.chunks {
        let [gx, gy, _] = groups_1d(chunk.rows.div_ceil(shape.rows()) as u32);
        let params = params(w, chunk.rows, chunk.row_start, n_tok, gx);
        let source = || {
            let binding = 3 + usize::from(bias.is_some());
            let kernel = format!("{}\n{}\n{}", params_at(binding), shape.wgsl(), include_str!("mul_mat_tiled.wgsl"));
            super::with_dequant(w.dtype, &with_bias(&kernel, bias.is_some(), 3, "p.y_offset + r + i"))
        };
        let groups = [gx, gy, n_tok.div_ceil(shape.acts()) as u32];
        match bias {
            None => gpu.dispatch(key, source, &[&chunk.buffer, x, y], &params, groups),
            Some(b) => gpu.dispatch(key, source, &[&chunk.buffer, x, y, b], &params, groups),
        }
        gpu.moved(moved(w, chunk.rows, n_tok) + bias.map_or(0, |_| 4 * chunk.rows as u64));
    }
}

/// The bytes a product of `rows` weight rows with `n_tok` activation rows must move: the
/// weights once, the activations read, the outputs written.
pub(crate) fn moved(w: &WgpuWeight, rows: usize, n_tok: usize) -> u64 {
    (rows * w.row_bytes + 4 * n_tok * (w.cols + rows)) as u64
}

/// The kernels' shared `Params`: (cols, rows, n_tok, row_bytes, y_offset, y_stride, groups_x, 0).
fn params(w: &WgpuWeight, rows: usize, row_start: usize, n_tok: usize, groups_x: u32) -> [u32; 8] {
    [w.cols as u32, rows as u32, n_tok as u32, w.row_bytes as u32, row_start as u32, w.rows as u32, groups_x, 0]
}
