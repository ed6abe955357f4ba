//! The kernels of repacked weights (`crate::repack`: 16 rows interleaved, four bytes of each per
//! slot) against Q8_0 activations (the K-quants: Q8_K), for NEON with and without the
//! dot-product extension.
//!
//! A 64-byte slot is four 16-byte registers, each holding four values of four rows (rows
//! `4q..4q + 4` in register `q`). Slot `s` (after Q4/Q5 decoding: low nibbles of packed slot `s`
//! for `s < 4`, high nibbles of `s − 4` after) holds values `4s..4s + 4` of every row, so it meets
//! the activation's quants `4s..4s + 4`, lane `s mod 4` of the activation's register `s / 4`:
//!
//! ```text
//!   neon+dotprod   s = sdot(s, slot_q, a.4b[lane])           one instruction: 4 rows × 4 values
//!   neon           p = smull(slot_q, broadcast(a, lane))      8 + 8 i16 products (≤ 128·127 each)
//!                  s = sadalp(s, addp(p_lo, p_hi))            pairs (≤ 32,512) into each row's i32
//!   Q5             the fifth bits of the register's 16 bytes: a 16-bit piece of mask word `s`,
//!                  spread to bytes by `cmtst` against each byte's bit, `and 16`, `or`
//! ```
//!
//! The K-quants (`kernel_k`, layouts in `crate::repack::k_quants`) decode a sub-block at a time
//! (Q4_K/Q5_K: eight slots of 32 values, Q6_K: four of 16, its two high bits shifted into place
//! from the part's high slot; Q2_K, Q3_K: four of 16, two bits of the low slot, Q3_K's third by `cmtst`)
//! and add each activation's exact dot times the four rows' scales (`mla`), and the minimums'
//! term `Σ m_j·Σa_j` (Q6_K: `Σ sc_j·Σa_j`, taken 32 times; Q3_K 4 times), then the
//! reference's f32 steps per super-block.
//!
//! Weights and activations are both signed here, so Q8_0's quants need no offset, nor MXFP4's
//! nibbles, looked up as their signed doubled E2M1 values (`tbl`); Q4_0's and Q5_0's come off the
//! exact sum as `s − 8·Σa`, `s − 16·Σa`. Per block and four rows
//! `acc = fma(d_w·d_a, f32(s), acc)` (and `fma(m_w, d_a·Σa, acc)` for Q4_1, Q5_1), as
//! `crate::repack::reference_kernel` does: the results equal it bit for bit.
//!
//! The kernels walk a group four rows at a time (a quarter), each quarter's pass over the blocks
//! serving [`ACTS`] activations: its eight decoded slot registers, two of each activation and
//! one accumulator per activation fit NEON's 32 registers; the group's bytes (a few KiB for the
//! rows of small models, 16 rows × a row's bytes in general) stay in L1/L2 between quarters.
//!
//! The dot-product instructions are written as inline assembly: their intrinsics
//! (`vdotq_laneq_s32`) are not stable in the pinned Rust (1.95). Memory safety otherwise rests on
//! slices and `bytemuck` loads.

use core::arch::aarch64::{
    float32x4_t, int8x16_t, int32x4_t, uint8x16_t, vaddq_s32, vandq_s32, vandq_u8, vcombine_u8, vcvtq_f32_s32,
    vdup_n_u8, vdupq_n_f32, vdupq_n_s32, vdupq_n_u8, vfmaq_f32, vmlaq_n_s32, vmlaq_s32, vmulq_f32, vnegq_f32, vorrq_u8,
    vqtbl1q_s8, vreinterpretq_s8_u8, vshlq_n_u8, vshlq_s32, vshrq_n_s32, vshrq_n_u8, vsubq_s32, vtstq_u8,
};

use bytemuck::pod_read_unaligned;
use half::f16;

use crate::activation::Activation;
use crate::ggml::mxfp4::{KVALUES_MXFP4, e8m0_to_f32_half};
pub(super) use crate::kernels::repacked_formats::{MXFP4, Q2_K, Q3_K, Q4_0, Q4_1, Q4_K, Q5_0, Q5_1, Q5_K, Q6_K, Q8_0};
use crate::kernels::repacked_formats::{
    block_bytes, blocks_of, has_e8m0_scales, has_fifth_bit, has_minimum, k_layout, k_offset_shift, k_signed, k_sixteen,
    quant_bytes,
};
use crate::repack::{ActBlock, GROUP_ROWS, SLOT_BYTES};

