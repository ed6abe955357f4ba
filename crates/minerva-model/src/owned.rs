//! Buffers for the tensors converted at load (MLX affine matrices and split MXFP4 on a backend
//! that does not read them in place): [`minerva_quant::StreamedBytes`], which from 2 MiB on is
//! anonymous memory that Linux is asked to back with 2 MiB pages.
//!
//! Decode reads every byte of these buffers once per token, as a stream. With 4 KiB pages a thread
//! streamed a 1 GiB buffer at about two thirds of the rate it reached once the same buffer had
//! transparent huge pages (docs/benchmarks-history.md, "Huge pages for converted tensors"); the model's own
//! mapping already gets large pages where the kernel's page cache keeps large folios.

use minerva_quant::StreamedBytes;

use crate::backend::ByteSource;

/// A converted tensor's bytes, owned by the weight that reads them.
pub(crate) enum OwnedBytes {
    /// Bytes made elsewhere.
    Vec(Vec<u8>),
    /// Zeroed bytes filled here (huge pages from 2 MiB on).
    Streamed(StreamedBytes),
}

impl OwnedBytes {
    /// `len` zero bytes, to be filled through [`OwnedBytes::as_mut`]: [`StreamedBytes`], or a
    /// vector where those cannot be allocated.
    pub(crate) fn zeroed(len: usize) -> OwnedBytes {
        StreamedBytes::zeroed(len).map_or_else(|| OwnedBytes::Vec(vec![0; len]), OwnedBytes::Streamed)
    }

    /// The bytes, to fill.
    pub(crate) fn as_mut(&mut self) -> &mut [u8] {
        match self {
            OwnedBytes::Vec(v) => v,
            OwnedBytes::Streamed(s) => s,
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
            OwnedBytes::Streamed(s) => s,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_and_large_buffers_hold_what_was_written() {
        const MAPPED_MIN: usize = minerva_quant::streamed::MAPPED_MIN;
        for len in [0, 17, MAPPED_MIN - 1, MAPPED_MIN, MAPPED_MIN + 4097] {
            let mut buf = OwnedBytes::zeroed(len);
            assert!(matches!(&buf, OwnedBytes::Streamed(s) if s.is_mapped() == (len >= MAPPED_MIN)), "len {len}");
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
