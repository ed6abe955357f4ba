//! Float weights (F32, F16, BF16) × f32 activations: one row · one activation for a decode, panels
//! of rows × activations for a prefill or a batch.
//!
//! A pair's arithmetic is one fixed sequence wherever it runs: four 8-lane accumulators over each
//! 32 values (value `32k + 8s + i` into accumulator `s`, lane `i`), the rest 8 at a time into the
//! first, the four added `(0 + 1) + (2 + 3)` and summed across lanes, then the last `cols % 8`
//! products summed in order and added (`finish`). One row · one activation (`dot_float`) keeps
//! the four FMA chains of one pair in flight, reading the row as one stream with a prefetch ahead;
//! a panel of `R` rows × `A` activations widens each row's values once for `A` activations and
//! keeps `4·R·A` accumulators in registers:
//!
//! ```text
//!   for each 32 columns, s = 0..4:   w_r = widen(row r, 32k + 8s)           R widenings
//!                                    acc[r][a][s] = fma(w_r, x_a, acc)       R × A FMAs
//! ```
//!
//! A decode (`dot_float`) and a prefill or a batch (panels, and `dot_float` for the activations
//! left over) therefore give every (row, activation) the same bits, as the engine's batch
//! invariance requires, and the same bits as before the panels existed. The panels are written
//! once as `float_panels!` and compiled for AVX2 (`R = 1, A = 3`: 12 accumulators in 16
//! registers) and for AVX-512 (`R = 2, A = 2` in its 32 `ymm` registers, the same 8-lane
//! arithmetic; with 24 accumulators, `R = 2, A = 3`, LLVM stored every accumulator after its FMA
//! and the panel ran slower than with 16).
//!
//! Memory safety does not rest on `unsafe` (slices and `bytemuck` unaligned loads); the caller
//! promises the features (see `super::AVX2_FMA_F16C`, `super::AVX512_VNNI`).

use core::arch::x86_64::{
    __m128i, __m256, _MM_HINT_T1, _mm_prefetch, _mm256_add_ps, _mm256_castsi256_ps, _mm256_cvtepu16_epi32,
    _mm256_cvtph_ps, _mm256_fmadd_ps, _mm256_setzero_ps, _mm256_slli_epi32,
};

use bytemuck::pod_read_unaligned;

use super::avx2_dot::hsum_ps;
use crate::kernels::float_format::{BF16, F16, F32, width};

/// How far ahead of its position a float row's dot product prefetches the weights, in bytes: the
/// hardware prefetcher alone kept a bf16 matvec at about two thirds of a core's read bandwidth
/// (docs/benchmarks-history.md, "AVX-VNNI without AVX-512…"). Into L2 (`prefetcht1`), as the i16 tiles
/// do (`avx2_tile_i16::prefetch`): into L1 it held back GPT-OSS's bf16 matrices read from DRAM.
const FLOAT_PREFETCH_AHEAD: usize = 12288;

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn load8(x: &[f32]) -> __m256 {
    pod_read_unaligned::<__m256>(bytemuck::cast_slice(&x[..8]))
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn widen_f32(b: &[u8]) -> __m256 {
    pod_read_unaligned::<__m256>(&b[..32])
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn widen_f16(b: &[u8]) -> __m256 {
    _mm256_cvtph_ps(pod_read_unaligned::<__m128i>(&b[..16]))
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn widen_bf16(b: &[u8]) -> __m256 {
    let wide = _mm256_cvtepu16_epi32(pod_read_unaligned::<__m128i>(&b[..16]));
    _mm256_castsi256_ps(_mm256_slli_epi32::<16>(wide))
}

/// 8 stored values of format `FORMAT` as f32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn widen<const FORMAT: u8>(b: &[u8]) -> __m256 {
    match FORMAT {
        F32 => widen_f32(b),
        F16 => widen_f16(b),
        _ => widen_bf16(b),
    }
}

/// One pair's sum from its four accumulators (after every whole 8 values) and the last `cols % 8`
/// weight bytes and activations, as the module docs order it.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn finish<const FORMAT: u8>(acc: [__m256; 4], w_rest: &[u8], x_rest: &[f32]) -> f32 {
    let total = hsum_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    if x_rest.is_empty() {
        // What the sum below adds then, -0.0 (`Sum`'s start), leaves every f32 as it is.
        return total;
    }
    // The last values one at a time, widened through an 8-lane buffer.
    let mut w_buf = [0u8; 32];
    w_buf[..w_rest.len()].copy_from_slice(w_rest);
    let tail = bytemuck::cast::<__m256, [f32; 8]>(widen::<FORMAT>(&w_buf));
    total + tail.iter().zip(x_rest).map(|(w, x)| w * x).sum::<f32>()
}

/// One row (values of format `FORMAT`) · `x`: the module's arithmetic, each 32 values prefetching
/// one cache line [`FLOAT_PREFETCH_AHEAD`] bytes on.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn dot_float<const FORMAT: u8>(row: &[u8], x: &[f32]) -> f32 {
    let width = width(FORMAT);
    let mut acc = [_mm256_setzero_ps(); 4];
    let (w32, x32) = (row.chunks_exact(32 * width), x.chunks_exact(32));
    let (w_tail, x_tail) = (w32.remainder(), x32.remainder());
    for (i, (w, x)) in w32.zip(x32).enumerate() {
        // The weights a few rows on (a matvec walks its rows in order), past this row's end: a
        // prefetch never faults, so the address need not be in `row`.
        _mm_prefetch::<_MM_HINT_T1>(row.as_ptr().wrapping_add(32 * width * i + FLOAT_PREFETCH_AHEAD).cast::<i8>());
        for (k, acc) in acc.iter_mut().enumerate() {
            *acc = _mm256_fmadd_ps(widen::<FORMAT>(&w[8 * width * k..]), load8(&x[8 * k..]), *acc);
        }
    }
    let (w8, x8) = (w_tail.chunks_exact(8 * width), x_tail.chunks_exact(8));
    let (w_rest, x_rest) = (w8.remainder(), x8.remainder());
    for (w, x) in w8.zip(x8) {
        acc[0] = _mm256_fmadd_ps(widen::<FORMAT>(w), load8(x), acc[0]);
    }
    finish::<FORMAT>(acc, w_rest, x_rest)
}

