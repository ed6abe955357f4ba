//! AVX2 (+FMA, F16C) tile kernels for the 32-value block formats (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
//! MXFP4) against Q8_0 activations: `R` weight rows × `C` activations per step, so that each
//! weight block is unpacked once for `C` activations and each activation block loaded once for
//! `R` rows (llama.cpp's multi-row decode loops and its matmul tiles do the same).
//!
//! ```text
//!            act 0   act 1        for each 32-value block b:
//!   row 0  [ acc00   acc01 ]        q_r  = unpack(row r, block b)      R unpacks
//!   row 1  [ acc10   acc11 ]        a_c  = activation c's 32 quants     C loads
//!   row 2  [ acc20   acc21 ]        acc_rc += d_r·d_c · Σ q_r·a_c      R·C integer dots
//!   row 3  [ acc30   acc31 ]        off_rc += m_r · (d_c·Σa_c)         (formats with an offset)
//! ```
//!
//! Every block is read as unsigned quants `q` (0..=31), so one `maddubs(q, a)` gives the products
//! (no `sign_epi8` pair per dot). A symmetric format's offset is an integer `k` subtracted in the
//! integer sum (`Σ(q − k)·a = Σq·a − k·Σa`, with the activation block's `Σa`): Q4_0 `k = 8`, Q5_0
//! `k = 16`, MXFP4's doubled E2M1 values −12..=12 shifted by `k = 12`; so their block sums stay
//! exact, as in the scalar kernels. Q4_1/Q5_1's minimum `m` is added as `m · d_a·Σa`
//! (`Activation::ds`), as the scalar kernels do. Q8_0's signed quants do not fit `maddubs`'
//! unsigned side, so it keeps the `sign_epi8` trick (|w|, sign moved onto a).
//!
//! The tiles against i16 activations are `avx2_tile_i16.rs`.
//!
//! Memory safety does not rest on `unsafe` (slices and `bytemuck` unaligned loads); the caller
//! promises AVX2, FMA and F16C (see `super::AVX2_FMA_F16C`).

use core::arch::x86_64::{
    __m128i, __m256, __m256i, _MM_HINT_T0, _mm_cvtsi32_si128, _mm_prefetch, _mm256_add_epi32, _mm256_and_si256,
    _mm256_broadcastsi128_si256, _mm256_cmpeq_epi8, _mm256_cvtepi32_ps, _mm256_fmadd_ps, _mm256_madd_epi16,
    _mm256_maddubs_epi16, _mm256_mul_ps, _mm256_or_si256, _mm256_set1_epi8, _mm256_set1_epi16, _mm256_set1_epi32,
    _mm256_set1_epi64x, _mm256_set1_ps, _mm256_setr_epi64x, _mm256_setzero_ps, _mm256_setzero_si256,
    _mm256_shuffle_epi8, _mm256_sign_epi8, _mm256_zextsi128_si256,
};

use bytemuck::pod_read_unaligned;

use super::avx2_dot::{f16_at, f16_pair_at, f16_splat, hsum_ps, load32, unpack_nibbles};
use crate::activation::Activation;
use crate::ggml::mxfp4::{KVALUES_MXFP4, e8m0_to_f32_half};
use crate::kernels::BlockKind as Kind;

/// One block's 32 quants (unsigned bytes, or i8 for `Kind::Signed`), scale `d` (in every lane)
/// and minimum (0 unless `Kind::Min`).
type Decoded = (__m256i, __m256, f32);

/// The 32 fifth bits of a Q5 block (`qh`, little-endian u32, bit j = value j) as 0x10 bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn fifth_bits(qh: &[u8]) -> __m256i {
    let bits = _mm256_set1_epi32(i32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]));
    // Byte j takes byte j/8 of qh, then is set to all ones iff its bit j%8 is set: OR with every
    // other bit (0xFE, 0xFD, …, 0x7F in each group of 8) and compare with 0xFF.
    let spread = _mm256_shuffle_epi8(
        bits,
        _mm256_setr_epi64x(0, 0x0101_0101_0101_0101, 0x0202_0202_0202_0202, 0x0303_0303_0303_0303),
    );
    let others = _mm256_set1_epi64x(0x7FBF_DFEF_F7FB_FDFE);
    let set = _mm256_cmpeq_epi8(_mm256_or_si256(spread, others), _mm256_set1_epi64x(-1));
    _mm256_and_si256(set, _mm256_set1_epi8(0x10))
}

/// A Q4_1/Q5_1 block's scale (in every lane) and minimum. With one activation, both from one
/// 32-bit load ([`f16_pair_at`]); in wider tiles, which are short of registers, the pair's extra
/// shuffle measured slower than two loads.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn scale_min(b: &[u8], one_activation: bool) -> (__m256, f32) {
    if one_activation {
        let (d, m) = f16_pair_at(b);
        (_mm256_set1_ps(d), m)
    } else {
        (f16_splat(b), f16_at(&b[2..]))
    }
}

