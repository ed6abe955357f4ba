//! AVX2 (+FMA, F16C) panel kernels for prefill: the 32-value block formats against i16
//! activations when a call brings [`MIN_ACTS`] or more of them.
//!
//! The tile kernels (`avx2_tile_i16`) unpack each weight block again
//! for every few activations and spend most of their instructions on that unpacking, on
//! reducing each pair's 8 integer lanes, and on scales, not on `vpmaddwd`. Here a
//! group of 8 rows is unpacked once per call into a panel of i16 quants laid out across the rows:
//!
//! ```text
//!   slot p of block b (p = 0..16): one vector of 8 i32 lanes, lane r = the i16 pair
//!   (value 2p, value 2p + 1) of row r        — an 8 × 8 transpose of the rows' unpacked halves
//!   s    += madd(slot p, broadcast(activation's pair p))    8 rows' partial sums, no reductions
//!   acc   = fma(d_w[rows] · d_a, f32(s), acc)                per block
//! ```
//!
//! so one `madd` does 16 useful multiply-adds and nothing is reduced across lanes.
//!
//! The results must equal the tile kernels' bit for bit (a row's output may not depend on how
//! many activations came with it). So each pair's integer sum is split the way the tile kernels
//! split it before converting and scaling (halves, see [`Layout`]), the same f32 products and FMAs run on
//! each part in block order, and the parts are added in the tiles' order.
//!
//! Memory safety does not rest on `unsafe` (slices and `bytemuck` unaligned loads); the caller
//! promises AVX2, FMA and F16C (see `super::AVX2_FMA_F16C`).

use core::arch::x86_64::{
    __m256, __m256i, _mm256_add_epi32, _mm256_add_ps, _mm256_castsi256_ps, _mm256_cvtepi32_ps, _mm256_fmadd_ps,
    _mm256_madd_epi16, _mm256_mul_ps, _mm256_permute2x128_si256, _mm256_set1_epi32, _mm256_set1_ps, _mm256_setzero_ps,
    _mm256_setzero_si256, _mm256_sub_epi32, _mm256_unpackhi_epi32, _mm256_unpackhi_epi64, _mm256_unpacklo_epi32,
    _mm256_unpacklo_epi64,
};
use std::cell::RefCell;

use bytemuck::pod_read_unaligned;

use crate::activation::Activation;
use crate::kernels::BlockKind as Kind;

/// Rows per panel: one i32 lane each.
const ROWS: usize = 8;

/// A block format as the panels read it: constants, so that every branch on them folds away in
/// each format's kernel. Each pair's sum is split as `avx2_tile_i16` splits it: two halves, values
/// {0..8, 16..24} and {8..16, 24..32} (lanes 0..4 and 4..8 of the two `madd`s), each with its own
/// accumulator, added at the end; the offset (`Kind::Offset`) and minimum (`Kind::Min`) terms go
/// to the first half.
pub(super) trait Layout {
    const BLOCK_BYTES: usize;
    const KIND: Kind;
}

/// Fewest activations for which a call packs panels: below, packing (about one pass of the tile
/// kernel over the rows) is not paid back.
pub(super) const MIN_ACTS: usize = 8;

/// One block of a panel: 16 slots (slot p: the pair of values 2p, 2p+1 of the 8 rows), the rows'
/// scales and their minimums (as f32 bits).
type PanelBlock = [__m256i; 18];

thread_local! {
    /// The current row group's panel, kept per thread (a few KiB to tens of KiB).
    static PANEL: RefCell<Vec<PanelBlock>> = const { RefCell::new(Vec::new()) };
}

