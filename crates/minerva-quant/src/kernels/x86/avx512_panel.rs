//! AVX-512 VNNI panel kernels for prefill: the 32-value block formats against i16 activations
//! when a call brings [`MIN_ACTS`] or more of them (fewer go to `avx512_tile` and the AVX2 tiles
//! and panels).
//!
//! The layout and arithmetic of `avx2_panel`, twice as wide: a panel holds 16 rows, one per i32
//! lane of a 512-bit vector, and each pair of activation quants meets all 16 rows in one
//! `vpdpwssd` (the `madd` and the add fused, 32 multiply-adds):
//!
//! ```text
//!   slot p of block b (p = 0..16): lane r = the i16 pair (value 2p, value 2p + 1) of row r
//!   s    = dpwssd(s, slot p, broadcast(activation's pair p))   16 rows' partial sums
//!   acc  = fma(d_w[rows] · d_a, f32(s), acc)                    per block and half
//! ```
//!
//! Every lane runs the operations of `avx2_panel` in the same order (the same two halves of each
//! pair's exact integer sum, the same f32 products and FMAs, the halves added last), so the results
//! equal the AVX2 panels' and tiles' bit for bit: a row's output does not depend on the ISA's
//! vector width or on how many activations came with it.
//!
//! Memory safety does not rest on `unsafe` (slices and `bytemuck` unaligned loads); the caller
//! promises AVX2, FMA, F16C, AVX-512F/BW and AVX-512 VNNI (see `super::AVX512_VNNI`).

use core::arch::x86_64::{
    __m256i, __m512, __m512i, _mm256_setzero_si256, _mm512_add_ps, _mm512_castsi256_si512, _mm512_castsi512_ps,
    _mm512_cvtepi32_ps, _mm512_fmadd_ps, _mm512_inserti64x4, _mm512_mul_ps, _mm512_set1_epi32, _mm512_set1_ps,
    _mm512_setzero_ps, _mm512_setzero_si512, _mm512_sub_epi32,
};
use std::cell::RefCell;

use super::avx2_panel::{Layout, transpose8};
use super::avx2_tile_i16::{self as tile_i16, Decoded, Mxfp4, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0};
use super::avx512_tile;
use crate::activation::Activation;
use crate::kernels::BlockKind as Kind;

/// Fewest activations for which a call takes these panels: with 8 (one step) the AVX2 panels,
/// whose 8-row panels cost less to pack, were as fast or faster (1536×576, 1 thread: 0.92–1.07×
/// of theirs at 8, 1.08–1.2× at 16).
pub(super) const MIN_ACTS: usize = 16;

/// Rows per panel: one i32 lane each.
const ROWS: usize = 16;

/// Activations per step: each slot is loaded once for this many `vpdpwssd` (16 of the 32 vector
/// registers hold their sums and accumulators).
const ACTS: usize = 8;

/// One block of a panel: 16 slots (slot p: the pair of values 2p, 2p+1 of the 16 rows), the rows'
/// scales and their minimums (as f32 bits).
type PanelBlock = [__m512i; 18];

thread_local! {
    /// The current row group's panel, kept per thread (tens of KiB).
    static PANEL: RefCell<Vec<PanelBlock>> = const { RefCell::new(Vec::new()) };
}

/// Lanes 0..8 from `low`, 8..16 from `high`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn join(low: __m256i, high: __m256i) -> __m512i {
    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(low), high)
}

/// 16 rows' vectors of 8 i32 each, transposed into 8 slots of 16 lanes (lane r = row r).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) fn across_rows(v: &[__m256i; ROWS], slots: &mut [__m512i]) {
    let first = transpose8(std::array::from_fn(|r| v[r]));
    let second = transpose8(std::array::from_fn(|r| v[8 + r]));
    for p in 0..8 {
        slots[p] = join(first[p], second[p]);
    }
}

