//! AVX-512 VNNI panel kernels for Q2_K…Q6_K prefill against Q8_K activations, when a call
//! brings [`MIN_ACTS`] or more of them (fewer go to `avx2_tile_k`).
//!
//! `avx2_tile_k` decodes each super-block again for every 4 activations and spends most of its
//! instructions there. Here 16 rows are decoded once per call into a panel of i16 weights, each
//! quant already multiplied by its sub-block's scale (at most 63 · 63, so exact in i16), laid out
//! across the rows; the activations are widened to i16 once per call:
//!
//! ```text
//!   slot s of a super-block (s = 0..128): lane r = row r's scaled pair (value 2s, value 2s + 1)
//!   S_l += dpwssd(slot s, broadcast(activation pair s))   for the slots of lane l (below)
//! ```
//!
//! The results must equal `avx2_tile_k`'s bit for bit (a row's output may not depend on how many
//! activations came with it). Its integer sum per super-block has 8 lanes, lane `l` holding values
//! `32c + 4l .. 32c + 4l + 4` of every 32-value chunk `c`, each product weighted by its sub-block's
//! scale: the same integers as `S_l` here (slots `16c + 2l` and `16c + 2l + 1`), exactly. Each `S_l`
//! is then converted and scaled as its lane is there, the minimum or offset term computed as its
//! integer and f32 operations are, and the 8 lanes added in `hsum_ps`'s order.
//!
//! Memory safety does not rest on `unsafe` (slices and `bytemuck` unaligned loads); the caller
//! promises AVX2, FMA, F16C, AVX-512F/BW and AVX-512 VNNI (see `super::AVX512_VNNI`).

use core::arch::x86_64::{
    __m128i, __m256i, __m512, __m512i, _mm256_castsi256_si128, _mm256_cvtepi8_epi16, _mm256_cvtepu8_epi16,
    _mm256_cvtepu16_epi32, _mm256_extracti128_si256, _mm256_mullo_epi16, _mm256_or_si256, _mm256_set1_epi16,
    _mm256_setzero_si256, _mm256_slli_epi32, _mm256_srli_epi16, _mm512_add_ps, _mm512_castsi512_ps, _mm512_cvtepi32_ps,
    _mm512_fmadd_ps, _mm512_mul_ps, _mm512_mullo_epi32, _mm512_set1_epi32, _mm512_set1_ps, _mm512_setzero_ps,
    _mm512_setzero_si512, _mm512_sub_ps,
};
use std::cell::RefCell;

use bytemuck::pod_read_unaligned;

use super::avx2_dequant::q6_k_quarters;
use super::avx2_dot::f16_at;
use super::avx2_tile_k::{self as tile_k, k4_chunk, k4_scales_mins, q2_k_quants, q3_k_quants};
use super::avx512_panel::{LayoutKey, across_rows, add_pair_products, group_rows, laid_out, put_results};
use crate::activation::Activation;
use crate::ggml::k_quants::q3_k_scales;

/// Fewest activations for which a call packs panels (as the 32-value formats' AVX-512 panels).
pub(super) const MIN_ACTS: usize = 16;

/// Rows per panel: one i32 lane each.
const ROWS: usize = 16;

/// Activations per step: each slot is loaded once for both (their 16 integer sums and 16 f32
/// accumulators fill the 32 vector registers).
const ACTS: usize = 2;

/// Values per super-block, and i16 pairs (slots) per super-block.
const VALUES: usize = 256;
const SLOTS: usize = VALUES / 2;

/// One super-block of a panel: slots `0..128` the scaled quants, `128..136` the weights of the
/// minimum (Q4_K: `(m_j, m_j)` against `bsums` `2j, 2j + 1`) or offset (Q6_K: the scales) term,
/// `136` the rows' `d`, `137` their `dmin` (f32 bits).
type PanelBlock = [__m512i; SLOTS + 10];

/// One row's super-block decoded: its 256 scaled quants (16 per vector, in value order), the 16
/// i16 weights of its minimum or offset term, `d` and `dmin`.
type Decoded = ([__m256i; 16], __m256i, f32, f32);

/// A K-quant as the panels read it.
trait Format {
    const BLOCK_BYTES: usize;
    /// Q6_K / Q3_K: the −32 / −4 every quant carries, taken off through the `bsums`; Q2_K, Q4_K,
    /// Q5_K: none (a minimum).
    const OFFSET: Option<i32>;
}

