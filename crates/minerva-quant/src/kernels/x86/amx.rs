//! AMX-INT8 (Intel Xeon since Sapphire Rapids): the repacked 32-value formats against sixteen
//! activations at a time by tile products (`tdpbssd`), the rest of each step in AVX-512.
//!
//! A repacked group's block (`crate::repack`: slot s holds values 4s..4s + 4 of each of 16 rows)
//! is already the B operand of `tdpbssd` — 8 tile rows of 64 bytes, tile row s the four bytes of
//! every weight row at values 4s.. — so a Q8_0 block is loaded from the weights as it lies; the
//! Q4 and Q5 nibbles (with Q5's fifth bits) and MXFP4's (to their doubled E2M1 values + 12) are
//! decoded into the same shape once per call. The A operand is sixteen activations' 32 quants
//! of the block, laid out once per thread and call (`avx512_panel::laid_out`), and C their
//! 16 × 16 exact integer sums: signed × signed, so Q8_0 needs none of the VNNI kernel's +128
//! fold, and Q4_0 / Q5_0 / MXFP4 subtract 8·Σa / 16·Σa / 12·Σa from their unsigned bytes' sums
//! as it does. The f32 steps per activation are `repacked::avx512`'s in
//! block order (`acc = fma(d_w·d_a, f32(s), acc)`, then the minimum's), so the results are its
//! results, and the scalar reference's, bit for bit; the activations short of sixteen at the end
//! of a call go to it.
//!
//! One block per tile product (K = 32: each block has its own scales), four products in flight
//! (C in `tmm0`..`tmm3`, A and B in `tmm4`..`tmm7`). The tile configuration is loaded
//! at the start of each call and released at its end, so a thread holds tile state only inside
//! a kernel.

use core::arch::asm;
use core::arch::x86_64::{
    __m256i, __m512, __m512i, _mm512_cvtepi32_ps, _mm512_cvtph_ps, _mm512_fmadd_ps, _mm512_mul_ps, _mm512_set1_epi32,
    _mm512_set1_ps, _mm512_setzero_ps, _mm512_sub_epi32,
};
use std::cell::RefCell;
use std::sync::OnceLock;

use bytemuck::pod_read_unaligned;

use super::avx2_tile_i16::prefetch;
use super::avx512_panel::{LayoutKey, laid_out};
use super::repacked::{self, MXFP4, Q4_0, Q5_0, Q8_0};
use crate::activation::Activation;
use crate::kernels::repacked_formats::{block_bytes, has_minimum, quant_bytes};
use crate::repack::{GROUP_ROWS, SLOT_BYTES};

/// Activations per tile product (A's and C's rows).
const ACTS: usize = 16;

/// Whether this CPU has AMX-TILE and AMX-INT8 and the kernel lets this process use tile data
/// (Linux ≥ 5.16 grants it on request, `arch_prctl(ARCH_REQ_XCOMP_PERM)`, for every thread of the
/// process); asked once.
pub(super) fn usable() -> bool {
    static USABLE: OnceLock<bool> = OnceLock::new();
    *USABLE.get_or_init(|| {
        // CPUID leaf 7, sub-leaf 0: EDX bit 24 AMX-TILE, bit 25 AMX-INT8.
        let leaf7 = core::arch::x86_64::__cpuid_count(7, 0);
        let has_tiles = leaf7.edx & (1 << 24) != 0 && leaf7.edx & (1 << 25) != 0;
        has_tiles && request_tile_data()
    })
}

