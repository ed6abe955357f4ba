//! The kernel table: one row per dtype, as ggml's `type_traits` — what this crate can do with
//! weights of that dtype and which function does it.
//!
//! * [`REFERENCE`] holds the scalar reference row of every dtype: the (de)quantizers of `ggml`,
//!   `float.rs`, the activation format matmul quantizes to, and the scalar dot kernels of
//!   [`reference`]. It is the definition of truth and the fallback on every CPU.
//! * Each instruction set is an [`Isa`]: a run-time check and its own rows, which fill only the
//!   entries it speeds up (`x86::AVX2_FMA_F16C` has tile kernels for Q8_0 but no quantizer, …).
//!   A new ISA (AVX-512, VNNI, NEON) is a new `Isa` with its rows in [`ISAS`], not a new `match`.
//! * [`selected`] merges them once per process: for each entry the best detected ISA that fills
//!   it, else the reference. Callers fetch a row per call and keep the function pointers outside
//!   their loops.
//!
//! Every ISA entry is tested against the reference entry it replaces (`tests/fast_path.rs`,
//! `tests/matmul.rs`): dequantizers bit for bit, matmul kernels within f32 summation order.

/// A [`TileKernel`] calling the `#[target_feature]` kernel `$kernel` (an ISA row's entry).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
macro_rules! tile {
    ($kernel:expr) => {
        |weights, row_bytes, acts, out| {
            // SAFETY: an ISA's rows run only after its `detected` check confirmed every feature
            // the kernel enables (see `Isa::detected`).
            unsafe { $kernel(weights, row_bytes, acts, out) }
        }
    };
}

/// A `crate::repack::RepackedKernel` calling the `#[target_feature]` kernel `$kernel` (an ISA
/// row's entry).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
macro_rules! repacked {
    ($kernel:expr) => {
        |group, ahead, acts, out| {
            // SAFETY: an ISA's rows run only after its `detected` check confirmed every feature
            // the kernel enables (see `Isa::detected`).
            unsafe { $kernel(group, ahead, acts, out) }
        }
    };
}

/// Runs `$body` with the run-time count `$n` (0 runs nothing) as the const `$N`, one of the
/// counts listed: the repacked kernels' last pass, over the activations short of a full one,
/// compiled for its count. Run one activation at a time, as before, they loaded and decoded a
/// group's weights again for each (a verifying pass of two rows cost two of one).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
macro_rules! for_count {
    ($n:expr, [$($k:literal),+], $N:ident => $body:expr) => {
        match $n {
            0 => {}
            $($k => {
                const $N: usize = $k;
                $body
            })+
            n => unreachable!("no pass of {n} activations: the caller passes fewer than a full one"),
        }
    };
}

#[cfg(target_arch = "aarch64")]
mod aarch64;
pub(crate) mod reference;
// Everywhere: `crate::repack` packs the 32-value formats by it on every target.
pub(crate) mod repacked_formats;
mod widened;
#[cfg(target_arch = "x86_64")]
mod x86;
#[cfg(target_arch = "x86_64")]
pub(crate) use x86::mxfp4_pairs_to_halves;
#[cfg(target_arch = "x86_64")]
pub(crate) use x86::prefetch_l2;

use std::sync::OnceLock;

use minerva_core::{DTYPE_TABLE, DType};

use crate::QuantError;
use crate::activation::Activation;

/// A row dequantizer: whole blocks in, exactly their values out; wrong lengths are a [`QuantError`].
pub(crate) type DequantizeFn = fn(&[u8], &mut [f32]) -> Result<(), QuantError>;

/// A row quantizer: whole blocks of values in, exactly their bytes out.
pub(crate) type QuantizeFn = fn(&[f32], &mut [u8]) -> Result<(), QuantError>;

