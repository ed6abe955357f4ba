//! Weights repacked into row-interleaved groups, multiplied with 8-bit activations.
//!
//! The zero-copy kernels read a GGML row block by block and must bring every row's sums
//! together across SIMD lanes, or unpack groups of rows into a panel again on every call
//! (`avx2_panel`, `avx512_panel`). A repacked matrix is that panel made once and kept instead of
//! the file's bytes (ik_llama.cpp's `_R8`/`_R16` layouts and llama.cpp's `repack`
//! follow the same idea): 16 rows side by side, four bytes of each row next to four of the
//! next, so that one 64-byte load holds four values of each of 16 rows and one `vpdpbusd`
//! (AVX-512 VNNI; VEX `vpdpbusd` on two halves with AVX-VNNI) — or `vpmaddubsw` + `vpmaddwd` on
//! two halves (AVX2) — adds a broadcast group
//! of four activation quants into 16 rows' sums at once, with nothing to reduce across lanes
//! (NEON: four 16-byte registers of four rows each, one `sdot` per register with the dot-product
//! extension).
//!
//! ```text
//! group g (rows 16g .. 16g+16, missing rows zero), then per 32-value block b, 16 × block bytes:
//!   quants   Q8_0: 8 slots × 64 B   slot s, row r, byte i  = row r's quant 4s + i
//!            Q4_x, Q5_x: 4 slots × 64 B
//!                                   slot c, row r, byte i  = row r's byte 4c + i
//!                                   (low nibble: value 4c + i, high: value 16 + 4c + i)
//!   fifth bits (Q5_x only) 8 × u64  word s, bit 4r + i     = row r's bit 4s + i of `qh`
//!                                   (the fifth bit of value 4s + i: one mask per decoded slot)
//!   scales   16 × f16               row r's d
//!            MXFP4: 16 × u8         row r's E8M0 exponent e
//!   minimums 16 × f16 (Q4_1, Q5_1)  row r's m
//! ```
//!
//! MXFP4 (GPT-OSS's experts) takes Q4_0's slots: its nibbles lie as Q4_0's do (low: values 0..16,
//! high: 16..32), each the index of a doubled E2M1 value (`KVALUES_MXFP4`), and its scale is
//! `2^(e−128)` (`e8m0_to_f32_half`), 17 bytes per row and block as in the file.
//!
//! A decoded slot s (nibbles: s < 4 the low ones of slot s, s ≥ 4 the high ones of slot s − 4)
//! holds values 4s .. 4s + 4 of each row, so Q5's word s is the bit each of its bytes needs: one
//! masked add (AVX-512) or a bit-to-byte spread (AVX2) per slot. Every block takes exactly its 16
//! rows' GGML bytes, so a repacked matrix is the size of the original (plus zero rows up to a
//! multiple of 16). The K-quants (Q2_K…Q6_K: super-blocks of 256 values, Q8_K
//! activations) follow the same slot scheme with their scales unpacked, in `k_quants`.
//!
//! Activations are Q8_0 as llama.cpp quantizes them (i8 quants, one f16-rounded scale `d_a` per
//! 32 values, and their sum `Σa`). Per row and block the integer sum is exact and the f32 steps
//! are fixed, so every ISA gives the scalar reference's bits ([`reference_kernel`]):
//!
//! ```text
//!   s   = Σ q·a  (Q8_0: signed quants; Q4_0: q − 8 folded in as s − 8·Σa; Q5_0: q − 16 as
//!                 s − 16·Σa; Q4_1, Q5_1: unsigned q; MXFP4: q = KVALUES_MXFP4[nibble])
//!   acc = fma(d_w · d_a, f32(s), acc)
//!   acc = fma(m_w, d_a·Σa, acc)                        (Q4_1, Q5_1)
//! ```
//!
//! in block order, one accumulator per (row, activation): a row's result does not depend on how
//! many activations or rows share a call.

use half::f16;
use minerva_core::DType;

use crate::QuantError;
use crate::activation::Activation;
use crate::ggml::mxfp4::{KVALUES_MXFP4, e8m0_to_f32_half};
use crate::kernels::repacked_formats as format;
use crate::pool;
use crate::streamed::StreamedBytes;

pub(crate) mod k_quants;

/// Rows per interleaved group.
pub const GROUP_ROWS: usize = 16;