/// Asks Linux for permission to use AMX tile data (`XFEATURE_XTILEDATA`): true if granted.
#[cfg(target_os = "linux")]
fn request_tile_data() -> bool {
    const SYS_ARCH_PRCTL: i64 = 158;
    const ARCH_REQ_XCOMP_PERM: i64 = 0x1023;
    const XFEATURE_XTILEDATA: i64 = 18;
    let result: i64;
    // SAFETY: `arch_prctl(ARCH_REQ_XCOMP_PERM, 18)` passes two integers and touches none of this
    // process's memory; `syscall` overwrites rax (the result), rcx and r11 only.
    unsafe {
        asm!("syscall", inlateout("rax") SYS_ARCH_PRCTL => result, in("rdi") ARCH_REQ_XCOMP_PERM,
            in("rsi") XFEATURE_XTILEDATA, lateout("rcx") _, lateout("r11") _, options(nostack));
    }
    result == 0
}

#[cfg(not(target_os = "linux"))]
fn request_tile_data() -> bool {
    false
}

/// A tile configuration (palette 1): C tiles `tmm0`..`tmm3` (16 × 16 i32), A tiles `tmm4`,
/// `tmm6` (16 activations × `a_width` bytes), B tiles `tmm5`, `tmm7` (`a_width / 4` × 64 bytes).
#[repr(C, align(64))]
pub(super) struct TileConfig(pub(super) [u8; 64]);

impl TileConfig {
    pub(super) const fn new(a_width: u8) -> Self {
        let mut bytes = [0u8; 64];
        bytes[0] = 1;
        // (tile, rows, bytes per row): bytes per row at 16 + 2·tile (u16), rows at 48 + tile.
        let b_rows = a_width / 4;
        let tiles: [(usize, u8, u8); 8] = [
            (0, 16, 64),
            (1, 16, 64),
            (2, 16, 64),
            (3, 16, 64),
            (4, 16, a_width),
            (5, b_rows, 64),
            (6, 16, a_width),
            (7, b_rows, 64),
        ];
        let mut t = 0;
        while t < tiles.len() {
            let (tile, rows, width) = tiles[t];
            bytes[16 + 2 * tile] = width;
            bytes[48 + tile] = rows;
            t += 1;
        }
        TileConfig(bytes)
    }
}

/// Runs `f` with `config` loaded into the tile unit, then releases the tile state, so that a
/// thread holds it only inside a kernel.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) fn with_tiles<R>(config: &TileConfig, f: impl FnOnce() -> R) -> R {
    // SAFETY: `usable()` held before the AMX ISA's rows were selected (its `detected`), and only
    // its kernels call this, so the process may use tile data; `config` is a palette-1
    // configuration made by `TileConfig::new`.
    unsafe { asm!("ldtilecfg [{0}]", in(reg) config.0.as_ptr(), options(nostack, readonly)) };
    let result = f();
    // SAFETY: releasing tile state is always allowed.
    unsafe { asm!("tilerelease", options(nostack, nomem)) };
    result
}