struct Q2K;
impl Format for Q2K {
    const BLOCK_BYTES: usize = 84;
    const OFFSET: Option<i32> = None;
}

struct Q3K;
impl Format for Q3K {
    const BLOCK_BYTES: usize = 110;
    const OFFSET: Option<i32> = Some(4);
}

struct Q4K;
impl Format for Q4K {
    const BLOCK_BYTES: usize = 144;
    const OFFSET: Option<i32> = None;
}

struct Q5K;
impl Format for Q5K {
    const BLOCK_BYTES: usize = 176;
    const OFFSET: Option<i32> = None;
}

struct Q6K;
impl Format for Q6K {
    const BLOCK_BYTES: usize = 210;
    const OFFSET: Option<i32> = Some(32);
}

thread_local! {
    /// The current row group's panel, kept per thread (about 9 KiB per super-block).
    static PANEL: RefCell<Vec<PanelBlock>> = const { RefCell::new(Vec::new()) };
    /// The call's activations, widened (see [`ActBlock`]), with the key of the activations they
    /// hold (see `avx512_panel::LayoutKey`).
    static ACT_BLOCKS: RefCell<(Option<LayoutKey>, Vec<ActBlock>)> = const { RefCell::new((None, Vec::new())) };
}

/// 32 unsigned quants (bytes) times `scale_low` (values 0..16) and `scale_high` (16..32), as i16.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn scaled(q: __m256i, scale_low: i16, scale_high: i16) -> [__m256i; 2] {
    [
        _mm256_mullo_epi16(_mm256_cvtepu8_epi16(_mm256_castsi256_si128(q)), _mm256_set1_epi16(scale_low)),
        _mm256_mullo_epi16(_mm256_cvtepu8_epi16(_mm256_extracti128_si256::<1>(q)), _mm256_set1_epi16(scale_high)),
    ]
}

/// Q4_K, or with `FIFTH` Q5_K (bit `j` of `qh[i]` the high bit of value `32j + i`, as
/// `avx2_tile_k` reads it: quants up to 31, times scales up to 63, still exact in i16).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn decode_k4<const FIFTH: bool>(w: &[u8]) -> Decoded {
    let (scales, mins) = k4_scales_mins(w);
    let sc: [i16; 8] = bytemuck::cast(scales);
    let mut values = [_mm256_setzero_si256(); 16];
    for chunk in 0..4 {
        let (low, high) = k4_chunk::<FIFTH>(w, chunk);
        let (j_low, j_high) = (2 * chunk, 2 * chunk + 1);
        [values[4 * chunk], values[4 * chunk + 1]] = scaled(low, sc[j_low], sc[j_low]);
        [values[4 * chunk + 2], values[4 * chunk + 3]] = scaled(high, sc[j_high], sc[j_high]);
    }
    let mins = _mm256_cvtepu16_epi32(mins);
    let mins_twice = _mm256_or_si256(mins, _mm256_slli_epi32::<16>(mins));
    (values, mins_twice, f16_at(w), f16_at(&w[2..]))
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn decode_q6_k(w: &[u8]) -> Decoded {
    let sc: [i16; 16] = std::array::from_fn(|i| i16::from(w[192 + i] as i8));
    let mut values = [_mm256_setzero_si256(); 16];
    for half in 0..2 {
        for (quarter, q6) in q6_k_quarters(w, half).into_iter().enumerate() {
            let sub = 8 * half + 2 * quarter;
            [values[sub], values[sub + 1]] = scaled(q6, sc[sub], sc[sub + 1]);
        }
    }
    let scales_wide = _mm256_cvtepi8_epi16(pod_read_unaligned::<__m128i>(&w[192..208]));
    (values, scales_wide, f16_at(&w[208..]), 0.0)
}

/// Q2_K: sub-blocks of 16 values, 4-bit scales (low nibble) and minimums (high nibble), the
/// minimums against the 16 `bsums` as `avx2_tile_k` weighs them.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn decode_q2_k(w: &[u8]) -> Decoded {
    let sc: [i16; 16] = std::array::from_fn(|i| i16::from(w[i] & 0x0F));
    let mut values = [_mm256_setzero_si256(); 16];
    for half in 0..2 {
        for quarter in 0..4 {
            let sub = 8 * half + 2 * quarter;
            [values[sub], values[sub + 1]] = scaled(q2_k_quants(w, half, quarter), sc[sub], sc[sub + 1]);
        }
    }
    let mins = _mm256_srli_epi16::<4>(_mm256_cvtepu8_epi16(pod_read_unaligned::<__m128i>(&w[..16])));
    (values, mins, f16_at(&w[80..]), f16_at(&w[82..]))
}

