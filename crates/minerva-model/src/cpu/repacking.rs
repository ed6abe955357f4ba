//! Repacking (`--repack`): Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4, Q2_K…Q6_K matrices copied once
//! into minerva-quant's row-interleaved layout ([`Repacked`]) and multiplied with 8-bit
//! activations (Q8_0's for the 32-value formats, instead of the zero-copy kernels' i16; Q8_K for
//! the K-quants, as in place).
//!
//! A matrix is repacked the first time a product reads it, on the backend's pool — while the model
//! loads, since `Model` runs one token through it then
//! (`Backend::makes_copies_at_first_product`) — so a tensor that
//! is only looked up (an untied embedding table) is never copied. The copy is as large as the
//! tensor; the file's pages it was read from are then given back (`ByteSource::release`:
//! `MADV_DONTNEED` on a GGUF file's map), so resident memory holds the copy, not both (a tied
//! embedding table's rows are read from the file again, a page per looked-up row).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use minerva_core::DType;
use minerva_quant::{Matrix, Repacked};

use crate::arch::Int8Activations;

/// Whether the CPU backend repacks weights.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Repack {
    /// Every repackable matrix whose format's repacked kernel on this CPU beats the zero-copy
    /// ones (`minerva_quant::repacking_pays`: AVX-512 VNNI for every format, AVX-VNNI and AVX2
    /// for the 32-value formats, Q2_K, Q3_K and Q6_K), where that keeps the activations' precision (the
    /// K-quants) or the model's architecture lets its matrices take 8-bit activations
    /// (`ArchSpec::int8_activations`: every matrix or none).
    Auto,
    /// Every repackable matrix, with the scalar kernel where there is no SIMD one.
    On,
    /// None: every weight read in place (zero-copy), i16 activations for the 32-value formats.
    #[default]
    Off,
}

impl std::str::FromStr for Repack {
    type Err = String;

    fn from_str(s: &str) -> Result<Repack, String> {
        match s {
            "auto" => Ok(Repack::Auto),
            "on" => Ok(Repack::On),
            "off" => Ok(Repack::Off),
            other => Err(format!("unknown repack mode {other:?} (expected auto, on or off)")),
        }
    }
}

impl Repack {
    /// Whether a matrix of `dtype` is repacked under this mode, where the model's architecture
    /// lets it take 8-bit activations (`int8_activations`) or not.
    pub fn applies(self, dtype: DType, int8_activations: bool) -> bool {
        let precise = || int8_activations || !minerva_quant::repacking_changes_activations(dtype);
        minerva_quant::is_repackable(dtype)
            && match self {
                Repack::Auto => minerva_quant::repacking_pays(dtype) && precise(),
                Repack::On => true,
                Repack::Off => false,
            }
    }
}

/// A weight's repacked copy, made at its first product (`None` inside: repacking failed, e.g. for
/// memory, and the weight is read in place).
#[derive(Default)]
pub(super) struct RepackedCopy {
    copy: OnceLock<Option<Repacked>>,
}

/// Which matrices of the loaded model may take 8-bit activations: set once, by
/// `Backend::prepare_for` (a backend serves one model); none before it.
#[derive(Default)]
pub(super) struct Int8Scope(OnceLock<Int8Activations>);

impl Int8Scope {
    pub(super) fn set(&self, scope: Int8Activations) {
        // A second call (none is made) would keep the first model's scope.
        let _ = self.0.set(scope);
    }

    pub(super) fn get(&self) -> Int8Activations {
        self.0.get().copied().unwrap_or(Int8Activations::Nowhere)
    }
}

/// What a backend has repacked so far: matrices and bytes.
#[derive(Default)]
pub(super) struct RepackCounts {
    matrices: AtomicUsize,
    bytes: AtomicUsize,
}

impl RepackCounts {
    /// (matrices, bytes).
    pub(super) fn get(&self) -> (usize, usize) {
        (self.matrices.load(Ordering::Relaxed), self.bytes.load(Ordering::Relaxed))
    }
}

impl RepackedCopy {
    /// The repacked matrix of `bytes` (`rows × cols` of `dtype`), made now if it was not yet:
    /// then counted in `counts`, and `made` runs (to give the file's pages back).
    pub(super) fn get(
        &self,
        dtype: DType,
        bytes: &[u8],
        (rows, cols): (usize, usize),
        counts: &RepackCounts,
        made: impl FnOnce(),
    ) -> Option<Matrix<'_>> {
        let made = self.copy.get_or_init(|| {
            let repacked = Repacked::new(dtype, bytes, rows, cols).ok()?;
            counts.matrices.fetch_add(1, Ordering::Relaxed);
            counts.bytes.fetch_add(repacked.len_bytes(), Ordering::Relaxed);
            made();
            Some(repacked)
        });
        made.as_ref().map(Repacked::matrix)
    }
}