/// A dot kernel: one weight row (whole blocks) · one activation whose length matches. Kernels zip
/// whole blocks, so a mismatch could only shorten the sum, never read out of bounds; the public
/// functions check every length first.
pub(crate) type DotKernel = fn(&[u8], &Activation<'_>) -> f32;

/// A tile kernel: every row of `weights` (whole rows of `row_bytes`) against every activation,
/// written row-major into `out` (rows × activations). It reads each weight block once for several
/// activations and each activation block once for several rows.
pub(crate) type TileKernel = fn(&[u8], usize, &[Activation<'_>], &mut [f32]);

/// An MXFP4 matrix in HF's and MLX's split layout (`crate::Matrix::Mxfp4Split`), its shape
/// checked: row `r`'s `groups` groups are physical row `r · row_stride`'s, 16 bytes of nibbles
/// each in `nibbles` and one E8M0 byte each in `scales`.
#[derive(Clone, Copy)]
pub(crate) struct SplitRows<'a> {
    pub(crate) nibbles: &'a [u8],
    pub(crate) scales: &'a [u8],
    pub(crate) row_stride: usize,
    pub(crate) groups: usize,
}

/// A split-MXFP4 kernel: rows `first..first + out.len() / acts.len()` of a split matrix against
/// one to [`SPLIT_MAX_ACTS`] i16 activations, into `out` (rows × activations), with the bits the
/// selected `matmul_i16` kernel gives on the same rows converted to GGML blocks.
pub(crate) type SplitKernel = fn(SplitRows<'_>, usize, &[Activation<'_>], &mut [f32]);

/// The most activations a [`SplitKernel`] takes (a decode batch's rows for one expert, below the
/// panels' eight; from there the rows are staged as GGML blocks, each staged block then serving
/// every activation).
pub(crate) const SPLIT_MAX_ACTS: usize = 7;

/// A matmul kernel: a tile kernel, or a dot kernel applied per (row, activation).
#[derive(Clone, Copy)]
pub(crate) enum MatKernel {
    Dot(DotKernel),
    Tile(TileKernel),
}

impl MatKernel {
    /// Every row of `weights` against every activation into `out` (rows × activations).
    pub(crate) fn apply(self, weights: &[u8], row_bytes: usize, acts: &[Activation<'_>], out: &mut [f32]) {
        match self {
            MatKernel::Tile(tile) => tile(weights, row_bytes, acts, out),
            MatKernel::Dot(dot) => {
                for (y_row, w_row) in out.chunks_exact_mut(acts.len()).zip(weights.chunks_exact(row_bytes)) {
                    for (y, act) in y_row.iter_mut().zip(acts) {
                        *y = dot(w_row, act);
                    }
                }
            }
        }
    }
}

/// The float weight formats as the const parameter of the float matmul kernels (`x86/float_panel.rs`,
/// `aarch64/neon_float.rs`; a closure would not inline their `#[target_feature]` widening into the
/// loops), and their bytes per value.
#[cfg_attr(not(any(target_arch = "x86_64", target_arch = "aarch64")), allow(dead_code))]
pub(crate) mod float_format {
    pub(crate) const F32: u8 = 0;
    pub(crate) const F16: u8 = 1;
    pub(crate) const BF16: u8 = 2;

    /// Bytes per value of `format`.
    pub(crate) const fn width(format: u8) -> usize {
        if format == F32 { 4 } else { 2 }
    }
}

/// How a 32-value block format's decoded quants combine with the activation, in the SIMD tile
/// kernels of every ISA.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum BlockKind {
    /// Signed i8 quants (Q8_0; MXFP4's doubled E2M1 values on x86).
    Signed,
    /// Unsigned quants minus an integer `k` (Q4_0 `k = 8`, Q5_0 `k = 16`).
    Offset(i32),
    /// Unsigned quants plus a per-block f32 minimum (Q4_1, Q5_1).
    Min,
}

/// One dtype's kernels. `None` where there is none: in [`REFERENCE`], that the crate cannot do it;
/// in an ISA's rows, that the ISA does not speed it up.
#[derive(Clone, Copy)]
pub(crate) struct Kernels {
    pub(crate) dtype: DType,
    pub(crate) dequantize: Option<DequantizeFn>,
    pub(crate) quantize: Option<QuantizeFn>,
    /// The format matmul quantizes activations to for these weights: `F32` (used as given),
    /// `Q8_0` or `Q8_K`, as llama.cpp's `vec_dot_type`. Reference rows only: an ISA's kernels
    /// read the same activations as the reference kernels they replace.
    pub(crate) activation: Option<DType>,
    /// Weights × activations in the `activation` format.
    pub(crate) matmul: Option<MatKernel>,
    /// Weights × i16 activations (`crate::matmul_i16`).
    pub(crate) matmul_i16: Option<MatKernel>,
    /// Repacked weights (`crate::repack`) × Q8_0 activations.
    pub(crate) repacked: Option<crate::repack::RepackedKernel>,
    /// Whether `repacked` was measured to beat the zero-copy kernels of its ISA on one activation
    /// as on many (`crate::repacking_pays`: what `--repack auto` asks of a format).
    pub(crate) repacked_pays: bool,
    /// MXFP4 in the split layout × i16 activations, read in place (an ISA row only: the reference
    /// stages the rows as GGML blocks for `matmul_i16`).
    pub(crate) split_i16: Option<SplitKernel>,
}

impl Kernels {
    /// A row with no kernels.
    pub(crate) const fn new(dtype: DType) -> Self {
        Kernels {
            dtype,
            dequantize: None,
            quantize: None,
            activation: None,
            matmul: None,
            matmul_i16: None,
            repacked: None,
            repacked_pays: false,
            split_i16: None,
        }
    }

    pub(crate) const fn dequantize(mut self, f: DequantizeFn) -> Self {
        self.dequantize = Some(f);
        self
    }

    pub(crate) const fn quantize(mut self, f: QuantizeFn) -> Self {
        self.quantize = Some(f);
        self
    }

    /// Matmul against activations in `format`, one weight row · one activation at a time.
    pub(crate) const fn dot(mut self, format: DType, f: DotKernel) -> Self {
        self.activation = Some(format);
        self.matmul = Some(MatKernel::Dot(f));
        self
    }

    /// Matmul in tiles of rows × activations (an ISA row; the activation format is the reference's).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(crate) const fn tile(mut self, f: TileKernel) -> Self {
        self.matmul = Some(MatKernel::Tile(f));
        self
    }

    pub(crate) const fn dot_i16(mut self, f: DotKernel) -> Self {
        self.matmul_i16 = Some(MatKernel::Dot(f));
        self
    }

    pub(crate) const fn tile_i16(mut self, f: TileKernel) -> Self {
        self.matmul_i16 = Some(MatKernel::Tile(f));
        self
    }

    /// The kernel of this dtype's repacked layout (`crate::repack`), not (or not yet) measured to
    /// beat the zero-copy kernels: `--repack on` uses it, `auto` does not.
    pub(crate) const fn repacked(mut self, f: crate::repack::RepackedKernel) -> Self {
        self.repacked = Some(f);
        self
    }

    /// [`Kernels::repacked`], measured to beat the zero-copy kernels on one activation as on many
    /// (the figures beside the ISA's row): `--repack auto` uses it.
    #[cfg(target_arch = "x86_64")]
    pub(crate) const fn repacked_paying(mut self, f: crate::repack::RepackedKernel) -> Self {
        self.repacked = Some(f);
        self.repacked_pays = true;
        self
    }

    /// The split-layout kernel (MXFP4 only).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(crate) const fn split_i16(mut self, f: SplitKernel) -> Self {
        self.split_i16 = Some(f);
        self
    }
}