/// Q3_K: unsigned quants `q` (0..=7) times their signed 6-bit scales; the −4 comes off through the
/// `bsums`, weighted by the scales.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn decode_q3_k(w: &[u8]) -> Decoded {
    let scales = q3_k_scales(w[96..108].try_into().expect("12 scale bytes"));
    let sc: [i16; 16] = scales.map(i16::from);
    let mut values = [_mm256_setzero_si256(); 16];
    for half in 0..2 {
        for quarter in 0..4 {
            let sub = 8 * half + 2 * quarter;
            [values[sub], values[sub + 1]] = scaled(q3_k_quants(w, half, quarter), sc[sub], sc[sub + 1]);
        }
    }
    let scales_wide = _mm256_cvtepi8_epi16(pod_read_unaligned::<__m128i>(bytemuck::cast_slice(&scales)));
    (values, scales_wide, f16_at(&w[108..]), 0.0)
}

/// Decodes up to 16 rows (the missing ones as zeros) into `panel`, one entry per super-block.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn pack<F: Format>(rows: &[&[u8]], panel: &mut [PanelBlock], decode: fn(&[u8]) -> Decoded) {
    let zero = _mm256_setzero_si256();
    for (b, entry) in panel.iter_mut().enumerate() {
        let mut values = [[zero; 16]; ROWS];
        let (mut extra, mut d, mut dmin) = ([zero; ROWS], [0.0f32; ROWS], [0.0f32; ROWS]);
        for (r, row) in rows.iter().enumerate() {
            (values[r], extra[r], d[r], dmin[r]) = decode(&row[F::BLOCK_BYTES * b..F::BLOCK_BYTES * (b + 1)]);
        }
        for g in 0..16 {
            across_rows(&std::array::from_fn(|r| values[r][g]), &mut entry[8 * g..8 * g + 8]);
        }
        across_rows(&extra, &mut entry[SLOTS..SLOTS + 8]);
        entry[SLOTS + 8] = bytemuck::cast(d);
        entry[SLOTS + 9] = bytemuck::cast(dmin);
    }
}

/// [`ACTS`] activations' values at one super-block, widened to i16, side by side.
#[derive(Clone, Copy)]
struct ActBlock {
    q: [[i16; VALUES]; ACTS],
    d: [f32; ACTS],
    bsums: [[i16; 16]; ACTS],
}

const EMPTY: ActBlock = ActBlock { q: [[0; VALUES]; ACTS], d: [0.0; ACTS], bsums: [[0; 16]; ACTS] };

