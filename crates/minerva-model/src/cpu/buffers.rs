//! Recycled activation buffers. Every CPU op returns a fresh tensor, and a prefill's are
//! megabytes: allocated anew, each was a `mmap` (or a heap grown and trimmed again) whose pages
//! the kernel zeroes and faults in on first write, every op of every layer. A dropped
//! [`super::CpuTensor`] hands its buffer back here and the next tensor of that size or smaller
//! takes it, so after the first layer a forward step allocates nothing (docs/benchmarks.md).
//!
//! The free buffers are per thread (tensors are made and dropped on the thread driving the
//! model; the pool's workers only fill slices of them) and at most [`KEEP`]: what is kept is at
//! most the largest set of tensors one step frees, memory the step had in use anyway.

use std::cell::RefCell;

/// Free buffers kept per thread: more than a layer's tensors (about ten are alive at once).
const KEEP: usize = 24;

thread_local! {
    static FREE: RefCell<Vec<Vec<f32>>> = const { RefCell::new(Vec::new()) };
}

/// `len` zeros, in the smallest free buffer that holds them (a new one if none does).
pub(super) fn zeros(len: usize) -> Vec<f32> {
    let mut buffer = stale(len);
    buffer.fill(0.0);
    buffer
}

/// `len` values left from an earlier tensor (zeros where there were none): for outputs that are
/// written in full, which need no clearing.
pub(super) fn stale(len: usize) -> Vec<f32> {
    match take(len) {
        Some(mut buffer) => {
            buffer.truncate(len);
            buffer.resize(len, 0.0);
            buffer
        }
        None => vec![0.0; len],
    }
}

/// The smallest free buffer of capacity `len` or more, first among those that held `len` values
/// or more (whose values a stale tensor takes as they are, where one that held fewer is zeroed
/// past them: a prefill's 2–3 % of serial `memset` where sizes alternate between layers' ops).
fn take(len: usize) -> Option<Vec<f32>> {
    FREE.with_borrow_mut(|free| {
        let best = free
            .iter()
            .enumerate()
            .filter(|(_, b)| b.capacity() >= len)
            .min_by_key(|(_, b)| (b.len() < len, b.capacity()))
            .map(|(i, _)| i)?;
        Some(free.swap_remove(best))
    })
}

/// A copy of `values` in a recycled buffer.
pub(super) fn copy_of(values: &[f32]) -> Vec<f32> {
    let mut buffer = stale(values.len());
    buffer.copy_from_slice(values);
    buffer
}

/// Takes `buffer` back for later tensors; past [`KEEP`] free ones, the smallest goes.
pub(super) fn recycle(buffer: Vec<f32>) {
    if buffer.capacity() == 0 {
        return;
    }
    // `try_with`: a tensor dropped while its thread's locals are torn down simply frees.
    let _ = FREE.try_with(|free| {
        let Ok(mut free) = free.try_borrow_mut() else { return };
        free.push(buffer);
        if free.len() > KEEP {
            let smallest = (0..free.len()).min_by_key(|&i| free[i].capacity()).expect("not empty");
            free.swap_remove(smallest);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recycled_buffer_is_reused_and_comes_back_zeroed() {
        let mut first = zeros(1000);
        first.iter_mut().for_each(|v| *v = 7.0);
        let address = first.as_ptr();
        recycle(first);
        let second = zeros(600);
        assert_eq!(second.as_ptr(), address, "the free buffer was not reused");
        assert_eq!(second, vec![0.0; 600]);
        recycle(second);
        let copy = copy_of(&[1.0, 2.0, 3.0]);
        assert_eq!(copy, [1.0, 2.0, 3.0]);
        assert_eq!(copy.as_ptr(), address);
        recycle(copy);
        let stale = stale(2000);
        assert_eq!(stale.len(), 2000);
        assert_ne!(stale.as_ptr(), address, "too small to reuse");
    }

    #[test]
    fn the_smallest_buffer_that_fits_is_taken_and_at_most_keep_are_kept() {
        for len in (1..=KEEP + 5).map(|i| 100 * i) {
            recycle(Vec::with_capacity(len));
        }
        FREE.with_borrow(|free| {
            assert_eq!(free.len(), KEEP);
            assert!(free.iter().all(|b| b.capacity() > 500), "the smallest should have gone");
        });
        let taken = zeros(1050);
        assert!((1100..1200).contains(&taken.capacity()), "took {} for 1050", taken.capacity());
    }

    #[test]
    fn a_buffer_that_held_as_many_values_is_taken_before_a_smaller_one_to_zero() {
        let mut short = Vec::with_capacity(600);
        short.resize(100, 1.0);
        let short_at = short.as_ptr();
        recycle(short);
        let full = vec![2.0; 800];
        let full_at = full.as_ptr();
        recycle(full);
        let taken = stale(500);
        assert_eq!(taken.as_ptr(), full_at, "the buffer that held 800 values should serve 500 without zeroing");
        assert_eq!(taken, vec![2.0; 500]);
        let next = stale(500);
        assert_eq!(next.as_ptr(), short_at, "then the smallest that fits");
        assert_eq!(&next[..100], &[1.0; 100]);
        assert_eq!(&next[100..], &[0.0; 400]);
    }
}
