//! The kernels of repacked weights (`crate::repack`: 16 rows interleaved, four bytes of each per
//! slot) against Q8_0 activations, for AVX-512 VNNI, for AVX2 and for AVX2 with AVX-VNNI.
//!
//! Per block, each slot is one 64-byte vector holding four values of each of the 16 rows; an
//! activation's four quants of the same values are broadcast to every lane, so the 16 rows'
//! integer sums build up lane by lane with nothing to reduce:
//!
//! ```text
//!   AVX-512 VNNI   s = vpdpbusd(s, slot, broadcast(a[4k..4k+4]))      u8 weights × i8 activations
//!                  Q8_0's signed quants as unsigned bytes: q ^ 0x80 = q + 128, then s − 128·Σa
//!                  Q5's fifth bits: one masked byte add of 16 per decoded slot
//!                  MXFP4's nibbles: one `vpshufb` to their doubled E2M1 value + 12, then s − 12·Σa
//!   AVX2           each slot as two 32-byte halves (rows 0..8, 8..16)
//!                  Q4_x, Q5_x, MXFP4: vpmaddubsw per slot (≤ 2·15·128 per i16; Q5 2·31·128;
//!                        MXFP4 2·24·128), the slots added as i16 (Q4: all 8, ≤ 30,720; Q5 and
//!                        MXFP4: two sums of 4, ≤ 31,744 and 24,576),
//!                        each sum one vpmaddwd by ones; Q5's fifth bits spread from their mask
//!                  Q8_0: vpmaddubsw(|q|, sign(a, q)) per slot, each vpmaddwd by ones, added as i32
//!   AVX-VNNI       the halves as AVX2 decodes them, summed as AVX-512 VNNI does: one VEX
//!                  vpdpbusd per slot and activation, each slot decoded once for
//!                  [`VNNI_ACTS`] activations
//! ```
//!
//! then per block `acc = fma(d_w·d_a, f32(s), acc)` (and `fma(m_w, d_a·Σa, acc)` for Q4_1, Q5_1), as
//! `crate::repack::reference_kernel` does: the results equal it bit for bit. Each pass over a
//! block's weights serves [`AVX512_ACTS`], [`AVX2_ACTS`] or [`VNNI_ACTS`] activations (weights
//! decoded once per pass), and the last pass those short of a full one (`for_count!`).
//!
//! Memory safety rests on slices and `bytemuck` loads; the caller promises the features of the
//! row the kernel is in (`super::AVX512_VNNI`, `super::AVX2_FMA_F16C`, `super::AVX2_VNNI`).

use core::arch::x86_64::{
    __m128i, __m256, __m256i, __m512, __m512i, _mm_cvtsi64_si128, _mm256_abs_epi8, _mm256_add_epi16, _mm256_add_epi32,
    _mm256_and_si256, _mm256_blendv_epi8, _mm256_castsi256_ps, _mm256_cmpeq_epi8, _mm256_cmpgt_epi32,
    _mm256_cvtepi32_ps, _mm256_cvtepu8_epi32, _mm256_cvtph_ps, _mm256_fmadd_ps, _mm256_madd_epi16,
    _mm256_maddubs_epi16, _mm256_max_ps, _mm256_min_ps, _mm256_mul_ps, _mm256_or_si256, _mm256_packs_epi16,
    _mm256_packs_epi32, _mm256_permutevar8x32_epi32, _mm256_set1_epi8, _mm256_set1_epi16, _mm256_set1_epi32,
    _mm256_set1_epi64x, _mm256_set1_ps, _mm256_setr_epi32, _mm256_setr_epi64x, _mm256_setzero_ps, _mm256_setzero_si256,
    _mm256_shuffle_epi8, _mm256_sign_epi8, _mm256_slli_epi32, _mm256_sllv_epi32, _mm256_srli_epi16, _mm256_sub_epi32,
    _mm256_xor_si256, _mm512_add_epi32, _mm512_and_si512, _mm512_castsi512_ps, _mm512_cmplt_epu32_mask,
    _mm512_cvtepi32_ps, _mm512_cvtepu8_epi32, _mm512_cvtph_ps, _mm512_dpbusd_epi32, _mm512_fmadd_ps,
    _mm512_mask_add_epi8, _mm512_mask_blend_epi32, _mm512_mul_ps, _mm512_set1_epi8, _mm512_set1_epi32, _mm512_set1_ps,
    _mm512_setzero_ps, _mm512_setzero_si512, _mm512_shuffle_epi8, _mm512_slli_epi32, _mm512_sllv_epi32,
    _mm512_srli_epi16, _mm512_sub_epi32, _mm512_xor_si512,
};