/// Bytes of one slot: four bytes of each of the group's rows.
pub(crate) const SLOT_BYTES: usize = 4 * GROUP_ROWS;

/// A repacked kernel: one group's blocks (`blocks × 16 × block bytes`) against `acts` (Q8_1:
/// their [`ActBlock`]s), each activation's 16 row results into `out` (one per activation).
///
/// The second argument, `ahead`, holds the bytes read next (the following group, or nothing):
/// an x86 kernel's first pass over the group asks for them, a block's share per block, to be
/// loaded into L2 meanwhile (the NEON kernels take no prefetch: untimed on aarch64 hardware). A
/// pass of several activations is compute-bound on its own, and the hardware prefetcher alone
/// left a decode batch's matrices, read from DRAM, 1.6× slower than the same pass over weights
/// in cache (docs/benchmarks.md, "Prefetching repacked groups"). A pass of one activation (a
/// decode step) asks too, on one thread ([`multiply`]) and on several ([`rows_into`]): on an AMD
/// EPYC Zen 4 (`avx512+vnni`), SmolLM2 Q8_0 decoded at 75–94 tok/s without it and 104–107 with
/// it on one thread, when the kernel's slot loads ran from a block's last line to its first.
/// The AVX-512 VNNI kernel now loads them in address order, and for one activation of Q8_0 it
/// leaves the stream to the hardware prefetchers, which then read it faster (docs/benchmarks.md,
/// "Slot loads in address order").
pub(crate) type RepackedKernel = fn(&[u8], &[u8], &[Activation<'_>], &mut [[f32; GROUP_ROWS]]);

/// One 32-value block of a Q8_0 activation as the repacked kernels read it: everything a block's
/// product needs in one 48-byte record, so that a kernel follows one pointer per activation.
#[derive(Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
pub(crate) struct ActBlock {
    /// The quants.
    pub(crate) qs: [u8; 32],
    /// The scale `d_a` (an f16 value, as llama.cpp's Q8_0 stores it).
    pub(crate) d: f32,
    /// `Σa`, the sum of the quants.
    pub(crate) sum: i32,
    /// `d_a · Σa` in f32 (what a Q4_1 block's minimum multiplies).
    pub(crate) ds: f32,
    pub(crate) pad: u32,
}

/// Activations per kernel call.
pub(crate) const MAX_ACTS: usize = 64;

/// Whether weights of `dtype` can be repacked (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4, Q2_K…Q6_K).
pub fn is_repackable(dtype: DType) -> bool {
    use DType::{MXFP4, Q2_K, Q3_K, Q4_0, Q4_1, Q4_K, Q5_0, Q5_1, Q5_K, Q6_K, Q8_0};
    matches!(dtype, Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | MXFP4 | Q2_K | Q3_K | Q4_K | Q5_K | Q6_K)
}

/// Whether repacking `dtype` changes the precision of the activations it is multiplied with: the
/// 32-value formats (MXFP4 too) go from the zero-copy kernels' i16 to 8 bits; the K-quants take
/// Q8_K either way.
pub fn repacking_changes_activations(dtype: DType) -> bool {
    is_repackable(dtype) && k_quants::group_block_bytes(dtype).is_none()
}

/// The activations a repacked `dtype` is multiplied with: Q8_K for the K-quants (`k_quants`),
/// else `Q8_1`, the key of [`ActBlock`]s (Q8_0's values).
pub(crate) fn activation_format(dtype: DType) -> DType {
    if k_quants::group_block_bytes(dtype).is_some() { DType::Q8_K } else { DType::Q8_1 }
}

/// The instruction set of the kernel that multiplies repacked `dtype` weights on this CPU
/// (`"scalar"` for the reference), or `None` if `dtype` cannot be repacked.
pub fn repacked_kernel_isa(dtype: DType) -> Option<&'static str> {
    crate::kernels::selected(dtype).repacked_isa
}

/// Whether the repacked kernel this CPU runs for `dtype` beats the zero-copy kernels on one
/// activation as on many (what `--repack auto` asks of a format), as its row in the kernel table
/// marks it: the AVX-512 VNNI kernels for every format (and AMX's, which run them below sixteen
/// activations); the AVX-VNNI and AVX2 ones for the 32-value formats, Q2_K, Q3_K and Q6_K (not Q4_K and
/// Q5_K: see `kernels::x86`); NEON's (`neon`, `neon+dotprod`, tested bit for
/// bit under QEMU but never timed on an aarch64 machine) for none, so `auto` leaves them to
/// `--repack on`.
pub fn repacking_pays(dtype: DType) -> bool {
    crate::kernels::selected(dtype).kernels.repacked_pays
}

/// Where a GGML block's fields lie: (quant bytes, Q5's `qh`, or 0 for formats without it).
const fn ggml_fields(dtype: DType) -> (usize, usize) {
    match dtype {
        DType::MXFP4 => (1, 0),
        DType::Q4_1 => (4, 0),
        DType::Q5_0 => (6, 2),
        DType::Q5_1 => (8, 4),
        _ => (2, 0),
    }
}

/// Slots of nibbles or bytes per block (Q8_0 8, the 4- and 5-bit formats 4).
const fn packed_slots(dtype: DType) -> usize {
    if matches!(dtype, DType::Q8_0) { 8 } else { 4 }
}

/// Q5's fifth bits of up to 16 rows (`qh`, one u32 per row) as the layout's 8 mask words.
fn fifth_bit_masks(qh: &[u32]) -> [u64; 8] {
    std::array::from_fn(|s| {
        qh.iter().enumerate().fold(0u64, |mask, (r, &qh)| mask | (u64::from((qh >> (4 * s)) & 0xF) << (4 * r)))
    })
}

/// Row `r`'s `qh` back from the 8 mask words.
fn row_fifth_bits(masks: &[u64; 8], r: usize) -> u32 {
    masks.iter().enumerate().fold(0u32, |qh, (s, &mask)| qh | (((mask >> (4 * r)) & 0xF) as u32) << (4 * s))
}

/// A `rows × cols` matrix of Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4 or Q2_K…Q6_K blocks in the
/// interleaved layout (module docs, and `k_quants` for the K-quants), owned.
pub struct Repacked {
    dtype: DType,
    rows: usize,
    cols: usize,
    /// The groups, from a 64-byte line on, so that every group and slot starts where the
    /// kernels' loads want it, in huge pages where they fill one (decode streams them);
    /// [`Repacked::len_bytes`] of them.
    storage: StreamedBytes,
}

impl std::fmt::Debug for Repacked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Repacked")
            .field("dtype", &self.dtype)
            .field("rows", &self.rows)
            .field("cols", &self.cols)
            .finish()
    }
}