/// Lays `acts` out as [`ActBlock`]s: group `g` at super-block `b` is entry `g·blocks + b`; a last
/// group short of [`ACTS`] is filled with zeros.
fn lay_out(acts: &[Activation<'_>], blocks: usize, out: &mut Vec<ActBlock>) {
    out.clear();
    out.resize(acts.len().div_ceil(ACTS) * blocks, EMPTY);
    for (group, acts) in out.chunks_exact_mut(blocks).zip(acts.chunks(ACTS)) {
        for (j, act) in acts.iter().enumerate() {
            let quants = act.qs[..VALUES * blocks].chunks_exact(VALUES);
            let values = quants.zip(&act.d[..blocks]).zip(act.bsums[..16 * blocks].chunks_exact(16));
            for (entry, ((q, &d), bsums)) in group.iter_mut().zip(values) {
                for (wide, &byte) in entry.q[j].iter_mut().zip(q) {
                    *wide = i16::from(byte as i8);
                }
                entry.d[j] = d;
                entry.bsums[j].copy_from_slice(bsums);
            }
        }
    }
}

/// One panel (16 rows) against one group of [`ACTS`] activations: 16 row results per activation,
/// as `avx2_tile_k` computes each (row, activation) pair.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn step<F: Format>(panel: &[PanelBlock], acts: &[ActBlock]) -> [__m512; ACTS] {
    let mut acc = [[_mm512_setzero_ps(); 8]; ACTS];
    let mut off = [_mm512_setzero_ps(); ACTS];
    for (entry, a) in panel.iter().zip(acts) {
        // S_l: lane l of `avx2_tile_k`'s sums, slots 16c + 2l and 16c + 2l + 1 of every chunk c.
        let mut sums = [[_mm512_setzero_si512(); 8]; ACTS];
        for c in 0..8 {
            for l in 0..8 {
                for h in 0..2 {
                    let s = 16 * c + 2 * l + h;
                    let w = entry[s];
                    for (sums, q) in sums.iter_mut().zip(&a.q) {
                        sums[l] = add_pair_products(sums[l], w, &q[2 * s..]);
                    }
                }
            }
        }
        let (dw, dmin) = (_mm512_castsi512_ps(entry[SLOTS + 8]), _mm512_castsi512_ps(entry[SLOTS + 9]));
        for j in 0..ACTS {
            let mut extra = _mm512_setzero_si512();
            for p in 0..8 {
                extra = add_pair_products(extra, entry[SLOTS + p], &a.bsums[j][2 * p..]);
            }
            let dd = _mm512_mul_ps(dw, _mm512_set1_ps(a.d[j]));
            for l in 0..8 {
                acc[j][l] = _mm512_fmadd_ps(dd, _mm512_cvtepi32_ps(sums[j][l]), acc[j][l]);
            }
            let term = match F::OFFSET {
                // `scale · (k · offset) as f32`.
                Some(k) => _mm512_mul_ps(dd, _mm512_cvtepi32_ps(_mm512_mullo_epi32(extra, _mm512_set1_epi32(k)))),
                // `dmin_w · d_a · min_sum as f32`.
                None => _mm512_mul_ps(_mm512_mul_ps(dmin, _mm512_set1_ps(a.d[j])), _mm512_cvtepi32_ps(extra)),
            };
            off[j] = _mm512_add_ps(off[j], term);
        }
    }
    // `hsum_ps`'s order: (l0 + l4) + (l2 + l6), then + ((l1 + l5) + (l3 + l7)).
    std::array::from_fn(|j| {
        let a = &acc[j];
        let t: [__m512; 4] = std::array::from_fn(|l| _mm512_add_ps(a[l], a[l + 4]));
        let total = _mm512_add_ps(_mm512_add_ps(t[0], t[2]), _mm512_add_ps(t[1], t[3]));
        _mm512_sub_ps(total, off[j])
    })
}

/// Every row of `w` against every activation into `out` (rows × activations), through panels of
/// 16 rows: `avx2_tile_k`'s results, bit for bit.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn panels<F: Format>(
    w: &[u8],
    row_bytes: usize,
    acts: &[Activation<'_>],
    out: &mut [f32],
    decode: fn(&[u8]) -> Decoded,
) {
    let blocks = row_bytes / F::BLOCK_BYTES;
    ACT_BLOCKS.with_borrow_mut(|cached| {
        laid_out(acts, blocks, cached, lay_out);
        let act_blocks = &cached.1;
        PANEL.with_borrow_mut(|panel| {
            panel.resize(blocks, [_mm512_setzero_si512(); SLOTS + 10]);
            for (first_row, group) in (0..).step_by(ROWS).zip(w.chunks(ROWS * row_bytes)) {
                let (rows, count) = group_rows(group, row_bytes);
                pack::<F>(&rows[..count], panel, decode);
                for (g, group_acts) in act_blocks.chunks_exact(blocks).enumerate() {
                    put_results(out, acts.len(), first_row, count, ACTS * g, step::<F>(panel, group_acts));
                }
            }
        });
    });
}

/// The matmul kernel of one K-quant for this ISA: panels from [`MIN_ACTS`] activations on,
/// `avx2_tile_k` (`A` activations per pass) below.
macro_rules! format_kernel {
    ($name:ident, $format:ty, $avx2:ident, $decode:expr) => {
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        pub(super) fn $name<const A: usize>(w: &[u8], row_bytes: usize, acts: &[Activation<'_>], out: &mut [f32]) {
            if acts.len() >= MIN_ACTS {
                panels::<$format>(w, row_bytes, acts, out, $decode);
            } else {
                tile_k::$avx2::<A>(w, row_bytes, acts, out);
            }
        }
    };
}

format_kernel!(kernel_q2_k, Q2K, tiles_q2_k, |b| decode_q2_k(b));
format_kernel!(kernel_q3_k, Q3K, tiles_q3_k, |b| decode_q3_k(b));
format_kernel!(kernel_q4_k, Q4K, tiles_q4_k, |b| decode_k4::<false>(b));
format_kernel!(kernel_q5_k, Q5K, tiles_q5_k, |b| decode_k4::<true>(b));
format_kernel!(kernel_q6_k, Q6K, tiles_q6_k, |b| decode_q6_k(b));
