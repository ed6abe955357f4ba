//! AMX-INT8 (Intel Xeon since Sapphire Rapids): the repacked K-quants (Q2_K…Q6_K) against
//! sixteen Q8_K activations at a time by tile products (`tdpbssd`), the rest of each step in
//! AVX-512 — `repacked_k::avx512`'s integer sums and f32 steps, so the results are its results,
//! and the scalar reference's, bit for bit.
//!
//! A repacked part's slot holds four values of each of 16 rows, so a sub-block's slots, decoded
//! to bytes (the nibbles, with Q5_K's fifth bits or Q6_K's high bits, or Q2_K's and Q3_K's bits: 0..63,
//! which a signed byte holds), are the B operand of one product: 8 tile rows of 64 bytes for Q4_K /
//! Q5_K's 32-value sub-blocks, 4 for Q2_K's, Q3_K's and Q6_K's 16-value ones. They are decoded once per
//! call. A is sixteen activations' quants of the sub-block (laid out once per thread and call), C
//! the 16 × 16 exact sums `dot_j`, four sub-blocks in flight, then per activation as the VNNI kernel:
//!
//! ```text
//!   s += dot_j · sc_j            (Q6_K: (dot_j − 32·Σa_j) · sc_j, its quants stored plus 32;
//!                                 Q3_K the same with 4)
//!   n  = Σ_j m_j · Σa_j          (Q2_K, Q4_K, Q5_K: vpdpwssd over the minimum pairs)
//!   acc = fma(d_w·d_a, f32(s), acc), then fnmadd(dmin_w·d_a, f32(n), acc)
//! ```
//!
//! Activations short of sixteen at the end of a call go to `repacked_k::avx512`. The tile
//! configuration is loaded at the start of each call and released at its end.

use core::arch::x86_64::{
    __m256i, __m512i, _mm512_add_epi32, _mm512_and_si512, _mm512_cvtepi8_epi16, _mm512_cvtepi32_ps,
    _mm512_cvtepu8_epi16, _mm512_cvtph_ps, _mm512_dpwssd_epi32, _mm512_fmadd_ps, _mm512_fnmadd_ps, _mm512_mul_ps,
    _mm512_mullo_epi32, _mm512_set1_epi16, _mm512_set1_epi32, _mm512_set1_ps, _mm512_setzero_ps, _mm512_setzero_si512,
    _mm512_slli_epi32, _mm512_srai_epi32, _mm512_srli_epi16, _mm512_srli_epi32,
};
use std::cell::RefCell;

use bytemuck::pod_read_unaligned;

use super::amx::{Sums, TileConfig, four_products, with_tiles};
use super::avx2_tile_i16::prefetch;
use super::avx512_panel::{LayoutKey, laid_out};
use super::repacked_k;
use crate::activation::Activation;
use crate::kernels::repacked_formats::k_layout as layout;
use crate::kernels::repacked_formats::{Q2_K, k_offset_shift, k_signed, k_sixteen};
use crate::repack::{GROUP_ROWS, SLOT_BYTES};

/// Activations per tile product (A's and C's rows).
const ACTS: usize = 16;

/// Values per super-block.
const QK: usize = 256;

/// Bytes of a super-block's decoded B operands (Q4_K, Q5_K: 8 sub-blocks × 8 slots; Q2_K, Q3_K,
/// Q6_K: 16 × 4).
const DECODED_BYTES: usize = 4096;

/// Q4_K and Q5_K: K = 32 per product; Q2_K, Q3_K, Q6_K: K = 16.
static CONFIG_32: TileConfig = TileConfig::new(32);
static CONFIG_16: TileConfig = TileConfig::new(16);

/// Sixteen activations at one super-block: A's rows (stride 256) and what the other steps read.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct ActTile {
    qs: [[u8; QK]; ACTS],
    d: [f32; ACTS],
    bsums: [[i16; 16]; ACTS],
}

const EMPTY: ActTile = ActTile { qs: [[0; QK]; ACTS], d: [0.0; ACTS], bsums: [[0; 16]; ACTS] };

/// One super-block's B operands: sub-block j's at `j · DECODED_BYTES / sub-blocks`.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Decoded([u8; DECODED_BYTES]);

thread_local! {
    /// The call's whole groups of sixteen activations: group `c` at super-block `b` is entry
    /// `c·blocks + b`, with the key of the activations they hold.
    static ACT_TILES: RefCell<(Option<LayoutKey>, Vec<ActTile>)> = const { RefCell::new((None, Vec::new())) };
    /// The group's super-blocks decoded to bytes.
    static DECODED: RefCell<Vec<Decoded>> = const { RefCell::new(Vec::new()) };
}

/// Sub-blocks per super-block: 8 of 32 values, Q2_K's, Q3_K's and Q6_K's 16 of 16.
const fn sub_blocks(format: u8) -> usize {
    if k_sixteen(format) { 16 } else { 8 }
}