use bytemuck::pod_read_unaligned;

use super::avx_vnni;
use super::avx2_tile_i16::prefetch;
use super::avx2_vector::{block_values, lane_sum, largest_magnitude, round_half_away};
use crate::activation::Activation;
pub(super) use crate::kernels::repacked_formats::{MXFP4, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0};
use crate::kernels::repacked_formats::{
    block_bytes, blocks_of, has_e8m0_scales, has_fifth_bit, has_minimum, quant_bytes,
};
use crate::repack::{ActBlock, GROUP_ROWS, SLOT_BYTES};

/// ggml's doubled E2M1 values plus 12 (`KVALUES_MXFP4[n] + 12`, 0..=24): the unsigned bytes MXFP4
/// nibbles decode to here (one `vpshufb`), `12·Σa` taken off the exact sum as Q4_0 takes `8·Σa`.
const MXFP4_PLUS_12: [u8; 16] = [12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0];

/// Activations per pass over a block's weights, AVX-512 (32 registers: 8 slots, 8 sums, scales).
const AVX512_ACTS: usize = 8;
/// Activations per pass over half a block's weights, AVX2 (16 registers: 8 slots, 4 sums).
const AVX2_ACTS: usize = 4;
/// Activations per pass over half a block's weights, AVX-VNNI (slot by slot: 8 sums, one slot).
const VNNI_ACTS: usize = 8;

/// A Q5 block's fifth-bit mask word `s` (bit 4r + i: row r's value 4s + i).
#[inline(always)]
fn fifth_bits(src: &[u8], s: usize) -> u64 {
    pod_read_unaligned::<u64>(&src[4 * SLOT_BYTES + 8 * s..4 * SLOT_BYTES + 8 * s + 8])
}

/// Rows `8·half .. 8·half + 8`'s 32 bits of [`fifth_bits`] word `s`, read where they lie (not
/// shifted out of the u64, so that `bytes_from_bits`'s broadcast takes them from memory).
#[inline(always)]
fn half_fifth_bits(src: &[u8], s: usize, half: usize) -> u32 {
    let at = 4 * SLOT_BYTES + 8 * s + 4 * half;
    pod_read_unaligned::<u32>(&src[at..at + 4])
}

/// An activation block's quants four at a time, as i32 (value order 4k..4k + 4).
#[inline(always)]
fn word(act: &ActBlock, k: usize) -> i32 {
    pod_read_unaligned::<i32>(&act.qs[4 * k..4 * k + 4])
}

/// The integer a block's sum is corrected by: what the unsigned form of the weights added.
#[inline(always)]
fn offset_sum(format: u8, act: &ActBlock) -> i32 {
    match format {
        Q8_0 => act.sum << 7,
        Q4_0 => act.sum << 3,
        Q5_0 => act.sum << 4,
        MXFP4 => act.sum * 12,
        _ => 0,
    }
}

/// Whether a 4-bit format's decoded slots must be summed as i16 in two halves of four (their
/// `vpmaddubsw` pairs reach 2·31·128 for Q5, 2·24·128 for MXFP4: eight would overflow).
const fn sums_in_halves(format: u8) -> bool {
    has_fifth_bit(format) || format == MXFP4
}