impl Repacked {
    /// `bytes` (`rows` GGML rows of `cols` values of `dtype`) repacked, on the current pool's
    /// threads. A dtype that cannot be repacked or lengths that do not match are a [`QuantError`].
    pub fn new(dtype: DType, bytes: &[u8], rows: usize, cols: usize) -> Result<Repacked, QuantError> {
        if !is_repackable(dtype) {
            return Err(QuantError::Unsupported { dtype, operation: "repacking" });
        }
        let row_bytes = crate::Matrix::Blocks { dtype, bytes }.check_shape(rows, cols)?;
        let group_bytes = group_bytes(dtype, cols)?;
        let total = Self::groups_bytes(dtype, rows, cols)?;
        let too_large = || QuantError::ShapeOverflow { dtype, rows, cols, n: 1 };
        let held = total.checked_next_multiple_of(64).ok_or_else(too_large)?;
        let mut storage = StreamedBytes::zeroed(held).ok_or_else(too_large)?;
        let out = &mut storage[..total];
        if group_bytes > 0 {
            pool::for_each_chunk_mut(out, group_bytes, |g, group| {
                let first = g * GROUP_ROWS;
                let count = GROUP_ROWS.min(rows - first);
                let src: Vec<&[u8]> = bytes[first * row_bytes..][..count * row_bytes].chunks_exact(row_bytes).collect();
                pack_group(dtype, &src, group);
            });
        }
        Ok(Repacked { dtype, rows, cols, storage })
    }

    /// The bytes [`Repacked::new`] would hold for `rows × cols` of `dtype` (its
    /// [`Repacked::len_bytes`]), without making the copy: what a caller weighs against the memory
    /// it has before asking for one.
    pub fn len_bytes_for(dtype: DType, rows: usize, cols: usize) -> Result<usize, QuantError> {
        if !is_repackable(dtype) {
            return Err(QuantError::Unsupported { dtype, operation: "repacking" });
        }
        let total = Self::groups_bytes(dtype, rows, cols)?;
        total.checked_next_multiple_of(64).ok_or(QuantError::ShapeOverflow { dtype, rows, cols, n: 1 })
    }