/// An instruction set: the CPU features its kernels need, checked at run time, and its rows.
pub(crate) struct Isa {
    /// What [`cpu_kernels`] reports, e.g. `"avx2+fma+f16c"`.
    pub(crate) name: &'static str,
    /// Whether this CPU runs the rows' kernels. Rows are used only where this returned true: the
    /// `unsafe` calls of `#[target_feature]` functions inside them rely on it.
    pub(crate) detected: fn() -> bool,
    pub(crate) rows: &'static [Kernels],
}

/// The f32 vector kernels (`crate::vector`): not per dtype, so one set per process, from the best
/// detected ISA that has them.
#[derive(Clone, Copy)]
pub(crate) struct VectorKernels {
    pub(crate) isa: &'static str,
    pub(crate) dot: fn(&[f32], &[f32]) -> f32,
    /// `dot` of `x` with each row, into `out` (`(out, x, rows)`).
    pub(crate) dots: fn(&mut [f32], &[f32], &[f32]),
    pub(crate) axpy: fn(&mut [f32], f32, &[f32]),
    pub(crate) exp: fn(&mut [f32]),
    /// `(out, weights, rows)`: `crate::vector::weighted_sum_add`.
    pub(crate) weighted_sum_add: fn(&mut [f32], &[f32], &[f32]),
    /// `(outs, weights, rows)`: `crate::vector::weighted_sums_add`.
    pub(crate) weighted_sums_add: WeightedSumsFn,
    /// Whether `dots_f16` and `weighted_sums_add_f16` widen f16 values in registers (otherwise
    /// they widen blocks of rows on the stack): `crate::vector::f16_in_registers`.
    pub(crate) f16_in_registers: bool,
    /// `crate::vector::dots_f16`.
    pub(crate) dots_f16: fn(&mut [f32], &[f32], &[half::f16]),
    /// `(outs, xs, rows)`: `crate::vector::dots_many_f16` where a set does better than
    /// `dots_f16` query by query (which it is otherwise).
    pub(crate) dots_many_f16: Option<DotsManyF16Fn>,
    /// `crate::vector::weighted_sums_add_f16`.
    pub(crate) weighted_sums_add_f16: WeightedSumsF16Fn,
    /// `(values, out)`: `crate::vector::widen_f16`.
    pub(crate) widen_f16: fn(&[half::f16], &mut [f32]),
    /// `crate::vector::dots_transposed` where a set has a kernel for it (the query lengths its
    /// `chunks` list).
    pub(crate) dots_transposed: Option<DotsTransposed>,
    /// `(xs, scale, sink)`: `crate::vector::softmax`.
    pub(crate) softmax: fn(&mut [f32], f32, Option<f32>),
    /// `reference::quantize_i16_blocks`, bit for bit.
    pub(crate) quantize_i16: QuantizeI16Fn,
    /// `crate::activation::quantize_act_blocks` (Q8_0's values as the repacked kernels read
    /// them), bit for bit.
    pub(crate) quantize_q8_1: fn(&[f32], &mut [crate::repack::ActBlock]),
    /// `crate::activation::quantize_q8_k_blocks` (`quantize_row_q8_k_ref`'s blocks), bit for bit.
    pub(crate) quantize_q8_k: QuantizeQ8KFn,
    /// `(src, rows, cols, first_col, dst)`: `crate::vector::transpose_into_rows`.
    pub(crate) transpose: TransposeFn,
    /// `crate::MlxAffine::groups_to_bytes` for bf16 scales, bit for bit.
    pub(crate) mlx_affine_bf16: MlxAffineFn,
}