/// How far ahead of the current position in the weights [`tile`] prefetches, in bytes. A tile
/// reads its rows side by side, each a stream too short for the hardware prefetcher to follow;
/// prefetching the weights as one stream a few KiB ahead keeps a matrix larger than L3 at memory
/// bandwidth (docs/benchmarks-history.md, "Prefetching the weights as one stream").
const PREFETCH_AHEAD: usize = 3072;

/// Asks the CPU to start loading `bytes[at]` into cache (nothing if `at` is past the end).
/// How far ahead of a tile's progress through `R` rows of `row_bytes` the weights are prefetched:
/// the stream runs `R` blocks per step from the first row on, so it must start past the last
/// row's first bytes to cover the rows after the first (and, by the group's end, the next group's
/// first `R − 1` rows entirely); `PREFETCH_AHEAD` alone covered only rows shorter than it.
pub(super) fn prefetch_lead(rows: usize, row_bytes: usize) -> usize {
    (rows - 1) * row_bytes + PREFETCH_AHEAD
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn prefetch(bytes: &[u8], at: usize) {
    if let Some(byte) = bytes.get(at) {
        _mm_prefetch::<_MM_HINT_T0>(std::ptr::from_ref(byte).cast::<i8>());
    }
}

/// `R` rows × `C` activations of 32-value blocks of `block_bytes`: `out[r][c]` = row r · act c.
/// `stream` holds the weights from the first of the rows on, prefetched [`prefetch_lead`] bytes
/// ahead of the rows' progress (empty: no prefetching).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn tile<const R: usize, const C: usize>(
    rows: [&[u8]; R],
    stream: &[u8],
    acts: [&Activation<'_>; C],
    block_bytes: usize,
    kind: Kind,
    decode: &impl Fn(&[u8], bool) -> Decoded,
) -> [[f32; C]; R] {
    let mut acc = [[_mm256_setzero_ps(); C]; R];
    let mut offset = [[0.0f32; C]; R];
    let ones = _mm256_set1_epi16(1);
    let blocks = acts[0].d.len();
    let lead = prefetch_lead(R, rows[0].len());
    for b in 0..blocks {
        let a: [__m256i; C] = std::array::from_fn(|c| load32(&acts[c].qs[32 * b..]));
        let da: [__m256; C] = std::array::from_fn(|c| _mm256_set1_ps(acts[c].d[b]));
        let ds: [f32; C] = std::array::from_fn(|c| if kind == Kind::Min { acts[c].ds[b] } else { 0.0 });
        // −k·Σa in lane 0 of an i32 vector, added to each dot's lanes.
        let k_sums: [__m256i; C] = std::array::from_fn(|c| match kind {
            Kind::Offset(k) => _mm256_zextsi128_si256(_mm_cvtsi32_si128(-k * acts[c].sums[b])),
            _ => _mm256_setzero_si256(),
        });
        let ahead = lead + R * block_bytes * b;
        for line in 0..(R * block_bytes).div_ceil(64) {
            prefetch(stream, ahead + 64 * line);
        }
        for r in 0..R {
            let (q, d, m) = decode(&rows[r][block_bytes * b..block_bytes * (b + 1)], C == 1);
            for c in 0..C {
                let products = if kind == Kind::Signed {
                    _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(a[c], q))
                } else {
                    _mm256_maddubs_epi16(q, a[c])
                };
                let mut sum = _mm256_madd_epi16(products, ones);
                if let Kind::Offset(_) = kind {
                    sum = _mm256_add_epi32(sum, k_sums[c]);
                }
                acc[r][c] = _mm256_fmadd_ps(_mm256_mul_ps(d, da[c]), _mm256_cvtepi32_ps(sum), acc[r][c]);
                if kind == Kind::Min {
                    offset[r][c] += m * ds[c];
                }
            }
        }
    }
    std::array::from_fn(|r| std::array::from_fn(|c| hsum_ps(acc[r][c]) + offset[r][c]))
}

