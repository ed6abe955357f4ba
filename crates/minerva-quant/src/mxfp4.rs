//! MXFP4 outside GGUF: the Hugging Face GPT-OSS `_blocks`/`_scales` pair, MLX's `mxfp4` mode (the
//! same bytes), and lossless conversion to and from GGML's [`BlockMxfp4`].
//!
//! Sources: transformers `integrations/mxfp4.py` (`FP4_VALUES`, `convert_moe_packed_tensors`);
//! MLX `mlx/ops.cpp` (`fp_dequantize`) checked against `mlx` 0.32.4 on Linux (CPU) by
//! `fixtures/quant/make_quant_goldens.py`; llama.cpp `convert_hf_to_gguf.py`
//! (`transform_nibble_layout`).
//!
//! ```text
//! HF `_blocks` (u8 [.., n/32, 16])         HF `_scales` (u8 [.., n/32])
//! +---------+---------+-----+----------+   +------+
//! | byte 0  | byte 1  | ... | byte 15  |   | e    |  one E8M0 byte per 32 values
//! | lo: v0  | lo: v2  |     | lo: v30  |   +------+
//! | hi: v1  | hi: v3  |     | hi: v31  |   value = FP4[nibble] * 2^(e-127)
//! +---------+---------+-----+----------+
//!   interleaved: v[2j] = lo nibble of byte j, v[2j+1] = hi nibble
//! ```
//!
//! MLX mode `mxfp4` stores `weight` as u32 words with 8 nibbles each, LSB first: viewed as
//! little-endian bytes it is exactly HF's `_blocks`, and its `scales` are HF's `_scales`.
//!
//! **Scale arithmetic.** Both transformers (`torch.ldexp(x, e) = x * 2.0**e`) and MLX multiply by a
//! scale computed as a float, `2^(e-127)`. In f32 every product is exact except that e = 255
//! makes the scale +inf, so nonzero nibbles give ±inf and zero nibbles give NaN (0 × inf; OCP
//! calls E8M0 0xFF NaN anyway). We reproduce that. ggml's reading of the same bytes differs only
//! there (it scales exactly by 2^128: ±0, ±2^127 for ±0.5, ±inf otherwise) and in the sign of
//! zero (nibble 8 is −0 here, +0 in ggml).

use crate::QuantError;
use crate::ggml::mxfp4::BlockMxfp4;
use crate::pool;

/// OCP FP4 E2M1 values indexed by nibble (bit 3 is the sign), as transformers' `FP4_VALUES`.
pub const FP4_E2M1_VALUES: [f32; 16] =
    [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0];

/// Values per MXFP4 group (one scale byte each).
pub const MXFP4_GROUP: usize = 32;
/// Bytes of packed nibbles per group.
pub const MXFP4_GROUP_BYTES: usize = MXFP4_GROUP / 2;

/// OCP E8M0 as a float scale, `2^(e-127)`: e = 0 gives the subnormal 2^-127 and e = 255 gives
/// +inf (the exponent field all ones), as MLX and torch compute it.
pub const fn e8m0_to_f32(e: u8) -> f32 {
    let bits = if e == 0 { 0x0040_0000 } else { (e as u32) << 23 };
    f32::from_bits(bits)
}

/// Checks an HF-style `blocks` / `scales` pair and returns the number of 32-value groups.
fn check_pair(format: &'static str, blocks: usize, scales: usize) -> Result<usize, QuantError> {
    if !blocks.is_multiple_of(MXFP4_GROUP_BYTES) {
        return Err(QuantError::PartialGroupBytes {
            format,
            component: "blocks",
            len: blocks,
            group_bytes: MXFP4_GROUP_BYTES,
        });
    }
    let groups = blocks / MXFP4_GROUP_BYTES;
    if scales != groups {
        return Err(QuantError::ComponentLength {
            format,
            component: "scales",
            expected: groups,
            actual: scales,
            unit: "bytes",
        });
    }
    Ok(groups)
}

fn check_output(format: &'static str, groups: usize, out: usize) -> Result<(), QuantError> {
    if out != groups * MXFP4_GROUP {
        return Err(QuantError::ComponentLength {
            format,
            component: "output",
            expected: groups * MXFP4_GROUP,
            actual: out,
            unit: "values",
        });
    }
    Ok(())
}

/// Dequantizes an HF GPT-OSS MXFP4 pair (`blocks`: 16 bytes per 32 values, interleaved nibbles;
/// `scales`: one E8M0 byte per 32 values) into `out`. Tensors may be passed whole: block `b` of
/// the flattened `_blocks` goes with byte `b` of the flattened `_scales`.
pub fn dequantize_hf_mxfp4_ref(blocks: &[u8], scales: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    let groups = check_pair("HF MXFP4", blocks.len(), scales.len())?;
    check_output("HF MXFP4", groups, out.len())?;
    let group_bytes = blocks.chunks_exact(MXFP4_GROUP_BYTES);
    for ((bytes, &e), values) in group_bytes.zip(scales).zip(out.chunks_exact_mut(MXFP4_GROUP)) {
        let scale = e8m0_to_f32(e);
        for (pair, &byte) in values.chunks_exact_mut(2).zip(bytes) {
            pair[0] = FP4_E2M1_VALUES[usize::from(byte & 0x0F)] * scale;
            pair[1] = FP4_E2M1_VALUES[usize::from(byte >> 4)] * scale;
        }
    }
    Ok(())
}