/// 8 × 8 i32 transpose: lane r of output p = lane p of input r (AVX2 alone, so that the f32
/// vector kernels, which do not ask for F16C, inline it too).
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn transpose8(v: [__m256i; 8]) -> [__m256i; 8] {
    let t = [
        _mm256_unpacklo_epi32(v[0], v[1]),
        _mm256_unpackhi_epi32(v[0], v[1]),
        _mm256_unpacklo_epi32(v[2], v[3]),
        _mm256_unpackhi_epi32(v[2], v[3]),
        _mm256_unpacklo_epi32(v[4], v[5]),
        _mm256_unpackhi_epi32(v[4], v[5]),
        _mm256_unpacklo_epi32(v[6], v[7]),
        _mm256_unpackhi_epi32(v[6], v[7]),
    ];
    let u = [
        _mm256_unpacklo_epi64(t[0], t[2]),
        _mm256_unpackhi_epi64(t[0], t[2]),
        _mm256_unpacklo_epi64(t[1], t[3]),
        _mm256_unpackhi_epi64(t[1], t[3]),
        _mm256_unpacklo_epi64(t[4], t[6]),
        _mm256_unpackhi_epi64(t[4], t[6]),
        _mm256_unpacklo_epi64(t[5], t[7]),
        _mm256_unpackhi_epi64(t[5], t[7]),
    ];
    [
        _mm256_permute2x128_si256::<0x20>(u[0], u[4]),
        _mm256_permute2x128_si256::<0x20>(u[1], u[5]),
        _mm256_permute2x128_si256::<0x20>(u[2], u[6]),
        _mm256_permute2x128_si256::<0x20>(u[3], u[7]),
        _mm256_permute2x128_si256::<0x31>(u[0], u[4]),
        _mm256_permute2x128_si256::<0x31>(u[1], u[5]),
        _mm256_permute2x128_si256::<0x31>(u[2], u[6]),
        _mm256_permute2x128_si256::<0x31>(u[3], u[7]),
    ]
}

/// Unpacks up to 8 rows (the missing ones as zeros) into `panel`, one entry per block.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn pack<D>(rows: &[&[u8]], block_bytes: usize, panel: &mut [PanelBlock], decode: &D)
where
    D: Fn(&[u8]) -> ((__m256i, __m256i), f32, f32),
{
    let zero = _mm256_setzero_si256();
    for (b, entry) in panel.iter_mut().enumerate() {
        let (mut lo, mut hi, mut d, mut m) = ([zero; ROWS], [zero; ROWS], [0.0f32; ROWS], [0.0f32; ROWS]);
        for (r, row) in rows.iter().enumerate() {
            ((lo[r], hi[r]), d[r], m[r]) = decode(&row[block_bytes * b..block_bytes * (b + 1)]);
        }
        entry[..8].copy_from_slice(&transpose8(lo));
        entry[8..16].copy_from_slice(&transpose8(hi));
        entry[16] = bytemuck::cast(d);
        entry[17] = bytemuck::cast(m);
    }
}

/// Activation pair `p` (values 2p, 2p + 1) of a block's i16 quants, in all 8 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn pair(a: &[i16; 32], p: usize) -> __m256i {
    _mm256_set1_epi32(pod_read_unaligned::<i32>(bytemuck::cast_slice(&a[2 * p..2 * p + 2])))
}

/// How the panels add each product pair into their integer sums (their `SUMS` parameter):
/// `vpmaddwd` + `vpaddd` (AVX2).
pub(super) const MADD: u8 = 0;
/// [`MADD`] as one VEX `vpdpwssd` (AVX-VNNI).
pub(super) const VEX_DPWSSD: u8 = 1;
/// [`MADD`] as one EVEX `vpdpwssd` on 256 bits (AVX-512 VL + VNNI).
pub(super) const EVEX_DPWSSD: u8 = 2;

/// `s + madd(w, x)` (8 i32 lanes, exact) as `SUMS` says: the `vpdpwssd` forms add the same
/// integers as `vpmaddwd` + `vpaddd`, in one instruction instead of two.
///
/// Written in `asm!` for the reason `avx512_tile::quants_dot` gives (LLVM splits the intrinsic
/// again when it does not tune for such a CPU); the `{vex}` / `{evex}` prefix picks the encoding
/// the CPU has.
#[inline]
#[target_feature(enable = "avx2")]
#[allow(unsafe_code)]
pub(super) fn madd_add<const SUMS: u8>(s: __m256i, w: __m256i, x: __m256i) -> __m256i {
    let mut s = s;
    match SUMS {
        // SAFETY: the instruction reads and writes registers only; kernels with `VEX_DPWSSD` are
        // reached only from the `avx2+avxvnni` ISA's rows, which run after its check found AVX-VNNI.
        VEX_DPWSSD => unsafe {
            core::arch::asm!("{{vex}} vpdpwssd {s}, {w}, {x}", s = inout(ymm_reg) s, w = in(ymm_reg) w,
                x = in(ymm_reg) x, options(pure, nomem, nostack, preserves_flags));
        },
        // SAFETY: as above; kernels with `EVEX_DPWSSD` are reached only from the `avx512+vnni`
        // ISA's rows, which run after its check found AVX-512 VL and VNNI.
        EVEX_DPWSSD => unsafe {
            core::arch::asm!("{{evex}} vpdpwssd {s}, {w}, {x}", s = inout(ymm_reg) s, w = in(ymm_reg) w,
                x = in(ymm_reg) x, options(pure, nomem, nostack, preserves_flags));
        },
        _ => s = _mm256_add_epi32(s, _mm256_madd_epi16(w, x)),
    }
    s
}

