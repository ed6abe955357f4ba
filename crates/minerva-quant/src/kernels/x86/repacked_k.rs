//! The kernels of repacked Q2_K…Q6_K weights (`crate::repack::k_quants`: 16 rows
//! interleaved, scales unpacked in pairs) against Q8_K activations, for AVX-512 VNNI, AVX2 and
//! AVX2 with AVX-VNNI.
//!
//! A decoded slot holds four values of each of the 16 rows; an activation's four quants of the
//! same values are broadcast to every lane:
//!
//! ```text
//!   AVX-512 VNNI   dot_j = vpdpbusd over the sub-block's slots (u8 weights × i8 activations)
//!                  s    += vpmulld(dot_j, sc_j)
//!                  Q6_K: the chain starts at −32·Σa_j, so s is Σ sc_j·(dot_j − 32·Σa_j)
//!                  (Q3_K: −4·Σa_j, its third bits one masked byte add of 4 per slot)
//!                  Q2_K: no offset; n = vpdpwssd over the scale bytes' high nibbles
//!                  Q4_K, Q5_K: n = vpdpwssd over the minimum pairs × (Σa_2p, Σa_2p+1)
//!                  Q5_K's fifth bits: one masked byte add of 16 per decoded slot
//!   AVX2           two halves of 8 rows; vpmaddubsw per slot, summed in i16 (Q4_K: 8 slots,
//!                  ≤ 30,720; Q5_K: 4 slots, ≤ 31,744; Q6_K: 2 slots, ≤ 32,256), then vpmaddwd
//!                  by (sc_j, sc_j); Q5_K's fifth bits spread from their mask words
//!                  Q6_K: the −32·Σ sc_j·Σa_j term by vpmaddwd over the scale pairs (Q3_K:
//!                  −4·Σ sc_j·Σa_j, ≤ 3,584 per i16 sum; Q2_K: its minimums' term so)
//!   AVX-VNNI       Q4_K, Q5_K: the halves as AVX2 decodes them, summed as AVX-512 VNNI does
//!                  (VEX vpdpbusd, vpmulld, the minimums by VEX vpdpwssd); Q2_K, Q3_K, Q6_K: as AVX2
//! ```
//!
//! then per super-block the scalar reference's f32 steps
//! (`crate::repack::k_quants::reference_kernel`): every ISA gives its bits.
//!
//! Memory safety rests on slices and `bytemuck` loads; the caller promises the features of the
//! row the kernel is in (`super::AVX512_VNNI`, `super::AVX2_FMA_F16C`, `super::AVX2_VNNI`).

use core::arch::x86_64::{
    __m128i, __m256, __m256i, __m512, __m512i, _mm256_add_epi16, _mm256_add_epi32, _mm256_and_si256, _mm256_cmpeq_epi8,
    _mm256_cvtepi8_epi16, _mm256_cvtepi32_ps, _mm256_cvtepu8_epi16, _mm256_cvtph_ps, _mm256_fmadd_ps, _mm256_fnmadd_ps,
    _mm256_madd_epi16, _mm256_maddubs_epi16, _mm256_mul_ps, _mm256_mullo_epi32, _mm256_or_si256, _mm256_set1_epi8,
    _mm256_set1_epi16, _mm256_set1_epi32, _mm256_set1_ps, _mm256_setzero_ps, _mm256_setzero_si256, _mm256_slli_epi16,
    _mm256_slli_epi32, _mm256_sllv_epi32, _mm256_srli_epi16, _mm256_srli_epi32, _mm256_sub_epi32, _mm512_add_epi32,
    _mm512_and_si512, _mm512_cvtepi8_epi16, _mm512_cvtepi32_ps, _mm512_cvtepu8_epi16, _mm512_cvtph_ps,
    _mm512_dpbusd_epi32, _mm512_dpwssd_epi32, _mm512_fmadd_ps, _mm512_fnmadd_ps, _mm512_mask_add_epi8, _mm512_mul_ps,
    _mm512_mullo_epi32, _mm512_or_si512, _mm512_set1_epi8, _mm512_set1_epi16, _mm512_set1_epi32, _mm512_set1_ps,
    _mm512_setzero_ps, _mm512_setzero_si512, _mm512_slli_epi16, _mm512_slli_epi32, _mm512_srai_epi32,
    _mm512_srli_epi16, _mm512_srli_epi32, _mm512_test_epi8_mask,
};