    /// The bytes of the groups of `rows × cols` of `dtype`.
    fn groups_bytes(dtype: DType, rows: usize, cols: usize) -> Result<usize, QuantError> {
        let groups = rows.div_ceil(GROUP_ROWS);
        groups.checked_mul(group_bytes(dtype, cols)?).ok_or(QuantError::ShapeOverflow { dtype, rows, cols, n: 1 })
    }

    /// The weights' dtype.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Rows (without the zero rows that fill the last group).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Values per row.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Bytes held (a whole number of groups).
    pub fn len_bytes(&self) -> usize {
        self.storage.len()
    }

    /// The matrix as the fused products read it.
    pub fn matrix(&self) -> crate::Matrix<'_> {
        crate::Matrix::Repacked(RepackedView {
            dtype: self.dtype,
            rows: self.rows,
            cols: self.cols,
            bytes: self.bytes(),
        })
    }

    fn bytes(&self) -> &[u8] {
        let len = self.rows.div_ceil(GROUP_ROWS) * group_bytes(self.dtype, self.cols).unwrap_or(0);
        &self.storage[..len]
    }

    /// The GGML rows back (exactly the bytes it was made from).
    pub fn to_ggml_blocks(&self, out: &mut [u8]) -> Result<(), QuantError> {
        self.matrix().to_ggml_blocks(self.rows, self.cols, out)
    }
}

/// A borrowed repacked matrix: what [`crate::Matrix::Repacked`] holds.
#[derive(Clone, Copy, Debug)]
pub struct RepackedView<'a> {
    pub(crate) dtype: DType,
    pub(crate) rows: usize,
    pub(crate) cols: usize,
    pub(crate) bytes: &'a [u8],
}

impl<'a> RepackedView<'a> {
    /// The weights' dtype.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Checks that the view holds `rows × cols` values; returns GGML's bytes per row.
    pub(crate) fn check_shape(&self, rows: usize, cols: usize) -> Result<usize, QuantError> {
        let dtype = self.dtype;
        if rows != self.rows || cols != self.cols {
            return Err(QuantError::MatmulOperand {
                dtype,
                operand: "weights",
                expected: rows.saturating_mul(cols),
                actual: self.rows.saturating_mul(self.cols),
                unit: "values (repacked)",
            });
        }
        let expected = self.rows.div_ceil(GROUP_ROWS).checked_mul(group_bytes(dtype, cols)?);
        if expected != Some(self.bytes.len()) {
            return Err(QuantError::MatmulOperand {
                dtype,
                operand: "weights",
                expected: expected.unwrap_or(usize::MAX),
                actual: self.bytes.len(),
                unit: "bytes (repacked)",
            });
        }
        dtype.row_bytes(cols).ok_or(QuantError::ShapeOverflow { dtype, rows, cols, n: 1 })
    }

    /// Rows `first..first + count` as a view of their own: whole groups only (`first` a multiple
    /// of 16, `count` one too or reaching the last row).
    pub(crate) fn rows(&self, first: usize, count: usize) -> Result<RepackedView<'a>, QuantError> {
        let dtype = self.dtype;
        let end = first.checked_add(count).filter(|&end| end <= self.rows);
        let whole = first.is_multiple_of(GROUP_ROWS) && (count.is_multiple_of(GROUP_ROWS) || end == Some(self.rows));
        let (Some(_), true) = (end, whole) else {
            return Err(QuantError::MatmulOperand {
                dtype,
                operand: "weights (whole groups of 16 rows)",
                expected: first.saturating_add(count),
                actual: self.rows,
                unit: "rows",
            });
        };
        let group_bytes = group_bytes(dtype, self.cols)?;
        let bytes = &self.bytes[first / GROUP_ROWS * group_bytes..][..count.div_ceil(GROUP_ROWS) * group_bytes];
        Ok(RepackedView { dtype, rows: count, cols: self.cols, bytes })
    }

    /// The GGML rows into `out` (`rows × row_bytes`, checked by the caller).
    pub(crate) fn unpack(&self, out: &mut [u8]) {
        let row_bytes = self.dtype.row_bytes(self.cols).unwrap_or(0);
        let group_bytes = group_bytes(self.dtype, self.cols).unwrap_or(0);
        if row_bytes == 0 {
            return;
        }
        for (g, rows) in out.chunks_mut(GROUP_ROWS * row_bytes).enumerate() {
            let group = &self.bytes[g * group_bytes..][..group_bytes];
            for (r, row) in rows.chunks_exact_mut(row_bytes).enumerate() {
                unpack_row(self.dtype, group, r, row);
            }
        }
    }
}