/// `e8m0_to_f32_half` of 16 exponent bytes: `(e − 1) << 23` as f32 bits, the subnormals
/// `0x200000 << e` for e < 2.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn e8m0_halves_512(bytes: __m128i) -> __m512 {
    let e = _mm512_cvtepu8_epi32(bytes);
    let normal = _mm512_slli_epi32::<23>(_mm512_sub_epi32(e, _mm512_set1_epi32(1)));
    let tiny = _mm512_sllv_epi32(_mm512_set1_epi32(0x0020_0000), e);
    _mm512_castsi512_ps(_mm512_mask_blend_epi32(_mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2)), normal, tiny))
}

/// [`e8m0_halves_512`] of 8 exponent bytes (`bytes`, little-endian).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn e8m0_halves_256(bytes: u64) -> __m256 {
    let e = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(bytes as i64));
    let normal = _mm256_slli_epi32::<23>(_mm256_sub_epi32(e, _mm256_set1_epi32(1)));
    let tiny = _mm256_sllv_epi32(_mm256_set1_epi32(0x0020_0000), e);
    _mm256_castsi256_ps(_mm256_blendv_epi8(normal, tiny, _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e)))
}

/// A block's (`src`) 16 row scales `d_w` as f32: f16 values, or MXFP4's exponents.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) fn row_scales_512<const FORMAT: u8>(src: &[u8]) -> __m512 {
    let quants = quant_bytes(FORMAT);
    if has_e8m0_scales(FORMAT) {
        e8m0_halves_512(pod_read_unaligned::<__m128i>(&src[quants..quants + 16]))
    } else {
        _mm512_cvtph_ps(pod_read_unaligned::<__m256i>(&src[quants..quants + 32]))
    }
}

/// Rows `8·half .. 8·half + 8` of a block's (`src`) scales `d_w` as f32 (AVX2).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn row_scales_256<const FORMAT: u8>(src: &[u8], half: usize) -> __m256 {
    let quants = quant_bytes(FORMAT);
    if has_e8m0_scales(FORMAT) {
        let at = quants + 8 * half;
        e8m0_halves_256(pod_read_unaligned::<u64>(&src[at..at + 8]))
    } else {
        let at = quants + 16 * half;
        _mm256_cvtph_ps(pod_read_unaligned::<__m128i>(&src[at..at + 16]))
    }
}

/// [`MXFP4_PLUS_12`] in every 16-byte lane of a 32-byte vector.
#[inline(always)]
fn mxfp4_table() -> [u8; 32] {
    std::array::from_fn(|i| MXFP4_PLUS_12[i % 16])
}

