//! AVX2 (+FMA, F16C) decode tiles for MXFP4 where HF and MLX store it (`Matrix::Mxfp4Split`):
//! nibbles in HF's pair order (byte j: value 2j low, 2j + 1 high), scales in a tensor of their
//! own, read where they lie against one to seven i16 activations — no staged copy of the rows.
//!
//! The results must equal `avx2_tile_i16`'s on the same values converted to GGML blocks bit for
//! bit. Those tiles add a block's products into two exact integer halves (the low and high 128
//! bits of the decoded quants: values 0..8 and 16..24, then 8..16 and 24..32), convert each half
//! to f32 and scale it. So here each block's 16 bytes, loaded into both 128-bit lanes, are picked
//! and zero-extended by one in-lane `vpshufb` (bytes 0..4 and 8..12, holding values 0..8 and
//! 16..24, into the low half; where GGML's tiles widen with `vpmovzxbw`, a shuffle across lanes)
//! before the same E2M1 lookup, and the activations are permuted to match, once per call and
//! thread:
//!
//! ```text
//!   decoded lane k (k < 16):  low nibble = value 2·src(k), high nibble = value 2·src(k) + 1
//!   src = [0 1 2 3 8 9 10 11 4 5 6 7 12 13 14 15]
//!   activation lane k:        a[2·src(k)],  lane 16 + k: a[2·src(k) + 1]
//! ```
//!
//! Every lane then holds the same products as GGML's tiles, grouped into the same halves; the
//! scale product and the FMA per block follow in the same order. The activation's scale and sums
//! do not depend on the order of its values within a block.
//!
//! Memory safety does not rest on `unsafe` (slices and `bytemuck` unaligned loads); the caller
//! promises AVX2, FMA and F16C (see `super::AVX2_FMA_F16C`).

use core::arch::x86_64::{
    __m128i, __m256i, _mm256_and_si256, _mm256_broadcastsi128_si256, _mm256_mul_ps, _mm256_set1_epi16, _mm256_set1_ps,
    _mm256_setzero_ps, _mm256_setzero_si256, _mm256_shuffle_epi8, _mm256_srli_epi16,
};
use std::cell::RefCell;

use bytemuck::pod_read_unaligned;

use super::avx2_tile_i16::{
    MXFP4_MAGNITUDES, PREFETCH_AHEAD, ROWS, accumulate, e2m1_wide, prefetch, put, quants_dot, reduce4, row_results,
    twice,
};
use super::avx512_panel::{LayoutKey, laid_out};
use crate::activation::Activation;
use crate::ggml::mxfp4::e8m0_to_f32_half;
use crate::kernels::{SPLIT_MAX_ACTS as MAX_ACTS, SplitRows};

/// Bytes of nibbles per group.
const GROUP_BYTES: usize = 16;

thread_local! {
    /// The call's activations' quants in pair order (activation `j`'s block `b` at `j·blocks + b`),
    /// with the key of the activations they were made from.
    static PAIR_ORDER: RefCell<(Option<LayoutKey>, Vec<[i16; 32]>)> = const { RefCell::new((None, Vec::new())) };
}

/// The HF byte that decoded lane `k` (`k < 16`) reads: its low nibble (value 2·byte) goes to the
/// first vector's lane `k`, its high nibble (value 2·byte + 1) to the second's.
const SOURCE_BYTE: [usize; 16] = [0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15];

