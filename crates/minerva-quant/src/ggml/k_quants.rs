//! GGML K-quants: 256-value super-blocks of 16 or 8 sub-blocks, each sub-block with a small integer
//! scale (and for Q2_K/Q4_K/Q5_K a minimum) multiplied by the super-block's f16 `d` (`dmin`).
//!
//! Sources: ggml `ggml-common.h` (layouts) and `ggml-quants.c` (`dequantize_row_q{2..6}_K`,
//! `get_scale_min_k4`); gguf-py 0.19 `gguf/quants.py`, whose f32 arithmetic we follow step for step
//! (sub-block factor `d * sc` first, then `factor * q - dmin * m`) so results match bit for bit.
//!
//! Value index `e` (0..256) in a super-block; the code names these pieces:
//! * `half = e / 128`, `quarter = (e % 128) / 32`, `lane = e % 32` — 2-bit fields of Q2_K/Q3_K and
//!   the high bits of Q6_K: byte `32*half + lane` of the quant array, bits `2*quarter ..`.
//! * `chunk = e / 64` — Q4_K/Q5_K nibbles: byte `32*chunk + lane`, low nibble for the first 32
//!   values of the chunk, high nibble for the next 32.

use bytemuck::{Pod, Zeroable};
use half::f16;
use minerva_core::DType;

use crate::QuantError;
use crate::blocks::{dequantize_blocks, impl_block};

/// Q2_K: 16 sub-blocks of 16 values; 4-bit scale and 4-bit minimum per sub-block; 2.625 bpw.
///
/// ```text
/// byte  0                16                      80     82     84
///       +----------------+-----------------------+------+------+
///       | scales[16]     | qs[64]                | d    | dmin |
///       | lo4 = scale    | 2-bit quants: value e | f16  | f16  |
///       | hi4 = min      | at qs[32*half + lane] |      |      |
///       |                | bits 2*quarter..+2    |      |      |
///       +----------------+-----------------------+------+------+
/// y[e] = (d * (scales[e/16] & 0xF)) * q[e] - dmin * (scales[e/16] >> 4)
/// ```
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ2_K {
    /// Per-sub-block scale (low nibble) and minimum (high nibble).
    pub scales: [u8; 16],
    /// 2-bit quants.
    pub qs: [u8; 64],
    /// Super-block scale for the scales.
    pub d: f16,
    /// Super-block scale for the minimums.
    pub dmin: f16,
}

/// The 2-bit field for value `e` from a 64-byte array laid out as Q2_K `qs` / Q3_K `qs`.
pub(crate) fn two_bits(qs: &[u8; 64], e: usize) -> u8 {
    let (half, quarter, lane) = (e / 128, (e % 128) / 32, e % 32);
    (qs[32 * half + lane] >> (2 * quarter)) & 3
}

fn decode_q2_k(block: &BlockQ2_K, out: &mut [f32]) {
    let (d, dmin) = (block.d.to_f32(), block.dmin.to_f32());
    for (e, y) in out.iter_mut().enumerate() {
        let sc = block.scales[e / 16];
        let factor = d * f32::from(sc & 0x0F);
        let offset = dmin * f32::from(sc >> 4);
        *y = factor * f32::from(two_bits(&block.qs, e)) - offset;
    }
}
impl_block!(BlockQ2_K, DType::Q2_K, decode_q2_k);

/// Dequantizes Q2_K blocks (`bytes`, any alignment) into `out`.
pub fn dequantize_row_q2_k_ref(bytes: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    dequantize_blocks::<BlockQ2_K>(bytes, out)
}

/// Q3_K: 16 sub-blocks of 16 values; signed 6-bit scales; 3.4375 bpw.
///
/// ```text
/// byte  0            32                    96              108    110
///       +------------+---------------------+---------------+------+
///       | hmask[32]  | qs[64]              | scales[12]    | d    |
///       | bit e/32 of| low 2 bits, as Q2_K | 16 x 6 bits,  | f16  |
///       | byte e%32  |                     | see below     |      |
///       +------------+---------------------+---------------+------+
/// q[e]  = low2(e) - (hmask bit set ? 0 : 4)          (range -4..=3)
/// y[e]  = (d * (scale[e/16] - 32)) * q[e]
///
/// scales (gguf-py's picture; scale i = lo4 | hi2 << 4):
///  byte 0..8:  lo4 of scale i (i < 8) in the low nibble of byte i,
///              lo4 of scale i (i >= 8) in the high nibble of byte i-8
///  byte 8..12: hi2 of scale i at bits 2*(i/4) of byte 8 + i%4
/// ```
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ3_K {
    /// High bit of each quant (set = no −4 offset).
    pub hmask: [u8; 32],
    /// Low 2 bits of each quant.
    pub qs: [u8; 64],
    /// 16 packed 6-bit scales.
    pub scales: [u8; 12],
    /// Super-block scale.
    pub d: f16,
}