/// AVX-512 VNNI: one group against the activations of `acts`, results into `out` (one per
/// activation); the first pass streams `ahead` into L2 (`crate::repack::RepackedKernel`), except
/// for one activation of Q8_0 (see below).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) fn avx512<const FORMAT: u8>(
    group: &[u8],
    ahead: &[u8],
    acts: &[Activation<'_>],
    out: &mut [[f32; GROUP_ROWS]],
) {
    let blocks = group.len() / block_bytes(FORMAT);
    // One activation of Q8_0 reads its weights as fast as they arrive, and there the hardware
    // prefetchers, with the slots loaded in address order ([`load_in_order`]), stream them
    // faster alone: on a Zen 4, 178 MB of Q8_0 in 6.6 ms on one thread without the software
    // prefetch against 8.9 with it (`repacked/gemma3_262144x640/Q8_0/n1`). The 4-bit formats
    // keep it (with it and without, their criterion medians moved within this VM's spread);
    // several activations make a pass compute-bound and need their next group in L2 ahead of
    // them (Q8_0, 8 activations: 14.7 GB/s with the prefetch, 6.4 without).
    let ahead = if acts.len() == 1 && FORMAT == Q8_0 { &[][..] } else { ahead };
    let (mut acts, mut out, mut ahead) = (acts, out, ahead);
    while out.len() >= AVX512_ACTS {
        avx512_pass::<FORMAT, AVX512_ACTS>(group, ahead, blocks_of(acts, blocks), &mut out[..AVX512_ACTS]);
        (acts, out, ahead) = (&acts[AVX512_ACTS..], &mut out[AVX512_ACTS..], &[]);
    }
    for_count!(out.len(), [1, 2, 3, 4, 5, 6, 7], N => avx512_pass::<FORMAT, N>(group, ahead, blocks_of(acts, blocks), out));
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn avx512_pass<const FORMAT: u8, const N: usize>(
    group: &[u8],
    ahead: &[u8],
    acts: [&[ActBlock]; N],
    out: &mut [[f32; GROUP_ROWS]],
) {
    let (block, quants) = (block_bytes(FORMAT), quant_bytes(FORMAT));
    let blocks = group.len() / block;
    let mut acc: [__m512; N] = [_mm512_setzero_ps(); N];
    let sign = _mm512_set1_epi8(-128);
    for b in 0..blocks {
        let src = &group[b * block..][..block];
        prefetch(ahead, b * block, block);
        let slots: [__m512i; 8] = if FORMAT == Q8_0 {
            std::array::from_fn(|s| _mm512_xor_si512(load_in_order(src, SLOT_BYTES * s), sign))
        } else {
            nibble_slots::<FORMAT>(src)
        };
        let d_w = row_scales_512::<FORMAT>(src);
        let m_w = if has_minimum(FORMAT) {
            _mm512_cvtph_ps(pod_read_unaligned::<__m256i>(&src[quants + 32..quants + 64]))
        } else {
            _mm512_setzero_ps()
        };
        for j in 0..N {
            let act = &acts[j][b];
            // Two running sums, so that each waits on four `vpdpbusd`s, not eight.
            let mut sums = [_mm512_setzero_si512(); 2];
            for k in 0..8 {
                sums[k % 2] = _mm512_dpbusd_epi32(sums[k % 2], slots[k], _mm512_set1_epi32(word(act, k)));
            }
            let mut s = _mm512_add_epi32(sums[0], sums[1]);
            if !has_minimum(FORMAT) {
                s = _mm512_sub_epi32(s, _mm512_set1_epi32(offset_sum(FORMAT, act)));
            }
            let scale = _mm512_mul_ps(d_w, _mm512_set1_ps(act.d));
            acc[j] = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(s), acc[j]);
            if has_minimum(FORMAT) {
                acc[j] = _mm512_fmadd_ps(m_w, _mm512_set1_ps(act.ds), acc[j]);
            }
        }
    }
    for (out, acc) in out.iter_mut().zip(acc) {
        *out = bytemuck::cast(acc);
    }
}

/// The 64 bytes of `src` at `at`, read where the code says: a block's slot loads in ascending
/// address order.
///
/// Written in `asm!` because LLVM, free to order plain loads, issued a block's eight slot loads
/// from the last to the first, and the hardware prefetchers, seeing each block's lines
/// requested downwards, fell behind: one Zen 4 thread streamed a Gemma 3 head (178 MB of Q8_0)
/// at 14 GB/s without software prefetch, and a C loop of the same instructions at 13 GB/s
/// with its loads descending against 22–28 ascending (docs/benchmarks.md, "Slot loads in
/// address order"). A non-`pure` `asm!` block is kept in program order with the others.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[allow(unsafe_code)]
pub(super) fn load_in_order(src: &[u8], at: usize) -> __m512i {
    let line = &src[at..at + 64];
    let bytes: __m512i;
    // SAFETY: the instruction reads the 64 bytes of `line` (sliced above, so they exist; no
    // alignment needed) and writes only the output register; the caller promises AVX-512
    // (this function's target features).
    unsafe {
        core::arch::asm!("vmovdqu64 {z}, zmmword ptr [{p}]", z = out(zmm_reg) bytes, p = in(reg) line.as_ptr(),
            options(readonly, nostack, preserves_flags));
    }
    bytes
}