use bytemuck::pod_read_unaligned;

use super::avx2_tile_i16::prefetch;
use super::repacked::bytes_from_bits;
use super::{avx_vnni, avx2_panel};
use crate::activation::Activation;
use crate::kernels::repacked_formats::k_layout as layout;
pub(super) use crate::kernels::repacked_formats::{Q2_K, Q3_K, Q4_K, Q5_K, Q6_K};
use crate::kernels::repacked_formats::{k_offset_shift, k_signed, k_sixteen};
use crate::repack::k_quants;
use crate::repack::{GROUP_ROWS, SLOT_BYTES};

/// Values per super-block.
const QK: usize = 256;

/// Activations per pass over a super-block's weights.
const AVX512_ACTS: usize = 8;
const AVX2_ACTS: usize = 4;
const VNNI_ACTS: usize = 8;

/// Q5_K's fifth-bit mask word `8h + c` of the part at `part` (slot c of sub-block half h).
#[inline(always)]
fn fifth_bits(part: &[u8], h: usize, c: usize) -> u64 {
    let at = k_quants::Q5_K.high + 8 * (8 * h + c);
    pod_read_unaligned::<u64>(&part[at..at + 8])
}

/// Rows `8·half .. 8·half + 8`'s 32 bits of [`fifth_bits`] word `8h + c`, read where they lie
/// (as `repacked::half_fifth_bits`).
#[inline(always)]
fn half_fifth_bits(part: &[u8], h: usize, c: usize, half: usize) -> u32 {
    let at = k_quants::Q5_K.high + 8 * (8 * h + c) + 4 * half;
    pod_read_unaligned::<u32>(&part[at..at + 4])
}

/// The four activation quants of values `at..at + 4`, as one i32.
#[inline(always)]
fn word(qs: &[u8], at: usize) -> i32 {
    pod_read_unaligned::<i32>(&qs[at..at + 4])
}

/// Two i16 as one i32 (low, high).
#[inline(always)]
fn pair(low: i32, high: i32) -> i32 {
    (low as u16 as u32 | (high as u16 as u32) << 16) as i32
}

/// An activation's parts for super-block `b`: its quants, bsums (per 16 values) and scale.
#[inline(always)]
fn act_block<'a>(act: &'a Activation<'_>, b: usize) -> (&'a [u8], &'a [i16], f32) {
    (&act.qs[QK * b..QK * b + QK], &act.bsums[16 * b..16 * b + 16], act.d[b])
}

/// AVX-512 VNNI: one group against `acts`, results into `out` (one per activation); the first
/// pass streams `ahead` into L2 (`crate::repack::RepackedKernel`).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) fn avx512<const FORMAT: u8>(
    group: &[u8],
    ahead: &[u8],
    acts: &[Activation<'_>],
    out: &mut [[f32; GROUP_ROWS]],
) {
    let (mut acts, mut out, mut ahead) = (acts, out, ahead);
    while out.len() >= AVX512_ACTS {
        avx512_pass::<FORMAT, AVX512_ACTS>(group, ahead, &acts[..AVX512_ACTS], &mut out[..AVX512_ACTS]);
        (acts, out, ahead) = (&acts[AVX512_ACTS..], &mut out[AVX512_ACTS..], &[]);
    }
    for_count!(out.len(), [1, 2, 3, 4, 5, 6, 7], N => avx512_pass::<FORMAT, N>(group, ahead, acts, out));
}