/// The integer sums over `slots` of a panel's block (8 rows) against `A` activations' blocks.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn partial<const A: usize, const S: usize, const SUMS: u8>(
    entry: &PanelBlock,
    a: &[&[i16; 32]; A],
    slots: [usize; S],
) -> [__m256i; A] {
    let mut s = [_mm256_setzero_si256(); A];
    for p in slots {
        for j in 0..A {
            s[j] = madd_add::<SUMS>(s[j], entry[p], pair(a[j], p));
        }
    }
    s
}

/// One activation's per-block values as a step reads them.
#[derive(Clone, Copy)]
struct ActBlocks<'a> {
    q: &'a [i16],
    d: &'a [f32],
    sums: &'a [i32],
    ds: &'a [f32],
}

impl<'a> ActBlocks<'a> {
    #[inline]
    fn new(act: &'a Activation<'_>, blocks: usize) -> Self {
        let ds = if act.ds.is_empty() { &[][..] } else { &act.ds[..blocks] };
        ActBlocks { q: &act.q16[..32 * blocks], d: &act.d[..blocks], sums: &act.sums[..blocks], ds }
    }
}

/// One half of every pair's sum (`slots`) over all blocks, scaled and accumulated per block:
/// `acc = fma(d_w·d_a, f32(s − k·Σa), acc)` (the offset only with `FIRST`), then the minimum's
/// term `fma(m, d_a·Σa, acc)` (`m` = 0 unless `FIRST`, as in the tiles' upper lanes).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn part<L: Layout, const A: usize, const FIRST: bool, const SUMS: u8>(
    panel: &[PanelBlock],
    acts: &[ActBlocks<'_>; A],
    slots: [usize; 8],
) -> [__m256; A] {
    let kind = L::KIND;
    let zero = _mm256_setzero_ps();
    let mut acc = [zero; A];
    for (b, entry) in panel.iter().enumerate() {
        let a: [&[i16; 32]; A] = std::array::from_fn(|j| acts[j].q[32 * b..32 * b + 32].try_into().expect("32 quants"));
        let s = partial::<A, 8, SUMS>(entry, &a, slots);
        let dw = _mm256_castsi256_ps(entry[16]);
        for j in 0..A {
            let v = match kind {
                Kind::Offset(k) if FIRST => _mm256_sub_epi32(s[j], _mm256_set1_epi32(k * acts[j].sums[b])),
                _ => s[j],
            };
            let dd = _mm256_mul_ps(dw, _mm256_set1_ps(acts[j].d[b]));
            let acc = &mut acc[j];
            *acc = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(v), *acc);
            if kind == Kind::Min {
                // The tiles' minimum term is 0 in the second half's lanes: kept there too, so
                // that both agree to the bit whatever the activation's values.
                let m = if FIRST { _mm256_castsi256_ps(entry[17]) } else { zero };
                *acc = _mm256_fmadd_ps(m, _mm256_set1_ps(acts[j].ds[b]), *acc);
            }
        }
    }
    acc
}