/// A Q4, Q5 or MXFP4 block's (`src`) 8 slots decoded to bytes, 0..32: slot s < 4 the low nibbles
/// of packed slot s, s ≥ 4 the high ones of slot s − 4, Q5's fifth bits added by a masked add of
/// 16, MXFP4's nibbles looked up in [`MXFP4_PLUS_12`] (the AMX kernels decode with it too).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) fn nibble_slots<const FORMAT: u8>(src: &[u8]) -> [__m512i; 8] {
    let low = _mm512_set1_epi8(0x0F);
    let sixteen = _mm512_set1_epi8(0x10);
    let table = bytemuck::cast::<[[u8; 32]; 2], __m512i>([mxfp4_table(); 2]);
    let packed: [__m512i; 4] = std::array::from_fn(|c| load_in_order(src, SLOT_BYTES * c));
    std::array::from_fn(|s| {
        let nibbles = if s < 4 {
            _mm512_and_si512(packed[s], low)
        } else {
            _mm512_and_si512(_mm512_srli_epi16(packed[s - 4], 4), low)
        };
        if has_fifth_bit(FORMAT) {
            _mm512_mask_add_epi8(nibbles, fifth_bits(src, s), nibbles, sixteen)
        } else if FORMAT == MXFP4 {
            _mm512_shuffle_epi8(table, nibbles)
        } else {
            nibbles
        }
    })
}

/// Slot `s` of half `half` (rows `8·half .. 8·half + 8`) of a Q4, Q5 or MXFP4 block (`src`),
/// decoded to bytes as [`nibble_slots`] decodes a whole one: `packed` (packed slot `s % 4`'s
/// half) its low nibbles for s < 4, its high ones for s ≥ 4, Q5's fifth bits spread from their
/// mask and added, MXFP4's nibbles looked up in [`MXFP4_PLUS_12`] (the AVX2 and AVX-VNNI passes).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn nibble_slot_256<const FORMAT: u8>(src: &[u8], packed: __m256i, s: usize, half: usize) -> __m256i {
    let nibbles = if s < 4 { packed } else { _mm256_srli_epi16(packed, 4) };
    let nibbles = _mm256_and_si256(nibbles, _mm256_set1_epi8(0x0F));
    if has_fifth_bit(FORMAT) {
        let word = half_fifth_bits(src, s, half);
        _mm256_or_si256(nibbles, _mm256_and_si256(bytes_from_bits(word), _mm256_set1_epi8(0x10)))
    } else if FORMAT == MXFP4 {
        _mm256_shuffle_epi8(bytemuck::cast::<[u8; 32], __m256i>(mxfp4_table()), nibbles)
    } else {
        nibbles
    }
}

/// AVX2 + FMA + F16C: one group against the activations of `acts`, results into `out`, as two
/// halves of 8 rows: a sweep over the group per half for several activations, one sweep taking
/// both halves block by block for one.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn avx2<const FORMAT: u8>(
    group: &[u8],
    ahead: &[u8],
    acts: &[Activation<'_>],
    out: &mut [[f32; GROUP_ROWS]],
) {
    let blocks = group.len() / block_bytes(FORMAT);
    let (mut acts, mut out, mut ahead) = (acts, out, ahead);
    while out.len() >= AVX2_ACTS {
        for half in 0..2 {
            let ahead = if half == 0 { ahead } else { &[] };
            avx2_pass::<FORMAT, AVX2_ACTS, 1>(group, ahead, half, blocks_of(acts, blocks), &mut out[..AVX2_ACTS]);
        }
        (acts, out, ahead) = (&acts[AVX2_ACTS..], &mut out[AVX2_ACTS..], &[]);
    }
    if out.len() == 1 {
        // One activation (a decode step) takes both halves of each block in one sweep over the
        // group: two sweeps read each line of a group streamed from DRAM twice, the second from
        // L1 or L2, and ran Q8_0 at 0.87x the zero-copy kernel from DRAM on a Zen 1.
        avx2_pass::<FORMAT, 1, 2>(group, ahead, 0, blocks_of(acts, blocks), out);
        return;
    }
    for_count!(out.len(), [2, 3], N => for half in 0..2 {
        let ahead = if half == 0 { ahead } else { &[] };
        avx2_pass::<FORMAT, N, 1>(group, ahead, half, blocks_of(acts, blocks), out);
    });
}