/// Dequantizes an MLX `mode="mxfp4"` tensor: `weight` is the u32 tensor's little-endian bytes and
/// is byte-identical to HF `_blocks`, so this is [`dequantize_hf_mxfp4_ref`] under MLX's name.
pub fn dequantize_mlx_mxfp4_ref(weight: &[u8], scales: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    dequantize_hf_mxfp4_ref(weight, scales, out).map_err(|err| match err {
        QuantError::PartialGroupBytes { len, group_bytes, .. } => {
            QuantError::PartialGroupBytes { format: "MLX mxfp4", component: "weight", len, group_bytes }
        }
        QuantError::ComponentLength { component, expected, actual, unit, .. } => {
            QuantError::ComponentLength { format: "MLX mxfp4", component, expected, actual, unit }
        }
        other => other,
    })
}

/// Converts an HF MXFP4 pair into GGML MXFP4 blocks (`out`: 17 bytes per group), as llama.cpp's
/// converter does: the E8M0 byte is copied, nibbles are reordered from interleaved to split
/// halves. Lossless; [`ggml_mxfp4_to_hf`] inverts it.
pub fn hf_mxfp4_to_ggml(blocks: &[u8], scales: &[u8], out: &mut [u8]) -> Result<(), QuantError> {
    let groups = check_pair("HF MXFP4", blocks.len(), scales.len())?;
    let expected = groups * size_of::<BlockMxfp4>();
    if out.len() != expected {
        return Err(QuantError::ComponentLength {
            format: "HF MXFP4 -> GGML",
            component: "output",
            expected,
            actual: out.len(),
            unit: "bytes",
        });
    }
    // On the current pool's threads: a loader converts gigabytes of experts this way.
    pool::for_each_chunk_mut(out, CHUNK_BLOCKS * 17, |c, out| {
        let first = c * CHUNK_BLOCKS;
        hf_blocks_to_ggml(&blocks[first * MXFP4_GROUP_BYTES..], &scales[first..], out);
    });
    Ok(())
}

/// The GGML blocks of `out` (17 bytes each) from the HF groups at the start of `blocks` and
/// `scales`.
#[inline]
pub(crate) fn hf_blocks_to_ggml(blocks: &[u8], scales: &[u8], out: &mut [u8]) {
    let group_bytes = blocks.chunks_exact(MXFP4_GROUP_BYTES);
    for ((hf, &e), ggml) in group_bytes.zip(scales).zip(out.chunks_exact_mut(17)) {
        ggml[0] = e;
        ggml[1..].copy_from_slice(&crate::matrix::pairs_to_halves(hf.try_into().unwrap_or_default()));
    }
}

/// Blocks per task of [`hf_mxfp4_to_ggml`] (64 Ki values).
const CHUNK_BLOCKS: usize = 2048;

/// Converts GGML MXFP4 blocks into an HF pair (`blocks_out`: 16 bytes per group, `scales_out`: 1
/// byte per group). Lossless; the inverse of [`hf_mxfp4_to_ggml`].
pub fn ggml_mxfp4_to_hf(ggml: &[u8], blocks_out: &mut [u8], scales_out: &mut [u8]) -> Result<(), QuantError> {
    let dtype = minerva_core::DType::MXFP4;
    let groups = crate::blocks::check_dequantize_lengths(dtype, ggml.len(), ggml.len() / 17 * 32)?;
    let (blocks, scales) = (blocks_out.len(), scales_out.len());
    check_pair("GGML -> HF MXFP4", blocks, scales)?;
    if blocks != groups * MXFP4_GROUP_BYTES {
        return Err(QuantError::ComponentLength {
            format: "GGML -> HF MXFP4",
            component: "blocks",
            expected: groups * MXFP4_GROUP_BYTES,
            actual: blocks,
            unit: "bytes",
        });
    }
    let hf_groups = blocks_out.chunks_exact_mut(MXFP4_GROUP_BYTES);
    for ((block, hf), e) in ggml.chunks_exact(17).zip(hf_groups).zip(scales_out.iter_mut()) {
        *e = block[0];
        let qs = &block[1..];
        // Value v sits in ggml byte v%16, low nibble for v < 16.
        let nibble = |v: usize| (qs[v % 16] >> (4 * (v / 16))) & 0x0F;
        for (k, byte) in hf.iter_mut().enumerate() {
            *byte = nibble(2 * k) | (nibble(2 * k + 1) << 4);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Converted on several threads, across task boundaries: each block as when converted
    /// alone, and back to the same HF bytes.
    #[test]
    fn conversion_on_the_pool_equals_block_by_block() {
        let groups = 2 * CHUNK_BLOCKS + CHUNK_BLOCKS / 2 + 3;
        let mut random = crate::test_rng::xorshift(0x2545_f491_4f6c_dd1d);
        let mut next = move || random() as u8;
        let blocks: Vec<u8> = (0..groups * MXFP4_GROUP_BYTES).map(|_| next()).collect();
        let scales: Vec<u8> = (0..groups).map(|_| next()).collect();
        let mut ggml = vec![0u8; groups * 17];
        let pool = crate::ComputePool::new(3).unwrap();
        pool.install(|| hf_mxfp4_to_ggml(&blocks, &scales, &mut ggml)).unwrap();
        for g in 0..groups {
            let mut one = [0u8; 17];
            hf_mxfp4_to_ggml(&blocks[g * MXFP4_GROUP_BYTES..][..MXFP4_GROUP_BYTES], &scales[g..g + 1], &mut one)
                .unwrap();
            assert_eq!(ggml[g * 17..][..17], one, "block {g}");
        }
        let (mut blocks_back, mut scales_back) = (vec![0u8; blocks.len()], vec![0u8; groups]);
        ggml_mxfp4_to_hf(&ggml, &mut blocks_back, &mut scales_back).unwrap();
        assert!(blocks_back == blocks && scales_back == scales, "the round trip lost bytes");
    }
}
