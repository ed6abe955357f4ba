//! AVX2 (+FMA, F16C) tile kernels for the 32-value block formats Q4_0, Q4_1, Q5_0, Q5_1 and MXFP4
//! against i16 activations (`Activation::q16`, `crate::matmul_i16`).
//!
//! A block's dot product is 32 i16 × i16 products summed by two `madd` into 8 i32 lanes. Rather
//! than scaling and accumulating those 8 lanes for every (row, activation) pair, which needs one
//! f32 accumulator per pair (a 4 × 6 tile's 24 did not fit in 16 registers and were spilled to
//! the stack on every block), four pairs' lanes are reduced by two rounds of unpacks and adds into
//! one vector whose lanes `i` and `i + 4` hold the two halves of pair `i`'s integer sum:
//!
//! ```text
//!   pairs p0..p3 (4 rows × 1 activation, or 1 row × 4 activations)
//!   s_i  = madd(q_lo, a_lo) + madd(q_hi, a_hi)          8 i32 lanes per pair
//!   v    = reduce4(s0, s1, s2, s3)                      [p0 p1 p2 p3 | p0 p1 p2 p3] (half sums)
//!   acc  = fma(d_w·d_a per lane, f32(v), acc)           one accumulator for four pairs
//!   acc  = fma(m_w·(d_a·Σa) in lanes 0..4, acc)          Q4_1/Q5_1: the minimum's term
//!   y_i  = acc[i] + acc[i + 4]
//! ```
//!
//! Which four pairs share a vector depends on the tile's shape: with 4 or more activations, one
//! row against four activations (`tiles::tile_acts`); with fewer (decode), four rows against one
//! activation (`tiles::tile_rows`). Every lane sees the same operations in the same order whatever
//! the grouping (an exact integer sum, one f32 product of the two scales, the same FMAs), so a
//! (row, activation) result does not depend on the batch it came in, as the engine's prefix
//! reuse and batch invariance require. Q4_0/Q5_0's offset `k` comes off the exact integer sum
//! (`Σ(q − k)·a = Σq·a − k·Σa`) in lanes 0..4. Tiles are 4 rows × 8 activations (then 4, then the
//! last 1..3 against 4 rows at a time). The tile functions are written once as `tile_kernels!`,
//! compiled here for AVX2 and in `avx512_tile` with AVX-512's cheaper decoding and block dot.
//!
//! Memory safety does not rest on `unsafe` (slices and `bytemuck` unaligned loads); the caller
//! promises AVX2, FMA and F16C (see `super::AVX2_FMA_F16C`).

use core::arch::x86_64::{
    __m128i, __m256, __m256i, _MM_HINT_T1, _mm_prefetch, _mm256_add_epi32, _mm256_add_ps, _mm256_and_si256,
    _mm256_broadcastsi128_si256, _mm256_cmpeq_epi16, _mm256_cvtepi8_epi16, _mm256_cvtepi32_ps, _mm256_fmadd_ps,
    _mm256_madd_epi16, _mm256_or_si256, _mm256_permute2f128_ps, _mm256_set1_epi16, _mm256_setr_epi16,
    _mm256_setr_epi32, _mm256_setr_ps, _mm256_shuffle_epi8, _mm256_sign_epi16, _mm256_slli_epi16, _mm256_srli_epi16,
    _mm256_sub_epi32, _mm256_unpackhi_epi32, _mm256_unpackhi_epi64, _mm256_unpacklo_epi32, _mm256_unpacklo_epi64,
};

use bytemuck::pod_read_unaligned;

use super::avx2_dot::{f16_at, f16_pair_at};
use super::avx2_panel;
use crate::activation::Activation;
use crate::ggml::mxfp4::{KVALUES_MXFP4, e8m0_to_f32_half};
use crate::kernels::BlockKind as Kind;

/// One decoded weight block: its 32 quants as i16 (values 0..16, 16..32), scale and minimum (0
/// unless `Kind::Min`).
pub(super) type Decoded = ((__m256i, __m256i), f32, f32);

/// Rows per tile.
pub(super) const ROWS: usize = 4;