/// AVX2 + FMA + F16C with AVX-VNNI: one group against the activations of `acts`, results into
/// `out`, as two halves of 8 rows; each slot · broadcast activation word is one VEX `vpdpbusd`
/// (u8 weights × i8 activations, Q8_0's quants made unsigned as in [`avx512`]) where AVX2 needs
/// `vpmaddubsw`, an i16 add and at last `vpmaddwd`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn avx_vnni<const FORMAT: u8>(
    group: &[u8],
    ahead: &[u8],
    acts: &[Activation<'_>],
    out: &mut [[f32; GROUP_ROWS]],
) {
    let blocks = group.len() / block_bytes(FORMAT);
    let (mut acts, mut out, mut ahead) = (acts, out, ahead);
    while out.len() >= VNNI_ACTS {
        for half in 0..2 {
            let ahead = if half == 0 { ahead } else { &[] };
            avx_vnni_pass::<FORMAT, VNNI_ACTS>(group, ahead, half, blocks_of(acts, blocks), &mut out[..VNNI_ACTS]);
        }
        (acts, out, ahead) = (&acts[VNNI_ACTS..], &mut out[VNNI_ACTS..], &[]);
    }
    for_count!(out.len(), [1, 2, 3, 4, 5, 6, 7], N => for half in 0..2 {
        let ahead = if half == 0 { ahead } else { &[] };
        avx_vnni_pass::<FORMAT, N>(group, ahead, half, blocks_of(acts, blocks), out);
    });
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn avx_vnni_pass<const FORMAT: u8, const N: usize>(
    group: &[u8],
    ahead: &[u8],
    half: usize,
    acts: [&[ActBlock]; N],
    out: &mut [[f32; GROUP_ROWS]],
) {
    let (block, quants) = (block_bytes(FORMAT), quant_bytes(FORMAT));
    let blocks = group.len() / block;
    let mut acc: [__m256; N] = [_mm256_setzero_ps(); N];
    let sign = _mm256_set1_epi8(-128);
    // Below eight activations, two running sums each, so that a block's eight `vpdpbusd`s are two
    // chains of four; with eight, the activations' chains are enough in flight.
    let chains = if N >= VNNI_ACTS { 1 } else { 2 };
    for b in 0..blocks {
        let src = &group[b * block..][..block];
        prefetch(ahead, b * block, block);
        let load = |at: usize| pod_read_unaligned::<__m256i>(&src[at + 32 * half..at + 32 * half + 32]);
        let scales = |at: usize| {
            let at = at + 16 * half;
            _mm256_cvtph_ps(pod_read_unaligned::<__m128i>(&src[at..at + 16]))
        };
        let mut sums = [[_mm256_setzero_si256(); 2]; N];
        // Slot by slot, each decoded once and used by every activation before the next.
        for k in 0..8 {
            let slot = if FORMAT == Q8_0 {
                _mm256_xor_si256(load(SLOT_BYTES * k), sign)
            } else {
                nibble_slot_256::<FORMAT>(src, load(SLOT_BYTES * (k % 4)), k, half)
            };
            for j in 0..N {
                let sum = &mut sums[j][k % chains];
                *sum = avx_vnni::dpbusd(*sum, slot, _mm256_set1_epi32(word(&acts[j][b], k)));
            }
        }
        let d_w = row_scales_256::<FORMAT>(src, half);
        let m_w = if has_minimum(FORMAT) { scales(quants + 32) } else { _mm256_setzero_ps() };
        for j in 0..N {
            let act = &acts[j][b];
            let mut s = _mm256_add_epi32(sums[j][0], sums[j][1]);
            if !has_minimum(FORMAT) {
                s = _mm256_sub_epi32(s, _mm256_set1_epi32(offset_sum(FORMAT, act)));
            }
            let scale = _mm256_mul_ps(d_w, _mm256_set1_ps(act.d));
            acc[j] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(s), acc[j]);
            if has_minimum(FORMAT) {
                acc[j] = _mm256_fmadd_ps(m_w, _mm256_set1_ps(act.ds), acc[j]);
            }
        }
    }
    for (out, acc) in out.iter_mut().zip(acc) {
        let values: [f32; 8] = bytemuck::cast(acc);
        out[8 * half..8 * half + 8].copy_from_slice(&values);
    }
}