/// Bytes of one group of 16 rows of `cols` values: the rows' GGML bytes, or for the K-quants
/// their super-blocks' parts (`k_quants::group_block_bytes`).
fn group_bytes(dtype: DType, cols: usize) -> Result<usize, QuantError> {
    let row_bytes = dtype.row_bytes(cols).ok_or(QuantError::PartialBlockValues {
        dtype,
        len: cols,
        block_elems: dtype.block_elems(),
    })?;
    let overflow = QuantError::ShapeOverflow { dtype, rows: GROUP_ROWS, cols, n: 1 };
    match k_quants::group_block_bytes(dtype) {
        Some(block) => (cols / dtype.block_elems()).checked_mul(block).ok_or(overflow),
        None => row_bytes.checked_mul(GROUP_ROWS).ok_or(overflow),
    }
}

/// Where row `r`'s quant bytes `4k..4k + 4` (k = slot) of a block lie within the block's part of
/// a group: one layout for every format, Q8_0 with 8 slots, Q4_x with 4.
const fn slot_offset(slot: usize, row: usize) -> usize {
    SLOT_BYTES * slot + 4 * row
}

/// Up to 16 GGML rows (`rows`) into one group (`out`, every byte written; missing rows zero).
fn pack_group(dtype: DType, rows: &[&[u8]], out: &mut [u8]) {
    match dtype {
        DType::Q8_0 => pack_blocks::<{ format::Q8_0 }>(rows, out),
        DType::Q4_0 => pack_blocks::<{ format::Q4_0 }>(rows, out),
        DType::Q4_1 => pack_blocks::<{ format::Q4_1 }>(rows, out),
        DType::Q5_0 => pack_blocks::<{ format::Q5_0 }>(rows, out),
        DType::Q5_1 => pack_blocks::<{ format::Q5_1 }>(rows, out),
        DType::MXFP4 => pack_blocks::<{ format::MXFP4 }>(rows, out),
        _ => k_quants::pack_group(dtype, rows, out),
    }
}

/// [`pack_group`] for one 32-value format, compiled for it: its sizes and offsets constants, so
/// that the 4-byte copies of a row's slots need no bounds check each (the loop was 39 % of a
/// Llama 8B load's samples with them).
fn pack_blocks<const FORMAT: u8>(rows: &[&[u8]], out: &mut [u8]) {
    let dtype = format::dtype(FORMAT);
    let rows = &rows[..rows.len().min(GROUP_ROWS)];
    let (block_bytes, quants) = (dtype.block_bytes(), format::quant_bytes(FORMAT));
    let (quants_at, qh_at) = ggml_fields(dtype);
    for (b, dst) in out.chunks_exact_mut(GROUP_ROWS * block_bytes).enumerate() {
        // Sixteen rows write every byte of the block's part; fewer leave the missing rows' zero.
        if rows.len() < GROUP_ROWS {
            dst.fill(0);
        }
        let mut qh = [0u32; GROUP_ROWS];
        for (r, row) in rows.iter().enumerate() {
            let src = &row[b * block_bytes..][..block_bytes];
            for s in 0..packed_slots(dtype) {
                let at = slot_offset(s, r);
                dst[at..at + 4].copy_from_slice(&src[quants_at + 4 * s..][..4]);
            }
            if format::has_e8m0_scales(FORMAT) {
                dst[quants + r] = src[0];
            } else {
                dst[quants + 2 * r..][..2].copy_from_slice(&src[..2]);
            }
            if format::has_minimum(FORMAT) {
                dst[quants + 2 * GROUP_ROWS + 2 * r..][..2].copy_from_slice(&src[2..4]);
            }
            if qh_at > 0 {
                qh[r] = u32::from_le_bytes(src[qh_at..qh_at + 4].try_into().expect("four bytes"));
            }
        }
        if qh_at > 0 {
            let masks = bytemuck::cast::<[u64; 8], [u8; 64]>(fifth_bit_masks(&qh).map(u64::to_le));
            dst[4 * SLOT_BYTES..5 * SLOT_BYTES].copy_from_slice(&masks);
        }
    }
}