/// A panel (8 rows) against `A` activations: one vector of 8 row results per activation.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn step<L: Layout, const A: usize, const SUMS: u8>(panel: &[PanelBlock], acts: &[Activation<'_>; A]) -> [__m256; A] {
    let blocks = panel.len();
    // Plain loops rather than `from_fn`: its closures were not inlined into this function, a call
    // per step and activation (2 % of a prefill's profile).
    let empty = ActBlocks { q: &[], d: &[], sums: &[], ds: &[] };
    let mut act_blocks = [empty; A];
    for (blocks_of, act) in act_blocks.iter_mut().zip(acts) {
        *blocks_of = ActBlocks::new(act, blocks);
    }
    let lo = part::<L, A, true, SUMS>(panel, &act_blocks, [0, 1, 2, 3, 8, 9, 10, 11]);
    let hi = part::<L, A, false, SUMS>(panel, &act_blocks, [4, 5, 6, 7, 12, 13, 14, 15]);
    let mut sums = [_mm256_setzero_ps(); A];
    for j in 0..A {
        sums[j] = _mm256_add_ps(lo[j], hi[j]);
    }
    sums
}

/// Every row of `w` (whole rows of `row_bytes`) against every activation, `out` row-major (rows ×
/// acts), through panels of 8 rows. The tile kernels' results, bit for bit, for any number of
/// activations (worth it from [`MIN_ACTS`] on). `SUMS` picks how the integer sums are added
/// ([`MADD`], or a `vpdpwssd` the caller promises the CPU has): the same bits.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn panels<L: Layout, D, const SUMS: u8>(
    w: &[u8],
    row_bytes: usize,
    acts: &[Activation<'_>],
    out: &mut [f32],
    decode: D,
) where
    D: Fn(&[u8]) -> ((__m256i, __m256i), f32, f32),
{
    // One 8-row panel per step: with two, their 8 integer sums and 8 f32 accumulators were spilled
    // from AVX2's and AVX-VNNI's 16 registers, and even with EVEX's 32 two panels measured slower
    // once the step's closures were inlined (docs/benchmarks-history.md, "Prefill on AVX2 and AVX-VNNI").
    groups::<L, D, 4, SUMS>(w, row_bytes, acts, out, &decode);
}

/// [`panels`] in groups of 8 rows × `A` activations (then single activations).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn groups<L: Layout, D, const A: usize, const SUMS: u8>(
    w: &[u8],
    row_bytes: usize,
    acts: &[Activation<'_>],
    out: &mut [f32],
    decode: &D,
) where
    D: Fn(&[u8]) -> ((__m256i, __m256i), f32, f32),
{
    let n = acts.len();
    let blocks = row_bytes / L::BLOCK_BYTES;
    PANEL.with_borrow_mut(|panel| {
        panel.resize(blocks, bytemuck::Zeroable::zeroed());
        for (g, group) in w.chunks(ROWS * row_bytes).enumerate() {
            let mut rows: [&[u8]; ROWS] = [&[]; ROWS];
            let mut count = 0;
            for (row, bytes) in rows.iter_mut().zip(group.chunks_exact(row_bytes)) {
                (*row, count) = (bytes, count + 1);
            }
            pack(&rows[..count], L::BLOCK_BYTES, panel, decode);
            let out = &mut out[g * ROWS * n..][..count * n];
            let mut put = |j: usize, v: __m256| {
                let v: [f32; 8] = bytemuck::cast(v);
                for (r, &value) in v.iter().enumerate().take(count) {
                    out[r * n + j] = value;
                }
            };
            let mut tiles = acts.chunks_exact(A);
            let mut j = 0;
            for tile in &mut tiles {
                let result = step::<L, A, SUMS>(panel, tile.try_into().expect("A activations"));
                for (k, &v) in result.iter().enumerate() {
                    put(j + k, v);
                }
                j += A;
            }
            for act in tiles.remainder() {
                let [result] = step::<L, 1, SUMS>(panel, std::array::from_ref(act));
                put(j, result);
                j += 1;
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transpose8_moves_lane_p_of_row_r_to_lane_r_of_slot_p() {
        if !(is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c")) {
            return;
        }
        let rows: [__m256i; 8] =
            std::array::from_fn(|r| bytemuck::cast(std::array::from_fn::<i32, 8, _>(|p| (10 * r + p) as i32)));
        // SAFETY: the features were detected above.
        let slots = unsafe { transpose8(rows) };
        for (p, slot) in slots.iter().enumerate() {
            let lanes: [i32; 8] = bytemuck::cast(*slot);
            assert_eq!(lanes, std::array::from_fn(|r| (10 * r + p) as i32));
        }
    }
}