/// Four tile products in flight, `C_i = A_i · B_i` (`tmm0`..`tmm3`; A and B in `tmm4`..`tmm7`,
/// taken again once the first two products have read theirs), stored into `sums.0[i]` (16 rows
/// of 64 bytes, 64 apart: inside `sums`).
///
/// # Safety
///
/// Inside [`with_tiles`]: the loaded configuration's A tiles (16 rows of its A width) read rows
/// `a_stride` apart from `a[i]`, its B tiles (A width / 4 rows of 64 bytes) rows 64 apart from
/// `b[i]`; every byte of those reads must lie inside one live value.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn four_products(a: [*const u8; 4], a_stride: usize, b: [*const u8; 4], sums: &mut Sums) {
    let [s0, s1, s2, s3] = &mut sums.0;
    // SAFETY: the loads read what the caller promises; the stores write the four 1 KiB arrays of
    // `sums`.
    unsafe {
        asm!(
            "tilezero tmm0",
            "tilezero tmm1",
            "tilezero tmm2",
            "tilezero tmm3",
            "tileloadd tmm4, [{a0} + {stride}]",
            "tileloadd tmm5, [{b0} + {sixty_four}]",
            "tdpbssd tmm0, tmm4, tmm5",
            "tileloadd tmm6, [{a1} + {stride}]",
            "tileloadd tmm7, [{b1} + {sixty_four}]",
            "tdpbssd tmm1, tmm6, tmm7",
            "tileloadd tmm4, [{a2} + {stride}]",
            "tileloadd tmm5, [{b2} + {sixty_four}]",
            "tdpbssd tmm2, tmm4, tmm5",
            "tileloadd tmm6, [{a3} + {stride}]",
            "tileloadd tmm7, [{b3} + {sixty_four}]",
            "tdpbssd tmm3, tmm6, tmm7",
            "tilestored [{s0} + {sixty_four}], tmm0",
            "tilestored [{s1} + {sixty_four}], tmm1",
            "tilestored [{s2} + {sixty_four}], tmm2",
            "tilestored [{s3} + {sixty_four}], tmm3",
            a0 = in(reg) a[0], a1 = in(reg) a[1], a2 = in(reg) a[2], a3 = in(reg) a[3],
            b0 = in(reg) b[0], b1 = in(reg) b[1], b2 = in(reg) b[2], b3 = in(reg) b[3],
            s0 = in(reg) s0.as_mut_ptr(), s1 = in(reg) s1.as_mut_ptr(),
            s2 = in(reg) s2.as_mut_ptr(), s3 = in(reg) s3.as_mut_ptr(),
            stride = in(reg) a_stride, sixty_four = in(reg) 64usize,
            options(nostack),
        );
    }
}

/// One block per product: K = 32.
static CONFIG: TileConfig = TileConfig::new(32);

/// Sixteen activations at one block: A's rows and what the f32 steps read per activation.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct ActTile {
    qs: [[u8; 32]; ACTS],
    d: [f32; ACTS],
    /// `Σa` (what Q4_0 and Q5_0 correct their sums by).
    sum: [i32; ACTS],
    ds: [f32; ACTS],
}

const EMPTY: ActTile = ActTile { qs: [[0; 32]; ACTS], d: [0.0; ACTS], sum: [0; ACTS], ds: [0.0; ACTS] };

/// One block's B operand decoded from nibbles: 8 slots of 64 bytes.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Decoded([u8; 8 * SLOT_BYTES]);

/// C, stored: four products' 16 activations × 16 rows' sums.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub(super) struct Sums(pub(super) [[[i32; GROUP_ROWS]; ACTS]; 4]);

thread_local! {
    /// The call's whole groups of sixteen activations: group `c` at block `b` is entry
    /// `c·blocks + b`, with the key of the activations they hold.
    static ACT_TILES: RefCell<(Option<LayoutKey>, Vec<ActTile>)> = const { RefCell::new((None, Vec::new())) };
    /// The group's blocks decoded to bytes (Q4, Q5).
    static DECODED: RefCell<Vec<Decoded>> = const { RefCell::new(Vec::new()) };
}

/// The integer an activation block's sum is corrected by: what the unsigned nibbles added.
fn offset_sum(format: u8, sum: i32) -> i32 {
    match format {
        Q4_0 => sum << 3,
        Q5_0 => sum << 4,
        MXFP4 => sum * 12,
        _ => 0,
    }
}