/// Each activation's i16 quants in the order [`decode_pairs`] reads the nibbles (module docs).
fn pair_order(acts: &[Activation<'_>], blocks: usize, out: &mut Vec<[i16; 32]>) {
    out.clear();
    for act in acts {
        for block in act.q16[..32 * blocks].as_chunks::<32>().0 {
            out.push(std::array::from_fn(|lane| {
                let (byte, high) = (SOURCE_BYTE[lane % 16], lane / 16);
                block[2 * byte + high]
            }));
        }
    }
}

/// One group's 16 bytes of HF nibbles as two vectors of 16 doubled E2M1 values (i16), in the
/// lanes [`pair_order`] gives the activations.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn decode_pairs(magnitudes: __m256i, nibbles: &[u8; GROUP_BYTES]) -> (__m256i, __m256i) {
    // The 16 bytes in both 128-bit lanes (a load, no shuffle µop), then each lane's bytes picked
    // and zero-extended to i16 by one in-lane `vpshufb` (index -1: a zero byte).
    let both = _mm256_broadcastsi128_si256(pod_read_unaligned::<__m128i>(nibbles));
    let wide = _mm256_shuffle_epi8(both, bytemuck::cast::<[i8; 32], __m256i>(WIDEN));
    e2m1_wide(magnitudes, _mm256_and_si256(wide, _mm256_set1_epi16(0x0F)), _mm256_srli_epi16::<4>(wide))
}

/// [`decode_pairs`]' `vpshufb` indices: i16 lane k takes byte [`SOURCE_BYTE`]`[k]` (lanes 0..8
/// from the low 128 bits' copy, 8..16 from the high one's, each lane's index relative to its
/// 128 bits) and a zero high byte.
const WIDEN: [i8; 32] = {
    let mut widen = [-1i8; 32];
    let mut k = 0;
    while k < 16 {
        widen[2 * k] = SOURCE_BYTE[k] as i8;
        k += 1;
    }
    widen
};

/// Rows `first..first + out.len() / acts.len()` of `rows` against `acts` (1 to [`MAX_ACTS`]
/// i16 activations of `rows.groups` blocks), into `out` (row-major, rows × acts): each tile of
/// rows against the activations three at a time, its nibbles still in L1 for the next three.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn split_mxfp4_i16(rows: SplitRows<'_>, first: usize, acts: &[Activation<'_>], out: &mut [f32]) {
    let n = acts.len();
    assert!((1..=MAX_ACTS).contains(&n), "split MXFP4 tiles take 1 to {MAX_ACTS} activations, got {n}");
    PAIR_ORDER.with_borrow_mut(|cache| {
        laid_out(acts, rows.groups, cache, pair_order);
        let groups = rows.groups;
        let count = out.len() / n;
        let mut r = 0;
        while r < count {
            let tile_rows = if count - r >= ROWS { ROWS } else { 1 };
            let out = &mut out[r * n..(r + tile_rows) * n];
            let mut c = 0;
            while c < n {
                let take = (n - c).min(TILE_ACTS);
                let (quants, acts) = (&cache.1[c * groups..(c + take) * groups], &acts[c..c + take]);
                let row = first + r;
                match (tile_rows, take) {
                    (ROWS, 1) => put(out, n, c, tile::<ROWS, 1>(rows, row, quants, acts)),
                    (ROWS, 2) => put(out, n, c, tile::<ROWS, 2>(rows, row, quants, acts)),
                    (ROWS, _) => put(out, n, c, tile::<ROWS, 3>(rows, row, quants, acts)),
                    (_, 1) => put(out, n, c, tile::<1, 1>(rows, row, quants, acts)),
                    (_, 2) => put(out, n, c, tile::<1, 2>(rows, row, quants, acts)),
                    (_, _) => put(out, n, c, tile::<1, 3>(rows, row, quants, acts)),
                }
                c += take;
            }
            r += tile_rows;
        }
    });
}

/// Activations per tile: three accumulators and their block dots fit the 16 registers beside
/// four rows' decoded quants.
const TILE_ACTS: usize = 3;