/// Lays `acts` (whole groups of sixteen) out as [`ActTile`]s (see [`ACT_TILES`]): the same for
/// every format, as the key assumes.
fn lay_out(acts: &[Activation<'_>], blocks: usize, out: &mut Vec<ActTile>) {
    // Not cleared: every entry is written below (whole groups of sixteen), so only new entries
    // are filled first.
    out.resize(acts.len() / ACTS * blocks, EMPTY);
    for (tiles, acts) in out.chunks_exact_mut(blocks).zip(acts.chunks_exact(ACTS)) {
        for (j, act) in acts.iter().enumerate() {
            for (b, tile) in tiles.iter_mut().enumerate() {
                tile.qs[j].copy_from_slice(&act.qs[QK * b..QK * (b + 1)]);
                tile.d[j] = act.d[b];
                tile.bsums[j].copy_from_slice(&act.bsums[16 * b..16 * (b + 1)]);
            }
        }
    }
}

/// One group against the activations of `acts`, results into `out` (one per activation): whole
/// groups of sixteen by tile products, the rest by `repacked_k::avx512`
/// (`crate::repack::RepackedKernel`).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) fn repacked<const FORMAT: u8>(
    group: &[u8],
    ahead: &[u8],
    acts: &[Activation<'_>],
    out: &mut [[f32; GROUP_ROWS]],
) {
    let whole = out.len().min(acts.len()) / ACTS * ACTS;
    if whole == 0 {
        return repacked_k::avx512::<FORMAT>(group, ahead, acts, out);
    }
    let blocks = group.len() / layout(FORMAT).bytes;
    let config = if k_sixteen(FORMAT) { &CONFIG_16 } else { &CONFIG_32 };
    ACT_TILES.with_borrow_mut(|tiles| {
        laid_out(&acts[..whole], blocks, tiles, lay_out);
        DECODED.with_borrow_mut(|decoded| {
            decode::<FORMAT>(group, ahead, blocks, decoded);
            // Once per call, not per sixteen activations (as `amx::repacked`'s): every product
            // stores its sums before they are read.
            let mut stored = Sums([[[0; GROUP_ROWS]; ACTS]; 4]);
            with_tiles(config, || {
                for (c, out) in out[..whole].chunks_exact_mut(ACTS).enumerate() {
                    products::<FORMAT>(group, &tiles.1[c * blocks..][..blocks], decoded, &mut stored, out);
                }
            });
        });
    });
    repacked_k::avx512::<FORMAT>(group, &[], &acts[whole..], &mut out[whole..]);
}

/// Every super-block's sub-blocks as bytes in B's shape, `repacked_k::avx512`'s decoding stored,
/// streaming `ahead` into L2 a super-block's share per super-block.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn decode<const FORMAT: u8>(group: &[u8], ahead: &[u8], blocks: usize, decoded: &mut Vec<Decoded>) {
    let l = layout(FORMAT);
    // Not cleared: every byte is written below.
    decoded.resize(blocks, Decoded([0; DECODED_BYTES]));
    let sub_block_bytes = DECODED_BYTES / sub_blocks(FORMAT);
    for (b, out) in decoded.iter_mut().enumerate() {
        let src = &group[b * l.bytes..][..l.bytes];
        prefetch(ahead, b * l.bytes, l.bytes);
        let parts = sub_blocks(FORMAT) / 2;
        for (p, part) in src[..parts * l.part].chunks_exact(l.part).enumerate() {
            for h in 0..2 {
                let sub_block = &mut out.0[(2 * p + h) * sub_block_bytes..][..sub_block_bytes];
                for (c, slot) in sub_block.chunks_exact_mut(SLOT_BYTES).enumerate() {
                    let bytes = repacked_k::slot_bytes::<FORMAT>(part, h, c);
                    slot.copy_from_slice(&bytemuck::cast::<__m512i, [u8; 64]>(bytes));
                }
            }
        }
    }
}