/// Slot `c` of sub-block half `h` of a repacked part as bytes (four values of each of the 16
/// rows, 0..63): Q4_K's nibbles, Q5_K's with their fifth bits, Q6_K's with high-bit field `c`
/// (bits 2c, 2c + 1 moved to bits 4, 5), Q2_K's and Q3_K's low-bit field `c` of slot `h` with
/// Q3_K's third bits (bit 4h + c). The AVX-512 VNNI and the AMX kernels' one decoder.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) fn slot_bytes<const FORMAT: u8>(part: &[u8], h: usize, c: usize) -> __m512i {
    let l = layout(FORMAT);
    let load = |at: usize| pod_read_unaligned::<__m512i>(&part[at..at + 64]);
    if FORMAT == Q2_K || FORMAT == Q3_K {
        let packed = load(l.slots + SLOT_BYTES * h);
        let shifted = match c {
            0 => packed,
            1 => _mm512_srli_epi16(packed, 2),
            2 => _mm512_srli_epi16(packed, 4),
            _ => _mm512_srli_epi16(packed, 6),
        };
        let low = _mm512_and_si512(shifted, _mm512_set1_epi8(3));
        if FORMAT == Q2_K {
            return low;
        }
        let third = _mm512_test_epi8_mask(load(l.high), _mm512_set1_epi8(1 << (4 * h + c)));
        return _mm512_mask_add_epi8(low, third, low, _mm512_set1_epi8(4));
    }
    let packed = load(l.slots + SLOT_BYTES * c);
    let nibbles = if h == 0 { packed } else { _mm512_srli_epi16(packed, 4) };
    let nibbles = _mm512_and_si512(nibbles, _mm512_set1_epi8(0x0F));
    match FORMAT {
        Q6_K => {
            let high = load(l.high + SLOT_BYTES * h);
            let high = match c {
                0 => _mm512_slli_epi16(high, 4),
                1 => _mm512_slli_epi16(high, 2),
                2 => high,
                _ => _mm512_srli_epi16(high, 2),
            };
            _mm512_or_si512(nibbles, _mm512_and_si512(high, _mm512_set1_epi8(0x30)))
        }
        Q5_K => _mm512_mask_add_epi8(nibbles, fifth_bits(part, h, c), nibbles, _mm512_set1_epi8(0x10)),
        _ => nibbles,
    }
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn avx512_pass<const FORMAT: u8, const N: usize>(
    group: &[u8],
    ahead: &[u8],
    acts: &[Activation<'_>],
    out: &mut [[f32; GROUP_ROWS]],
) {
    let l = layout(FORMAT);
    let mut acc: [__m512; N] = [_mm512_setzero_ps(); N];
    let low_word = _mm512_set1_epi32(0xFFFF);
    for (b, src) in group.chunks_exact(l.bytes).enumerate() {
        prefetch(ahead, b * l.bytes, l.bytes);
        let load_half = |at: usize| pod_read_unaligned::<__m256i>(&src[at..at + 32]);
        let parts: [_; N] = std::array::from_fn(|n| act_block(&acts[n], b));
        let mut sums = [_mm512_setzero_si512(); N];
        if !k_sixteen(FORMAT) {
            let mut mins = [_mm512_setzero_si512(); N];
            for (p, part) in src[..4 * l.part].chunks_exact(l.part).enumerate() {
                let mut dots = [[_mm512_setzero_si512(); N]; 2];
                for (h, dots) in dots.iter_mut().enumerate() {
                    let j = 2 * p + h;
                    let w: [__m512i; 8] = std::array::from_fn(|c| slot_bytes::<FORMAT>(part, h, c));
                    for n in 0..N {
                        let qs = parts[n].0;
                        let mut dot = [_mm512_setzero_si512(); 2];
                        for (c, &w) in w.iter().enumerate() {
                            dot[c % 2] =
                                _mm512_dpbusd_epi32(dot[c % 2], w, _mm512_set1_epi32(word(qs, 32 * j + 4 * c)));
                        }
                        dots[n] = _mm512_add_epi32(dot[0], dot[1]);
                    }
                }
                // The scale pairs after the slots they scale: a part is read front to back (a
                // load past the slots first made the next part's lines demand misses).
                let pairs = _mm512_cvtepu8_epi16(pod_read_unaligned::<__m256i>(&part[l.scales..l.scales + 32]));
                let scales = [_mm512_and_si512(pairs, low_word), _mm512_srli_epi32(pairs, 16)];
                for (dots, scale) in dots.iter().zip(scales) {
                    for (sum, &dot) in sums.iter_mut().zip(dots) {
                        *sum = _mm512_add_epi32(*sum, _mm512_mullo_epi32(dot, scale));
                    }
                }
                let minimums = _mm512_cvtepu8_epi16(pod_read_unaligned::<__m256i>(&part[l.minimums..l.minimums + 32]));
                for n in 0..N {
                    let bsums = parts[n].1;
                    let sum = |j: usize| i32::from(bsums[2 * j]) + i32::from(bsums[2 * j + 1]);
                    let a = _mm512_set1_epi32(pair(sum(2 * p), sum(2 * p + 1)));
                    mins[n] = _mm512_dpwssd_epi32(mins[n], minimums, a);
                }
            }
            let d_w = _mm512_cvtph_ps(load_half(l.d));
            let dmin_w = _mm512_cvtph_ps(load_half(l.dmin));
            for n in 0..N {
                let d_a = _mm512_set1_ps(parts[n].2);
                acc[n] = _mm512_fmadd_ps(_mm512_mul_ps(d_w, d_a), _mm512_cvtepi32_ps(sums[n]), acc[n]);
                acc[n] = _mm512_fnmadd_ps(_mm512_mul_ps(dmin_w, d_a), _mm512_cvtepi32_ps(mins[n]), acc[n]);
            }
        } else {
            // Q2_K's minimums' term, n = Σ_j m_j·Σa_j.
            let mut mins = [_mm512_setzero_si512(); N];
            for (p, part) in src[..8 * l.part].chunks_exact(l.part).enumerate() {
                let mut dots = [[_mm512_setzero_si512(); N]; 2];
                for (h, dots) in dots.iter_mut().enumerate() {
                    let j = 2 * p + h;
                    let w: [__m512i; 4] = std::array::from_fn(|k| slot_bytes::<FORMAT>(part, h, k));
                    for n in 0..N {
                        let (qs, bsums, _) = parts[n];
                        // The chain starts at −32·Σa_j: Q6_K's quants are stored plus 32 (Q3_K's
                        // plus 4; Q2_K's as they are).
                        let offset =
                            if k_signed(FORMAT) { -(1 << k_offset_shift(FORMAT)) * i32::from(bsums[j]) } else { 0 };
                        let mut dot = [_mm512_set1_epi32(offset), _mm512_setzero_si512()];
                        for (k, &w) in w.iter().enumerate() {
                            dot[k % 2] =
                                _mm512_dpbusd_epi32(dot[k % 2], w, _mm512_set1_epi32(word(qs, 16 * j + 4 * k)));
                        }
                        dots[n] = _mm512_add_epi32(dot[0], dot[1]);
                    }
                }
                // The scale pairs last, in the order the part's bytes lie (slots, high bits, scales).
                let bytes = pod_read_unaligned::<__m256i>(&part[l.scales..l.scales + 32]);
                let scales = if k_signed(FORMAT) {
                    let pairs = _mm512_cvtepi8_epi16(bytes);
                    [_mm512_srai_epi32(_mm512_slli_epi32(pairs, 16), 16), _mm512_srai_epi32(pairs, 16)]
                } else {
                    // Q2_K: each byte's scale in its low nibble, its minimum in the high one.
                    let pairs = _mm512_cvtepu8_epi16(bytes);
                    let minimums = _mm512_srli_epi16(pairs, 4);
                    for n in 0..N {
                        let bsums = parts[n].1;
                        let a = _mm512_set1_epi32(pair(i32::from(bsums[2 * p]), i32::from(bsums[2 * p + 1])));
                        mins[n] = _mm512_dpwssd_epi32(mins[n], minimums, a);
                    }
                    let pairs = _mm512_and_si512(pairs, _mm512_set1_epi16(0x0F));
                    [_mm512_and_si512(pairs, low_word), _mm512_srli_epi32(pairs, 16)]
                };
                for (dots, scale) in dots.iter().zip(scales) {
                    for (sum, &dot) in sums.iter_mut().zip(dots) {
                        *sum = _mm512_add_epi32(*sum, _mm512_mullo_epi32(dot, scale));
                    }
                }
            }
            let d_w = _mm512_cvtph_ps(load_half(l.d));
            for n in 0..N {
                let d_a = _mm512_set1_ps(parts[n].2);
                acc[n] = _mm512_fmadd_ps(_mm512_mul_ps(d_w, d_a), _mm512_cvtepi32_ps(sums[n]), acc[n]);
                if !k_signed(FORMAT) {
                    let dmin_w = _mm512_cvtph_ps(load_half(l.dmin));
                    acc[n] = _mm512_fnmadd_ps(_mm512_mul_ps(dmin_w, d_a), _mm512_cvtepi32_ps(mins[n]), acc[n]);
                }
            }
        }
    }
    for (out, acc) in out.iter_mut().zip(acc) {
        *out = bytemuck::cast(acc);
    }
}

/// AVX2 + FMA + F16C: one group against `acts`, results into `out`, as two halves of 8 rows: a
/// sweep over the group per half, except for one activation of Q2_K, Q3_K or Q6_K, whose one
/// sweep takes both halves block by block.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn avx2<const FORMAT: u8>(
    group: &[u8],
    ahead: &[u8],
    acts: &[Activation<'_>],
    out: &mut [[f32; GROUP_ROWS]],
) {
    let (mut acts, mut out, mut ahead) = (acts, out, ahead);
    while out.len() >= AVX2_ACTS {
        for half in 0..2 {
            let ahead = if half == 0 { ahead } else { &[] };
            avx2_pass::<FORMAT, AVX2_ACTS, 1>(group, ahead, half, &acts[..AVX2_ACTS], &mut out[..AVX2_ACTS]);
        }
        (acts, out, ahead) = (&acts[AVX2_ACTS..], &mut out[AVX2_ACTS..], &[]);
    }
    if out.len() == 1 && k_sixteen(FORMAT) {
        // One activation (a decode step): both halves of each block in one sweep over the group
        // (see `repacked::avx2`). Llama 8B's FFN shapes from DRAM on a Zen 1: Q6_K 9.6 -> 8.6 ms,
        // Q3_K 5.9 -> 5.6 ms at one thread; Q4_K and Q5_K ran 0-5 % slower so, and keep a sweep
        // per half.
        avx2_pass::<FORMAT, 1, 2>(group, ahead, 0, acts, out);
        return;
    }
    for_count!(out.len(), [1, 2, 3], N => for half in 0..2 {
        let ahead = if half == 0 { ahead } else { &[] };
        avx2_pass::<FORMAT, N, 1>(group, ahead, half, acts, out);
    });
}

/// Row half `half` (8 rows, 32 bytes) of slot `c` of sub-block half `h` as bytes: [`slot_bytes`]
/// for the AVX2 and AVX-VNNI kernels, Q5_K's fifth bits spread from their mask word, Q3_K's
/// third bits by a byte compare.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn half_slot_bytes<const FORMAT: u8>(part: &[u8], h: usize, c: usize, half: usize) -> __m256i {
    let l = layout(FORMAT);
    let load = |at: usize| pod_read_unaligned::<__m256i>(&part[at + 32 * half..at + 32 * half + 32]);
    if FORMAT == Q2_K || FORMAT == Q3_K {
        let packed = load(l.slots + SLOT_BYTES * h);
        let shifted = match c {
            0 => packed,
            1 => _mm256_srli_epi16(packed, 2),
            2 => _mm256_srli_epi16(packed, 4),
            _ => _mm256_srli_epi16(packed, 6),
        };
        let low = _mm256_and_si256(shifted, _mm256_set1_epi8(3));
        if FORMAT == Q2_K {
            return low;
        }
        let bit = _mm256_set1_epi8(1 << (4 * h + c));
        let set = _mm256_cmpeq_epi8(_mm256_and_si256(load(l.high), bit), bit);
        return _mm256_or_si256(low, _mm256_and_si256(set, _mm256_set1_epi8(4)));
    }
    let packed = load(l.slots + SLOT_BYTES * c);
    let nibbles = if h == 0 { packed } else { _mm256_srli_epi16(packed, 4) };
    let nibbles = _mm256_and_si256(nibbles, _mm256_set1_epi8(0x0F));
    match FORMAT {
        Q6_K => {
            let high = load(l.high + SLOT_BYTES * h);
            let high = match c {
                0 => _mm256_slli_epi16(high, 4),
                1 => _mm256_slli_epi16(high, 2),
                2 => high,
                _ => _mm256_srli_epi16(high, 2),
            };
            _mm256_or_si256(nibbles, _mm256_and_si256(high, _mm256_set1_epi8(0x30)))
        }
        Q5_K => {
            let word = half_fifth_bits(part, h, c, half);
            _mm256_or_si256(nibbles, _mm256_and_si256(bytes_from_bits(word), _mm256_set1_epi8(0x10)))
        }
        _ => nibbles,
    }
}