/// `crate::activation::quantize_act_blocks` in AVX2, bit for bit: each block's largest magnitude
/// (NaN ignored, as `f32::max` does), `d = amax / 127`, the values times `1/d` clamped to the
/// i8 range and rounded half away from zero (NaN to 0), their sum, the scale rounded to f16.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn quantize_q8_1(x: &[f32], out: &mut [ActBlock]) {
    let (lowest, highest) = (_mm256_set1_ps(-128.0), _mm256_set1_ps(127.0));
    let (x_blocks, _) = x.as_chunks::<32>();
    for (x, block) in x_blocks.iter().zip(out) {
        let v = block_values(x);
        let scale = largest_magnitude(&v) / 127.0;
        let inverse = _mm256_set1_ps(if scale == 0.0 { 0.0 } else { 1.0 / scale });
        let rounded: [__m256i; 4] = std::array::from_fn(|k| {
            // Clamped to the i8 range first; NaN stays NaN through both (each returns its second
            // operand, the product, for a NaN).
            round_half_away(_mm256_min_ps(highest, _mm256_max_ps(lowest, _mm256_mul_ps(v[k], inverse))))
        });
        // i32 → i16 → i8 by saturating packs (the values fit), lanes put back in order.
        let words = [_mm256_packs_epi32(rounded[0], rounded[1]), _mm256_packs_epi32(rounded[2], rounded[3])];
        let bytes = _mm256_packs_epi16(words[0], words[1]);
        let ordered = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        block.qs = bytemuck::cast(ordered);
        block.sum = lane_sum(&rounded);
        block.d = half::f16::from_f32(scale).to_f32();
        block.ds = block.d * block.sum as f32;
        block.pad = 0;
    }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn avx2_pass<const FORMAT: u8, const N: usize, const HALVES: usize>(
    group: &[u8],
    ahead: &[u8],
    half: usize,
    acts: [&[ActBlock]; N],
    out: &mut [[f32; GROUP_ROWS]],
) {
    let (block, quants) = (block_bytes(FORMAT), quant_bytes(FORMAT));
    let blocks = group.len() / block;
    // HALVES = 1: rows 8·half.. of the group; 2: both halves, block by block. The accumulators
    // are indexed by the unrolled `h` so that they stay in registers.
    let half_of = |h: usize| if HALVES == 2 { h } else { half };
    let mut acc: [[__m256; N]; HALVES] = [[_mm256_setzero_ps(); N]; HALVES];
    let ones = _mm256_set1_epi16(1);
    for b in 0..blocks {
        let src = &group[b * block..][..block];
        prefetch(ahead, b * block, block);
        for (h, acc) in acc.iter_mut().enumerate() {
            let half = half_of(h);
            let load = |at: usize| pod_read_unaligned::<__m256i>(&src[at + 32 * half..at + 32 * half + 32]);
            let scales = |at: usize| {
                let at = at + 16 * half;
                _mm256_cvtph_ps(pod_read_unaligned::<__m128i>(&src[at..at + 16]))
            };
            let d_w = row_scales_256::<FORMAT>(src, half);
            if FORMAT == Q8_0 {
                let slots: [__m256i; 8] = std::array::from_fn(|s| load(SLOT_BYTES * s));
                for j in 0..N {
                    let act = &acts[j][b];
                    let mut s = _mm256_setzero_si256();
                    for (k, &slot) in slots.iter().enumerate() {
                        let a = _mm256_sign_epi8(_mm256_set1_epi32(word(act, k)), slot);
                        s = _mm256_add_epi32(
                            s,
                            _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(slot), a), ones),
                        );
                    }
                    let scale = _mm256_mul_ps(d_w, _mm256_set1_ps(act.d));
                    acc[j] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(s), acc[j]);
                }
            } else {
                let packed: [__m256i; 4] = std::array::from_fn(|c| load(SLOT_BYTES * c));
                let slots: [__m256i; 8] =
                    std::array::from_fn(|s| nibble_slot_256::<FORMAT>(src, packed[s % 4], s, half));
                let m_w = if has_minimum(FORMAT) { scales(quants + 32) } else { _mm256_setzero_ps() };
                for j in 0..N {
                    let act = &acts[j][b];
                    // Slot pairs' products are at most 2·15·128 (Q4), 2·31·128 (Q5) or 2·24·128
                    // (MXFP4) per i16: eight Q4 slots sum within i16 (≤ 30,720), Q5's and MXFP4's in
                    // two halves of four (≤ 31,744, 24,576).
                    let partial = |from: usize, to: usize| {
                        let mut p = _mm256_maddubs_epi16(slots[from], _mm256_set1_epi32(word(act, from)));
                        // A slice and a range, not `enumerate().take().skip()`: `Skip::next` was not
                        // inlined here, and its call per slot spilled the accumulators (3.6× slower).
                        for (&slot, k) in slots[from + 1..to].iter().zip(from + 1..) {
                            p = _mm256_add_epi16(p, _mm256_maddubs_epi16(slot, _mm256_set1_epi32(word(act, k))));
                        }
                        _mm256_madd_epi16(p, ones)
                    };
                    let mut s = if sums_in_halves(FORMAT) {
                        _mm256_add_epi32(partial(0, 4), partial(4, 8))
                    } else {
                        partial(0, 8)
                    };
                    if !has_minimum(FORMAT) {
                        s = _mm256_sub_epi32(s, _mm256_set1_epi32(offset_sum(FORMAT, act)));
                    }
                    let scale = _mm256_mul_ps(d_w, _mm256_set1_ps(act.d));
                    acc[j] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(s), acc[j]);
                    if has_minimum(FORMAT) {
                        acc[j] = _mm256_fmadd_ps(m_w, _mm256_set1_ps(act.ds), acc[j]);
                    }
                }
            }
        }
    }
    for (h, acc) in acc.into_iter().enumerate() {
        let half = half_of(h);
        for (out, acc) in out.iter_mut().zip(acc) {
            let values: [f32; 8] = bytemuck::cast(acc);
            out[8 * half..8 * half + 8].copy_from_slice(&values);
        }
    }
}

/// The 32 bits of `word` as 32 bytes, 0xFF where the bit is set: byte j takes byte j / 8 of the
/// word, every bit but j % 8 is set, and the byte is all ones only if bit j % 8 was.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn bytes_from_bits(word: u32) -> __m256i {
    let spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(word as i32),
        _mm256_setr_epi64x(0, 0x0101_0101_0101_0101, 0x0202_0202_0202_0202, 0x0303_0303_0303_0303),
    );
    let others = _mm256_or_si256(spread, _mm256_set1_epi64x(0x7fbf_dfef_f7fb_fdfe_u64 as i64));
    _mm256_cmpeq_epi8(others, _mm256_set1_epi64x(-1))
}
