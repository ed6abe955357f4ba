//! Storage whose values start on a 64-byte cache line, for the KV cache: attention's kernels
//! read each key and value row in 32-byte vectors, and rows that start mid-line (as `Vec<f32>`'s
//! 16-byte-aligned allocations do) split every other load across two lines.

use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};

/// One cache line of bytes.
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// `len` values of `T`, all bits zero at first, the first at a 64-byte boundary.
pub(super) struct LineAligned<T> {
    lines: Vec<Line>,
    len: usize,
    values: PhantomData<T>,
}

impl<T: bytemuck::Pod> LineAligned<T> {
    /// `len` zero values, or `None` if their bytes overflow `usize` or cannot be allocated.
    /// Allocated zeroed (`calloc`: untouched pages of a large cache cost no memory until used),
    /// as `vec![0.0f32; len]` was.
    pub(super) fn zeroed(len: usize) -> Option<Self> {
        let bytes = len.checked_mul(size_of::<T>())?;
        let lines = bytemuck::allocation::try_zeroed_vec(bytes.div_ceil(64)).ok()?;
        Some(LineAligned { lines, len, values: PhantomData })
    }

    /// Resized to `len` values (new ones zero; the first `len` kept).
    pub(super) fn resize(&mut self, len: usize) {
        let bytes = len.checked_mul(size_of::<T>()).expect("a buffer of values that exist in memory");
        self.lines.resize(bytes.div_ceil(64), Line([0; 64]));
        self.len = len;
    }
}

impl<T: bytemuck::Pod> Default for LineAligned<T> {
    fn default() -> Self {
        LineAligned { lines: Vec::new(), len: 0, values: PhantomData }
    }
}

impl<T: bytemuck::Pod> Deref for LineAligned<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        &bytemuck::cast_slice(&self.lines)[..self.len]
    }
}

impl<T: bytemuck::Pod> DerefMut for LineAligned<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut bytemuck::cast_slice_mut(&mut self.lines)[..self.len]
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
        assert!(LineAligned::<half::f16>::zeroed(usize::MAX).is_none());
    }
}
