//! Storage whose values start on a 64-byte cache line, for the KV cache: attention's kernels
//! read each key and value row in 32-byte vectors, and rows that start mid-line (as `Vec<f32>`'s
//! 16-byte-aligned allocations do) split every other load across two lines.

use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};

/// Sixteen bytes: the alignment the system allocator's `calloc` gives (std asks `calloc` for
/// zeroed memory only up to that alignment, and zeroes larger alignments by hand, touching every
/// page).
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C, align(16))]
struct Chunk([u8; 16]);

/// Bytes of slack before the first line boundary, at most.
const SLACK: usize = 64 - 16;

/// `len` values of `T`, all bits zero at first, the first at a 64-byte boundary.
pub(super) struct LineAligned<T> {
    chunks: Vec<Chunk>,
    /// Byte offset of the first value in `chunks` (a multiple of 16, below 64).
    start: usize,
    len: usize,
    values: PhantomData<T>,
}

impl<T: bytemuck::Pod> LineAligned<T> {
    /// `len` zero values, or `None` if their bytes overflow `usize` or cannot be allocated.
    /// Allocated zeroed through `calloc` (16-byte aligned, the first line found inside), so the
    /// untouched pages of a large KV pool cost no memory until a sequence writes them.
    pub(super) fn zeroed(len: usize) -> Option<Self> {
        let bytes = len.checked_mul(size_of::<T>())?.checked_add(SLACK)?;
        let chunks = bytemuck::allocation::try_zeroed_vec::<Chunk>(bytes.div_ceil(16)).ok()?;
        let start = (chunks.as_ptr() as usize).wrapping_neg() % 64;
        Some(LineAligned { chunks, start, len, values: PhantomData })
    }

    /// Resized to `len` values (new ones zero; the first `len` kept), in the memory it has where
    /// that holds them: a buffer shrunk by one block and grown again by the next allocates once.
    pub(super) fn resize(&mut self, len: usize) {
        if len <= self.len {
            self.len = len;
            return;
        }
        if len <= self.capacity() {
            let old = self.len;
            self.len = len;
            self[old..].fill(T::zeroed());
            return;
        }
        let mut grown = LineAligned::<T>::zeroed(len).expect("a buffer of values that exist in memory");
        grown[..self.len].copy_from_slice(self);
        *self = grown;
    }

    /// Values the allocation holds from the first line on.
    fn capacity(&self) -> usize {
        (self.chunks.len() * 16).saturating_sub(self.start) / size_of::<T>()
    }
}

impl<T: bytemuck::Pod> Default for LineAligned<T> {
    fn default() -> Self {
        LineAligned { chunks: Vec::new(), start: 0, len: 0, values: PhantomData }
    }
}

impl<T: bytemuck::Pod> Deref for LineAligned<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        let bytes: &[u8] = bytemuck::cast_slice(&self.chunks);
        bytemuck::cast_slice(&bytes[self.start.min(bytes.len())..][..self.len * size_of::<T>()])
    }
}

impl<T: bytemuck::Pod> DerefMut for LineAligned<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut self.chunks);
        let start = self.start.min(bytes.len());
        bytemuck::cast_slice_mut(&mut bytes[start..][..self.len * size_of::<T>()])
    }
}

#[cfg(test)]
mod tests {
    use super::LineAligned;

    #[test]
    fn values_start_on_a_line_and_resizing_keeps_them() {
        let mut values = LineAligned::<f32>::zeroed(5).expect("small");
        assert_eq!((values.as_ptr() as usize % 64, values.len()), (0, 5));
        values.copy_from_slice(&[1.0, 2.0, 3.0, 4.0, 5.0]);
        values.resize(40);
        assert_eq!(values.as_ptr() as usize % 64, 0);
        assert_eq!(&values[..6], &[1.0, 2.0, 3.0, 4.0, 5.0, 0.0]);
        assert_eq!(values.len(), 40);
        values.resize(3);
        assert_eq!(&values[..], &[1.0, 2.0, 3.0]);
        // Grown again within its memory: the same values, zeros after them, no new allocation.
        let address = values.as_ptr();
        values.resize(6);
        assert_eq!((&values[..], values.as_ptr()), (&[1.0, 2.0, 3.0, 0.0, 0.0, 0.0][..], address));
        assert!(LineAligned::<half::f16>::zeroed(usize::MAX).is_none());
    }
}