/// Unpacks up to 16 rows (the missing ones as zeros) into `panel`, one entry per block.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn pack<D>(rows: &[&[u8]], block_bytes: usize, panel: &mut [PanelBlock], decode: &D)
where
    D: Fn(&[u8]) -> Decoded,
{
    let zero = bytemuck::Zeroable::zeroed();
    for (b, entry) in panel.iter_mut().enumerate() {
        let (mut lo, mut hi, mut d, mut m) = ([zero; ROWS], [zero; ROWS], [0.0f32; ROWS], [0.0f32; ROWS]);
        for (r, row) in rows.iter().enumerate() {
            ((lo[r], hi[r]), d[r], m[r]) = decode(&row[block_bytes * b..block_bytes * (b + 1)]);
        }
        across_rows(&lo, &mut entry[..8]);
        across_rows(&hi, &mut entry[8..16]);
        entry[16] = bytemuck::cast(d);
        entry[17] = bytemuck::cast(m);
    }
}

/// `s + Σ` of the products of `w`'s i16 pairs with the pair `pair[..2]` broadcast to all 16
/// lanes: one `vpdpwssd` with its pair read from memory.
///
/// Written in `asm!` because LLVM splits the intrinsic into `vpmaddwd` + `vpaddd` unless it tunes
/// for a CPU it knows to run `vpdpwssd` fast, which a run-time dispatched kernel cannot name.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[allow(unsafe_code)]
pub(super) fn add_pair_products(s: __m512i, w: __m512i, pair: &[i16]) -> __m512i {
    let pair = &pair[..2];
    let mut s = s;
    // SAFETY: the instruction reads the 4 bytes of `pair` (sliced above, so they exist) and
    // writes only `s`'s register; the caller promises AVX-512 VNNI (this function's features).
    unsafe {
        core::arch::asm!("vpdpwssd {s}, {w}, dword ptr [{p}]{{1to16}}", s = inout(zmm_reg) s, w = in(zmm_reg) w,
            p = in(reg) pair.as_ptr(), options(pure, readonly, nostack, preserves_flags));
    }
    s
}

/// The rows of one group of up to 16 (`group` holds whole rows of `row_bytes`) and their count.
pub(super) fn group_rows(group: &[u8], row_bytes: usize) -> ([&[u8]; ROWS], usize) {
    let mut rows: [&[u8]; ROWS] = [&[]; ROWS];
    let mut count = 0;
    for (row, bytes) in rows.iter_mut().zip(group.chunks_exact(row_bytes)) {
        (*row, count) = (bytes, count + 1);
    }
    (rows, count)
}

/// `ACTS` activations' values at one block, side by side, so that a step reads them from one
/// place per block without a bounds check per activation.
#[derive(Clone, Copy)]
struct ActBlock {
    q: [[i16; 32]; ACTS],
    d: [f32; ACTS],
    sums: [i32; ACTS],
    ds: [f32; ACTS],
}

const EMPTY: ActBlock = ActBlock { q: [[0; 32]; ACTS], d: [0.0; ACTS], sums: [0; ACTS], ds: [0.0; ACTS] };

thread_local! {
    /// The call's activations as [`ActBlock`]s: group `g` (activations `ACTS·g..`) at block `b` is
    /// entry `g·blocks + b`; a last group short of `ACTS` is filled with zeros. With the key of
    /// the activations they hold.
    static ACT_BLOCKS: RefCell<(Option<LayoutKey>, Vec<ActBlock>)> = const { RefCell::new((None, Vec::new())) };
}

/// Which activations a thread's laid-out blocks hold: a prefill's matmul calls a kernel once per
/// task and chunk, every task with the same chunks, so each thread lays a chunk out once rather
/// than once per task. Activations do not change after quantizing and their ids are never reused,
/// so an equal key means the same values.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct LayoutKey {
    first: u64,
    count: usize,
    blocks: usize,
}

