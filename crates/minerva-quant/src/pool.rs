//! A compute pool for the many short parallel loops of a forward pass.
//!
//! A decode step runs a few hundred small parallel loops (one per matrix product, attention,
//! RoPE…), each a few microseconds long. A work-stealing pool whose idle workers sleep (rayon)
//! pays a wake-up per loop, and on a busy machine a worker that is slow to wake stalls the join;
//! the second thread then gained 1.1–1.6× where llama.cpp's spinning OpenMP workers gain 2×.
//! [`ComputePool`] is built for that pattern instead:
//!
//! * the calling thread runs tasks too (no hand-off to the pool and back);
//! * idle workers spin on one atomic word for a while ([`SPIN_FOR`]) before they sleep, so the
//!   next loop of the same step finds them awake;
//! * tasks are claimed one by one from an atomic counter, so a worker that is descheduled takes
//!   fewer tasks instead of holding the others up — unless it is inside one, which the caller
//!   then waits for;
//! * a loop started inside a task, or while another thread's loop holds the pool, runs serially
//!   on its own thread (no deadlock, no oversubscription).
//!
//! ```
//! use std::sync::atomic::{AtomicUsize, Ordering};
//! use minerva_quant::ComputePool;
//!
//! let pool = ComputePool::new(2)?;
//! let sum = AtomicUsize::new(0);
//! pool.for_each(100, |i| {
//!     sum.fetch_add(i, Ordering::Relaxed);
//! });
//! assert_eq!(sum.into_inner(), 4950);
//! // `install` makes the pool the one `matmul` and `for_each_task` use on this thread.
//! assert_eq!(pool.install(minerva_quant::pool::current_threads), 2);
//! # Ok::<(), std::io::Error>(())
//! ```

// The unsafe things here: a loop body shared with the workers by raw pointer (its lifetime
// erased: the loop does not return while a worker can still call it), and disjoint chunks of one
// slice handed to different tasks. Without them every loop would allocate (boxed 'static bodies)
// or copy its output; a decode step runs hundreds of loops.
#![allow(unsafe_code)]

use std::any::Any;
use std::cell::{Cell, RefCell, UnsafeCell};
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long an idle worker spins for the next loop before it sleeps: longer than the serial gap
/// between two loops of a step, short enough that an idle process stops burning a core at once.
pub const SPIN_FOR: Duration = Duration::from_micros(500);

/// The state word: workers inside the current loop (low bits), whether it still admits workers,
/// and the loop's epoch (high bits), so that one compare-and-swap both checks that a loop is
/// still the one a worker saw and registers the worker in it.
const COUNT_BITS: u32 = 16;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;
const OPEN: u64 = 1 << COUNT_BITS;
const EPOCH_SHIFT: u32 = COUNT_BITS + 1;

/// The most threads a pool may have (the state word counts workers in 16 bits).
pub const MAX_THREADS: usize = 1024;