/// `R` rows (4, or 1 filling all four lanes) from row `first` × `C` activations, whose pair-order
/// quants are `quants` (activation `c` at `c · groups`): `avx2_tile_i16`'s `tile_rows`, step for
/// step, over the split layout.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn tile<const R: usize, const C: usize>(
    rows: SplitRows<'_>,
    first: usize,
    quants: &[[i16; 32]],
    acts: &[Activation<'_>],
) -> [[f32; C]; R] {
    let groups = rows.groups;
    let nibbles = rows.nibbles.as_chunks::<GROUP_BYTES>().0;
    let mut row_nibbles: [&[[u8; GROUP_BYTES]]; R] = [&[]; R];
    let mut row_scales: [&[u8]; R] = [&[]; R];
    for r in 0..R {
        let physical = (first + r) * rows.row_stride * groups;
        row_nibbles[r] = &nibbles[physical..physical + groups];
        row_scales[r] = &rows.scales[physical..physical + groups];
    }
    let mut act_quants: [&[[i16; 32]]; C] = [&[]; C];
    let mut act_scales: [&[f32]; C] = [&[]; C];
    for c in 0..C {
        act_quants[c] = &quants[c * groups..(c + 1) * groups];
        act_scales[c] = &acts[c].d[..groups];
    }
    // Prefetching runs through the rows read from `first` on (every `row_stride`-th physical
    // row) as one stream, from `PREFETCH_AHEAD` bytes past the start of this tile's last row,
    // `R · 16` bytes per block, as `avx2_tile_i16` does through GGML rows: `ahead` is where it is,
    // as (rows past `first`, byte in that row).
    let row_bytes = groups * GROUP_BYTES;
    let lead = (R - 1) * row_bytes + PREFETCH_AHEAD;
    let mut ahead = (lead / row_bytes, lead % row_bytes);
    let physical_bytes = rows.row_stride * row_bytes;
    let magnitudes = _mm256_broadcastsi128_si256(pod_read_unaligned::<__m128i>(&MXFP4_MAGNITUDES));
    let zero = _mm256_setzero_si256();
    let mut acc = [_mm256_setzero_ps(); C];
    for b in 0..groups {
        prefetch(rows.nibbles, (first + ahead.0) * physical_bytes + ahead.1, R * GROUP_BYTES);
        ahead.1 += R * GROUP_BYTES;
        while ahead.1 >= row_bytes {
            ahead = (ahead.0 + 1, ahead.1 - row_bytes);
        }
        let mut q = [(zero, zero); R];
        let mut d = [0.0f32; R];
        for r in 0..R {
            q[r] = decode_pairs(magnitudes, &row_nibbles[r][b]);
            d[r] = e8m0_to_f32_half(row_scales[r][b]);
        }
        let lane = |i: usize| i % R;
        let d = twice([d[0], d[lane(1)], d[lane(2)], d[lane(3)]]);
        for c in 0..C {
            let mut dots = [zero; R];
            for r in 0..R {
                dots[r] = quants_dot(q[r], &act_quants[c][b]);
            }
            let v = reduce4([dots[0], dots[lane(1)], dots[lane(2)], dots[lane(3)]]);
            acc[c] = accumulate(acc[c], v, None, _mm256_mul_ps(d, _mm256_set1_ps(act_scales[c][b])), None);
        }
    }
    row_results(acc)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decoded lane k's low nibble is value 2·SOURCE_BYTE[k], its high nibble the next one, and
    /// lanes 0..8 of both vectors hold exactly GGML's low halves (values 0..8 and 16..24).
    #[test]
    fn pair_order_keeps_ggml_halves() {
        let low_half: Vec<usize> = (0..8).flat_map(|k| [2 * SOURCE_BYTE[k], 2 * SOURCE_BYTE[k] + 1]).collect();
        let mut sorted = low_half.clone();
        sorted.sort_unstable();
        let ggml: Vec<usize> = (0..8).chain(16..24).collect();
        assert_eq!(sorted, ggml);
        // The `vpshufb` indices take those bytes, each into the low byte of its i16 lane.
        for k in 0..16 {
            assert_eq!((WIDEN[2 * k], WIDEN[2 * k + 1]), (SOURCE_BYTE[k] as i8, -1), "lane {k}");
        }
    }
}
