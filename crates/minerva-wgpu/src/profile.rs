//! GPU time per kernel from timestamp queries ([`crate::WgpuOptions::profile`]).
//!
//! While profiling is on, every dispatch is recorded in a compute pass of its own whose beginning
//! and end write a timestamp; at each submission the timestamps are resolved, read back (the
//! submission is waited for) and summed per pipeline key (`mul_mat/Q4_0/8/subgroup`, `rope`, …).
//! A pass per dispatch and a wait per submission slow the step down: profiled runs say where the
//! GPU's time goes, unprofiled runs how fast a step is.

use std::collections::HashMap;
use std::time::Duration;

/// Timestamps per submission: two per dispatch, at most wgpu's limit for one query set. A longer
/// submission is split.
pub(crate) const MAX_PROFILED_DISPATCHES: usize = wgpu::QUERY_SET_MAX_QUERIES as usize / 2;

/// The GPU time of one kernel kind, summed over its dispatches.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelTime {
    /// The pipeline's key: the kernel, and for weight-reading kernels the weight type and variant.
    pub kernel: String,
    /// Dispatches timed.
    pub dispatches: u64,
    /// Their summed GPU time (from each dispatch's first to its last timestamp).
    pub gpu: Duration,
    /// The fewest bytes their work must move through device memory (each weight, activation
    /// and cache value read once, each output written once), summed; 0 for kernels that do not
    /// count theirs. Over [`KernelTime::gpu`] it is the achieved bandwidth.
    pub bytes: u64,
}

impl KernelTime {
    /// Achieved GB/s ([`KernelTime::bytes`] over the time), when the kernel counts its bytes.
    pub fn gigabytes_per_second(&self) -> Option<f64> {
        (self.bytes > 0 && !self.gpu.is_zero()).then(|| self.bytes as f64 / self.gpu.as_secs_f64() / 1e9)
    }
}

/// The profiled kernels as a text table, one line per kernel (the first `max_rows`, longest
/// first as [`crate::WgpuBackend::take_kernel_times`] returns them): time, share of the kernels'
/// total, dispatches, MB moved and GB/s; times, dispatches and bytes divided by `units` (e.g. the
/// 32 steps of a decode, for figures per token).
pub fn kernel_table(times: &[KernelTime], units: f64, max_rows: usize) -> String {
    let total: f64 = times.iter().map(|t| t.gpu.as_secs_f64()).sum();
    let mut text = format!(
        "    {:<40} {:>13} {:>7} {:>17} {:>10} {:>9}\n",
        "kernel", "time", "share", "dispatches", "MB moved", "GB/s"
    );
    for t in times.iter().take(max_rows) {
        let secs = t.gpu.as_secs_f64();
        let (mb, gbs) = match t.gigabytes_per_second() {
            Some(gbs) => (format!("{:.2}", t.bytes as f64 / units / 1e6), format!("{gbs:.0}")),
            None => ("—".to_string(), "—".to_string()),
        };
        text += &format!(
            "    {:<40} {:>10.1} µs {:>5.1} % {:>6.1} dispatches {:>10} {:>9}\n",
            t.kernel,
            secs * 1e6 / units,
            100.0 * secs / total.max(1e-12),
            t.dispatches as f64 / units,
            mb,
            gbs
        );
    }
    text
}

/// One timed dispatch of a submission: its pipeline key and the bytes it counts.
#[derive(Clone, Debug)]
pub(crate) struct Profiled {
    pub kernel: String,
    pub bytes: u64,
}

/// The query set and buffers the timestamps go through, and the times gathered so far.
pub(crate) struct Profiler {
    pub queries: wgpu::QuerySet,
    /// Where the query set is resolved (GPU-only).
    resolve: wgpu::Buffer,
    /// Its copy the host maps.
    read: wgpu::Buffer,
    /// Nanoseconds per timestamp tick.
    period_ns: f64,
    times: HashMap<String, KernelTime>,
}

impl Profiler {
    pub(crate) fn new(device: &wgpu::Device, queue: &wgpu::Queue) -> Profiler {
        let count = 2 * MAX_PROFILED_DISPATCHES as u32;
        let bytes = u64::from(count) * 8;
        let queries = device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("kernel timestamps"),
            ty: wgpu::QueryType::Timestamp,
            count,
        });
        let buffer = |label, usage| {
            device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size: bytes,
                usage,
                mapped_at_creation: false,
            })
        };
        Profiler {
            queries,
            resolve: buffer("timestamps", wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC),
            read: buffer("timestamps read back", wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST),
            period_ns: f64::from(queue.get_timestamp_period()),
            times: HashMap::new(),
        }
    }

    /// The timestamp indices of dispatch `i` of a submission: its pass's beginning and end.
    pub(crate) fn writes(&self, i: usize) -> wgpu::ComputePassTimestampWrites<'_> {
        wgpu::ComputePassTimestampWrites {
            query_set: &self.queries,
            beginning_of_pass_write_index: Some(2 * i as u32),
            end_of_pass_write_index: Some(2 * i as u32 + 1),
        }
    }

    /// Records the copy of `n` dispatches' timestamps to the host-readable buffer (before the
    /// encoder is finished).
    pub(crate) fn resolve(&self, encoder: &mut wgpu::CommandEncoder, n: usize) {
        let queries = 2 * n as u32;
        encoder.resolve_query_set(&self.queries, 0..queries, &self.resolve, 0);
        encoder.copy_buffer_to_buffer(&self.resolve, 0, &self.read, 0, u64::from(queries) * 8);
    }

    /// After the submission that resolved them: waits for it and adds the dispatches' times to
    /// their kernels' sums (`kernels[i]` is dispatch `i`).
    pub(crate) fn collect(&mut self, device: &wgpu::Device, kernels: &[Profiled]) -> Result<(), String> {
        let bytes = kernels.len() as u64 * 16;
        let slice = self.read.slice(..bytes);
        let (tx, rx) = std::sync::mpsc::channel();
        slice.map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        device.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| e.to_string())?;
        rx.recv().map_err(|e| e.to_string())?.map_err(|e| e.to_string())?;
        {
            let data = slice.get_mapped_range().map_err(|e| e.to_string())?;
            let ticks: &[u64] = bytemuck::cast_slice(&data);
            for (dispatch, pair) in kernels.iter().zip(ticks.chunks_exact(2)) {
                let ns = pair[1].saturating_sub(pair[0]) as f64 * self.period_ns;
                let kernel = &dispatch.kernel;
                if !self.times.contains_key(kernel) {
                    self.times.insert(kernel.clone(), KernelTime { kernel: kernel.clone(), ..KernelTime::default() });
                }
                let entry = self.times.get_mut(kernel).expect("inserted above");
                entry.dispatches += 1;
                entry.gpu += Duration::from_nanos(ns as u64);
                entry.bytes += dispatch.bytes;
            }
        }
        self.read.unmap();
        Ok(())
    }

    /// The times gathered since the last call, longest first; resets them.
    pub(crate) fn take(&mut self) -> Vec<KernelTime> {
        let mut times: Vec<KernelTime> = self.times.drain().map(|(_, t)| t).collect();
        times.sort_by(|a, b| b.gpu.cmp(&a.gpu).then_with(|| a.kernel.cmp(&b.kernel)));
        times
    }
}