/// Lays `acts` (whole groups of sixteen) out as [`ActTile`]s (see [`ACT_TILES`]): the same for
/// every format, as the key assumes.
fn lay_out(acts: &[Activation<'_>], blocks: usize, out: &mut Vec<ActTile>) {
    // Not cleared: every entry is written below (whole groups of sixteen), so only new entries
    // are filled first.
    out.resize(acts.len() / ACTS * blocks, EMPTY);
    for (tiles, acts) in out.chunks_exact_mut(blocks).zip(acts.chunks_exact(ACTS)) {
        for (j, act) in acts.iter().enumerate() {
            for (tile, block) in tiles.iter_mut().zip(&act.blocks[..blocks]) {
                tile.qs[j] = block.qs;
                (tile.d[j], tile.sum[j], tile.ds[j]) = (block.d, block.sum, block.ds);
            }
        }
    }
}

/// One group against the activations of `acts`, results into `out` (one per activation): whole
/// groups of sixteen by tile products, the rest by `repacked::avx512` (`crate::repack::RepackedKernel`).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) fn repacked<const FORMAT: u8>(
    group: &[u8],
    ahead: &[u8],
    acts: &[Activation<'_>],
    out: &mut [[f32; GROUP_ROWS]],
) {
    let whole = out.len().min(acts.len()) / ACTS * ACTS;
    if whole == 0 {
        return repacked::avx512::<FORMAT>(group, ahead, acts, out);
    }
    let blocks = group.len() / block_bytes(FORMAT);
    ACT_TILES.with_borrow_mut(|tiles| {
        laid_out(&acts[..whole], blocks, tiles, lay_out);
        DECODED.with_borrow_mut(|decoded| {
            if FORMAT != Q8_0 {
                decode::<FORMAT>(group, ahead, blocks, decoded);
            }
            // Made once per call, not per sixteen activations: zeroing its 4 KiB was 1.1 % of a
            // Q4_1 prefill. Every product stores its sums before they are read.
            let mut sums = Sums([[[0; GROUP_ROWS]; ACTS]; 4]);
            with_tiles(&CONFIG, || {
                for (c, out) in out[..whole].chunks_exact_mut(ACTS).enumerate() {
                    let ahead = if c == 0 && FORMAT == Q8_0 { ahead } else { &[] };
                    products::<FORMAT>(group, ahead, &tiles.1[c * blocks..][..blocks], decoded, &mut sums, out);
                }
            });
        });
    });
    repacked::avx512::<FORMAT>(group, &[], &acts[whole..], &mut out[whole..]);
}

/// Q4, Q5 and MXFP4 blocks' slots as bytes (`repacked::nibble_slots`, stored), streaming `ahead`
/// into L2 a block's share per block.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn decode<const FORMAT: u8>(group: &[u8], ahead: &[u8], blocks: usize, decoded: &mut Vec<Decoded>) {
    let block = block_bytes(FORMAT);
    // Not cleared: every byte is written below.
    decoded.resize(blocks, Decoded([0; 8 * SLOT_BYTES]));
    for (b, out) in decoded.iter_mut().enumerate() {
        let src = &group[b * block..][..block];
        prefetch(ahead, b * block, block);
        for (slot, bytes) in out.0.chunks_exact_mut(SLOT_BYTES).zip(repacked::nibble_slots::<FORMAT>(src)) {
            slot.copy_from_slice(&bytemuck::cast::<__m512i, [u8; 64]>(bytes));
        }
    }
}