/// A loop body with its lifetime erased: valid while its loop is open or has workers inside.
type TaskFn = *const (dyn Fn(usize) + Sync + 'static);

struct Shared {
    state: AtomicU64,
    /// The current loop's body; written only by the thread holding `submit` while no worker is
    /// inside a loop and none can enter (closed), read by workers after they entered.
    task: UnsafeCell<TaskFn>,
    tasks: AtomicUsize,
    next: AtomicUsize,
    panic: Mutex<Option<Box<dyn Any + Send>>>,
    /// Held by the thread running a loop: one loop at a time.
    submit: Mutex<()>,
    sleepers: AtomicUsize,
    sleep: Mutex<()>,
    wake: Condvar,
    shutdown: AtomicBool,
}

// SAFETY: `task` is the only field that is not `Sync` by itself. It is written only by the
// thread holding `submit`, while the state word is closed with no worker inside (so no reader),
// and published by the release store that opens the loop; workers read it only after their
// acquire compare-and-swap entered that loop, and the writer waits for them to leave before it
// writes again or returns.
unsafe impl Sync for Shared {}
// SAFETY: the raw pointer in `task` points at a `Sync` closure and is dereferenced only under
// the protocol above, whichever thread holds it.
unsafe impl Send for Shared {}

/// A fixed set of threads that run `for_each` loops, the calling thread among them.
pub struct ComputePool {
    shared: Arc<Shared>,
    threads: usize,
    workers: Vec<JoinHandle<()>>,
    /// What `install` makes current, made once: a forward step installs the pool per op.
    installed: Arc<PoolRef>,
}

thread_local! {
    /// The pool [`ComputePool::install`] made current on this thread.
    static CURRENT: RefCell<Option<Arc<PoolRef>>> = const { RefCell::new(None) };
    /// Whether this thread is running a task of some loop (a nested loop then runs serially).
    static IN_TASK: Cell<bool> = const { Cell::new(false) };
}

/// What `install` keeps in the thread-local: the shared state and the thread count.
struct PoolRef {
    shared: Arc<Shared>,
    threads: usize,
}

impl ComputePool {
    /// A pool of `threads` threads in all: the caller of each loop and `threads - 1` workers
    /// (0 and 1 both mean the caller alone). More than [`MAX_THREADS`] is an error, as is a
    /// thread the system refuses to start.
    pub fn new(threads: usize) -> std::io::Result<ComputePool> {
        let threads = threads.max(1);
        if threads > MAX_THREADS {
            return Err(std::io::Error::other(format!("{threads} threads: at most {MAX_THREADS}")));
        }
        let shared = Arc::new(Shared {
            state: AtomicU64::new(0),
            task: UnsafeCell::new(&no_task as &(dyn Fn(usize) + Sync) as TaskFn),
            tasks: AtomicUsize::new(0),
            next: AtomicUsize::new(0),
            panic: Mutex::new(None),
            submit: Mutex::new(()),
            sleepers: AtomicUsize::new(0),
            sleep: Mutex::new(()),
            wake: Condvar::new(),
            shutdown: AtomicBool::new(false),
        });
        let installed = Arc::new(PoolRef { shared: Arc::clone(&shared), threads });
        let mut pool = ComputePool { shared, threads, workers: Vec::with_capacity(threads - 1), installed };
        for i in 1..threads {
            let shared = Arc::clone(&pool.shared);
            let handle =
                std::thread::Builder::new().name(format!("minerva-compute-{i}")).spawn(move || worker(&shared))?;
            pool.workers.push(handle);
        }
        Ok(pool)
    }

    /// The process-wide pool, one thread per available core, started at the first call.
    /// [`current_threads`] and [`for_each_task`] use it where no pool was installed.
    pub fn global() -> &'static ComputePool {
        static GLOBAL: OnceLock<ComputePool> = OnceLock::new();
        GLOBAL.get_or_init(|| {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get()).min(MAX_THREADS);
            // A system that cannot start a thread still runs every loop on the caller.
            ComputePool::new(cores).unwrap_or_else(|_| ComputePool::new(1).expect("a 1-thread pool starts no thread"))
        })
    }

    /// The number of threads, the caller included.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Runs `f` with this pool as the current one on this thread: [`for_each_task`],
    /// [`current_threads`] and the matrix products inside `f` use it. `f` runs on the calling
    /// thread (nothing is handed over).
    pub fn install<R>(&self, f: impl FnOnce() -> R) -> R {
        let previous = CURRENT.with(|c| c.replace(Some(Arc::clone(&self.installed))));
        struct Restore(Option<Arc<PoolRef>>);
        impl Drop for Restore {
            fn drop(&mut self) {
                let previous = self.0.take();
                CURRENT.with(|c| *c.borrow_mut() = previous);
            }
        }
        let _restore = Restore(previous);
        f()
    }

    /// Runs `f(0)`, …, `f(tasks - 1)` on the pool's threads and returns when all have run. Each
    /// task runs once, in no particular order or thread. A panic in a task is raised again here,
    /// after every other task has finished.
    pub fn for_each(&self, tasks: usize, f: impl Fn(usize) + Sync) {
        run_loop(&self.shared, self.threads, tasks, &f);
    }
}

impl Drop for ComputePool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        {
            let _sleep = self.shared.sleep.lock().unwrap_or_else(|e| e.into_inner());
            self.shared.wake.notify_all();
        }
        for worker in self.workers.drain(..) {
            // A worker never panics (tasks run under `catch_unwind`); nothing to report if it did.
            let _ = worker.join();
        }
    }
}