/// How far ahead of a tile's progress through its rows [`prefetch`] runs: bytes past the start
/// of the tile's last row (as `avx2_tile::prefetch_lead`, with a distance of its own).
pub(super) const PREFETCH_AHEAD: usize = 4096;

/// Where [`prefetch`] runs for a tile over `rows` rows of `row_bytes`: see [`PREFETCH_AHEAD`].
pub(super) fn prefetch_lead(rows: usize, row_bytes: usize) -> usize {
    (rows - 1) * row_bytes + PREFETCH_AHEAD
}

/// Asks the CPU to start loading the cache lines of `bytes[at..at + len]` (none past the end) into
/// L2: the weights as one stream ahead of the rows' progress, as `avx2_tile` does into L1.
///
/// Into L2 (`prefetcht1`) rather than L1: on the Intel Xeon, reading from DRAM, a prefetch into
/// L1 holds one of the core's few L1 miss buffers for a whole trip to memory, which kept a
/// thread's stream below what its L2 takes in (docs/benchmarks-history.md, "Prefetching into L2").
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn prefetch(bytes: &[u8], at: usize, len: usize) {
    for line in 0..len.div_ceil(64) {
        if let Some(byte) = bytes.get(at + 64 * line) {
            _mm_prefetch::<_MM_HINT_T1>(std::ptr::from_ref(byte).cast::<i8>());
        }
    }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn load_i16(a: &[i16]) -> __m256i {
    pod_read_unaligned::<__m256i>(bytemuck::cast_slice(&a[..16]))
}

/// A block's quants · 32 activation quants: 8 i32 lanes, exact.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn quants_dot(q: (__m256i, __m256i), a: &[i16; 32]) -> __m256i {
    _mm256_add_epi32(_mm256_madd_epi16(q.0, load_i16(a)), _mm256_madd_epi16(q.1, load_i16(&a[16..])))
}

/// Four block dots reduced to one vector: lanes `i` and `i + 4` hold the halves of dot `i`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn reduce4(s: [__m256i; 4]) -> __m256i {
    // Unpacks and adds rather than `hadd`, which is several µops on the same shuffle units.
    let pair = |x, y| _mm256_add_epi32(_mm256_unpacklo_epi32(x, y), _mm256_unpackhi_epi32(x, y));
    let (t01, t23) = (pair(s[0], s[1]), pair(s[2], s[3]));
    _mm256_add_epi32(_mm256_unpacklo_epi64(t01, t23), _mm256_unpackhi_epi64(t01, t23))
}

/// Four f32 in lanes 0..4 and again in 4..8.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn twice(v: [f32; 4]) -> __m256 {
    _mm256_setr_ps(v[0], v[1], v[2], v[3], v[0], v[1], v[2], v[3])
}

/// Four f32 in lanes 0..4, zeros in 4..8.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn low_half(v: [f32; 4]) -> __m256 {
    _mm256_setr_ps(v[0], v[1], v[2], v[3], 0.0, 0.0, 0.0, 0.0)
}

/// What an offset format takes off each pair's integer sum: `k·Σa` in lanes 0..4 (zeros in 4..8,
/// so the two halves together lose it once).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn offsets(kind: Kind, sums: [i32; 4]) -> Option<__m256i> {
    match kind {
        Kind::Offset(k) => Some(_mm256_setr_epi32(k * sums[0], k * sums[1], k * sums[2], k * sums[3], 0, 0, 0, 0)),
        _ => None,
    }
}

/// A 32-value block format as the tiles read it: constants, so that every branch on them folds
/// away in each format's kernel (as run-time values they did not, `tiles` being too large to
/// inline).
pub(super) trait Format {
    const BLOCK_BYTES: usize;
    const KIND: Kind;
    const SCALES: Scales;
}

/// Every format here is read by the panels with its sums split in halves, as `tiles::tile_acts` and
/// `tiles::tile_rows` split them.
impl<F: Format> avx2_panel::Layout for F {
    const BLOCK_BYTES: usize = <F as Format>::BLOCK_BYTES;
    const KIND: Kind = <F as Format>::KIND;
}