/// Activations per pass over a quarter's blocks.
const ACTS: usize = 4;

/// Values per K-quant super-block.
const QK: usize = 256;

/// The integer a block's sum is corrected by: Q4_0's and Q5_0's offsets times `Σa`.
#[inline(always)]
fn offset_sum(format: u8, act: &ActBlock) -> i32 {
    match format {
        Q4_0 => act.sum << 3,
        Q5_0 => act.sum << 4,
        _ => 0,
    }
}

/// Sixteen bytes of `bytes` from `at` as one register (a checked, unaligned load).
#[inline(always)]
fn load16<T: bytemuck::Pod>(bytes: &[u8], at: usize) -> T {
    pod_read_unaligned(&bytes[at..at + 16])
}

/// Four f16 values (two bytes each from `at`) as f32: one quarter's scales or minimums.
#[inline(always)]
fn f16x4(bytes: &[u8], at: usize) -> float32x4_t {
    let values: [f32; 4] =
        std::array::from_fn(|r| f16::from_le_bytes([bytes[at + 2 * r], bytes[at + 2 * r + 1]]).to_f32());
    bytemuck::cast(values)
}

/// Four rows' scales `d_w` from `at`: f16 values, or MXFP4's E8M0 exponents (one byte each).
#[inline(always)]
fn row_scales<const FORMAT: u8>(bytes: &[u8], rows: usize) -> float32x4_t {
    let quants = quant_bytes(FORMAT);
    if has_e8m0_scales(FORMAT) {
        bytemuck::cast::<[f32; 4], float32x4_t>(std::array::from_fn(|r| e8m0_to_f32_half(bytes[quants + rows + r])))
    } else {
        f16x4(bytes, quants + 2 * rows)
    }
}

/// Four rows' scale (or minimum) bytes of one sub-block, every second byte from `at`, as i32:
/// Q3_K's and Q6_K's signed, Q4_K's and Q5_K's unsigned 6-bit values.
#[inline(always)]
fn row_bytes_i32<const FORMAT: u8>(part: &[u8], at: usize) -> int32x4_t {
    let lanes: [i32; 4] = std::array::from_fn(|r| {
        let byte = part[at + 2 * r];
        if k_signed(FORMAT) { i32::from(byte as i8) } else { i32::from(byte) }
    });
    bytemuck::cast(lanes)
}