/// Row `r` of a group back to its GGML bytes.
fn unpack_row(dtype: DType, group: &[u8], r: usize, out: &mut [u8]) {
    if k_quants::group_block_bytes(dtype).is_some() {
        return k_quants::unpack_row(dtype, group, r, out);
    }
    let code = format::of(dtype);
    let (block_bytes, quants) = (dtype.block_bytes(), format::quant_bytes(code));
    let (quants_at, qh_at) = ggml_fields(dtype);
    for (b, dst) in out.chunks_exact_mut(block_bytes).enumerate() {
        let src = &group[b * GROUP_ROWS * block_bytes..][..GROUP_ROWS * block_bytes];
        for s in 0..packed_slots(dtype) {
            let at = slot_offset(s, r);
            dst[quants_at + 4 * s..][..4].copy_from_slice(&src[at..at + 4]);
        }
        if format::has_e8m0_scales(code) {
            dst[0] = src[quants + r];
        } else {
            dst[..2].copy_from_slice(&src[quants + 2 * r..][..2]);
        }
        if format::has_minimum(code) {
            dst[2..4].copy_from_slice(&src[quants + 2 * GROUP_ROWS + 2 * r..][..2]);
        }
        if qh_at > 0 {
            dst[qh_at..qh_at + 4].copy_from_slice(&row_fifth_bits(&fifth_bit_words(src), r).to_le_bytes());
        }
    }
}

/// A block's 8 fifth-bit mask words (Q5 formats).
fn fifth_bit_words(block: &[u8]) -> [u64; 8] {
    std::array::from_fn(|s| u64::from_le_bytes(block[4 * SLOT_BYTES + 8 * s..][..8].try_into().expect("eight bytes")))
}