/// Where `tiles::tile_rows` reads four blocks' scales.
#[derive(Clone, Copy)]
pub(super) enum Scales {
    /// The f16 scale in bytes 0..2 (and with `Kind::Min` the f16 minimum in bytes 2..4): four
    /// blocks' at once, converted by one `vcvtph2ps`, rather than one by one and inserted.
    F16,
    /// As `decode` returns them (MXFP4's E8M0 exponents).
    Decoded,
}

/// One block's step for four pairs: `acc = fma(scales, f32(v − offset), acc)`, then the minimum's
/// term `fma(mins, ds, acc)` (lanes 0..4; `mins` is zero in lanes 4..8).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn accumulate(
    acc: __m256,
    v: __m256i,
    offset: Option<__m256i>,
    scales: __m256,
    min_terms: Option<(__m256, __m256)>,
) -> __m256 {
    let v = match offset {
        Some(o) => _mm256_sub_epi32(v, o),
        None => v,
    };
    let acc = _mm256_fmadd_ps(scales, _mm256_cvtepi32_ps(v), acc);
    match min_terms {
        Some((mins, ds)) => _mm256_fmadd_ps(mins, ds, acc),
        None => acc,
    }
}

/// The four results of an accumulator: lane `i` + lane `i + 4`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn results(acc: __m256) -> [f32; 4] {
    let both = _mm256_add_ps(acc, _mm256_permute2f128_ps::<0x01>(acc, acc));
    let lanes = bytemuck::cast::<__m256, [f32; 8]>(both);
    [lanes[0], lanes[1], lanes[2], lanes[3]]
}

/// `R` rows × `C` activations from one accumulator per activation whose lanes hold four rows
/// (`results`; a single row fills all four).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn row_results<const R: usize, const C: usize>(acc: [__m256; C]) -> [[f32; C]; R] {
    let mut out = [[0.0; C]; R];
    for c in 0..C {
        let per_row = results(acc[c]);
        for r in 0..R {
            out[r][c] = per_row[r];
        }
    }
    out
}