/// Defines module `$module` with `kernel::<FORMAT>` (a `crate::repack::RepackedKernel`),
/// compiled with `$features` and with `$dot` as the four-row, four-value dot product
/// (`$dot::<LANE>(s, slot, a)` adds `slot`'s four rows · lane `LANE` of `a` to `s`'s lanes).
///
/// A macro, as `x86::avx2_tile_i16::tile_kernels`, so that each variant's dot product inlines
/// into loops compiled with its own features.
macro_rules! repacked_kernels {
    ($module:ident, $features:literal, $dot:ident) => {
        pub(super) mod $module {
            use super::*;

            /// One group against `acts`, results into `out` (one per activation). `_ahead` (the
            /// next group) is not prefetched: no aarch64 machine was at hand to measure whether
            /// asking for it pays.
            #[target_feature(enable = $features)]
            pub(in super::super) fn kernel<const FORMAT: u8>(
                group: &[u8],
                _ahead: &[u8],
                acts: &[Activation<'_>],
                out: &mut [[f32; GROUP_ROWS]],
            ) {
                let blocks = group.len() / block_bytes(FORMAT);
                let (mut acts, mut out) = (acts, out);
                while out.len() >= ACTS {
                    for quarter in 0..4 {
                        pass::<FORMAT, ACTS>(group, quarter, blocks_of(acts, blocks), &mut out[..ACTS]);
                    }
                    (acts, out) = (&acts[ACTS..], &mut out[ACTS..]);
                }
                for_count!(out.len(), [1, 2, 3], N => for quarter in 0..4 {
                    pass::<FORMAT, N>(group, quarter, blocks_of(acts, blocks), out);
                });
            }

            /// Rows `4·quarter..4·quarter + 4` of the group against `N` activations.
            #[inline]
            #[target_feature(enable = $features)]
            fn pass<const FORMAT: u8, const N: usize>(
                group: &[u8],
                quarter: usize,
                acts: [&[ActBlock]; N],
                out: &mut [[f32; GROUP_ROWS]],
            ) {
                let (block, quants) = (block_bytes(FORMAT), quant_bytes(FORMAT));
                let blocks = group.len() / block;
                let rows = 4 * quarter;
                let mut acc = [vdupq_n_f32(0.0); N];
                for b in 0..blocks {
                    let src = &group[b * block..][..block];
                    let slots = decode::<FORMAT>(src, quarter);
                    let d_w = row_scales::<FORMAT>(src, rows);
                    let m_w = if has_minimum(FORMAT) {
                        f16x4(src, quants + 2 * GROUP_ROWS + 2 * rows)
                    } else {
                        vdupq_n_f32(0.0)
                    };
                    for j in 0..N {
                        let act = &acts[j][b];
                        let a = [load16::<int8x16_t>(&act.qs, 0), load16(&act.qs, 16)];
                        let mut s = dot8(&slots, a[0], a[1]);
                        if matches!(FORMAT, Q4_0 | Q5_0) {
                            s = vsubq_s32(s, vdupq_n_s32(offset_sum(FORMAT, act)));
                        }
                        let scale = vmulq_f32(d_w, vdupq_n_f32(act.d));
                        acc[j] = vfmaq_f32(acc[j], scale, vcvtq_f32_s32(s));
                        if has_minimum(FORMAT) {
                            acc[j] = vfmaq_f32(acc[j], m_w, vdupq_n_f32(act.ds));
                        }
                    }
                }
                for j in 0..N {
                    out[j][rows..rows + 4].copy_from_slice(&bytemuck::cast::<float32x4_t, [f32; 4]>(acc[j]));
                }
            }

            /// One K-quant group (`crate::repack::k_quants`) against Q8_K `acts`, results into
            /// `out` (one per activation).
            #[target_feature(enable = $features)]
            pub(in super::super) fn kernel_k<const FORMAT: u8>(
                group: &[u8],
                _ahead: &[u8],
                acts: &[Activation<'_>],
                out: &mut [[f32; GROUP_ROWS]],
            ) {
                let (mut acts, mut out) = (acts, out);
                while out.len() >= ACTS {
                    for quarter in 0..4 {
                        pass_k::<FORMAT, ACTS>(group, quarter, &acts[..ACTS], &mut out[..ACTS]);
                    }
                    (acts, out) = (&acts[ACTS..], &mut out[ACTS..]);
                }
                for_count!(out.len(), [1, 2, 3], N => for quarter in 0..4 {
                    pass_k::<FORMAT, N>(group, quarter, acts, out);
                });
            }

            /// Rows `4·quarter..4·quarter + 4` of a K-quant group against `N` activations, a
            /// sub-block at a time: its slots decoded, then each activation's exact dot product
            /// times the rows' scales into `s`, and the minimums' (Q3_K, Q6_K: the offset's) term.
            #[inline]
            #[target_feature(enable = $features)]
            fn pass_k<const FORMAT: u8, const N: usize>(
                group: &[u8],
                quarter: usize,
                acts: &[Activation<'_>],
                out: &mut [[f32; GROUP_ROWS]],
            ) {
                let l = k_layout(FORMAT);
                let rows = 4 * quarter;
                let mut acc = [vdupq_n_f32(0.0); N];
                for (b, src) in group.chunks_exact(l.bytes).enumerate() {
                    // s: Σ_j sc_j · dot_j; n: Σ_j m_j · Σa_j (Q3_K, Q6_K: Σ_j sc_j · Σa_j, 16 values
                    // each).
                    let (mut s, mut n) = ([vdupq_n_s32(0); N], [vdupq_n_s32(0); N]);
                    // The parts, then (from `l.d`) the rows' d and dmin.
                    for (p, part) in src[..l.d].chunks_exact(l.part).enumerate() {
                        for h in 0..2 {
                            let j = 2 * p + h;
                            let scale = row_bytes_i32::<FORMAT>(part, l.scales + 2 * rows + h);
                            if k_sixteen(FORMAT) {
                                let slots = if FORMAT == Q6_K {
                                    decode_q6_k(part, quarter, h)
                                } else {
                                    decode_low_bits::<FORMAT>(part, quarter, h)
                                };
                                // Q2_K: the scale in each byte's low nibble, the minimum in the
                                // high one (n: Σ m_j·Σa_j); Q3_K, Q6_K: n is Σ sc_j·Σa_j.
                                let (scale, term) = if FORMAT == Q2_K {
                                    (vandq_s32(scale, vdupq_n_s32(0x0F)), vshrq_n_s32::<4>(scale))
                                } else {
                                    (scale, scale)
                                };
                                for (k, act) in acts[..N].iter().enumerate() {
                                    let a = load16::<int8x16_t>(&act.qs, QK * b + 16 * j);
                                    s[k] = vmlaq_s32(s[k], dot4(&slots, a), scale);
                                    n[k] = vmlaq_n_s32(n[k], term, i32::from(act.bsums[16 * b + j]));
                                }
                            } else {
                                let minimum = row_bytes_i32::<FORMAT>(part, l.minimums + 2 * rows + h);
                                let slots = decode_q45_k::<FORMAT>(part, quarter, h);
                                for (k, act) in acts[..N].iter().enumerate() {
                                    let at = QK * b + 32 * j;
                                    let (a0, a1) = (load16::<int8x16_t>(&act.qs, at), load16(&act.qs, at + 16));
                                    s[k] = vmlaq_s32(s[k], dot8(&slots, a0, a1), scale);
                                    let sum =
                                        i32::from(act.bsums[16 * b + 2 * j]) + i32::from(act.bsums[16 * b + 2 * j + 1]);
                                    n[k] = vmlaq_n_s32(n[k], minimum, sum);
                                }
                            }
                        }
                    }
                    let d_w = f16x4(src, l.d + 2 * rows);
                    for (k, act) in acts[..N].iter().enumerate() {
                        let d_a = vdupq_n_f32(act.d[b]);
                        let scale = vmulq_f32(d_w, d_a);
                        if k_signed(FORMAT) {
                            // The offset the quants are stored with: 4 (Q3_K) or 32 (Q6_K).
                            let offset = vshlq_s32(n[k], vdupq_n_s32(k_offset_shift(FORMAT) as i32));
                            let s = vsubq_s32(s[k], offset);
                            acc[k] = vfmaq_f32(acc[k], scale, vcvtq_f32_s32(s));
                        } else {
                            acc[k] = vfmaq_f32(acc[k], scale, vcvtq_f32_s32(s[k]));
                            let dmin = vnegq_f32(vmulq_f32(f16x4(src, l.dmin + 2 * rows), d_a));
                            acc[k] = vfmaq_f32(acc[k], dmin, vcvtq_f32_s32(n[k]));
                        }
                    }
                }
                for k in 0..N {
                    out[k][rows..rows + 4].copy_from_slice(&bytemuck::cast::<float32x4_t, [f32; 4]>(acc[k]));
                }
            }

            /// Q4_K's or Q5_K's sub-block `2p + h` of part `part`, rows `4·quarter..4·quarter + 4`:
            /// eight slots (values `4c..4c + 4` of the sub-block in slot `c`), 0..15 or 0..31.
            #[inline]
            #[target_feature(enable = $features)]
            fn decode_q45_k<const FORMAT: u8>(part: &[u8], quarter: usize, h: usize) -> [int8x16_t; 8] {
                let l = k_layout(FORMAT);
                let low = vdupq_n_u8(0x0F);
                std::array::from_fn(|c| {
                    let packed: uint8x16_t = load16(part, l.slots + SLOT_BYTES * c + 16 * quarter);
                    let nibbles = if h == 0 { vandq_u8(packed, low) } else { vshrq_n_u8::<4>(packed) };
                    let values = if FORMAT == Q5_K {
                        // Word 8h + c of the fifth bits, the quarter's 16 bits.
                        vorrq_u8(nibbles, spread_bits(part, l.high + 8 * (8 * h + c) + 2 * quarter))
                    } else {
                        nibbles
                    };
                    vreinterpretq_s8_u8(values)
                })
            }

            /// Q6_K's sub-block `2p + h` of part `part`, rows `4·quarter..4·quarter + 4`: four
            /// slots (values `4k..4k + 4` of the 16 in slot `k`), 0..63.
            #[inline]
            #[target_feature(enable = $features)]
            fn decode_q6_k(part: &[u8], quarter: usize, h: usize) -> [int8x16_t; 4] {
                let l = k_layout(Q6_K);
                let (low, two) = (vdupq_n_u8(0x0F), vdupq_n_u8(0x30));
                // High slot h keeps bits 4, 5 of value 4k + i at bits 2k, 2k + 1: moved to 4, 5.
                let high: uint8x16_t = load16(part, l.high + SLOT_BYTES * h + 16 * quarter);
                let highs = [vshlq_n_u8::<4>(high), vshlq_n_u8::<2>(high), high, vshrq_n_u8::<2>(high)];
                std::array::from_fn(|k| {
                    let packed: uint8x16_t = load16(part, l.slots + SLOT_BYTES * k + 16 * quarter);
                    let nibbles = if h == 0 { vandq_u8(packed, low) } else { vshrq_n_u8::<4>(packed) };
                    vreinterpretq_s8_u8(vorrq_u8(nibbles, vandq_u8(highs[k], two)))
                })
            }

            /// Q2_K's or Q3_K's sub-block `2p + h` of part `part`, rows `4·quarter..4·quarter + 4`:
            /// four slots (values `4k..4k + 4` of the 16 in slot `k`), 0..3 or 0..7.
            #[inline]
            #[target_feature(enable = $features)]
            fn decode_low_bits<const FORMAT: u8>(part: &[u8], quarter: usize, h: usize) -> [int8x16_t; 4] {
                let l = k_layout(FORMAT);
                let three = vdupq_n_u8(3);
                // Low slot h keeps bits 0, 1 of value 4k + i at bits 2k, 2k + 1; Q3_K's high slot
                // its bit 2 at bit 4h + k.
                let low: uint8x16_t = load16(part, l.slots + SLOT_BYTES * h + 16 * quarter);
                let lows = [low, vshrq_n_u8::<2>(low), vshrq_n_u8::<4>(low), vshrq_n_u8::<6>(low)];
                let high: uint8x16_t = if FORMAT == Q3_K { load16(part, l.high + 16 * quarter) } else { vdupq_n_u8(0) };
                std::array::from_fn(|k| {
                    let values = vandq_u8(lows[k], three);
                    if FORMAT == Q3_K {
                        let set = vtstq_u8(high, vdupq_n_u8(1 << (4 * h + k)));
                        vreinterpretq_s8_u8(vorrq_u8(values, vandq_u8(set, vdupq_n_u8(4))))
                    } else {
                        vreinterpretq_s8_u8(values)
                    }
                })
            }

            /// Four rows' dot products of eight slots (values `4s..4s + 4` in slot `s`) with the
            /// 32 activation quants in `a0` (values 0..16) and `a1` (16..32): exact.
            #[inline]
            #[target_feature(enable = $features)]
            fn dot8(slots: &[int8x16_t; 8], a0: int8x16_t, a1: int8x16_t) -> int32x4_t {
                // Two running sums, so that each waits on four dot products, not eight.
                let zero = vdupq_n_s32(0);
                let even = $dot::<2>($dot::<0>(zero, slots[0], a0), slots[2], a0);
                let odd = $dot::<3>($dot::<1>(zero, slots[1], a0), slots[3], a0);
                let even = $dot::<2>($dot::<0>(even, slots[4], a1), slots[6], a1);
                let odd = $dot::<3>($dot::<1>(odd, slots[5], a1), slots[7], a1);
                vaddq_s32(even, odd)
            }

            /// Four rows' dot products of four slots with the 16 activation quants in `a`.
            #[inline]
            #[target_feature(enable = $features)]
            fn dot4(slots: &[int8x16_t; 4], a: int8x16_t) -> int32x4_t {
                let zero = vdupq_n_s32(0);
                let even = $dot::<2>($dot::<0>(zero, slots[0], a), slots[2], a);
                let odd = $dot::<3>($dot::<1>(zero, slots[1], a), slots[3], a);
                vaddq_s32(even, odd)
            }

            /// The eight slots of block `src`, rows `4·quarter..4·quarter + 4`, as signed bytes.
            #[inline]
            #[target_feature(enable = $features)]
            fn decode<const FORMAT: u8>(src: &[u8], quarter: usize) -> [int8x16_t; 8] {
                let at = |slot: usize| SLOT_BYTES * slot + 16 * quarter;
                if FORMAT == Q8_0 {
                    return std::array::from_fn(|s| load16(src, at(s)));
                }
                let low = vdupq_n_u8(0x0F);
                let table: int8x16_t = bytemuck::cast(KVALUES_MXFP4);
                let mut slots = [vreinterpretq_s8_u8(low); 8];
                for c in 0..4 {
                    let packed: uint8x16_t = load16(src, at(c));
                    let nibbles = [vandq_u8(packed, low), vshrq_n_u8::<4>(packed)];
                    for (half, nibbles) in nibbles.into_iter().enumerate() {
                        let s = c + 4 * half;
                        // MXFP4's nibbles index its doubled E2M1 values, signed as the kernels'
                        // products take them (no offset to correct).
                        if FORMAT == MXFP4 {
                            slots[s] = vqtbl1q_s8(table, nibbles);
                            continue;
                        }
                        let values = if has_fifth_bit(FORMAT) {
                            vorrq_u8(nibbles, spread_bits(src, 4 * SLOT_BYTES + 8 * s + 2 * quarter))
                        } else {
                            nibbles
                        };
                        slots[s] = vreinterpretq_s8_u8(values);
                    }
                }
                slots
            }

            /// Sixteen bits (two bytes of `src` from `at`) as 16 in the bytes whose bit is set:
            /// Q5's fifth bits of a quarter's slot. A mask word keeps row r's value 4s + i at bit
            /// 4r + i, so the quarter's 16 bits are in register byte order.
            #[inline]
            #[target_feature(enable = $features)]
            fn spread_bits(src: &[u8], at: usize) -> uint8x16_t {
                let (low, high) = (src[at], src[at + 1]);
                let each_bit: [u8; 16] = [1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128];
                let set = vtstq_u8(vcombine_u8(vdup_n_u8(low), vdup_n_u8(high)), bytemuck::cast(each_bit));
                vandq_u8(set, vdupq_n_u8(16))
            }
        }
    };
}

repacked_kernels!(neon, "neon", dot_neon);
repacked_kernels!(dotprod, "neon,dotprod", dot_sdot);

/// `s` + four rows' (four bytes each in `w`) dot products with lane `LANE` of `a`, without the
/// dot-product extension: widening multiplies, then pairwise adds into the rows' lanes.
#[inline]
#[target_feature(enable = "neon")]
fn dot_neon<const LANE: i32>(s: int32x4_t, w: int8x16_t, a: int8x16_t) -> int32x4_t {
    use core::arch::aarch64::{
        vdupq_laneq_s32, vget_low_s8, vmull_high_s8, vmull_s8, vpadalq_s16, vpaddq_s16, vreinterpretq_s8_s32,
        vreinterpretq_s32_s8,
    };
    let a = vreinterpretq_s8_s32(vdupq_laneq_s32::<LANE>(vreinterpretq_s32_s8(a)));
    // Each product is at most 128·127 in magnitude (activations are within ±127), so a pair's
    // sum fits an i16.
    let pairs = vpaddq_s16(vmull_s8(vget_low_s8(w), vget_low_s8(a)), vmull_high_s8(w, a));
    vpadalq_s16(s, pairs)
}

/// `s` + four rows' (four bytes each in `w`) dot products with lane `LANE` of `a`: one `sdot`.
#[inline]
#[target_feature(enable = "neon,dotprod")]
fn dot_sdot<const LANE: i32>(s: int32x4_t, w: int8x16_t, a: int8x16_t) -> int32x4_t {
    let mut s = s;
    // SAFETY: `sdot` (by element) reads and writes only the three registers named; this function
    // runs only where the dot-product extension is enabled (its callers' `detected` check).
    unsafe {
        core::arch::asm!(
            "sdot {s:v}.4s, {w:v}.16b, {a:v}.4b[{lane}]",
            s = inout(vreg) s,
            w = in(vreg) w,
            a = in(vreg) a,
            lane = const LANE,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    s
}