/// The thread count of the pool loops on this thread use: 1 inside a task (loops there run
/// serially), else the installed pool's, else [`ComputePool::global`]'s.
pub fn current_threads() -> usize {
    if IN_TASK.with(Cell::get) {
        return 1;
    }
    CURRENT.with(|c| c.borrow().as_ref().map(|p| p.threads)).unwrap_or_else(|| ComputePool::global().threads())
}

/// [`ComputePool::for_each`] on the current pool (see [`current_threads`]).
pub fn for_each_task(tasks: usize, f: impl Fn(usize) + Sync) {
    // One task (a decode's row-wise step, a small conversion) needs no pool: not even a look at
    // which one is current, which clones its `Arc`.
    if tasks <= 1 {
        if tasks == 1 {
            run_serially(1, &f);
        }
        return;
    }
    let installed = CURRENT.with(|c| c.borrow().clone());
    match installed {
        Some(pool) => run_loop(&pool.shared, pool.threads, tasks, &f),
        None => ComputePool::global().for_each(tasks, f),
    }
}

/// [`for_each_task`] over the chunks of `data`: task `i` gets `data[i * chunk_len..]`, at most
/// `chunk_len` values (the last chunk may be shorter), each chunk to one task.
pub fn for_each_chunk_mut<T: Send>(data: &mut [T], chunk_len: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    let chunk_len = chunk_len.max(1);
    let len = data.len();
    let chunks = SharedSlice(data.as_mut_ptr());
    for_each_task(len.div_ceil(chunk_len), |i| {
        let start = i * chunk_len;
        let count = chunk_len.min(len - start);
        // SAFETY: `start + count <= len`, and each task index runs once, so the chunks handed
        // out are disjoint parts of `data`, which stays mutably borrowed until the loop returns.
        let chunk = unsafe { std::slice::from_raw_parts_mut(chunks.at(start), count) };
        f(i, chunk);
    });
}