/// Defines module `tiles` with `tiles::tiles`, the kernel walking all rows × activations in
/// tiles (below `avx2_panel::MIN_ACTS` activations; the AVX2 panels from there), compiled with
/// `$features` and with `$dot` (a path from inside the module) as the block dot product.
///
/// A macro so that an ISA with a cheaper block dot or decoders (`avx512_tile`) compiles the same
/// steps with its own features: its decoders and dot then inline into the loops, which they would
/// not into functions compiled for AVX2 alone. Any `$dot` gives the same exact integer sums, so
/// every ISA's tiles give the same bits.
macro_rules! tile_kernels {
    ($features:literal, $dot:path) => {
        pub(super) mod tiles {
            use core::arch::x86_64::{
                __m256i, _mm_set1_epi64x, _mm_setr_epi32, _mm256_blend_ps, _mm256_cvtph_ps, _mm256_mul_ps,
                _mm256_permutevar8x32_ps, _mm256_set1_ps, _mm256_setr_epi32, _mm256_setzero_ps, _mm256_setzero_si256,
            };

            use core::slice::ChunksExact;

            use super::super::avx2_tile_i16::{
                Decoded, Format, ROWS, Scales, accumulate, low_half, offsets, prefetch, prefetch_lead, put, reduce4,
                results, row_results, twice,
            };
            use crate::activation::Activation;
            use crate::kernels::BlockKind as Kind;

            /// Block `b` of one weight row · block `b` of `act`: 8 i32 lanes, exact.
            #[inline]
            #[target_feature(enable = $features)]
            fn block_dot(q: (__m256i, __m256i), act: &Activation<'_>, b: usize) -> __m256i {
                $dot(q, act.q16[32 * b..32 * b + 32].try_into().expect("a block of 32"))
            }

            /// `R` rows × `4·G` activations, each row against groups of four activations:
            /// `out[r][4g + i]` = row r · act 4g + i.
            #[inline]
            #[target_feature(enable = $features)]
            fn tile_acts<F: Format, const R: usize, const G: usize>(
                rows: [&[u8]; R],
                stream: &[u8],
                acts: &[Activation<'_>],
                decode: &impl Fn(&[u8]) -> Decoded,
            ) -> [[[f32; 4]; G]; R] {
                let (block_bytes, kind) = (F::BLOCK_BYTES, F::KIND);
                let lead = prefetch_lead(R, rows[0].len());
                let mut acc = [[_mm256_setzero_ps(); G]; R];
                let zero = _mm256_setzero_ps();
                for b in 0..acts[0].d.len() {
                    // Closures do not inline the kernels' intrinsics: plain loops fill these.
                    let (mut da, mut ds, mut off) = ([zero; G], [zero; G], [None; G]);
                    for g in 0..G {
                        let group = &acts[4 * g..4 * g + 4];
                        da[g] = twice([group[0].d[b], group[1].d[b], group[2].d[b], group[3].d[b]]);
                        if kind == Kind::Min {
                            ds[g] = twice([group[0].ds[b], group[1].ds[b], group[2].ds[b], group[3].ds[b]]);
                        }
                        off[g] =
                            offsets(kind, [group[0].sums[b], group[1].sums[b], group[2].sums[b], group[3].sums[b]]);
                    }
                    prefetch(stream, lead + R * block_bytes * b, R * block_bytes);
                    for r in 0..R {
                        let (q, d, m) = decode(&rows[r][block_bytes * b..block_bytes * (b + 1)]);
                        let d = _mm256_set1_ps(d);
                        let mins = low_half([m; 4]);
                        for g in 0..G {
                            let group = &acts[4 * g..4 * g + 4];
                            let v = reduce4([
                                block_dot(q, &group[0], b),
                                block_dot(q, &group[1], b),
                                block_dot(q, &group[2], b),
                                block_dot(q, &group[3], b),
                            ]);
                            let min_terms = if kind == Kind::Min { Some((mins, ds[g])) } else { None };
                            acc[r][g] = accumulate(acc[r][g], v, off[g], _mm256_mul_ps(d, da[g]), min_terms);
                        }
                    }
                }
                let mut out = [[[0.0; 4]; G]; R];
                for r in 0..R {
                    for g in 0..G {
                        out[r][g] = results(acc[r][g]);
                    }
                }
                out
            }

            /// `R` rows (1 or 4) × `C` activations (fewer than 4), each activation against the rows as a
            /// group of four (a single row fills all four lanes): `out[r][c]` = row r · act c.
            #[inline]
            #[target_feature(enable = $features)]
            #[allow(clippy::too_many_arguments)]
            fn tile_rows<F: Format, const R: usize, const C: usize>(
                rows: [&[u8]; R],
                stream: &[u8],
                acts: [&Activation<'_>; C],
                decode: &impl Fn(&[u8]) -> Decoded,
            ) -> [[f32; C]; R] {
                let (block_bytes, kind, scales) = (F::BLOCK_BYTES, F::KIND, F::SCALES);
                let mut acc = [_mm256_setzero_ps(); C];
                let zero = _mm256_setzero_si256();
                // Every per-block access below is an iterator step or an index below `blocks_per_row` into a
                // slice of that length, so no bounds check is left in the loop.
                let blocks_per_row = acts[0].d.len();
                let lead = prefetch_lead(R, rows[0].len());
                // Plain loops rather than `map`: a closure compiled with the kernel's features is
                // not inlined into `map`, which cost calls per tile (8 % of a 576-column decode).
                let mut row_blocks: [Option<ChunksExact<'_, u8>>; R] = [const { None }; R];
                for (blocks, row) in row_blocks.iter_mut().zip(rows) {
                    *blocks = Some(row[..blocks_per_row * block_bytes].chunks_exact(block_bytes));
                }
                let mut act_quants: [&[[i16; 32]]; C] = [&[]; C];
                let (mut act_scales, mut act_scaled_sums, mut act_sums): ([&[f32]; C], [&[f32]; C], [&[i32]; C]) =
                    ([&[]; C], [&[]; C], [&[]; C]);
                for (c, act) in acts.iter().enumerate() {
                    act_quants[c] = &act.q16.as_chunks::<32>().0[..blocks_per_row];
                    act_scales[c] = &act.d[..blocks_per_row];
                    if kind == Kind::Min {
                        act_scaled_sums[c] = &act.ds[..blocks_per_row];
                    }
                    if matches!(kind, Kind::Offset(_)) {
                        act_sums[c] = &act.sums[..blocks_per_row];
                    }
                }
                for b in 0..blocks_per_row {
                    prefetch(stream, lead + R * block_bytes * b, R * block_bytes);
                    // Closures do not inline the kernels' intrinsics: plain loops fill these.
                    let mut blocks: [Decoded; R] = [((zero, zero), 0.0, 0.0); R];
                    let mut bytes: [&[u8]; R] = [&[]; R];
                    for r in 0..R {
                        bytes[r] = match &mut row_blocks[r] {
                            Some(blocks) => blocks.next().unwrap_or_default(),
                            None => &[],
                        };
                        blocks[r] = decode(bytes[r]);
                    }
                    let lane = |i: usize| i % R;
                    let four = [bytes[0], bytes[lane(1)], bytes[lane(2)], bytes[lane(3)]];
                    // Written out here: as a function LLVM did not inline it, which cost 2× in decode.
                    let (d, mins) = match scales {
                        Scales::F16 if kind == Kind::Min => {
                            let pair = |b: &[u8]| i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                            // [d0 m0 d1 m1 d2 m2 d3 m3] as f32, then the scales twice and the minimums once.
                            let both = _mm256_cvtph_ps(_mm_setr_epi32(
                                pair(four[0]),
                                pair(four[1]),
                                pair(four[2]),
                                pair(four[3]),
                            ));
                            let d = _mm256_permutevar8x32_ps(both, _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6));
                            let m = _mm256_permutevar8x32_ps(both, _mm256_setr_epi32(1, 3, 5, 7, 1, 3, 5, 7));
                            (d, _mm256_blend_ps::<0b1111_0000>(m, _mm256_setzero_ps()))
                        }
                        Scales::F16 => {
                            // Combined in general registers, then one move into a vector: a chain of `vpinsrw`
                            // measured 1.13–1.2× slower in decode.
                            let scale = |i: usize| u64::from(u16::from_le_bytes([four[i][0], four[i][1]])) << (16 * i);
                            let packed = scale(0) | scale(1) | scale(2) | scale(3);
                            (_mm256_cvtph_ps(_mm_set1_epi64x(packed as i64)), _mm256_setzero_ps())
                        }
                        Scales::Decoded => (
                            twice([blocks[0].1, blocks[lane(1)].1, blocks[lane(2)].1, blocks[lane(3)].1]),
                            low_half([blocks[0].2, blocks[lane(1)].2, blocks[lane(2)].2, blocks[lane(3)].2]),
                        ),
                    };
                    for c in 0..C {
                        let mut dots = [zero; R];
                        for r in 0..R {
                            dots[r] = $dot(blocks[r].0, &act_quants[c][b]);
                        }
                        let v = reduce4([dots[0], dots[1 % R], dots[2 % R], dots[3 % R]]);
                        let min_terms =
                            if kind == Kind::Min { Some((mins, _mm256_set1_ps(act_scaled_sums[c][b]))) } else { None };
                        let off =
                            if matches!(kind, Kind::Offset(_)) { offsets(kind, [act_sums[c][b]; 4]) } else { None };
                        acc[c] =
                            accumulate(acc[c], v, off, _mm256_mul_ps(d, _mm256_set1_ps(act_scales[c][b])), min_terms);
                    }
                }
                row_results(acc)
            }

            /// Walks all rows of `w` (whole rows of `row_bytes`) × all activations: rows in groups of
            /// [`ROWS`] (then one at a time), activations in groups of `4·G`, then 4, then the last 1..3
            /// together; `out` is row-major (rows × acts). The callers take the panels from
            /// `avx2_panel::MIN_ACTS` activations on (one instance of the panels per format: with one
            /// per ISA their inner step was no longer inlined, 0.7–0.9× at 8 and 12 activations).
            #[inline]
            #[target_feature(enable = $features)]
            pub(in super::super) fn tiles<F: Format, const G: usize>(
                w: &[u8],
                row_bytes: usize,
                acts: &[Activation<'_>],
                out: &mut [f32],
                decode: impl Fn(&[u8]) -> Decoded,
            ) {
                let n = acts.len();
                let mut row_groups = w.chunks_exact(ROWS * row_bytes);
                let mut out_groups = out.chunks_exact_mut(ROWS * n);
                for (g, (rows, out)) in (&mut row_groups).zip(&mut out_groups).enumerate() {
                    let mut group: [&[u8]; ROWS] = [&[]; ROWS];
                    for (row, bytes) in group.iter_mut().zip(rows.chunks_exact(row_bytes)) {
                        *row = bytes;
                    }
                    // Only the first tile over these rows prefetches: the later ones find them in cache.
                    let stream = &w[g * ROWS * row_bytes..];
                    row_group::<F, ROWS, G>(group, stream, acts, out, &decode);
                }
                let rest =
                    row_groups.remainder().chunks_exact(row_bytes).zip(out_groups.into_remainder().chunks_exact_mut(n));
                for (row, out) in rest {
                    row_group::<F, 1, G>([row], row, acts, out, &decode);
                }
            }

            /// [`tiles`] for one group of `R` rows; `out` is their `R × acts` results.
            #[allow(clippy::too_many_arguments)]
            #[inline]
            #[target_feature(enable = $features)]
            fn row_group<F: Format, const R: usize, const G: usize>(
                rows: [&[u8]; R],
                mut stream: &[u8],
                acts: &[Activation<'_>],
                out: &mut [f32],
                decode: &impl Fn(&[u8]) -> Decoded,
            ) {
                let n = acts.len();
                let mut done = 0;
                while G > 1 && n - done >= 4 * G {
                    let result = tile_acts::<F, R, G>(rows, stream, &acts[done..done + 4 * G], decode);
                    for g in 0..G {
                        put(out, n, done + 4 * g, result.map(|groups| groups[g]));
                    }
                    (stream, done) = (&[], done + 4 * G);
                }
                while n - done >= 4 {
                    let result = tile_acts::<F, R, 1>(rows, stream, &acts[done..done + 4], decode);
                    put(out, n, done, result.map(|[group]| group));
                    (stream, done) = (&[], done + 4);
                }
                match &acts[done..] {
                    [] => {}
                    [a] => put(out, n, done, tile_rows::<F, R, 1>(rows, stream, [a], decode)),
                    [a, b] => put(out, n, done, tile_rows::<F, R, 2>(rows, stream, [a, b], decode)),
                    [a, b, c] => put(out, n, done, tile_rows::<F, R, 3>(rows, stream, [a, b, c], decode)),
                    _ => unreachable!("fewer than 4 activations are left"),
                }
            }
        }
    };
}
pub(super) use tile_kernels;

tile_kernels!("avx2,fma,f16c", super::quants_dot);

/// Writes a tile's `R × C` results into `out` (rows of `n`) from column `first` on.
#[inline]
pub(super) fn put<const R: usize, const C: usize>(out: &mut [f32], n: usize, first: usize, result: [[f32; C]; R]) {
    for (r, values) in result.iter().enumerate() {
        out[r * n + first..r * n + first + C].copy_from_slice(values);
    }
}

/// 32 signed bytes as two vectors of 16 i16, each widened straight from memory.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn bytes_wide_signed(qs: &[u8]) -> (__m256i, __m256i) {
    (
        _mm256_cvtepi8_epi16(pod_read_unaligned::<__m128i>(&qs[..16])),
        _mm256_cvtepi8_epi16(pod_read_unaligned::<__m128i>(&qs[16..32])),
    )
}

/// 16 bytes of packed nibbles (byte j: value j low, value j + 16 high) as two vectors of 16 i16,
/// widened before they are split: one `vpmovzxbw`, an `and` and a shift, where unpacking to bytes
/// first and widening after costs an insert, an extract and two widenings.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn nibbles_wide(qs: &[u8]) -> (__m256i, __m256i) {
    let bytes = bytes_wide(qs);
    (_mm256_and_si256(bytes, _mm256_set1_epi16(0x0F)), _mm256_srli_epi16::<4>(bytes))
}

/// The first 16 bytes of `qs`, zero-extended to 16 i16 lanes by one `vpmovzxbw` from memory.
///
/// Written in `asm!` because LLVM, seeing zero-extended bytes, rewrote the intrinsics' version of
/// [`nibbles_wide`] back into byte-wide shifts and masks followed by two `vpmovzxbw` per block
/// (docs/benchmarks-history.md, "Widening once"): one shuffle and two other µops more per block.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(unsafe_code)]
pub(super) fn bytes_wide(qs: &[u8]) -> __m256i {
    let qs = &qs[..16];
    let bytes: __m256i;
    // SAFETY: the instruction reads the 16 bytes of `qs` (sliced above, so they exist) and writes
    // only the output register; the caller promises AVX2 (this function's target features).
    unsafe {
        core::arch::asm!("vpmovzxbw {y}, xmmword ptr [{p}]", y = out(ymm_reg) bytes, p = in(reg) qs.as_ptr(),
            options(pure, readonly, nostack, preserves_flags));
    }
    bytes
}

/// A Q5 block's 32 quants as two vectors of 16 i16 (values 0..16, 16..32): the nibbles as
/// [`nibbles_wide`] reads them, each lane's fifth bit (bit j of `qh` for value j) tested in place,
/// so that nothing is widened after the bytes are split.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q5_wide(qh: &[u8], qs: &[u8]) -> (__m256i, __m256i) {
    let (low, high) = nibbles_wide(qs);
    let (bits_low, bits_high) = (i16::from_le_bytes([qh[0], qh[1]]), i16::from_le_bytes([qh[2], qh[3]]));
    (_mm256_or_si256(low, fifth_wide(bits_low)), _mm256_or_si256(high, fifth_wide(bits_high)))
}

/// Two vectors of 16 E2M1 nibbles (one per i16 lane) as their doubled values: the magnitude
/// looked up by `vpshufb` (a lane's zero high byte looks up entry 0, which is 0, so the result
/// stays zero-extended), the sign (bit 3) moved to the lane's sign bit and applied by `vpsignw`
/// (a zero `nibble << 12` only meets nibble 0, whose value is 0 anyway).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn e2m1_wide(magnitudes: __m256i, low: __m256i, high: __m256i) -> (__m256i, __m256i) {
    (
        _mm256_sign_epi16(_mm256_shuffle_epi8(magnitudes, low), _mm256_slli_epi16::<12>(low)),
        _mm256_sign_epi16(_mm256_shuffle_epi8(magnitudes, high), _mm256_slli_epi16::<12>(high)),
    )
}