impl LayoutKey {
    pub(super) fn of(acts: &[Activation<'_>], blocks: usize) -> Option<Self> {
        acts.first().map(|first| Self { first: first.id, count: acts.len(), blocks })
    }
}

/// `out` laid out for `acts` by `lay_out`, unless `key` says it already is.
pub(super) fn laid_out<B>(
    acts: &[Activation<'_>],
    blocks: usize,
    (key, out): &mut (Option<LayoutKey>, Vec<B>),
    lay_out: impl Fn(&[Activation<'_>], usize, &mut Vec<B>),
) {
    let wanted = LayoutKey::of(acts, blocks);
    if wanted.is_none() || *key != wanted {
        // Cleared first, so that a panic while laying out leaves no stale key behind.
        *key = None;
        lay_out(acts, blocks, out);
        *key = wanted;
    }
}

/// Lays `acts` out as [`ActBlock`]s (see [`ACT_BLOCKS`]).
fn lay_out(acts: &[Activation<'_>], blocks: usize, out: &mut Vec<ActBlock>) {
    out.clear();
    out.resize(acts.len().div_ceil(ACTS) * blocks, EMPTY);
    for (group, acts) in out.chunks_exact_mut(blocks).zip(acts.chunks(ACTS)) {
        for (j, act) in acts.iter().enumerate() {
            let quants = act.q16[..32 * blocks].chunks_exact(32);
            let values = quants.zip(&act.d[..blocks]).zip(&act.sums[..blocks]);
            for (b, ((q, &d), &sum)) in values.enumerate() {
                let entry = &mut group[b];
                entry.q[j].copy_from_slice(q);
                (entry.d[j], entry.sums[j]) = (d, sum);
                entry.ds[j] = act.ds.get(b).copied().unwrap_or(0.0);
            }
        }
    }
}

/// One panel (16 rows) against one group of `ACTS` activations: 16 row results per activation.
///
/// Each block's two halves of every pair's sum (`avx2_panel`'s `part`: slots 0..4 and 8..12,
/// then 4..8 and 12..16) are scaled and accumulated into two accumulators per activation, which
/// are added last. Both halves in one pass over the blocks, so that the scale product
/// `d_w · d_a` is made once per block and the panel is read once.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn step<L: Layout>(panel: &[PanelBlock], acts: &[ActBlock]) -> [__m512; ACTS] {
    let kind = L::KIND;
    let zero = _mm512_setzero_ps();
    let (mut lo, mut hi) = ([zero; ACTS], [zero; ACTS]);
    for (entry, a) in panel.iter().zip(acts) {
        let dw = _mm512_castsi512_ps(entry[16]);
        let mut dd = [zero; ACTS];
        let mut s = [_mm512_setzero_si512(); ACTS];
        for p in [0, 1, 2, 3, 8, 9, 10, 11] {
            let w = entry[p];
            for (s, q) in s.iter_mut().zip(&a.q) {
                *s = add_pair_products(*s, w, &q[2 * p..]);
            }
        }
        for j in 0..ACTS {
            let v = match kind {
                Kind::Offset(k) => _mm512_sub_epi32(s[j], _mm512_set1_epi32(k * a.sums[j])),
                _ => s[j],
            };
            dd[j] = _mm512_mul_ps(dw, _mm512_set1_ps(a.d[j]));
            lo[j] = _mm512_fmadd_ps(dd[j], _mm512_cvtepi32_ps(v), lo[j]);
            if kind == Kind::Min {
                lo[j] = _mm512_fmadd_ps(_mm512_castsi512_ps(entry[17]), _mm512_set1_ps(a.ds[j]), lo[j]);
            }
        }
        let mut s = [_mm512_setzero_si512(); ACTS];
        for p in [4, 5, 6, 7, 12, 13, 14, 15] {
            let w = entry[p];
            for (s, q) in s.iter_mut().zip(&a.q) {
                *s = add_pair_products(*s, w, &q[2 * p..]);
            }
        }
        for j in 0..ACTS {
            hi[j] = _mm512_fmadd_ps(dd[j], _mm512_cvtepi32_ps(s[j]), hi[j]);
            if kind == Kind::Min {
                // The second half's minimum term is zero; the FMA stays so that results equal
                // `avx2_panel`'s bit for bit (it turns a −0 sum into +0, as there).
                hi[j] = _mm512_fmadd_ps(zero, _mm512_set1_ps(a.ds[j]), hi[j]);
            }
        }
    }
    std::array::from_fn(|j| _mm512_add_ps(lo[j], hi[j]))
}

/// Every row of `w` (whole rows of `row_bytes`) against every activation into `out`, through
/// panels of 16 rows: the AVX2 panels' and tiles' results, bit for bit.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn panels<L: Layout, D>(w: &[u8], row_bytes: usize, acts: &[Activation<'_>], out: &mut [f32], decode: D)
where
    D: Fn(&[u8]) -> Decoded,
{
    let blocks = row_bytes / L::BLOCK_BYTES;
    ACT_BLOCKS.with_borrow_mut(|cached| {
        laid_out(acts, blocks, cached, lay_out);
        let act_blocks = &cached.1;
        PANEL.with_borrow_mut(|panel| {
            panel.resize(blocks, bytemuck::Zeroable::zeroed());
            for (first_row, group) in (0..).step_by(ROWS).zip(w.chunks(ROWS * row_bytes)) {
                let (rows, count) = group_rows(group, row_bytes);
                pack(&rows[..count], L::BLOCK_BYTES, panel, &decode);
                for (g, group_acts) in act_blocks.chunks_exact(blocks).enumerate() {
                    put_results(out, acts.len(), first_row, count, ACTS * g, step::<L>(panel, group_acts));
                }
            }
        });
    });
}

/// A step's results (`results[k]`: the values of rows `first_row..first_row + count`, one per
/// lane, for activation `first + k`) into `out` (rows × `n` activations); activations past the
/// call's are dropped (a last step may be short).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) fn put_results<const A: usize>(
    out: &mut [f32],
    n: usize,
    first_row: usize,
    count: usize,
    first: usize,
    results: [__m512; A],
) {
    let out = &mut out[first_row * n..];
    if A == 8 && first + 8 <= n {
        // Eight whole activations: two 8 × 8 transposes (rows 0..8 and 8..16) give each row its
        // eight values side by side, one store per row instead of eight.
        for half in 0..2 {
            let mut eight = [_mm256_setzero_si256(); 8];
            for (e, v) in eight.iter_mut().zip(results) {
                let v: [__m256i; 2] = bytemuck::cast(v);
                *e = v[half];
            }
            for (r, row) in transpose8(eight).into_iter().enumerate().take(count.saturating_sub(8 * half)) {
                let values: [f32; 8] = bytemuck::cast(row);
                out[(8 * half + r) * n + first..][..8].copy_from_slice(&values);
            }
        }
        return;
    }
    for (j, v) in (first..n).zip(results) {
        let v: [f32; ROWS] = bytemuck::cast(v);
        for (r, &value) in v.iter().enumerate().take(count) {
            out[r * n + j] = value;
        }
    }
}

/// The `matmul_i16` kernel of one format for this ISA: panels from [`MIN_ACTS`] activations,
/// `avx512_tile`'s kernels (`G` activation groups per AVX2 tile) below.
macro_rules! format_kernel {
    ($name:ident, $format:ty, $tiles:ident, $decode:ident) => {
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        pub(super) fn $name<const G: usize>(w: &[u8], row_bytes: usize, acts: &[Activation<'_>], out: &mut [f32]) {
            if acts.len() >= MIN_ACTS {
                panels::<$format, _>(w, row_bytes, acts, out, |b| tile_i16::$decode(b));
            } else {
                avx512_tile::$tiles::<G>(w, row_bytes, acts, out);
            }
        }
    };
}

format_kernel!(kernel_q8_0, Q8_0, tiles_q8_0, decode_q8_0);
format_kernel!(kernel_q4_0, Q4_0, tiles_q4_0, decode_q4_0);
format_kernel!(kernel_q4_1, Q4_1, tiles_q4_1, decode_q4_1);
format_kernel!(kernel_q5_0, Q5_0, tiles_q5_0, decode_q5_0);
format_kernel!(kernel_q5_1, Q5_1, tiles_q5_1, decode_q5_1);
format_kernel!(kernel_mxfp4, Mxfp4, tiles_mxfp4, decode_mxfp4);