/// Defines module `$name` with `tiles_f32`, `tiles_f16` and `tiles_bf16` ([`super::TileKernel`]s):
/// one activation by `dot_float`, more in panels of `$rows` rows × `$acts` activations compiled
/// with `$features` (the activations left over by `dot_float`).
macro_rules! float_panels {
    ($name:ident, $features:literal, $rows:expr, $acts:expr) => {
        pub(super) mod $name {
            use core::arch::x86_64::{__m256, _mm256_fmadd_ps, _mm256_setzero_ps};

            use super::{BF16, F16, F32, dot_float, finish, load8, widen, width};
            use crate::activation::Activation;

            /// Rows per panel.
            const ROWS: usize = $rows;
            /// Activations per panel.
            const ACTS: usize = $acts;

            #[target_feature(enable = $features)]
            pub(in super::super) fn tiles_f32(w: &[u8], row_bytes: usize, acts: &[Activation<'_>], out: &mut [f32]) {
                tiles::<F32>(w, row_bytes, acts, out);
            }

            #[target_feature(enable = $features)]
            pub(in super::super) fn tiles_f16(w: &[u8], row_bytes: usize, acts: &[Activation<'_>], out: &mut [f32]) {
                tiles::<F16>(w, row_bytes, acts, out);
            }

            #[target_feature(enable = $features)]
            pub(in super::super) fn tiles_bf16(w: &[u8], row_bytes: usize, acts: &[Activation<'_>], out: &mut [f32]) {
                tiles::<BF16>(w, row_bytes, acts, out);
            }

            /// Every row of `w` (`row_bytes` each, values of format `FORMAT`) · every activation
            /// into `out` (rows × activations, row-major).
            #[inline]
            #[target_feature(enable = $features)]
            fn tiles<const FORMAT: u8>(w: &[u8], row_bytes: usize, acts: &[Activation<'_>], out: &mut [f32]) {
                let n = acts.len();
                if n < ACTS {
                    for (row, out) in w.chunks_exact(row_bytes).zip(out.chunks_exact_mut(n)) {
                        for (y, act) in out.iter_mut().zip(acts) {
                            *y = dot_float::<FORMAT>(row, act.x);
                        }
                    }
                    return;
                }
                for (group, out) in w.chunks(ROWS * row_bytes).zip(out.chunks_mut(ROWS * n)) {
                    if group.len() == ROWS * row_bytes {
                        let mut rows: [&[u8]; ROWS] = [&[]; ROWS];
                        for (r, row) in rows.iter_mut().enumerate() {
                            *row = &group[r * row_bytes..][..row_bytes];
                        }
                        rows_times_acts::<ROWS, FORMAT>(rows, acts, out);
                    } else {
                        // The last rows, fewer than a panel's, one at a time.
                        for (row, out) in group.chunks_exact(row_bytes).zip(out.chunks_exact_mut(n)) {
                            rows_times_acts::<1, FORMAT>([row], acts, out);
                        }
                    }
                }
            }

            /// `rows` · every activation into `out` (`R` rows of `acts.len()`): panels of `ACTS`
            /// activations, the rest by `dot_float`.
            #[inline]
            #[target_feature(enable = $features)]
            fn rows_times_acts<const R: usize, const FORMAT: u8>(
                rows: [&[u8]; R],
                acts: &[Activation<'_>],
                out: &mut [f32],
            ) {
                let n = acts.len();
                let (panels, rest) = acts.as_chunks::<ACTS>();
                for (p, panel_acts) in panels.iter().enumerate() {
                    let ys = panel::<R, FORMAT>(rows, panel_acts);
                    for (r, y) in ys.iter().enumerate() {
                        out[r * n + ACTS * p..][..ACTS].copy_from_slice(y);
                    }
                }
                let first = panels.len() * ACTS;
                for (r, row) in rows.iter().enumerate() {
                    for (j, act) in rest.iter().enumerate() {
                        out[r * n + first + j] = dot_float::<FORMAT>(row, act.x);
                    }
                }
            }

            /// `rows` · `acts`, each pair by the module's arithmetic.
            #[inline]
            #[target_feature(enable = $features)]
            fn panel<const R: usize, const FORMAT: u8>(
                rows: [&[u8]; R],
                acts: &[Activation<'_>; ACTS],
            ) -> [[f32; ACTS]; R] {
                let width = width(FORMAT);
                let cols = rows[0].len() / width;
                let mut xs: [&[f32]; ACTS] = [&[]; ACTS];
                for (x, act) in xs.iter_mut().zip(acts) {
                    *x = &act.x[..cols];
                }
                // Four arrays rather than one with a step index: with the index, LLVM kept the
                // accumulators in memory and stored each after its FMA.
                let mut acc = [[[_mm256_setzero_ps(); ACTS]; R]; 4];
                let whole = cols / 32;
                for k in 0..whole {
                    // One slice per row and activation for these 32 values: the four steps'
                    // offsets are then constants within it, checked at compile time.
                    let mut w32: [&[u8]; R] = [&[]; R];
                    for r in 0..R {
                        w32[r] = &rows[r][32 * width * k..32 * width * (k + 1)];
                    }
                    let mut x32: [&[f32; 32]; ACTS] = [&[0.0; 32]; ACTS];
                    for a in 0..ACTS {
                        x32[a] = xs[a][32 * k..32 * k + 32].try_into().expect("32 values");
                    }
                    for (s, acc) in acc.iter_mut().enumerate() {
                        step::<R, FORMAT>(acc, &w32, &x32, s);
                    }
                }
                let eights = (cols - 32 * whole) / 8;
                for e in 0..eights {
                    let at = 32 * whole + 8 * e;
                    for r in 0..R {
                        let w = widen::<FORMAT>(&rows[r][width * at..]);
                        for a in 0..ACTS {
                            acc[0][r][a] = _mm256_fmadd_ps(w, load8(&xs[a][at..]), acc[0][r][a]);
                        }
                    }
                }
                let done = 32 * whole + 8 * eights;
                let mut ys = [[0.0; ACTS]; R];
                for r in 0..R {
                    for a in 0..ACTS {
                        let pair = [acc[0][r][a], acc[1][r][a], acc[2][r][a], acc[3][r][a]];
                        ys[r][a] = finish::<FORMAT>(pair, &rows[r][width * done..], &xs[a][done..]);
                    }
                }
                ys
            }

            /// Values `8·s..8·s + 8` of the 32 in `w32` and `x32` into accumulators `acc`.
            #[inline]
            #[target_feature(enable = $features)]
            fn step<const R: usize, const FORMAT: u8>(
                acc: &mut [[__m256; ACTS]; R],
                w32: &[&[u8]; R],
                x32: &[&[f32; 32]; ACTS],
                s: usize,
            ) {
                let width = width(FORMAT);
                let mut w = [_mm256_setzero_ps(); R];
                for r in 0..R {
                    w[r] = widen::<FORMAT>(&w32[r][8 * width * s..]);
                }
                for a in 0..ACTS {
                    let x = load8(&x32[a][8 * s..]);
                    for r in 0..R {
                        acc[r][a] = _mm256_fmadd_ps(w[r], x, acc[r][a]);
                    }
                }
            }
        }
    };
}

float_panels!(avx2, "avx2,fma,f16c", 1, 3);
float_panels!(avx512, "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni", 2, 2);
