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
//!
//! Under `Repack::Auto` the copies also have a memory budget ([`RepackMemory`]): a file's pages
//! can be evicted under pressure and read again, an anonymous copy cannot, so a model whose copies
//! would not fit beside what else needs memory keeps the matrices past the budget in place (each
//! matrix is decided at its first product, in the order the warm-up token reaches them).

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

/// How much memory `Repack::Auto`'s copies may take (`Repack::On` copies whatever memory there
/// is, an allocation that fails leaving the matrix in place).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RepackMemory {
    /// Half the memory the system has available (Linux: `MemAvailable`) when the first copy is
    /// made, the other half left for the KV cache (which `minerva serve` sizes at half the
    /// available memory too), activations, and the file's pages of the matrices read in place.
    /// Where the system does not say (no `/proc/meminfo`), no budget.
    #[default]
    HalfAvailable,
    /// At most this many bytes of copies.
    Bytes(u64),
}

impl RepackMemory {
    /// The budget in bytes (`usize::MAX`: none).
    fn resolve(self) -> usize {
        let bytes = match self {
            RepackMemory::HalfAvailable => available_memory().map_or(u64::MAX, |b| b / 2),
            RepackMemory::Bytes(b) => b,
        };
        usize::try_from(bytes).unwrap_or(usize::MAX)
    }
}

/// The memory the system says it can give a process without swapping, in bytes (Linux's
/// `MemAvailable`: free memory plus the caches it can drop); `None` where it does not say.
pub fn available_memory() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    meminfo_available(&meminfo)
}

/// `MemAvailable` of a `/proc/meminfo` text, in bytes.
fn meminfo_available(meminfo: &str) -> Option<u64> {
    let kib = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:")?.trim().strip_suffix("kB")?.trim().parse::<u64>().ok())?;
    kib.checked_mul(1024)
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

/// What a backend has repacked so far, matrices and bytes, and what it left in place because the
/// copies would have gone past `Repack::Auto`'s memory budget.
#[derive(Default)]
pub(super) struct RepackCounts {
    matrices: AtomicUsize,
    bytes: AtomicUsize,
    declined: AtomicUsize,
    declined_bytes: AtomicUsize,
    /// The copies' budget in bytes, resolved at the first copy under `Repack::Auto`.
    budget: OnceLock<usize>,
    /// Bytes of the budget taken: copies made and being made.
    reserved: AtomicUsize,
}

impl RepackCounts {
    /// (matrices, bytes) repacked.
    pub(super) fn get(&self) -> (usize, usize) {
        (self.matrices.load(Ordering::Relaxed), self.bytes.load(Ordering::Relaxed))
    }

    /// (matrices, bytes their copies would have taken) left in place for memory.
    pub(super) fn declined(&self) -> (usize, usize) {
        (self.declined.load(Ordering::Relaxed), self.declined_bytes.load(Ordering::Relaxed))
    }

    /// Takes `bytes` of the budget (`memory`, resolved now if this is the first copy), or counts
    /// the matrix as declined and says no.
    fn reserve(&self, bytes: usize, memory: RepackMemory) -> bool {
        let budget = *self.budget.get_or_init(|| memory.resolve());
        let taken = self.reserved.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |reserved| {
            reserved.checked_add(bytes).filter(|&total| total <= budget)
        });
        if taken.is_err() {
            self.declined.fetch_add(1, Ordering::Relaxed);
            self.declined_bytes.fetch_add(bytes, Ordering::Relaxed);
        }
        taken.is_ok()
    }

    /// Gives back `bytes` reserved for a copy that was not made.
    fn unreserve(&self, bytes: usize) {
        self.reserved.fetch_sub(bytes, Ordering::Relaxed);
    }
}

impl RepackedCopy {
    /// The repacked matrix of `bytes` (`rows × cols` of `dtype`), made now if it was not yet
    /// (and, with `budget`, if its bytes fit in what is left of it): then counted in `counts`,
    /// and `made` runs (to give the file's pages back).
    pub(super) fn get(
        &self,
        dtype: DType,
        bytes: &[u8],
        (rows, cols): (usize, usize),
        (counts, budget): (&RepackCounts, Option<RepackMemory>),
        made: impl FnOnce(),
    ) -> Option<Matrix<'_>> {
        let made = self.copy.get_or_init(|| {
            let len = Repacked::len_bytes_for(dtype, rows, cols).ok()?;
            if budget.is_some_and(|memory| !counts.reserve(len, memory)) {
                return None;
            }
            let Ok(repacked) = Repacked::new(dtype, bytes, rows, cols) else {
                if budget.is_some() {
                    counts.unreserve(len);
                }
                return None;
            };
            counts.matrices.fetch_add(1, Ordering::Relaxed);
            counts.bytes.fetch_add(repacked.len_bytes(), Ordering::Relaxed);
            made();
            Some(repacked)
        });
        made.as_ref().map(Repacked::matrix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_available_is_read_in_bytes() {
        let meminfo = "MemTotal:       24576000 kB\nMemFree:         1000 kB\nMemAvailable:   20480000 kB\n";
        assert_eq!(meminfo_available(meminfo), Some(20_480_000 * 1024));
        assert_eq!(meminfo_available("MemTotal: 5 kB\n"), None);
        assert_eq!(meminfo_available("MemAvailable: lots kB\n"), None);
        assert_eq!(meminfo_available("MemAvailable: 18446744073709551615 kB\n"), None);
    }

    /// The budget is taken copy by copy: one that would go past it is declined and counted, a
    /// smaller one after it may still fit, and bytes given back can be taken again.
    #[test]
    fn budget_takes_copies_until_full() {
        let counts = RepackCounts::default();
        let memory = RepackMemory::Bytes(100);
        assert!(counts.reserve(60, memory));
        assert!(!counts.reserve(50, memory));
        assert!(counts.reserve(40, memory));
        assert!(!counts.reserve(1, memory));
        assert_eq!(counts.declined(), (2, 51));
        counts.unreserve(40);
        assert!(counts.reserve(40, memory));
        assert!(!counts.reserve(usize::MAX, memory));
    }
}