/// Whole MLX affine groups to their values' bytes: `(params, weight, scales, biases, out)`.
pub(crate) type MlxAffineFn = fn(&crate::MlxAffine, &[u8], &[u8], &[u8], &mut [u8]);

/// Columns `first_col..` of a row-major matrix into one slice per column: `(src, rows, cols,
/// first_col, dst)`.
pub(crate) type TransposeFn = fn(&[f32], usize, usize, usize, &mut [&mut [f32]]);

/// Several queries' dot products with the same f16 rows: `(outs, xs, rows)`.
pub(crate) type DotsManyF16Fn = fn(&mut [&mut [f32]], &[&[f32]], &[half::f16]);

/// [`DotsTransposed`]' kernel: `(outs, xs, firsts, keys)`.
pub(crate) type DotsTransposedFn = fn(&mut [&mut [f32]], &[&[f32]], &[usize], &[f32]);

/// Several queries' dot products with keys in `crate::vector::transpose_keys`' layout, for the
/// query lengths `chunks` lists (in 16-value chunks).
#[derive(Clone, Copy)]
pub(crate) struct DotsTransposed {
    /// `(outs, xs, firsts, keys)`.
    pub(crate) dots: DotsTransposedFn,
    pub(crate) chunks: &'static [usize],
}

impl DotsTransposed {
    /// Whether the kernel takes queries of `len` values.
    pub(crate) fn fits(&self, len: usize) -> bool {
        len.is_multiple_of(16) && self.chunks.contains(&(len / 16))
    }
}

/// Several queries' weighted sums over the same rows: `(outs, weights, rows)`.
pub(crate) type WeightedSumsFn = fn(&mut [&mut [f32]], &[&[f32]], &[f32]);

/// [`WeightedSumsFn`] over f16 rows.
pub(crate) type WeightedSumsF16Fn = fn(&mut [&mut [f32]], &[&[f32]], &[half::f16]);