/// Walks all rows of `w` (whole rows of `row_bytes`) × all activations in tiles of `R` rows ×
/// `C` activations (`R` × 2 and `R` × 1 for the last activations, 1 × 1 for the last rows), writing `out`
/// row-major (rows × acts).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn tiles<const R: usize, const C: usize>(
    w: &[u8],
    row_bytes: usize,
    acts: &[Activation<'_>],
    out: &mut [f32],
    block_bytes: usize,
    kind: Kind,
    decode: impl Fn(&[u8], bool) -> Decoded,
) {
    let n = acts.len();
    let mut row_groups = w.chunks_exact(R * row_bytes);
    let mut out_groups = out.chunks_exact_mut(R * n);
    for (g, (rows, out)) in (&mut row_groups).zip(&mut out_groups).enumerate() {
        // Only the first tile over these rows prefetches: the later ones find them in cache.
        let mut stream = &w[g * R * row_bytes..];
        let rows: [&[u8]; R] = std::array::from_fn(|r| &rows[r * row_bytes..(r + 1) * row_bytes]);
        let mut groups = acts.chunks_exact(C);
        for (j, group) in (&mut groups).enumerate() {
            let result = tile::<R, C>(rows, stream, std::array::from_fn(|c| &group[c]), block_bytes, kind, &decode);
            stream = &[];
            for (r, values) in result.iter().enumerate() {
                out[r * n + C * j..r * n + C * (j + 1)].copy_from_slice(values);
            }
        }
        // The last (< C) activations in pairs, then one.
        let mut done = n - groups.remainder().len();
        let mut pairs = groups.remainder().chunks_exact(2);
        for pair in &mut pairs {
            let result = tile::<R, 2>(rows, stream, [&pair[0], &pair[1]], block_bytes, kind, &decode);
            stream = &[];
            for (r, values) in result.iter().enumerate() {
                out[r * n + done..r * n + done + 2].copy_from_slice(values);
            }
            done += 2;
        }
        if let [act] = pairs.remainder() {
            let result = tile::<R, 1>(rows, stream, [act], block_bytes, kind, &decode);
            for (r, values) in result.iter().enumerate() {
                out[r * n + done] = values[0];
            }
        }
    }
    let rest = row_groups.remainder().chunks_exact(row_bytes).zip(out_groups.into_remainder().chunks_exact_mut(n));
    for (row, out) in rest {
        for (act, y) in acts.iter().zip(out) {
            *y = tile::<1, 1>([row], row, [act], block_bytes, kind, &decode)[0][0];
        }
    }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn tiles_q8_0<const R: usize, const C: usize>(
    w: &[u8],
    row_bytes: usize,
    acts: &[Activation<'_>],
    out: &mut [f32],
) {
    tiles::<R, C>(w, row_bytes, acts, out, 34, Kind::Signed, |b, _| (load32(&b[2..]), f16_splat(b), 0.0));
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn tiles_q4_0<const R: usize, const C: usize>(
    w: &[u8],
    row_bytes: usize,
    acts: &[Activation<'_>],
    out: &mut [f32],
) {
    tiles::<R, C>(w, row_bytes, acts, out, 18, Kind::Offset(8), |b, _| (unpack_nibbles(&b[2..]), f16_splat(b), 0.0));
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn tiles_q4_1<const R: usize, const C: usize>(
    w: &[u8],
    row_bytes: usize,
    acts: &[Activation<'_>],
    out: &mut [f32],
) {
    tiles::<R, C>(w, row_bytes, acts, out, 20, Kind::Min, |b, one| {
        let (d, m) = scale_min(b, one);
        (unpack_nibbles(&b[4..]), d, m)
    });
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn tiles_q5_0<const R: usize, const C: usize>(
    w: &[u8],
    row_bytes: usize,
    acts: &[Activation<'_>],
    out: &mut [f32],
) {
    tiles::<R, C>(w, row_bytes, acts, out, 22, Kind::Offset(16), |b, _| {
        (_mm256_or_si256(unpack_nibbles(&b[6..]), fifth_bits(&b[2..])), f16_splat(b), 0.0)
    });
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn tiles_q5_1<const R: usize, const C: usize>(
    w: &[u8],
    row_bytes: usize,
    acts: &[Activation<'_>],
    out: &mut [f32],
) {
    tiles::<R, C>(w, row_bytes, acts, out, 24, Kind::Min, |b, one| {
        let (d, m) = scale_min(b, one);
        (_mm256_or_si256(unpack_nibbles(&b[8..]), fifth_bits(&b[4..])), d, m)
    });
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn tiles_mxfp4<const R: usize, const C: usize>(
    w: &[u8],
    row_bytes: usize,
    acts: &[Activation<'_>],
    out: &mut [f32],
) {
    // The doubled E2M1 values as signed quants (the `sign_epi8` path measured faster here than
    // shifting them by +12 to unsigned: 0.59 vs 0.78 ms on 2880×2880).
    let table = _mm256_broadcastsi128_si256(pod_read_unaligned::<__m128i>(bytemuck::cast_slice(&KVALUES_MXFP4)));
    tiles::<R, C>(w, row_bytes, acts, out, 17, Kind::Signed, |b, _| {
        (_mm256_shuffle_epi8(table, unpack_nibbles(&b[1..])), _mm256_set1_ps(e8m0_to_f32_half(b[0])), 0.0)
    });
}