/// AVX2 + FMA + F16C with AVX-VNNI, Q4_K and Q5_K: one group against `acts`, results into `out`,
/// as two halves of 8 rows; [`avx512`]'s integer steps on 256 bits (VEX `vpdpbusd` per slot,
/// `vpmulld` by the sub-block scales, the minimums by VEX `vpdpwssd`), then the same f32 steps.
/// (Q6_K's 16-value sub-blocks, one `vpmulld` per four `vpdpbusd`s, ran no faster this way than
/// in [`avx2`], which the AVX-VNNI row keeps for it.)
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn avx_vnni<const FORMAT: u8>(
    group: &[u8],
    ahead: &[u8],
    acts: &[Activation<'_>],
    out: &mut [[f32; GROUP_ROWS]],
) {
    const { assert!(FORMAT == Q4_K || FORMAT == Q5_K, "the AVX-VNNI pass reads Q4_K's and Q5_K's layout") };
    let (mut acts, mut out, mut ahead) = (acts, out, ahead);
    while out.len() >= VNNI_ACTS {
        for half in 0..2 {
            let ahead = if half == 0 { ahead } else { &[] };
            avx_vnni_pass::<FORMAT, VNNI_ACTS>(group, ahead, half, &acts[..VNNI_ACTS], &mut out[..VNNI_ACTS]);
        }
        (acts, out, ahead) = (&acts[VNNI_ACTS..], &mut out[VNNI_ACTS..], &[]);
    }
    for_count!(out.len(), [1, 2, 3, 4, 5, 6, 7], N => for half in 0..2 {
        let ahead = if half == 0 { ahead } else { &[] };
        avx_vnni_pass::<FORMAT, N>(group, ahead, half, acts, out);
    });
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn avx_vnni_pass<const FORMAT: u8, const N: usize>(
    group: &[u8],
    ahead: &[u8],
    half: usize,
    acts: &[Activation<'_>],
    out: &mut [[f32; GROUP_ROWS]],
) {
    let l = layout(FORMAT);
    // Below eight activations, two running sums each, so that a sub-block's eight `vpdpbusd`s are
    // two chains; with eight, the activations' chains are enough in flight.
    let chains = if N >= VNNI_ACTS { 1 } else { 2 };
    let mut acc: [__m256; N] = [_mm256_setzero_ps(); N];
    let low_word = _mm256_set1_epi32(0xFFFF);
    for (b, src) in group.chunks_exact(l.bytes).enumerate() {
        prefetch(ahead, b * l.bytes, l.bytes);
        let load_pairs =
            |bytes: &[u8], at: usize| pod_read_unaligned::<__m128i>(&bytes[at + 16 * half..at + 16 * half + 16]);
        let parts: [_; N] = std::array::from_fn(|n| act_block(&acts[n], b));
        let mut sums = [_mm256_setzero_si256(); N];
        let mut mins = [_mm256_setzero_si256(); N];
        for (p, part) in src[..4 * l.part].chunks_exact(l.part).enumerate() {
            for h in 0..2 {
                let j = 2 * p + h;
                let mut dots = [[_mm256_setzero_si256(); 2]; N];
                for c in 0..8 {
                    let w = half_slot_bytes::<FORMAT>(part, h, c, half);
                    for n in 0..N {
                        let a = _mm256_set1_epi32(word(parts[n].0, 32 * j + 4 * c));
                        dots[n][c % chains] = avx_vnni::dpbusd(dots[n][c % chains], w, a);
                    }
                }
                // The sub-block's scales (the pairs after the slots they scale, as `avx512_pass`
                // reads them).
                let pairs = _mm256_cvtepu8_epi16(load_pairs(part, l.scales));
                let scale = if h == 0 { _mm256_and_si256(pairs, low_word) } else { _mm256_srli_epi32(pairs, 16) };
                for (sum, [first, second]) in sums.iter_mut().zip(dots) {
                    *sum = _mm256_add_epi32(*sum, _mm256_mullo_epi32(_mm256_add_epi32(first, second), scale));
                }
            }
            let minimums = _mm256_cvtepu8_epi16(load_pairs(part, l.minimums));
            for n in 0..N {
                let bsums = parts[n].1;
                let sum = |j: usize| i32::from(bsums[2 * j]) + i32::from(bsums[2 * j + 1]);
                let a = _mm256_set1_epi32(pair(sum(2 * p), sum(2 * p + 1)));
                mins[n] = avx2_panel::madd_add::<{ avx2_panel::VEX_DPWSSD }>(mins[n], minimums, a);
            }
        }
        let d_w = _mm256_cvtph_ps(load_pairs(src, l.d));
        let dmin_w = _mm256_cvtph_ps(load_pairs(src, l.dmin));
        for n in 0..N {
            let d_a = _mm256_set1_ps(parts[n].2);
            acc[n] = _mm256_fmadd_ps(_mm256_mul_ps(d_w, d_a), _mm256_cvtepi32_ps(sums[n]), acc[n]);
            acc[n] = _mm256_fnmadd_ps(_mm256_mul_ps(dmin_w, d_a), _mm256_cvtepi32_ps(mins[n]), acc[n]);
        }
    }
    for (out, acc) in out.iter_mut().zip(acc) {
        let values: [f32; 8] = bytemuck::cast(acc);
        out[8 * half..8 * half + 8].copy_from_slice(&values);
    }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn avx2_pass<const FORMAT: u8, const N: usize, const HALVES: usize>(
    group: &[u8],
    ahead: &[u8],
    half: usize,
    acts: &[Activation<'_>],
    out: &mut [[f32; GROUP_ROWS]],
) {
    let l = layout(FORMAT);
    // HALVES = 1: rows 8·half.. of the group; 2: both halves, block by block (as in
    // `repacked::avx2_pass`).
    let half_of = |r: usize| if HALVES == 2 { r } else { half };
    let mut acc: [[__m256; N]; HALVES] = [[_mm256_setzero_ps(); N]; HALVES];
    let (low_word, high_word) = (_mm256_set1_epi32(0xFFFF), _mm256_set1_epi32(-0x1_0000));
    // (sc, sc) in each i32 lane, from a lane's (sc_2p, sc_2p+1).
    let replicated = |pairs: __m256i| {
        [
            _mm256_or_si256(_mm256_and_si256(pairs, low_word), _mm256_slli_epi32(pairs, 16)),
            _mm256_or_si256(_mm256_srli_epi32(pairs, 16), _mm256_and_si256(pairs, high_word)),
        ]
    };
    for (b, src) in group.chunks_exact(l.bytes).enumerate() {
        prefetch(ahead, b * l.bytes, l.bytes);
        for (r, acc) in acc.iter_mut().enumerate() {
            let half = half_of(r);
            // Row half `half` of a pair vector or of the f16 scales (16 bytes).
            let load_pairs =
                |bytes: &[u8], at: usize| pod_read_unaligned::<__m128i>(&bytes[at + 16 * half..at + 16 * half + 16]);
            let parts: [_; N] = std::array::from_fn(|n| act_block(&acts[n], b));
            let mut sums = [_mm256_setzero_si256(); N];
            if !k_sixteen(FORMAT) {
                let mut mins = [_mm256_setzero_si256(); N];
                for (p, part) in src[..4 * l.part].chunks_exact(l.part).enumerate() {
                    let scales = replicated(_mm256_cvtepu8_epi16(load_pairs(part, l.scales)));
                    for (h, &scale) in scales.iter().enumerate() {
                        let j = 2 * p + h;
                        let w: [__m256i; 8] = std::array::from_fn(|c| half_slot_bytes::<FORMAT>(part, h, c, half));
                        for n in 0..N {
                            let qs = parts[n].0;
                            // Q4_K's 8 slots sum within i16 (≤ 30,720), Q5_K's in two halves of 4.
                            let partial = |from: usize, to: usize| {
                                let mut s =
                                    _mm256_maddubs_epi16(w[from], _mm256_set1_epi32(word(qs, 32 * j + 4 * from)));
                                // A slice and a range (see `repacked::avx2_pass`).
                                for (&w, c) in w[from + 1..to].iter().zip(from + 1..) {
                                    let a = _mm256_set1_epi32(word(qs, 32 * j + 4 * c));
                                    s = _mm256_add_epi16(s, _mm256_maddubs_epi16(w, a));
                                }
                                _mm256_madd_epi16(s, scale)
                            };
                            let s = if FORMAT == Q5_K {
                                _mm256_add_epi32(partial(0, 4), partial(4, 8))
                            } else {
                                partial(0, 8)
                            };
                            sums[n] = _mm256_add_epi32(sums[n], s);
                        }
                    }
                    let minimums = _mm256_cvtepu8_epi16(load_pairs(part, l.minimums));
                    for n in 0..N {
                        let bsums = parts[n].1;
                        let sum = |j: usize| i32::from(bsums[2 * j]) + i32::from(bsums[2 * j + 1]);
                        let a = _mm256_set1_epi32(pair(sum(2 * p), sum(2 * p + 1)));
                        mins[n] = _mm256_add_epi32(mins[n], _mm256_madd_epi16(minimums, a));
                    }
                }
                let d_w = _mm256_cvtph_ps(load_pairs(src, l.d));
                let dmin_w = _mm256_cvtph_ps(load_pairs(src, l.dmin));
                for n in 0..N {
                    let d_a = _mm256_set1_ps(parts[n].2);
                    acc[n] = _mm256_fmadd_ps(_mm256_mul_ps(d_w, d_a), _mm256_cvtepi32_ps(sums[n]), acc[n]);
                    acc[n] = _mm256_fnmadd_ps(_mm256_mul_ps(dmin_w, d_a), _mm256_cvtepi32_ps(mins[n]), acc[n]);
                }
            } else {
                let mut correction = [_mm256_setzero_si256(); N];
                for (p, part) in src[..8 * l.part].chunks_exact(l.part).enumerate() {
                    // Each half's i16 sums first, the scale pairs (after the slots and high bits)
                    // last: the part is read front to back (one activation from DRAM: 5.18 -> 3.46 ms
                    // on Llama 8B's FFN down; Q4_K's and Q5_K's kernels measured no faster so).
                    let mut halves = [[[_mm256_setzero_si256(); 2]; N]; 2];
                    for (h, halves) in halves.iter_mut().enumerate() {
                        let j = 2 * p + h;
                        let w: [__m256i; 4] = std::array::from_fn(|k| half_slot_bytes::<FORMAT>(part, h, k, half));
                        for n in 0..N {
                            let qs = parts[n].0;
                            let product =
                                |k: usize| _mm256_maddubs_epi16(w[k], _mm256_set1_epi32(word(qs, 16 * j + 4 * k)));
                            halves[n] =
                                [_mm256_add_epi16(product(0), product(1)), _mm256_add_epi16(product(2), product(3))];
                        }
                    }
                    // Q3_K, Q6_K: Σ sc_j·Σa_j, the offset's term; Q2_K: each byte's scale in its low
                    // nibble and its minimum in the high one, and Σ m_j·Σa_j, the minimums' term.
                    let (pairs, terms) = if k_signed(FORMAT) {
                        let pairs = _mm256_cvtepi8_epi16(load_pairs(part, l.scales));
                        (pairs, pairs)
                    } else {
                        let bytes = _mm256_cvtepu8_epi16(load_pairs(part, l.scales));
                        (_mm256_and_si256(bytes, _mm256_set1_epi16(0x0F)), _mm256_srli_epi16(bytes, 4))
                    };
                    for n in 0..N {
                        let bsums = parts[n].1;
                        let a = _mm256_set1_epi32(pair(i32::from(bsums[2 * p]), i32::from(bsums[2 * p + 1])));
                        correction[n] = _mm256_add_epi32(correction[n], _mm256_madd_epi16(terms, a));
                    }
                    for (halves, scale) in halves.iter().zip(replicated(pairs)) {
                        for (sum, [first, second]) in sums.iter_mut().zip(halves) {
                            let first = _mm256_madd_epi16(*first, scale);
                            let second = _mm256_madd_epi16(*second, scale);
                            *sum = _mm256_add_epi32(*sum, _mm256_add_epi32(first, second));
                        }
                    }
                }
                let d_w = _mm256_cvtph_ps(load_pairs(src, l.d));
                for n in 0..N {
                    let d_a = _mm256_set1_ps(parts[n].2);
                    if k_signed(FORMAT) {
                        // The offset's term: 32 (Q6_K) or 4 (Q3_K) times Σ sc_j·Σa_j.
                        let offset = _mm256_sllv_epi32(correction[n], _mm256_set1_epi32(k_offset_shift(FORMAT) as i32));
                        let s = _mm256_sub_epi32(sums[n], offset);
                        acc[n] = _mm256_fmadd_ps(_mm256_mul_ps(d_w, d_a), _mm256_cvtepi32_ps(s), acc[n]);
                    } else {
                        let dmin_w = _mm256_cvtph_ps(load_pairs(src, l.dmin));
                        acc[n] = _mm256_fmadd_ps(_mm256_mul_ps(d_w, d_a), _mm256_cvtepi32_ps(sums[n]), acc[n]);
                        acc[n] =
                            _mm256_fnmadd_ps(_mm256_mul_ps(dmin_w, d_a), _mm256_cvtepi32_ps(correction[n]), acc[n]);
                    }
                }
            }
        }
    }
    for (r, acc) in acc.into_iter().enumerate() {
        let half = half_of(r);
        for (out, acc) in out.iter_mut().zip(acc) {
            let values: [f32; 8] = bytemuck::cast(acc);
            out[8 * half..8 * half + 8].copy_from_slice(&values);
        }
    }
}