/// Sixteen activations (`tiles`, one per block) against one group, results into `out`; `sums`
/// holds each product's C as stored.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn products<const FORMAT: u8>(
    group: &[u8],
    ahead: &[u8],
    tiles: &[ActTile],
    decoded: &[Decoded],
    sums: &mut Sums,
    out: &mut [[f32; GROUP_ROWS]],
) {
    let block = block_bytes(FORMAT);
    let mut acc = [_mm512_setzero_ps(); ACTS];
    let weights = |b: usize| b_operand::<FORMAT>(group, decoded, b);
    let mut b = 0;
    while b + 4 <= tiles.len() {
        prefetch(ahead, b * block, 4 * block);
        let a = [0, 1, 2, 3].map(|i| tiles[b + i].qs.as_ptr().cast::<u8>());
        let w = [0, 1, 2, 3].map(|i| weights(b + i).as_ptr());
        // SAFETY: inside `with_tiles` (`repacked`), whose configuration reads each A as 16 rows of
        // 32 bytes 32 apart (`ActTile::qs`, 512 bytes) and each B as 8 rows of 64 bytes (the 512
        // bytes of `weights(b)`).
        unsafe { four_products(a, 32, w, sums) };
        // Written out, not a loop: a loop left the accumulators in memory.
        accumulate::<FORMAT>(&group[b * block..][..block], &tiles[b], &sums.0[0], &mut acc);
        accumulate::<FORMAT>(&group[(b + 1) * block..][..block], &tiles[b + 1], &sums.0[1], &mut acc);
        accumulate::<FORMAT>(&group[(b + 2) * block..][..block], &tiles[b + 2], &sums.0[2], &mut acc);
        accumulate::<FORMAT>(&group[(b + 3) * block..][..block], &tiles[b + 3], &sums.0[3], &mut acc);
        b += 4;
    }
    for b in b..tiles.len() {
        let (a0, w0) = (&tiles[b].qs, weights(b));
        let s0 = &mut sums.0[0];
        // SAFETY: as `four_products`, one product: A 16 rows of 32 bytes 32 apart (512 bytes of
        // `ActTile::qs`), B 8 rows of 64 bytes (`weights(b)`), C stored into `s0` (1 KiB).
        unsafe {
            asm!(
                "tilezero tmm0",
                "tileloadd tmm4, [{a0} + {thirty_two}]",
                "tileloadd tmm5, [{w0} + {sixty_four}]",
                "tdpbssd tmm0, tmm4, tmm5",
                "tilestored [{s0} + {sixty_four}], tmm0",
                a0 = in(reg) a0.as_ptr(), w0 = in(reg) w0.as_ptr(), s0 = in(reg) s0.as_mut_ptr(),
                thirty_two = in(reg) 32usize, sixty_four = in(reg) 64usize,
                options(nostack),
            );
        }
        accumulate::<FORMAT>(&group[b * block..][..block], &tiles[b], s0, &mut acc);
    }
    for (out, acc) in out.iter_mut().zip(acc) {
        *out = bytemuck::cast(acc);
    }
}

/// B of block `b`: 8 rows of 64 bytes, from the weights (Q8_0) or their decoded bytes.
#[inline(always)]
fn b_operand<'a, const FORMAT: u8>(group: &'a [u8], decoded: &'a [Decoded], b: usize) -> &'a [u8] {
    if FORMAT == Q8_0 { &group[b * block_bytes(FORMAT)..][..8 * SLOT_BYTES] } else { &decoded[b].0 }
}

/// One block's f32 steps for sixteen activations, `repacked::avx512`'s: `acc = fma(d_w·d_a,
/// f32(s), acc)`, then `fma(m_w, d_a·Σa, acc)` for Q4_1, Q5_1.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn accumulate<const FORMAT: u8>(
    src: &[u8],
    tile: &ActTile,
    sums: &[[i32; GROUP_ROWS]; ACTS],
    acc: &mut [__m512; ACTS],
) {
    let quants = quant_bytes(FORMAT);
    let d_w = repacked::row_scales_512::<FORMAT>(src);
    let m_w = if has_minimum(FORMAT) {
        _mm512_cvtph_ps(pod_read_unaligned::<__m256i>(&src[quants + 32..quants + 64]))
    } else {
        _mm512_setzero_ps()
    };
    for (j, acc) in acc.iter_mut().enumerate() {
        let mut s = bytemuck::cast::<[i32; GROUP_ROWS], __m512i>(sums[j]);
        if matches!(FORMAT, Q4_0 | Q5_0 | MXFP4) {
            s = _mm512_sub_epi32(s, _mm512_set1_epi32(offset_sum(FORMAT, tile.sum[j])));
        }
        let scale = _mm512_mul_ps(d_w, _mm512_set1_ps(tile.d[j]));
        *acc = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(s), *acc);
        if has_minimum(FORMAT) {
            *acc = _mm512_fmadd_ps(m_w, _mm512_set1_ps(tile.ds[j]), *acc);
        }
    }
}