/// [`for_each_task`] over blocks of columns of a row-major matrix (`data`, rows of `row_len`):
/// task `i` may write columns `i * block_cols..` (at most `block_cols` of them) of every row, so
/// tasks that each produce some columns of all rows (a matrix product split by weight rows, its
/// output transposed) write straight into place.
pub fn for_each_column_block_mut<T: Send>(
    data: &mut [T],
    row_len: usize,
    block_cols: usize,
    f: impl Fn(usize, ColumnBlock<'_, T>) + Sync,
) {
    let rows = data.len() / row_len.max(1);
    for_each_tile_mut(data, row_len, rows.max(1), block_cols, |_, i, block| f(i, block));
}

/// [`for_each_task`] over tiles of a row-major matrix (`data`, rows of `row_len`): the rows in
/// groups of `group_rows` (the last may be shorter), the columns in blocks of `block_cols`; task
/// `(g, i)` may write columns `i * block_cols..` (at most `block_cols`) of the rows of group `g`.
/// Tasks run group by group (every block of group 0 is claimed before any of group 1), in one
/// loop: a thread done with its last block of one group goes on to the next group instead of
/// waiting for the others at the end of each.
pub fn for_each_tile_mut<T: Send>(
    data: &mut [T],
    row_len: usize,
    group_rows: usize,
    block_cols: usize,
    f: impl Fn(usize, usize, ColumnBlock<'_, T>) + Sync,
) {
    let (row_len, group_rows, block_cols) = (row_len.max(1), group_rows.max(1), block_cols.max(1));
    let rows = data.len() / row_len;
    let blocks = row_len.div_ceil(block_cols);
    let base = SharedSlice(data.as_mut_ptr());
    for_each_task(rows.div_ceil(group_rows) * blocks, |task| {
        let (group, i) = (task / blocks, task % blocks);
        let start = i * block_cols;
        let width = block_cols.min(row_len - start);
        let first_row = group * group_rows;
        let end_row = (first_row + group_rows).min(rows);
        f(
            group,
            i,
            ColumnBlock { base: base.at(0), row_len, first_row, end_row, start, width, data: std::marker::PhantomData },
        );
    });
}

/// Columns `start..start + width` of rows `first_row..end_row` of a row-major matrix: one task's
/// part in [`for_each_tile_mut`] (every row in [`for_each_column_block_mut`]).
pub struct ColumnBlock<'a, T> {
    base: *mut T,
    row_len: usize,
    first_row: usize,
    end_row: usize,
    start: usize,
    width: usize,
    data: std::marker::PhantomData<&'a mut [T]>,
}

impl<T> ColumnBlock<'_, T> {
    /// The rows the block may write (row indices of the whole matrix).
    pub fn rows(&self) -> std::ops::Range<usize> {
        self.first_row..self.end_row
    }

    /// The first column of the block.
    pub fn first_column(&self) -> usize {
        self.start
    }

    /// Columns in the block.
    pub fn width(&self) -> usize {
        self.width
    }

    /// The block's part of row `r` (`width` values). Panics if `r` is not one of its rows.
    pub fn row_mut(&mut self, r: usize) -> &mut [T] {
        assert!(self.rows().contains(&r), "row {r} outside {:?}", self.rows());
        // SAFETY: `r` is below the matrix's row count and `start + width <= row_len`, so the range
        // lies within the slice `for_each_tile_mut` borrowed mutably for the whole loop; blocks of
        // different tasks cover disjoint columns or disjoint rows, and `&mut self` hands out one
        // row of this block at a time.
        unsafe { std::slice::from_raw_parts_mut(self.base.add(r * self.row_len + self.start), self.width) }
    }

    /// The block's parts of rows `rows`, each `width` values, all at once (disjoint: one per
    /// row). Panics if `rows` does not lie within the block's rows.
    pub fn rows_mut(&mut self, rows: std::ops::Range<usize>) -> impl Iterator<Item = &mut [T]> + '_ {
        let own = self.rows();
        assert!(
            own.start <= rows.start && rows.start <= rows.end && rows.end <= own.end,
            "rows {rows:?} outside {own:?}"
        );
        let (base, row_len, start, width) = (self.base, self.row_len, self.start, self.width);
        rows.map(move |r| {
            // SAFETY: as in `row_mut`, each row's part lies within the borrowed slice and no other
            // task's block covers it; distinct rows give disjoint parts, and the iterator borrows
            // `self` mutably for as long as any of them lives.
            unsafe { std::slice::from_raw_parts_mut(base.add(r * row_len + start), width) }
        })
    }

    /// Rows `rows` whole, as one slice, when the block spans every column (one task per row
    /// group); `None` otherwise. Panics if `rows` does not lie within the block's rows.
    pub fn whole_rows_mut(&mut self, rows: std::ops::Range<usize>) -> Option<&mut [T]> {
        let own = self.rows();
        assert!(
            own.start <= rows.start && rows.start <= rows.end && rows.end <= own.end,
            "rows {rows:?} outside {own:?}"
        );
        if self.start != 0 || self.width != self.row_len {
            return None;
        }
        let offset = rows.start * self.row_len;
        // SAFETY: the block is every column of its rows, so no other task holds a part of them,
        // and the rows lie within the slice `for_each_tile_mut` borrowed mutably for the whole
        // loop; `&mut self` hands out one such slice at a time.
        Some(unsafe { std::slice::from_raw_parts_mut(self.base.add(offset), rows.len() * self.row_len) })
    }
}

/// The base pointer of a slice whose disjoint chunks go to different tasks.
struct SharedSlice<T>(*mut T);

impl<T> SharedSlice<T> {
    /// The pointer `offset` elements in (a method, so that closures capture the whole `Sync`
    /// wrapper rather than its raw-pointer field).
    fn at(&self, offset: usize) -> *mut T {
        // SAFETY: callers pass offsets within the slice the pointer came from.
        unsafe { self.0.add(offset) }
    }
}

// SAFETY: the wrapper only hands out disjoint chunks (see `for_each_chunk_mut`), and `T: Send`
// lets each chunk be used from another thread.
unsafe impl<T: Send> Sync for SharedSlice<T> {}

/// The body `task` holds before the first loop (never run).
fn no_task(_: usize) {}

/// Runs every task serially on this thread, marked as inside a task.
fn run_serially(tasks: usize, f: &(dyn Fn(usize) + Sync)) {
    let was = IN_TASK.with(|t| t.replace(true));
    let result = panic::catch_unwind(AssertUnwindSafe(|| (0..tasks).for_each(f)));
    IN_TASK.with(|t| t.set(was));
    if let Err(payload) = result {
        panic::resume_unwind(payload);
    }
}

