//! Memory for weights that decode streams from DRAM once per token (repacked matrices, and the
//! tensors minerva-model converts at load): zeroed, the first byte on a 64-byte line, and from
//! [`MAPPED_MIN`] bytes on anonymous memory that Linux is asked to back with 2 MiB pages.
//!
//! With 4 KiB pages such a stream is slower: the L2 prefetchers stop at every page boundary and
//! each page costs a TLB walk. On an AMD EPYC Zen 4 a 1 GiB `u64` sum read 21.8 GB/s on one
//! thread with 4 KiB pages and 28.4 with huge pages, and Gemma 3 270M's repacked decode, whose
//! copies came from `calloc` (small pages where THP is `madvise`, the usual default), gained
//! 6–9 % from them (docs/benchmarks.md, "Huge pages for repacked matrices"). The advice is only
//! advice: where it is refused (another OS, THP `never`), the memory is the same with small
//! pages.

use std::ops::{Deref, DerefMut};

use memmap2::MmapMut;

/// From this size on the bytes are a mapping of their own (a huge page is 2 MiB; smaller
/// buffers gain nothing from one).
pub const MAPPED_MIN: usize = 2 << 20;

/// `len` bytes, zero until written, starting on a 64-byte line.
pub struct StreamedBytes(Storage);

enum Storage {
    /// Below [`MAPPED_MIN`]: `calloc`'s bytes and the offset of their first line.
    Heap { bytes: Vec<u8>, start: usize, len: usize },
    /// Anonymous pages (page-aligned), advised to be huge.
    Mapped(MmapMut),
}

impl StreamedBytes {
    /// `len` zero bytes, or `None` where they cannot be allocated. Nothing is written: the pages
    /// are faulted in (huge ones, advised before the first write) by whichever threads fill
    /// them — for a repacked matrix the pool's, in parallel (a zeroing `memset` on one thread
    /// was a quarter of the samples of a Llama 8B load).
    pub fn zeroed(len: usize) -> Option<StreamedBytes> {
        if len >= MAPPED_MIN
            && let Ok(map) = MmapMut::map_anon(len)
        {
            advise_huge_pages(&map);
            return Some(StreamedBytes(Storage::Mapped(map)));
        }
        // Alignment 1, so that the zeroed bytes are `calloc`'s (fresh pages, not a `memset`);
        // 63 more let the bytes start on a line.
        let bytes = bytemuck::allocation::try_zeroed_vec::<u8>(len.checked_add(63)?).ok()?;
        let start = bytes.as_ptr().align_offset(64).min(63);
        Some(StreamedBytes(Storage::Heap { bytes, start, len }))
    }

    /// Whether the bytes are a mapping of their own, advised to use huge pages.
    pub fn is_mapped(&self) -> bool {
        matches!(self.0, Storage::Mapped(_))
    }
}

impl Deref for StreamedBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match &self.0 {
            Storage::Heap { bytes, start, len } => &bytes[*start..*start + *len],
            Storage::Mapped(map) => map,
        }
    }
}

impl DerefMut for StreamedBytes {
    fn deref_mut(&mut self) -> &mut [u8] {
        match &mut self.0 {
            Storage::Heap { bytes, start, len } => &mut bytes[*start..*start + *len],
            Storage::Mapped(map) => map,
        }
    }
}

impl std::fmt::Debug for StreamedBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamedBytes").field("len", &self.len()).field("mapped", &self.is_mapped()).finish()
    }
}

/// Asks Linux for transparent huge pages over `map`; a refusal leaves it as it was.
#[cfg(target_os = "linux")]
fn advise_huge_pages(map: &MmapMut) {
    // An error (no THP support, or `never`) only means 4 KiB pages.
    let _ = map.advise(memmap2::Advice::HugePage);
}

#[cfg(not(target_os = "linux"))]
fn advise_huge_pages(_map: &MmapMut) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_are_zeroed_start_on_a_line_and_hold_what_was_written() {
        for len in [0, 1, 4097, MAPPED_MIN - 1, MAPPED_MIN, 3 * MAPPED_MIN + 5] {
            let mut bytes = StreamedBytes::zeroed(len).unwrap();
            assert_eq!(bytes.is_mapped(), len >= MAPPED_MIN, "{len} bytes");
            assert_eq!(bytes.len(), len);
            assert!(bytes.iter().all(|&b| b == 0), "{len} bytes start zeroed");
            if len > 0 {
                assert_eq!(bytes.as_ptr() as usize % 64, 0, "{len} bytes");
            }
            for (i, b) in bytes.iter_mut().enumerate() {
                *b = (i % 251) as u8;
            }
            assert!(bytes.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8), "{len} bytes");
        }
    }

    /// The `VmFlags` of the mapping holding `at` (`/proc/self/smaps`).
    #[cfg(target_os = "linux")]
    fn vm_flags(at: usize) -> Vec<String> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut in_mapping = false;
        for line in smaps.lines() {
            if let Some((range, _)) = line.split_once(' ')
                && let Some((start, end)) = range.split_once('-')
                && let (Ok(start), Ok(end)) = (usize::from_str_radix(start, 16), usize::from_str_radix(end, 16))
            {
                in_mapping = (start..end).contains(&at);
            } else if in_mapping && let Some(flags) = line.strip_prefix("VmFlags:") {
                return flags.split_whitespace().map(str::to_owned).collect();
            }
        }
        panic!("no mapping holds {at:#x} in /proc/self/smaps");
    }

    /// Linux marks a mapping advised `MADV_HUGEPAGE` with `hg` in its `VmFlags`; where a mapping
    /// advised here directly gets it (not where the kernel has no transparent huge pages, nor
    /// under `qemu-aarch64`, which takes the advice and passes none of it on), the bytes' mapping
    /// must carry it too.
    #[cfg(target_os = "linux")]
    #[test]
    fn mapped_bytes_are_advised_huge_pages_where_linux_takes_the_advice() {
        let probe = MmapMut::map_anon(2 * MAPPED_MIN).unwrap();
        let honoured = probe.advise(memmap2::Advice::HugePage).is_ok()
            && vm_flags(probe.as_ptr() as usize).iter().any(|f| f == "hg");
        if !honoured {
            return; // nothing here to check the advice by
        }
        let bytes = StreamedBytes::zeroed(2 * MAPPED_MIN).unwrap();
        let flags = vm_flags(bytes.as_ptr() as usize);
        assert!(flags.iter().any(|f| f == "hg"), "VmFlags {flags:?}");
    }
}