/// Quantizes whole 32-value blocks of f32 (`x`) to i16 quants, one scale and one quant sum per
/// block: `(x, quants, scales, sums)`.
pub(crate) type QuantizeI16Fn = fn(&[f32], &mut [i16], &mut [f32], &mut [i32]);

/// Quantizes whole 256-value blocks of f32 (`x`) to Q8_K: `(x, quants as i8 bits, scales, the
/// sums of each 16 quants)`.
pub(crate) type QuantizeQ8KFn = fn(&[f32], &mut [u8], &mut [f32], &mut [i16]);

/// The scalar f32 vector kernels.
pub(crate) const SCALAR_VECTOR: VectorKernels = VectorKernels {
    isa: SCALAR,
    dot: reference::vector_dot_f32,
    dots: reference::vector_dots_f32,
    axpy: reference::vector_axpy_f32,
    exp: reference::vector_exp_f32,
    weighted_sum_add: reference::vector_weighted_sum_add_f32,
    weighted_sums_add: reference::vector_weighted_sums_add_f32,
    f16_in_registers: false,
    dots_f16: |out, x, rows| widened::dots_f16(reference::vector_dots_f32, out, x, rows),
    dots_many_f16: None,
    weighted_sums_add_f16: |outs, weights, rows| {
        widened::weighted_sums_add_f16(reference::vector_weighted_sums_add_f32, outs, weights, rows)
    },
    widen_f16: widened::widen_f16,
    dots_transposed: None,
    softmax: reference::vector_softmax_f32,
    quantize_i16: reference::quantize_i16_blocks,
    quantize_q8_1: crate::activation::quantize_act_blocks,
    quantize_q8_k: crate::activation::quantize_q8_k_blocks,
    transpose: reference::vector_transpose_f32,
    mlx_affine_bf16: |p, weight, scales, biases, out| p.groups_to_bytes_ref(weight, scales, biases, out),
};

/// The vector kernels this CPU runs, detected once.
pub(crate) fn vector_kernels() -> &'static VectorKernels {
    static SELECTED: OnceLock<VectorKernels> = OnceLock::new();
    SELECTED.get_or_init(|| {
        // `MINERVA_CPU_ISAS` limits these too: the AVX-512 set with the AVX-512 matmul ISA, the
        // AVX2 set with the AVX2 one, so that a run limited to AVX2 is AVX2 throughout.
        let allowed = std::env::var(ISAS_VAR).ok();
        let permits = |isa: &Isa| is_allowed(isa.name, allowed.as_deref());
        #[cfg(target_arch = "x86_64")]
        if let Some(kernels) = permits(&x86::AVX512_VNNI).then(x86::avx512_vector).flatten() {
            return kernels;
        }
        #[cfg(target_arch = "x86_64")]
        if let Some(kernels) = permits(&x86::AVX2_FMA_F16C).then(x86::avx2_fma_vector).flatten() {
            return kernels;
        }
        #[cfg(target_arch = "aarch64")]
        if let Some(kernels) = permits(&aarch64::NEON).then(aarch64::neon_vector).flatten() {
            return kernels;
        }
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        let _ = permits;
        SCALAR_VECTOR
    })
}

/// The name [`cpu_kernels`] gives the scalar reference.
pub(crate) const SCALAR: &str = "scalar";

/// Every instruction set with kernels, best first: where two detected ISAs fill the same entry,
/// the earlier one's kernel is used.
const ISAS: &[Isa] = &[
    #[cfg(target_arch = "x86_64")]
    x86::AMX_INT8,
    #[cfg(target_arch = "x86_64")]
    x86::AVX512_VNNI,
    #[cfg(target_arch = "x86_64")]
    x86::AVX2_VNNI,
    #[cfg(target_arch = "x86_64")]
    x86::AVX2_FMA_F16C,
    #[cfg(target_arch = "x86_64")]
    x86::AVX2,
    #[cfg(target_arch = "aarch64")]
    aarch64::NEON_DOTPROD,
    #[cfg(target_arch = "aarch64")]
    aarch64::NEON,
];

/// Every dtype's reference row, indexed by discriminant (rows without kernels for the others).
static REFERENCE: [Kernels; DTYPE_TABLE.len()] = index_by_dtype(&reference::ROWS);