/// The scalar kernel of every repacked format: the definition the SIMD kernels equal bit for bit.
pub(crate) fn reference_kernel(dtype: DType, group: &[u8], acts: &[Activation<'_>], out: &mut [[f32; GROUP_ROWS]]) {
    if k_quants::group_block_bytes(dtype).is_some() {
        return k_quants::reference_kernel(dtype, group, acts, out);
    }
    let block = GROUP_ROWS * dtype.block_bytes();
    let code = format::of(dtype);
    let (quants, five, minimum) = (format::quant_bytes(code), format::has_fifth_bit(code), format::has_minimum(code));
    for (act, out) in acts.iter().zip(out.iter_mut()) {
        *out = [0.0; GROUP_ROWS];
        for (src, act) in group.chunks_exact(block).zip(&act.blocks) {
            let a = &act.qs;
            let (d_a, sum_a) = (act.d, act.sum);
            let masks = if five { fifth_bit_words(src) } else { [0; 8] };
            for (r, acc) in out.iter_mut().enumerate() {
                let mut s = 0i32;
                for k in 0..32 {
                    let q = match dtype {
                        DType::Q8_0 => i32::from(src[slot_offset(k / 4, r) + k % 4] as i8),
                        _ => {
                            let byte = src[slot_offset(k % 16 / 4, r) + k % 4];
                            let nibble = if k < 16 { byte & 0x0F } else { byte >> 4 };
                            let fifth = (masks[k / 4] >> (4 * r + k % 4)) & 1;
                            if dtype == DType::MXFP4 {
                                i32::from(KVALUES_MXFP4[usize::from(nibble)])
                            } else {
                                i32::from(nibble) | (fifth as i32) << 4
                            }
                        }
                    };
                    s += q * i32::from(a[k] as i8);
                }
                match dtype {
                    DType::Q4_0 => s -= 8 * sum_a,
                    DType::Q5_0 => s -= 16 * sum_a,
                    _ => {}
                }
                let d_w = if format::has_e8m0_scales(code) {
                    e8m0_to_f32_half(src[quants + r])
                } else {
                    f16::from_le_bytes([src[quants + 2 * r], src[quants + 2 * r + 1]]).to_f32()
                };
                *acc = (d_w * d_a).mul_add(s as f32, *acc);
                if minimum {
                    let at = quants + 2 * GROUP_ROWS + 2 * r;
                    let m_w = f16::from_le_bytes([src[at], src[at + 1]]).to_f32();
                    *acc = m_w.mul_add(act.ds, *acc);
                }
            }
        }
    }
}

/// Rows `first..first + ys.len()` of `view` (`first` a multiple of 16) against one activation
/// (`acts`), into `ys`: one task of a decode's shared loop (`crate::matmul_i16_each`), each group
/// streaming the next into L2 as [`multiply`]'s do ([`RepackedKernel`]).
pub(crate) fn rows_into(
    kernel: RepackedKernel,
    view: RepackedView<'_>,
    first: usize,
    acts: &[Activation<'_>],
    ys: &mut [f32],
) {
    let group_bytes = view.bytes.len() / view.rows.div_ceil(GROUP_ROWS).max(1);
    let mut results = [[0.0f32; GROUP_ROWS]; 1];
    for (i, ys) in ys.chunks_mut(GROUP_ROWS).enumerate() {
        let g = first / GROUP_ROWS + i;
        let at = g * group_bytes;
        let ahead = view.bytes.get(at + group_bytes..at + 2 * group_bytes).unwrap_or_default();
        kernel(&view.bytes[at..][..group_bytes], ahead, &acts[..1], &mut results);
        ys.copy_from_slice(&results[0][..ys.len()]);
    }
}

/// Most bytes of weights per task of a one-activation product on several threads, so that the
/// threads end a large matrix within a small task of each other: Gemma 3's 178 MB output matrix
/// in four tasks per thread left one thread 22 MB (about a millisecond of a ten-millisecond
/// step) to stream alone whenever the other had fallen a task behind.
const DECODE_TASK_BYTES: usize = 1 << 20;

/// `ys = acts · Wᵀ` (`ys`: `acts.len() × view.rows`) for non-empty shapes checked by the caller,
/// on the current pool: tasks of whole groups × chunks of activations, each writing its part of
/// every activation's row of `ys` directly.
pub(crate) fn multiply(kernel: RepackedKernel, view: RepackedView<'_>, acts: &[Activation<'_>], ys: &mut [f32]) {
    let (rows, n, threads) = (view.rows, acts.len(), pool::current_threads());
    let group_bytes = view.bytes.len() / rows.div_ceil(GROUP_ROWS);
    let groups = rows.div_ceil(GROUP_ROWS);
    // Several tasks per thread for one activation on several threads (a shared core should not
    // hold the rest up), and at most `DECODE_TASK_BYTES` of weights each, so that the threads
    // end a large matrix together; one block of groups per thread otherwise (each claims chunks
    // of activations in turn; one thread takes every row in one task).
    let tasks =
        if n == 1 && threads > 1 { (4 * threads).max(view.bytes.len().div_ceil(DECODE_TASK_BYTES)) } else { threads };
    let groups_per_task = groups.div_ceil(tasks.max(1)).max(1);
    let block_rows = groups_per_task * GROUP_ROWS;
    let run = |block: &mut pool::ColumnBlock<'_, f32>, first: usize, chunk: &[Activation<'_>]| {
        let mut results = [[0.0f32; GROUP_ROWS]; MAX_ACTS];
        let (first_row, width) = (block.first_column(), block.width());
        for g in (first_row..first_row + width).step_by(GROUP_ROWS) {
            let at = g / GROUP_ROWS * group_bytes;
            let group = &view.bytes[at..][..group_bytes];
            let ahead = view.bytes.get(at + group_bytes..at + 2 * group_bytes).unwrap_or_default();
            let results = &mut results[..chunk.len()];
            kernel(group, ahead, chunk, results);
            let valid = GROUP_ROWS.min(rows - g);
            for (row, result) in block.rows_mut(first..first + chunk.len()).zip(results.iter()) {
                match <&mut [f32; GROUP_ROWS]>::try_from(&mut row[g - first_row..][..valid]) {
                    // A whole group: one fixed-size store, not a `memcpy` call per activation.
                    Ok(whole) => *whole = *result,
                    Err(_) => row[g - first_row..][..valid].copy_from_slice(&result[..valid]),
                }
            }
        }
    };
    pool::for_each_tile_mut(ys, rows, MAX_ACTS, block_rows, |c, _, mut block| {
        let first = c * MAX_ACTS;
        run(&mut block, first, &acts[first..(first + MAX_ACTS).min(n)]);
    });
}