/// Sixteen activations (`tiles`, one per super-block) against one group, results into `out`;
/// `stored` holds each product's C as stored.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn products<const FORMAT: u8>(
    group: &[u8],
    tiles: &[ActTile],
    decoded: &[Decoded],
    stored: &mut Sums,
    out: &mut [[f32; GROUP_ROWS]],
) {
    let l = layout(FORMAT);
    let (width, sub_block_bytes) = (QK / sub_blocks(FORMAT), DECODED_BYTES / sub_blocks(FORMAT));
    let low_word = _mm512_set1_epi32(0xFFFF);
    let mut acc = [_mm512_setzero_ps(); ACTS];
    for ((src, tile), weights) in group.chunks_exact(l.bytes).zip(tiles).zip(decoded) {
        let mut sums = [_mm512_setzero_si512(); ACTS];
        for four in 0..sub_blocks(FORMAT) / 4 {
            let (a, w) = (tile.qs.as_ptr().cast::<u8>(), weights.0.as_ptr());
            let (a, w) = (a.wrapping_add(4 * four * width), w.wrapping_add(4 * four * sub_block_bytes));
            let a = [a, a.wrapping_add(width), a.wrapping_add(2 * width), a.wrapping_add(3 * width)];
            let w = [
                w,
                w.wrapping_add(sub_block_bytes),
                w.wrapping_add(2 * sub_block_bytes),
                w.wrapping_add(3 * sub_block_bytes),
            ];
            // SAFETY: inside `with_tiles` (`repacked`), whose configuration reads each A as 16
            // rows of `width` bytes 256 apart from sub-block j's quants of the first activation
            // (`ActTile::qs`, 16 × 256 bytes, the last row ending within it) and each B as
            // `width / 4` rows of 64 bytes (sub-block j's `sub_block_bytes` of `weights`).
            unsafe { four_products(a, QK, w, stored) };
            for (i, dots) in stored.0.iter().enumerate() {
                let j = 4 * four + i;
                let (p, h) = (j / 2, j % 2);
                let part = &src[p * l.part..][..l.part];
                let pairs = pod_read_unaligned::<__m256i>(&part[l.scales..l.scales + 32]);
                let scale = if k_signed(FORMAT) {
                    let pairs = _mm512_cvtepi8_epi16(pairs);
                    if h == 0 {
                        _mm512_srai_epi32(_mm512_slli_epi32(pairs, 16), 16)
                    } else {
                        _mm512_srai_epi32(pairs, 16)
                    }
                } else {
                    let mut pairs = _mm512_cvtepu8_epi16(pairs);
                    if FORMAT == Q2_K {
                        // The scale in each byte's low nibble (the minimum in the high one).
                        pairs = _mm512_and_si512(pairs, _mm512_set1_epi16(0x0F));
                    }
                    if h == 0 { _mm512_and_si512(pairs, low_word) } else { _mm512_srli_epi32(pairs, 16) }
                };
                for (n, sum) in sums.iter_mut().enumerate() {
                    let mut dot = bytemuck::cast::<[i32; GROUP_ROWS], __m512i>(dots[n]);
                    if k_signed(FORMAT) {
                        // Q6_K's quants are stored plus 32, Q3_K's plus 4.
                        let offset = -(1 << k_offset_shift(FORMAT)) * i32::from(tile.bsums[n][j]);
                        dot = _mm512_add_epi32(dot, _mm512_set1_epi32(offset));
                    }
                    *sum = _mm512_add_epi32(*sum, _mm512_mullo_epi32(dot, scale));
                }
            }
        }
        let load_half = |at: usize| pod_read_unaligned::<__m256i>(&src[at..at + 32]);
        let d_w = _mm512_cvtph_ps(load_half(l.d));
        if k_signed(FORMAT) {
            for (n, acc) in acc.iter_mut().enumerate() {
                let d_a = _mm512_set1_ps(tile.d[n]);
                *acc = _mm512_fmadd_ps(_mm512_mul_ps(d_w, d_a), _mm512_cvtepi32_ps(sums[n]), *acc);
            }
            continue;
        }
        let dmin_w = _mm512_cvtph_ps(load_half(l.dmin));
        for (n, acc) in acc.iter_mut().enumerate() {
            let bsums = &tile.bsums[n];
            let sum = |j: usize| i32::from(bsums[2 * j]) + i32::from(bsums[2 * j + 1]);
            let mut mins = _mm512_setzero_si512();
            let parts = sub_blocks(FORMAT) / 2;
            for (p, part) in src[..parts * l.part].chunks_exact(l.part).enumerate() {
                let minimums = _mm512_cvtepu8_epi16(pod_read_unaligned::<__m256i>(&part[l.minimums..l.minimums + 32]));
                // Q2_K: the minimums of 16 values in the scale bytes' high nibbles; the others'
                // of 32 values, whose sums are two of the activation's.
                let (minimums, pair) = if FORMAT == Q2_K {
                    (
                        _mm512_srli_epi16(minimums, 4),
                        (bsums[2 * p] as u16 as u32 | (bsums[2 * p + 1] as u16 as u32) << 16),
                    )
                } else {
                    (minimums, (sum(2 * p) as u16 as u32 | (sum(2 * p + 1) as u16 as u32) << 16))
                };
                mins = _mm512_dpwssd_epi32(mins, minimums, _mm512_set1_epi32(pair as i32));
            }
            let d_a = _mm512_set1_ps(tile.d[n]);
            *acc = _mm512_fmadd_ps(_mm512_mul_ps(d_w, d_a), _mm512_cvtepi32_ps(sums[n]), *acc);
            *acc = _mm512_fnmadd_ps(_mm512_mul_ps(dmin_w, d_a), _mm512_cvtepi32_ps(mins), *acc);
        }
    }
    for (out, acc) in out.iter_mut().zip(acc) {
        *out = bytemuck::cast(acc);
    }
}