/// Spreads `rows` into a table indexed by the `DType` discriminant; two rows for one dtype are a
/// compile error.
const fn index_by_dtype<const N: usize>(rows: &[Kernels; N]) -> [Kernels; DTYPE_TABLE.len()] {
    let mut table = [Kernels::new(DType::F32); DTYPE_TABLE.len()];
    let mut i = 0;
    while i < DTYPE_TABLE.len() {
        table[i].dtype = DTYPE_TABLE[i].dtype;
        i += 1;
    }
    let mut seen = [false; DTYPE_TABLE.len()];
    let mut r = 0;
    while r < N {
        let at = rows[r].dtype as usize;
        assert!(!seen[at], "two kernel rows for one dtype");
        seen[at] = true;
        table[at] = rows[r];
        r += 1;
    }
    table
}

/// The scalar reference row of `dtype`.
pub(crate) fn reference(dtype: DType) -> &'static Kernels {
    &REFERENCE[dtype as usize]
}

/// One dtype's kernels as this CPU runs them, with the ISA each entry came from.
#[derive(Clone, Copy)]
pub(crate) struct Selected {
    pub(crate) kernels: Kernels,
    pub(crate) names: CpuKernels,
    /// The ISA of `kernels.repacked`.
    pub(crate) repacked_isa: Option<&'static str>,
}

/// The instruction set of each kernel [`crate::dequantize_fast`], [`crate::matmul`] and
/// [`crate::matmul_i16`] use for one dtype on this CPU (`"scalar"` for the reference, `None` where
/// there is no kernel).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuKernels {
    /// The dequantizer of [`crate::dequantize_fast`].
    pub dequantize: Option<&'static str>,
    /// The kernel of [`crate::matmul`] / [`crate::matvec`].
    pub matmul: Option<&'static str>,
    /// The kernel of [`crate::matmul_i16`] (`None`: it runs [`crate::matmul`]'s).
    pub matmul_i16: Option<&'static str>,
}

/// Which instruction set runs each kernel for weights of `dtype` on this CPU.
pub fn cpu_kernels(dtype: DType) -> CpuKernels {
    selected(dtype).names
}

/// The row of `dtype` for this CPU: each entry from the best detected ISA that has it, else the
/// reference. ISAs are detected once, at the first call.
pub(crate) fn selected(dtype: DType) -> &'static Selected {
    static SELECTED: OnceLock<Vec<Selected>> = OnceLock::new();
    &SELECTED.get_or_init(|| {
        let allowed = std::env::var(ISAS_VAR).ok();
        select(ISAS.iter().filter(|isa| (isa.detected)() && is_allowed(isa.name, allowed.as_deref())))
    })[dtype as usize]
}

/// The environment variable that limits the instruction sets [`selected`] may use to those it
/// names, comma-separated (e.g. `MINERVA_CPU_ISAS=avx2+fma+f16c,avx2`; empty: the reference
/// only), to compare kernels on one machine; unset, every detected one. The f32 vector kernels
/// follow it: AVX-512's only where `avx512+vnni` is allowed, AVX2's where `avx2+fma+f16c` is,
/// NEON's where `neon` is.
pub const ISAS_VAR: &str = "MINERVA_CPU_ISAS";

/// Whether `name` is in the comma-separated `allowed` list (`None`: every ISA is).
fn is_allowed(name: &str, allowed: Option<&str>) -> bool {
    allowed.is_none_or(|list| list.split(',').any(|item| item.trim() == name))
}

/// The instruction sets with kernels that this CPU runs, best first, then `"scalar"` (the
/// reference, which runs everywhere): every name [`cpu_kernels`] can give here.
pub fn detected_isas() -> Vec<&'static str> {
    ISAS.iter().filter(|isa| (isa.detected)()).map(|isa| isa.name).chain([SCALAR]).collect()
}

/// The row of `dtype` with one ISA's entries only (the reference's where it has none), if that
/// ISA exists and this CPU runs it; `"scalar"` is the reference row.
pub(crate) fn isa_only(isa: &str, dtype: DType) -> Option<Kernels> {
    if isa == SCALAR {
        return Some(*reference(dtype));
    }
    let found = ISAS.iter().find(|i| i.name == isa && (i.detected)())?;
    Some(select(std::iter::once(found))[dtype as usize].kernels)
}