/// The 16 signed sub-block scales of a Q3_K block.
pub(crate) fn q3_k_scales(packed: &[u8; 12]) -> [i8; 16] {
    std::array::from_fn(|i| {
        let low4 = if i < 8 { packed[i] & 0x0F } else { packed[i - 8] >> 4 };
        let high2 = (packed[8 + i % 4] >> (2 * (i / 4))) & 3;
        ((low4 | (high2 << 4)) as i8) - 32
    })
}

fn decode_q3_k(block: &BlockQ3_K, out: &mut [f32]) {
    let d = block.d.to_f32();
    let scales = q3_k_scales(&block.scales);
    for (e, y) in out.iter_mut().enumerate() {
        let factor = d * f32::from(scales[e / 16]);
        let high_bit_set = (block.hmask[e % 32] >> (e / 32)) & 1 == 1;
        // Odd but true (ggml): the −4 applies when the mask bit is *clear*.
        let q = two_bits(&block.qs, e) as i8 - if high_bit_set { 0 } else { 4 };
        *y = factor * f32::from(q);
    }
}
impl_block!(BlockQ3_K, DType::Q3_K, decode_q3_k);

/// Dequantizes Q3_K blocks (`bytes`, any alignment) into `out`.
pub fn dequantize_row_q3_k_ref(bytes: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    dequantize_blocks::<BlockQ3_K>(bytes, out)
}

/// ggml's `get_scale_min_k4`: the 6-bit scale and minimum of sub-block `j` (0..8) of Q4_K/Q5_K.
///
/// ```text
/// byte 0..4   : scale j (j<4)  in bits 0..6;  bits 6..8 = high 2 bits of scale j+4
/// byte 4..8   : min   j (j<4)  in bits 0..6;  bits 6..8 = high 2 bits of min   j+4
/// byte 8..12  : low 4 bits of scale j+4 (low nibble) and of min j+4 (high nibble)
/// ```
pub fn get_scale_min_k4(j: usize, scales: &[u8; 12]) -> (u8, u8) {
    if j < 4 {
        (scales[j] & 63, scales[j + 4] & 63)
    } else {
        let scale = (scales[j + 4] & 0x0F) | ((scales[j - 4] >> 6) << 4);
        let min = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
        (scale, min)
    }
}

/// The 4-bit field for value `e` from a 128-byte Q4_K/Q5_K `qs`.
pub(crate) fn nibble_k(qs: &[u8; 128], e: usize) -> u8 {
    let (chunk, upper, lane) = (e / 64, (e % 64) / 32, e % 32);
    (qs[32 * chunk + lane] >> (4 * upper)) & 0x0F
}

/// Q4_K: 8 sub-blocks of 32 values; 6-bit scales and minimums; 4.5 bpw.
///
/// ```text
/// byte  0      2      4              16                            144
///       +------+------+--------------+------------------------------+
///       | d    | dmin | scales[12]   | qs[128]                      |
///       | f16  | f16  | 8 x (6-bit   | value e: byte 32*(e/64)+e%32,|
///       |      |      | scale, min)  | lo nibble if e%64 < 32 else hi|
///       +------+------+--------------+------------------------------+
/// (sc, m) = get_scale_min_k4(e / 32)
/// y[e] = (d * sc) * q[e] - dmin * m
/// ```
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ4_K {
    /// Super-block scale for the scales.
    pub d: f16,
    /// Super-block scale for the minimums.
    pub dmin: f16,
    /// Packed 6-bit scales and minimums ([`get_scale_min_k4`]).
    pub scales: [u8; 12],
    /// 4-bit quants.
    pub qs: [u8; 128],
}

/// The per-sub-block `(d * sc, dmin * m)` of Q4_K and Q5_K.
pub(crate) fn k4_factors(d: f16, dmin: f16, scales: &[u8; 12]) -> [(f32, f32); 8] {
    let (d, dmin) = (d.to_f32(), dmin.to_f32());
    std::array::from_fn(|j| {
        let (sc, m) = get_scale_min_k4(j, scales);
        (d * f32::from(sc), dmin * f32::from(m))
    })
}