/// 0x10 in i16 lane j iff bit j of `bits` is set.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn fifth_wide(bits: i16) -> __m256i {
    let lanes = _mm256_setr_epi16(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, i16::MIN);
    let set = _mm256_cmpeq_epi16(_mm256_and_si256(_mm256_set1_epi16(bits), lanes), lanes);
    _mm256_and_si256(set, _mm256_set1_epi16(0x10))
}

// The formats. Q8_0 joined them from `avx2_tile`'s 4 × 2 tiles of 8-lane accumulators, whose
// eight-part sums made its prefill panels convert and scale 8 parts per block
// (docs/benchmarks-history.md, "Widening once").

pub(super) struct Q8_0;
impl Format for Q8_0 {
    const BLOCK_BYTES: usize = 34;
    const KIND: Kind = Kind::Signed;
    const SCALES: Scales = Scales::F16;
}

pub(super) struct Q4_0;
impl Format for Q4_0 {
    const BLOCK_BYTES: usize = 18;
    const KIND: Kind = Kind::Offset(8);
    const SCALES: Scales = Scales::F16;
}

pub(super) struct Q4_1;
impl Format for Q4_1 {
    const BLOCK_BYTES: usize = 20;
    const KIND: Kind = Kind::Min;
    const SCALES: Scales = Scales::F16;
}