/// Merges the reference table with the rows of `isas` (best first).
fn select<'a>(isas: impl DoubleEndedIterator<Item = &'a Isa>) -> Vec<Selected> {
    let name = |present: bool| present.then_some(SCALAR);
    let mut table: Vec<Selected> = REFERENCE
        .iter()
        .map(|&kernels| Selected {
            kernels,
            names: CpuKernels {
                dequantize: name(kernels.dequantize.is_some()),
                matmul: name(kernels.matmul.is_some()),
                matmul_i16: name(kernels.matmul_i16.is_some()),
            },
            repacked_isa: name(kernels.repacked.is_some()),
        })
        .collect();
    // Worst first, so that a better ISA's entry overwrites a worse one's.
    for isa in isas.rev() {
        for row in isa.rows {
            let Selected { kernels, names, repacked_isa } = &mut table[row.dtype as usize];
            if row.dequantize.is_some() {
                (kernels.dequantize, names.dequantize) = (row.dequantize, Some(isa.name));
            }
            if row.matmul.is_some() {
                (kernels.matmul, names.matmul) = (row.matmul, Some(isa.name));
            }
            if row.matmul_i16.is_some() {
                (kernels.matmul_i16, names.matmul_i16) = (row.matmul_i16, Some(isa.name));
            }
            if row.repacked.is_some() {
                (kernels.repacked, kernels.repacked_pays) = (row.repacked, row.repacked_pays);
                *repacked_isa = Some(isa.name);
            }
            if row.split_i16.is_some() {
                kernels.split_i16 = row.split_i16;
            }
        }
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An ISA row only replaces entries the reference has, and keeps the reference's activation
    /// format (its kernels read what the reference kernels read) and quantizer.
    #[test]
    fn isa_rows_replace_reference_entries_only() {
        for isa in ISAS {
            for row in isa.rows {
                let reference = reference(row.dtype);
                let what = format!("{} {}", isa.name, row.dtype);
                assert!(row.activation.is_none() && row.quantize.is_none(), "{what}");
                assert!(row.dequantize.is_none() || reference.dequantize.is_some(), "{what}: dequantize");
                assert!(row.matmul.is_none() || reference.matmul.is_some(), "{what}: matmul");
                assert!(row.matmul_i16.is_none() || reference.matmul_i16.is_some(), "{what}: matmul_i16");
                assert!(row.repacked.is_none() || reference.repacked.is_some(), "{what}: repacked");
                // The reference multiplies split matrices by staging GGML blocks; a split kernel
                // stands in for that with the i16 kernels' bits.
                assert!(row.split_i16.is_none() || row.dtype == DType::MXFP4, "{what}: split_i16");
            }
            let mut dtypes: Vec<usize> = isa.rows.iter().map(|r| r.dtype as usize).collect();
            dtypes.sort_unstable();
            dtypes.dedup();
            assert_eq!(dtypes.len(), isa.rows.len(), "{}: one row per dtype", isa.name);
        }
    }

    #[test]
    fn every_matmul_row_names_its_activation_format() {
        for row in &REFERENCE {
            assert_eq!(row.matmul.is_some(), row.activation.is_some(), "{}", row.dtype);
            assert!(row.matmul_i16.is_none() || row.activation == Some(DType::Q8_0), "{}", row.dtype);
            if let Some(format) = row.activation {
                assert!(row.dtype.block_elems().is_multiple_of(format.block_elems()), "{}", row.dtype);
            }
        }
    }

    #[test]
    fn the_isa_list_names_whole_isas() {
        assert!(is_allowed("avx2", None));
        assert!(is_allowed("avx2", Some("avx2+fma+f16c, avx2")));
        assert!(!is_allowed("avx2+fma+f16c", Some("avx2")));
        assert!(!is_allowed("avx2", Some("")));
    }

    #[test]
    fn without_simd_every_entry_is_the_reference() {
        let table = select(std::iter::empty());
        for (row, reference) in table.iter().zip(&REFERENCE) {
            let names = [row.names.dequantize, row.names.matmul, row.names.matmul_i16];
            assert!(names.iter().all(|n| n.is_none() || *n == Some(SCALAR)), "{}", reference.dtype);
            assert_eq!(row.names.dequantize.is_some(), reference.dequantize.is_some());
        }
    }
}