fn run_loop(shared: &Shared, threads: usize, tasks: usize, f: &(dyn Fn(usize) + Sync)) {
    if tasks == 0 {
        return;
    }
    if threads == 1 || tasks == 1 || IN_TASK.with(Cell::get) {
        return run_serially(tasks, f);
    }
    // Another thread's loop holds the pool: run this one alone rather than wait for it.
    let Ok(_submit) = shared.submit.try_lock() else {
        return run_serially(tasks, f);
    };
    let state = shared.state.load(Ordering::Acquire);
    debug_assert!(state & (OPEN | COUNT_MASK) == 0, "a loop left open or with workers inside");
    // SAFETY: this thread holds `submit` and the last loop is closed with no worker inside (its
    // runner waited for them), so no thread reads `task` now. The erased lifetime is sound
    // because this function does not return before every worker that entered has left.
    unsafe {
        *shared.task.get() = std::mem::transmute::<*const (dyn Fn(usize) + Sync + '_), TaskFn>(f);
    }
    shared.tasks.store(tasks, Ordering::Relaxed);
    shared.next.store(0, Ordering::Relaxed);
    let epoch = (state >> EPOCH_SHIFT).wrapping_add(1);
    shared.state.store((epoch << EPOCH_SHIFT) | OPEN, Ordering::SeqCst);
    if shared.sleepers.load(Ordering::SeqCst) > 0 {
        let _sleep = shared.sleep.lock().unwrap_or_else(|e| e.into_inner());
        shared.wake.notify_all();
    }

    let was = IN_TASK.with(|t| t.replace(true));
    let mine = claim_tasks(shared, f);
    IN_TASK.with(|t| t.set(was));

    // Close the loop to latecomers, then wait for the workers inside to finish their tasks.
    shared.state.fetch_and(!OPEN, Ordering::AcqRel);
    let mut spins = 0u32;
    while shared.state.load(Ordering::Acquire) & COUNT_MASK != 0 {
        spins += 1;
        if spins < 1 << 12 {
            std::hint::spin_loop();
        } else {
            // A worker inside was descheduled mid-task: let it run.
            std::thread::yield_now();
        }
    }
    if let Some(payload) = mine {
        panic::resume_unwind(payload);
    }
    let theirs = shared.panic.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(payload) = theirs {
        panic::resume_unwind(payload);
    }
}

/// Runs tasks until none is left to claim; a panicking task does not stop the others (the loop
/// ends whole, then raises it). Returns the first panic.
fn claim_tasks(shared: &Shared, f: &(dyn Fn(usize) + Sync)) -> Option<Box<dyn Any + Send>> {
    let tasks = shared.tasks.load(Ordering::Relaxed);
    let mut first_panic = None;
    loop {
        let i = shared.next.fetch_add(1, Ordering::Relaxed);
        if i >= tasks {
            return first_panic;
        }
        if let Err(payload) = panic::catch_unwind(AssertUnwindSafe(|| f(i))) {
            first_panic.get_or_insert(payload);
        }
    }
}

fn worker(shared: &Shared) {
    IN_TASK.with(|t| t.set(true));
    let mut seen_epoch = 0u64;
    while let Some(state) = wait_for_loop(shared, seen_epoch) {
        seen_epoch = state >> EPOCH_SHIFT;
        if enter(shared, state) {
            // SAFETY: this worker entered an open loop (acquire), so `task` holds that loop's
            // body, published before the loop opened, and its runner waits for this worker to
            // leave before the body goes out of scope.
            let f = unsafe { &**shared.task.get() };
            if let Some(payload) = claim_tasks(shared, f) {
                shared.panic.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(payload);
            }
            shared.state.fetch_sub(1, Ordering::Release);
        }
    }
}

/// Registers this worker in the loop of `state` if that loop is still open; false if it closed
/// or another one began.
fn enter(shared: &Shared, mut state: u64) -> bool {
    let epoch = state >> EPOCH_SHIFT;
    loop {
        if state >> EPOCH_SHIFT != epoch || state & OPEN == 0 {
            return false;
        }
        match shared.state.compare_exchange_weak(state, state + 1, Ordering::Acquire, Ordering::Relaxed) {
            Ok(_) => return true,
            Err(now) => state = now,
        }
    }
}

/// Spins, then sleeps, until a loop newer than `seen_epoch` is open; `None` at shutdown.
fn wait_for_loop(shared: &Shared, seen_epoch: u64) -> Option<u64> {
    let is_new = |state: u64| state >> EPOCH_SHIFT != seen_epoch && state & OPEN != 0;
    let start = Instant::now();
    let mut spins = 0u32;
    loop {
        let state = shared.state.load(Ordering::Acquire);
        if is_new(state) {
            return Some(state);
        }
        if shared.shutdown.load(Ordering::Relaxed) {
            return None;
        }
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(256) && start.elapsed() > SPIN_FOR {
            break;
        }
        std::hint::spin_loop();
    }
    let mut guard = shared.sleep.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        shared.sleepers.fetch_add(1, Ordering::SeqCst);
        let state = shared.state.load(Ordering::SeqCst);
        if is_new(state) || shared.shutdown.load(Ordering::SeqCst) {
            shared.sleepers.fetch_sub(1, Ordering::SeqCst);
            return (!shared.shutdown.load(Ordering::SeqCst)).then_some(state);
        }
        guard = shared.wake.wait(guard).unwrap_or_else(|e| e.into_inner());
        shared.sleepers.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    #[test]
    fn every_task_runs_exactly_once() {
        let pool = ComputePool::new(3).unwrap();
        for tasks in [0, 1, 2, 3, 7, 100, 1000] {
            let counts: Vec<AtomicU32> = (0..tasks).map(|_| AtomicU32::new(0)).collect();
            pool.for_each(tasks, |i| {
                counts[i].fetch_add(1, Ordering::Relaxed);
            });
            assert!(counts.iter().all(|c| c.load(Ordering::Relaxed) == 1), "{tasks} tasks");
        }
    }

    #[test]
    fn column_blocks_cover_every_value_once() {
        let pool = ComputePool::new(3).unwrap();
        for (rows, row_len, block_cols) in [(5, 10, 4), (3, 7, 7), (1, 9, 2), (4, 8, 100), (0, 6, 2)] {
            let mut data = vec![0u32; rows * row_len];
            pool.install(|| {
                for_each_column_block_mut(&mut data, row_len, block_cols, |i, mut block| {
                    assert_eq!(block.first_column(), i * block_cols);
                    for r in block.rows() {
                        let first = block.first_column();
                        for (c, v) in block.row_mut(r).iter_mut().enumerate() {
                            *v += (r * row_len + first + c) as u32 + 1;
                        }
                    }
                });
            });
            let expected: Vec<u32> = (1..=rows * row_len).map(|v| v as u32).collect();
            assert_eq!(data, expected, "{rows} x {row_len} in blocks of {block_cols}");
        }
    }

    #[test]
    fn tiles_cover_every_value_once_and_lend_only_their_rows() {
        let pool = ComputePool::new(3).unwrap();
        for (rows, row_len, group_rows, block_cols) in [(7, 10, 3, 4), (8, 6, 4, 6), (5, 9, 100, 2), (1, 4, 1, 1)] {
            let mut data = vec![0u32; rows * row_len];
            pool.install(|| {
                for_each_tile_mut(&mut data, row_len, group_rows, block_cols, |g, i, mut block| {
                    assert_eq!(block.first_column(), i * block_cols);
                    assert_eq!(block.rows(), g * group_rows..((g + 1) * group_rows).min(rows));
                    let whole = block.whole_rows_mut(block.rows()).is_some();
                    assert_eq!(whole, block.width() == row_len, "a whole row only to a block of every column");
                    for r in block.rows() {
                        let first = block.first_column();
                        for (c, v) in block.row_mut(r).iter_mut().enumerate() {
                            *v += (r * row_len + first + c) as u32 + 1;
                        }
                    }
                    // Rows of other groups are not lent.
                    let outside = block.rows().end;
                    if outside < rows {
                        assert!(panic::catch_unwind(AssertUnwindSafe(|| block.row_mut(outside).len())).is_err());
                    }
                    if block.rows().start > 0 {
                        let before = block.rows().start - 1;
                        assert!(panic::catch_unwind(AssertUnwindSafe(|| block.row_mut(before).len())).is_err());
                    }
                });
            });
            let expected: Vec<u32> = (1..=rows * row_len).map(|v| v as u32).collect();
            assert_eq!(data, expected, "{rows} x {row_len} in tiles of {group_rows} x {block_cols}");
        }
    }

    #[test]
    fn whole_rows_are_lent_only_to_a_block_of_every_column() {
        let pool = ComputePool::new(2).unwrap();
        for (rows, row_len, block_cols) in [(5, 6, 6), (5, 6, 100), (5, 6, 3), (4, 1, 1)] {
            let mut data = vec![0u32; rows * row_len];
            pool.install(|| {
                for_each_column_block_mut(&mut data, row_len, block_cols, |_, mut block| {
                    let whole = block.whole_rows_mut(1..rows - 1).map(|part| {
                        part.iter_mut().enumerate().for_each(|(i, v)| *v = (row_len + i) as u32 + 1);
                    });
                    assert_eq!(whole.is_some(), block.width() == row_len, "{rows} x {row_len} by {block_cols}");
                });
            });
            let lent = block_cols >= row_len;
            let expected: Vec<u32> = (0..rows * row_len)
                .map(|i| if lent && i >= row_len && i < (rows - 1) * row_len { i as u32 + 1 } else { 0 })
                .collect();
            assert_eq!(data, expected, "{rows} x {row_len} by {block_cols}");
        }
    }

    #[test]
    fn many_short_loops_and_sleeping_workers() {
        let pool = ComputePool::new(2).unwrap();
        let sum = AtomicUsize::new(0);
        for round in 0..2000 {
            pool.for_each(4, |i| {
                sum.fetch_add(i + 1, Ordering::Relaxed);
            });
            if round % 500 == 0 {
                // Past SPIN_FOR: the worker is asleep and must be woken by the next loop.
                std::thread::sleep(SPIN_FOR * 4);
            }
        }
        assert_eq!(sum.into_inner(), 2000 * 10);
    }

    #[test]
    fn nested_loops_and_concurrent_callers_run_serially() {
        let pool = ComputePool::new(2).unwrap();
        let sum = AtomicUsize::new(0);
        pool.install(|| {
            for_each_task(8, |_| {
                assert_eq!(current_threads(), 1);
                for_each_task(8, |j| {
                    sum.fetch_add(j, Ordering::Relaxed);
                });
            })
        });
        assert_eq!(sum.load(Ordering::Relaxed), 8 * 28);
        let pool = &pool;
        std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| {
                    for _ in 0..200 {
                        pool.for_each(16, |j| {
                            sum.fetch_add(j, Ordering::Relaxed);
                        });
                    }
                });
            }
        });
        assert_eq!(sum.into_inner(), 8 * 28 + 3 * 200 * 120);
    }

    #[test]
    fn a_panicking_task_is_raised_after_the_loop() {
        let pool = ComputePool::new(2).unwrap();
        let ran = AtomicUsize::new(0);
        let result = panic::catch_unwind(AssertUnwindSafe(|| {
            pool.for_each(64, |i| {
                ran.fetch_add(1, Ordering::Relaxed);
                assert!(i != 17, "task 17 fails");
            })
        }));
        assert!(result.is_err());
        assert_eq!(ran.load(Ordering::Relaxed), 64, "the other tasks still ran");
        // The pool still works.
        let sum = AtomicUsize::new(0);
        pool.for_each(10, |i| {
            sum.fetch_add(i, Ordering::Relaxed);
        });
        assert_eq!(sum.into_inner(), 45);
    }

    #[test]
    fn chunks_cover_the_slice_once() {
        let pool = ComputePool::new(2).unwrap();
        for (len, chunk) in [(0, 3), (1, 3), (10, 3), (12, 3), (7, 100), (5, 0)] {
            let mut data = vec![0usize; len];
            pool.install(|| {
                for_each_chunk_mut(&mut data, chunk, |i, c| {
                    assert!(c.len() <= chunk.max(1));
                    c.iter_mut().enumerate().for_each(|(k, v)| *v += i * chunk.max(1) + k + 1);
                })
            });
            assert_eq!(data, (1..=len).collect::<Vec<_>>(), "{len} values in chunks of {chunk}");
        }
    }

    #[test]
    fn install_nests_and_restores() {
        let two = ComputePool::new(2).unwrap();
        let three = ComputePool::new(3).unwrap();
        two.install(|| {
            assert_eq!(current_threads(), 2);
            three.install(|| assert_eq!(current_threads(), 3));
            assert_eq!(current_threads(), 2);
        });
        assert!(ComputePool::new(MAX_THREADS + 1).is_err());
    }
}