pub(super) struct Q5_0;
impl Format for Q5_0 {
    const BLOCK_BYTES: usize = 22;
    const KIND: Kind = Kind::Offset(16);
    const SCALES: Scales = Scales::F16;
}

pub(super) struct Q5_1;
impl Format for Q5_1 {
    const BLOCK_BYTES: usize = 24;
    const KIND: Kind = Kind::Min;
    const SCALES: Scales = Scales::F16;
}

pub(super) struct Mxfp4;
impl Format for Mxfp4 {
    const BLOCK_BYTES: usize = 17;
    const KIND: Kind = Kind::Signed;
    const SCALES: Scales = Scales::Decoded;
}

// Each format's block decoder, shared by these tiles and the AVX-512 panels.

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn decode_q8_0(b: &[u8]) -> Decoded {
    (bytes_wide_signed(&b[2..]), f16_at(b), 0.0)
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn decode_q4_0(b: &[u8]) -> Decoded {
    (nibbles_wide(&b[2..]), f16_at(b), 0.0)
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn decode_q4_1(b: &[u8]) -> Decoded {
    let (d, m) = f16_pair_at(b);
    (nibbles_wide(&b[4..]), d, m)
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn decode_q5_0(b: &[u8]) -> Decoded {
    (q5_wide(&b[2..6], &b[6..]), f16_at(b), 0.0)
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn decode_q5_1(b: &[u8]) -> Decoded {
    let (d, m) = f16_pair_at(b);
    (q5_wide(&b[4..8], &b[8..]), d, m)
}

/// The doubled E2M1 values' magnitudes, by nibble.
pub(super) const MXFP4_MAGNITUDES: [u8; 16] = {
    let mut magnitudes = [0; 16];
    let mut i = 0;
    while i < 16 {
        magnitudes[i] = KVALUES_MXFP4[i].unsigned_abs();
        i += 1;
    }
    magnitudes
};

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn decode_mxfp4(b: &[u8]) -> Decoded {
    let table = _mm256_broadcastsi128_si256(pod_read_unaligned::<__m128i>(&MXFP4_MAGNITUDES));
    let (low, high) = nibbles_wide(&b[1..]);
    (e2m1_wide(table, low, high), e8m0_to_f32_half(b[0]), 0.0)
}

/// The `matmul_i16` kernel of one format, compiled with `$features`: `tiles::tiles` (of the module
/// that invokes this) with `$tile_decode` below `avx2_panel::MIN_ACTS` activations, the panels
/// from there, adding their sums as `$sums` says (`avx2_panel::MADD` here; `avx_vnni` and
/// `avx512_tile` invoke it too, with their `vpdpwssd`).
///
/// The panels run in a function of their own compiled for AVX2, with AVX2's `$panel_decode`
/// (the same integers): a decoder or closure compiled with more features than the panels' loop
/// is not inlined into it, which cost 0.7–0.9× at 8 to 15 activations.
macro_rules! format_tiles {
    ($name:ident, $format:ty, $tile_decode:path, $panel_decode:path, $sums:path, $features:literal) => {
        #[inline]
        #[target_feature(enable = $features)]
        pub(super) fn $name<const G: usize>(w: &[u8], row_bytes: usize, acts: &[Activation<'_>], out: &mut [f32]) {
            #[target_feature(enable = "avx2,fma,f16c")]
            fn panels(w: &[u8], row_bytes: usize, acts: &[Activation<'_>], out: &mut [f32]) {
                avx2_panel::panels::<$format, _, { $sums }>(w, row_bytes, acts, out, |b| $panel_decode(b));
            }
            if acts.len() >= avx2_panel::MIN_ACTS {
                panels(w, row_bytes, acts, out);
            } else {
                tiles::tiles::<$format, G>(w, row_bytes, acts, out, |b| $tile_decode(b));
            }
        }
    };
}
pub(super) use format_tiles;

format_tiles!(tiles_q8_0, Q8_0, decode_q8_0, decode_q8_0, avx2_panel::MADD, "avx2,fma,f16c");
format_tiles!(tiles_q4_0, Q4_0, decode_q4_0, decode_q4_0, avx2_panel::MADD, "avx2,fma,f16c");
format_tiles!(tiles_q4_1, Q4_1, decode_q4_1, decode_q4_1, avx2_panel::MADD, "avx2,fma,f16c");
format_tiles!(tiles_q5_0, Q5_0, decode_q5_0, decode_q5_0, avx2_panel::MADD, "avx2,fma,f16c");
format_tiles!(tiles_q5_1, Q5_1, decode_q5_1, decode_q5_1, avx2_panel::MADD, "avx2,fma,f16c");
format_tiles!(tiles_mxfp4, Mxfp4, decode_mxfp4, decode_mxfp4, avx2_panel::MADD, "avx2,fma,f16c");
