//! Buffers for the tensors converted at load (MLX affine matrices and split MXFP4 on a backend
//! that does not read them in place):
//! anonymous memory that Linux is asked to back with 2 MiB pages.
//!
//! Decode reads every byte of these buffers once per token, as a stream. With 4 KiB pages a thread
//! streamed a 1 GiB buffer at about two thirds of the rate it reached once the same buffer had
//! transparent huge pages (docs/benchmarks-history.md, "Huge pages for converted tensors"); the model's own
//! mapping already gets large pages where the kernel's page cache keeps large folios. The advice
//! is only advice: where it is refused (another OS, `transparent_hugepage=never`), the buffer is
//! the same memory with small pages.

use memmap2::MmapMut;

use crate::backend::ByteSource;

/// Below this a buffer is an ordinary vector: huge pages are 2 MiB, and the small biases and
/// norms gain nothing from a mapping of their own.
const MAPPED_MIN: usize = 2 << 20;

/// A converted tensor's bytes, owned by the weight that reads them.
pub(crate) enum OwnedBytes {
    /// A small buffer.
    Vec(Vec<u8>),
    /// Anonymous memory advised to use huge pages.
    Mapped(MmapMut),
}

impl OwnedBytes {
    /// `len` zero bytes, to be filled through [`OwnedBytes::as_mut`]: anonymous memory advised
    /// to use huge pages from [`MAPPED_MIN`] bytes on (before anything is written, so that the
    /// first writes already fault in huge pages), a vector below that or where mapping fails.
    pub(crate) fn zeroed(len: usize) -> OwnedBytes {
        if len >= MAPPED_MIN
            && let Ok(map) = MmapMut::map_anon(len)
        {
            advise_huge_pages(&map);
            return OwnedBytes::Mapped(map);
        }
        OwnedBytes::Vec(vec![0; len])
    }

    /// The bytes, to fill.
    pub(crate) fn as_mut(&mut self) -> &mut [u8] {
        match self {
            OwnedBytes::Vec(v) => v,
            OwnedBytes::Mapped(m) => m,
        }
    }
}

impl From<Vec<u8>> for OwnedBytes {
    fn from(bytes: Vec<u8>) -> OwnedBytes {
        OwnedBytes::Vec(bytes)
    }
}

impl ByteSource for OwnedBytes {
    fn bytes(&self) -> &[u8] {
        match self {
            OwnedBytes::Vec(v) => v,
            OwnedBytes::Mapped(m) => m,
        }
    }
}

/// Asks Linux for transparent huge pages over `map`; a refusal leaves it as it was.
#[cfg(target_os = "linux")]
fn advise_huge_pages(map: &MmapMut) {
    // An error (no THP support, or `never`) only means 4 KiB pages, which is what the buffer
    // would have had anyway.
    let _ = map.advise(memmap2::Advice::HugePage);
}

#[cfg(not(target_os = "linux"))]
fn advise_huge_pages(_map: &MmapMut) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_and_large_buffers_hold_what_was_written() {
        for len in [0, 17, MAPPED_MIN - 1, MAPPED_MIN, MAPPED_MIN + 4097] {
            let mut buf = OwnedBytes::zeroed(len);
            assert_eq!(matches!(buf, OwnedBytes::Mapped(_)), len >= MAPPED_MIN, "len {len}");
            assert!(buf.bytes().iter().all(|&b| b == 0), "len {len} starts zeroed");
            for (i, b) in buf.as_mut().iter_mut().enumerate() {
                *b = (i % 251) as u8;
            }
            let bytes = buf.bytes();
            assert_eq!(bytes.len(), len);
            assert!(bytes.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8), "len {len}");
        }
    }
}