fn decode_q4_k(block: &BlockQ4_K, out: &mut [f32]) {
    let factors = k4_factors(block.d, block.dmin, &block.scales);
    for (e, y) in out.iter_mut().enumerate() {
        let (scale, offset) = factors[e / 32];
        *y = scale * f32::from(nibble_k(&block.qs, e)) - offset;
    }
}
impl_block!(BlockQ4_K, DType::Q4_K, decode_q4_k);

/// Dequantizes Q4_K blocks (`bytes`, any alignment) into `out`.
pub fn dequantize_row_q4_k_ref(bytes: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    dequantize_blocks::<BlockQ4_K>(bytes, out)
}

/// Q5_K: Q4_K plus a fifth bit per value; 5.5 bpw.
///
/// ```text
/// byte  0      2      4              16           48                144
///       +------+------+--------------+------------+------------------+
///       | d    | dmin | scales[12]   | qh[32]     | qs[128]          |
///       | f16  | f16  | as Q4_K      | bit e/32 of| low nibbles,     |
///       |      |      |              | byte e%32  | as Q4_K          |
///       +------+------+--------------+------------+------------------+
/// y[e] = (d * sc) * (nibble | hbit << 4) - dmin * m,  (sc, m) = get_scale_min_k4(e / 32)
/// ```
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ5_K {
    /// Super-block scale for the scales.
    pub d: f16,
    /// Super-block scale for the minimums.
    pub dmin: f16,
    /// Packed 6-bit scales and minimums ([`get_scale_min_k4`]).
    pub scales: [u8; 12],
    /// Fifth bits.
    pub qh: [u8; 32],
    /// Low 4 bits.
    pub qs: [u8; 128],
}

fn decode_q5_k(block: &BlockQ5_K, out: &mut [f32]) {
    let factors = k4_factors(block.d, block.dmin, &block.scales);
    for (e, y) in out.iter_mut().enumerate() {
        let (scale, offset) = factors[e / 32];
        let high_bit = (block.qh[e % 32] >> (e / 32)) & 1;
        let q = nibble_k(&block.qs, e) | (high_bit << 4);
        *y = scale * f32::from(q) - offset;
    }
}
impl_block!(BlockQ5_K, DType::Q5_K, decode_q5_k);

/// Dequantizes Q5_K blocks (`bytes`, any alignment) into `out`.
pub fn dequantize_row_q5_k_ref(bytes: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    dequantize_blocks::<BlockQ5_K>(bytes, out)
}

/// Q6_K: 16 sub-blocks of 16 values; signed 8-bit scales; 6.5625 bpw. `d` comes *last*.
///
/// ```text
/// byte  0                  128               192             208    210
///       +------------------+-----------------+---------------+------+
///       | ql[128]          | qh[64]          | scales[16]    | d    |
///       | low 4 bits:      | high 2 bits:    | i8            | f16  |
///       | byte 64*half +   | as Q2_K's qs    |               |      |
///       | e%64, lo nibble  | (half, quarter, |               |      |
///       | if e%128 < 64    | lane)           |               |      |
///       +------------------+-----------------+---------------+------+
/// q[e] = (low4 | high2 << 4) - 32            (range -32..=31)
/// y[e] = (d * scales[e/16]) * q[e]
/// ```
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ6_K {
    /// Low 4 bits of the quants.
    pub ql: [u8; 128],
    /// High 2 bits of the quants.
    pub qh: [u8; 64],
    /// Signed 8-bit sub-block scales.
    pub scales: [i8; 16],
    /// Super-block scale.
    pub d: f16,
}

fn decode_q6_k(block: &BlockQ6_K, out: &mut [f32]) {
    let d = block.d.to_f32();
    for (e, y) in out.iter_mut().enumerate() {
        let (half, upper) = (e / 128, (e % 128) / 64);
        let low4 = (block.ql[64 * half + e % 64] >> (4 * upper)) & 0x0F;
        let q = (low4 | (two_bits(&block.qh, e) << 4)) as i8 - 32;
        *y = (d * f32::from(block.scales[e / 16])) * f32::from(q);
    }
}
impl_block!(BlockQ6_K, DType::Q6_K, decode_q6_k);

/// Dequantizes Q6_K blocks (`bytes`, any alignment) into `out`.
pub fn dequantize_row_q6_k_ref(bytes: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    dequantize_blocks::<BlockQ6_K>(bytes, out)
}
