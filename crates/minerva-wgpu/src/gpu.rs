//! The device and what every op shares: the pipeline cache, the activation buffer pool, and the
//! pending step: the command encoder that collects a forward step's dispatches until something
//! is read back, with the kernels' parameters gathered into one uniform ring buffer.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use minerva_core::DType;

use wgpu::util::DeviceExt;

use crate::device::DeviceInfo;
use crate::error::WgpuError;
use crate::profile::{KernelTime, MAX_PROFILED_DISPATCHES, Profiled, Profiler};

/// Buffers of activations, by exact byte size, waiting to be reused. Shapes repeat from one
/// step to the next, so after the first step a forward pass allocates nothing.
pub(crate) type Pool = Arc<Mutex<HashMap<u64, Vec<wgpu::Buffer>>>>;

/// An activation buffer that goes back to the pool when dropped.
///
/// Reuse is safe while dispatches are still pending: wgpu orders the dispatches of one encoder
/// (each is its own usage scope, in a pass or not) and inserts the barriers between a dispatch
/// that reads a buffer and a later one that writes it. No
/// pooled buffer is ever written with `Queue::write_buffer` (which would land before the pending
/// encoder runs); uploads get fresh buffers.
pub(crate) struct PooledBuffer {
    buffer: Option<wgpu::Buffer>,
    pool: Pool,
}

impl PooledBuffer {
    pub(crate) fn buffer(&self) -> &wgpu::Buffer {
        self.buffer.as_ref().expect("present until dropped")
    }
}

impl Drop for PooledBuffer {
    fn drop(&mut self) {
        if let Some(b) = self.buffer.take() {
            lock(&self.pool).entry(b.size()).or_default().push(b);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The device, its queue, and the shared state of the ops.
pub(crate) struct Gpu {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub info: DeviceInfo,
    pipelines: Mutex<HashMap<PipelineKey, wgpu::ComputePipeline>>,
    pool: Pool,
    step: Mutex<Step>,
    /// Every dispatch's parameters, at `param_align` offsets; written once per submission.
    ring: wgpu::Buffer,
    param_align: usize,
    /// Errors wgpu reported asynchronously (validation, out of memory), oldest first.
    errors: Arc<Mutex<Vec<String>>>,
    /// What recording has cost the host so far.
    recorded: Mutex<RecordStats>,
    /// Submit a step in parts of this many dispatches (0: only when something is read back), so
    /// the GPU runs the first part while the host records the rest.
    submit_every: usize,
    /// Command buffers submitted since the device opened: [`StepTable`]s compare it with their
    /// last use to know whether recorded work that reads them is still unsubmitted.
    submitted: AtomicU64,
    /// The read-back staging buffer, kept for the next read-back of at most its size.
    staging: Mutex<Option<wgpu::Buffer>>,
}

/// A small host-made table that ops bind for a step (token ids, RoPE angles, row positions,
/// sampling settings): one device buffer rewritten in place, grown only when a table outgrows it,
/// so a steady decode creates no buffer for it.
pub(crate) struct StepTable {
    label: &'static str,
    /// The buffer, and the submission count when recorded work last bound it.
    slot: Mutex<Option<(wgpu::Buffer, u64)>>,
}

impl StepTable {
    pub(crate) const fn new(label: &'static str) -> StepTable {
        StepTable { label, slot: Mutex::new(None) }
    }
}

/// Host-side cost of recording dispatches: how many, and the CPU time spent in
/// [`Gpu::dispatch`] (pipeline lookup, parameters, bind group, pass), so a step's recording
/// overhead can be measured apart from the GPU's work.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecordStats {
    /// Dispatches recorded.
    pub dispatches: u64,
    /// Time spent recording them.
    pub cpu: std::time::Duration,
    /// Command buffers submitted (a step in parts submits several).
    pub submissions: u64,
    /// Device objects made while recording: buffers (activations the pool had none of, read-back
    /// staging, per-step tables that outgrew theirs), bind groups and pipelines. A steady decode
    /// makes none: every step after the first finds them all pooled or cached.
    pub objects_created: u64,
    /// Activations copied because an op wrote one in place while a deferred value still read it
    /// (`WgpuTensor::write`): none in the models' steps, which drop a deferred norm before
    /// writing its source.
    pub source_copies: u64,
}

/// A compiled kernel's identity: the kernel, the weight dtype it was assembled for, a size it was
/// specialised to (tile, activation rows) and a variant (reduction, cache element). Built without
/// allocating, so looking a pipeline up costs a recorded dispatch no allocation. Displayed as
/// `kernel[/dtype][/size][/variant]` (`mul_mat_vec/Q4_0/1/subgroup`), the profile's kernel names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct PipelineKey {
    kernel: &'static str,
    dtype: Option<DType>,
    size: Option<u32>,
    variant: &'static str,
}

impl PipelineKey {
    /// The kernel `kernel`, with no dtype, size or variant.
    pub(crate) const fn named(kernel: &'static str) -> PipelineKey {
        PipelineKey { kernel, dtype: None, size: None, variant: "" }
    }

    /// For weights of `dtype`.
    pub(crate) const fn dtype(self, dtype: DType) -> PipelineKey {
        PipelineKey { dtype: Some(dtype), ..self }
    }

    /// Specialised to `size`.
    pub(crate) const fn size(self, size: usize) -> PipelineKey {
        PipelineKey { size: Some(size as u32), ..self }
    }

    /// The variant `variant`.
    pub(crate) const fn variant(self, variant: &'static str) -> PipelineKey {
        PipelineKey { variant, ..self }
    }
}

impl fmt::Display for PipelineKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kernel)?;
        if let Some(dtype) = self.dtype {
            write!(f, "/{}", dtype.name())?;
        }
        if let Some(size) = self.size {
            write!(f, "/{size}")?;
        }
        if !self.variant.is_empty() {
            write!(f, "/{}", self.variant)?;
        }
        Ok(())
    }
}

/// Bytes of the parameter ring: 8192 dispatches of 256-byte-aligned parameters per submission
/// (a LLaMA step records ~16 per layer); a longer step is submitted in parts.
const RING_BYTES: usize = 2 << 20;

/// What has been recorded since the last submission.
#[derive(Default)]
struct Step {
    /// The open compute pass every dispatch goes into, until a copy or the submission ends it.
    /// wgpu makes each dispatch its own usage scope, so it still orders a dispatch after the
    /// ones whose outputs it reads; one pass instead of one per dispatch saves the host the pass
    /// set-up per kernel.
    pass: Option<wgpu::ComputePass<'static>>,
    /// After `pass`, so that a dropped step ends the pass before its encoder.
    encoder: Option<wgpu::CommandEncoder>,
    /// The ring's contents so far.
    params: Vec<u8>,
    /// Dispatches recorded into the encoder since the last submission.
    in_encoder: usize,
    /// Bind groups by what they bind, with the step that last used each. A steady decode records
    /// the same dispatches on the same pooled buffers and ring offsets every step, so it finds
    /// them here; steps that alternate (penalty entries in one sampled step and not the next)
    /// find them from a few steps back. One unused for [`BIND_GROUP_STEPS`] steps is dropped
    /// with the buffers it holds.
    bind_groups: HashMap<BindKey, (wgpu::BindGroup, u64)>,
    /// Steps ended so far ([`Gpu::submit`]).
    steps: u64,
    /// The timestamp queries, when the device was opened for profiling.
    profiler: Option<Profiler>,
    /// Whether dispatches are timed now (each in a pass of its own).
    profiling: bool,
    /// The dispatches timed in this submission, in order.
    profiled: Vec<Profiled>,
}

/// Steps a bind group is kept unused before it is dropped.
const BIND_GROUP_STEPS: u64 = 4;

/// The most buffers a kernel binds (besides its parameters).
pub(crate) const MAX_BINDINGS: usize = 8;

/// What a dispatch binds: its pipeline (compared by identity), its buffers in binding order (a
/// fixed array, so that looking a bind group up allocates nothing), and its parameters' place in
/// the ring.
#[derive(Clone, PartialEq, Eq, Hash)]
struct BindKey {
    pipeline: wgpu::ComputePipeline,
    buffers: [Option<wgpu::Buffer>; MAX_BINDINGS],
    params_offset: usize,
    params_len: usize,
}

/// A usage for activations: kernels read and write them, copies move rows and results.
const ACTIVATION: wgpu::BufferUsages =
    wgpu::BufferUsages::STORAGE.union(wgpu::BufferUsages::COPY_SRC).union(wgpu::BufferUsages::COPY_DST);

impl Gpu {
    pub(crate) fn new(device: wgpu::Device, queue: wgpu::Queue, info: DeviceInfo, submit_every: usize) -> Gpu {
        // wgpu's default handler panics; keep the message and report it at the next read-back.
        let errors: Arc<Mutex<Vec<String>>> = Arc::default();
        let sink = errors.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| lock(&sink).push(e.to_string())));
        let ring = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("parameter ring"),
            size: RING_BYTES as u64,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let param_align = device.limits().min_uniform_buffer_offset_alignment.max(16) as usize;
        let profiler = info.timestamps.then(|| Profiler::new(&device, &queue));
        Gpu {
            errors,
            ring,
            param_align,
            step: Mutex::new(Step { profiler, ..Step::default() }),
            device,
            queue,
            info,
            pipelines: Mutex::new(HashMap::new()),
            pool: Arc::new(Mutex::new(HashMap::new())),
            recorded: Mutex::new(RecordStats::default()),
            submit_every,
            submitted: AtomicU64::new(0),
            staging: Mutex::new(None),
        }
    }

    /// The recording cost since the last call, and resets it.
    pub(crate) fn take_record_stats(&self) -> RecordStats {
        std::mem::take(&mut *lock(&self.recorded))
    }

    /// Times every dispatch from now on (`true`) or none (`false`); ends the open pass. Only a
    /// device with timestamp queries (`info.timestamps`, which made the profiler) is timed.
    pub(crate) fn set_profiling(&self, on: bool) {
        let mut step = lock(&self.step);
        step.pass = None;
        step.profiling = on && step.profiler.is_some();
    }

    /// The GPU time per kernel gathered since the last call (submitted dispatches only), longest
    /// first; resets it.
    pub(crate) fn take_kernel_times(&self) -> Vec<KernelTime> {
        lock(&self.step).profiler.as_mut().map(Profiler::take).unwrap_or_default()
    }

    /// An activation buffer of `bytes` (at least 4), from the pool when one of that size is free.
    /// Its contents are whatever the last user left: every kernel writing one writes all of it.
    pub(crate) fn scratch(&self, bytes: u64) -> PooledBuffer {
        let size = bytes.max(4).next_multiple_of(4);
        // The least free buffer (by wgpu's order), not the last freed: a step that allocates and
        // frees in the same order as the one before then gets the same buffers, so it finds its
        // bind groups cached. (Popping the last freed one permutes the buffers between steps.)
        let reused = lock(&self.pool).get_mut(&size).and_then(|free| {
            let least = free.iter().enumerate().min_by(|a, b| a.1.cmp(b.1)).map(|(i, _)| i)?;
            Some(free.swap_remove(least))
        });
        let buffer = reused.unwrap_or_else(|| {
            self.created();
            self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("activation"),
                size,
                usage: ACTIVATION,
                mapped_at_creation: false,
            })
        });
        PooledBuffer { buffer: Some(buffer), pool: self.pool.clone() }
    }

    /// A new activation buffer holding `bytes` (created mapped, so it is ready before any pending
    /// dispatch runs); it joins the pool when dropped.
    pub(crate) fn upload(&self, bytes: &[u8]) -> PooledBuffer {
        let buffer = self.init_buffer("upload", bytes, ACTIVATION);
        PooledBuffer { buffer: Some(buffer), pool: self.pool.clone() }
    }

    /// A buffer holding `bytes` (padded to at least 4 bytes), for small per-op inputs.
    pub(crate) fn init_buffer(&self, label: &str, bytes: &[u8], usage: wgpu::BufferUsages) -> wgpu::Buffer {
        if bytes.len() < 4 || !bytes.len().is_multiple_of(4) {
            let mut padded = bytes.to_vec();
            padded.resize(bytes.len().max(4).next_multiple_of(4), 0);
            return self.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some(label),
                contents: &padded,
                usage,
            });
        }
        self.device.create_buffer_init(&wgpu::util::BufferInitDescriptor { label: Some(label), contents: bytes, usage })
    }

    /// Counts a copy of a source written in place ([`RecordStats::source_copies`]).
    pub(crate) fn count_source_copy(&self) {
        lock(&self.recorded).source_copies += 1;
    }

    /// Counts a device object made while recording ([`RecordStats::objects_created`]).
    fn created(&self) {
        lock(&self.recorded).objects_created += 1;
    }

    /// `bytes` in `table`'s buffer for the ops about to be recorded, which bind the returned
    /// buffer. Recorded work that read the table's earlier contents and is not yet submitted is
    /// submitted first: a queue write lands before every command buffer submitted after it.
    pub(crate) fn write_table(&self, table: &StepTable, bytes: &[u8]) -> wgpu::Buffer {
        let mut slot = lock(&table.slot);
        let submitted = self.submitted.load(Ordering::Relaxed);
        if let Some((_, last_bound)) = &*slot
            && *last_bound == submitted
        {
            self.submit_part(&mut lock(&self.step));
        }
        let size = bytes.len().max(4).next_multiple_of(4) as u64;
        if slot.as_ref().is_none_or(|(b, _)| b.size() < size) {
            self.created();
            let buffer = self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(table.label),
                size: size.next_power_of_two().max(256),
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            *slot = Some((buffer, 0));
        }
        let (buffer, last_bound) = slot.as_mut().expect("made above");
        if bytes.len().is_multiple_of(4) {
            self.queue.write_buffer(buffer, 0, bytes);
        } else {
            let mut padded = bytes.to_vec();
            padded.resize(size as usize, 0);
            self.queue.write_buffer(buffer, 0, &padded);
        }
        *last_bound = self.submitted.load(Ordering::Relaxed);
        buffer.clone()
    }

    /// `table`'s buffer, bound again by the ops about to be recorded (its contents unchanged).
    pub(crate) fn reuse_table(&self, table: &StepTable) -> Option<wgpu::Buffer> {
        let mut slot = lock(&table.slot);
        let (buffer, last_bound) = slot.as_mut()?;
        *last_bound = self.submitted.load(Ordering::Relaxed);
        Some(buffer.clone())
    }

    /// The pipeline `key`, compiled from `source()` the first time it is asked for.
    fn pipeline(&self, key: PipelineKey, source: impl FnOnce() -> String) -> wgpu::ComputePipeline {
        let mut cache = lock(&self.pipelines);
        if let Some(p) = cache.get(&key) {
            return p.clone();
        }
        self.created();
        let label = key.to_string();
        let module = self.device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some(&label),
            source: wgpu::ShaderSource::Wgsl(source().into()),
        });
        let pipeline = self.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(&label),
            layout: None,
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        });
        cache.insert(key, pipeline.clone());
        pipeline
    }

    /// Records one dispatch of pipeline `key` into the pending encoder: `buffers` bound at
    /// 0, 1, …, then `params` (from the ring) as a uniform at the next binding.
    pub(crate) fn dispatch(
        &self,
        key: PipelineKey,
        source: impl FnOnce() -> String,
        buffers: &[&wgpu::Buffer],
        params: &[u32],
        groups: [u32; 3],
    ) {
        let started = std::time::Instant::now();
        self.record_dispatch(key, source, buffers, params, groups);
        let mut stats = lock(&self.recorded);
        stats.dispatches += 1;
        stats.cpu += started.elapsed();
    }

    /// Counts `bytes` (the fewest its work must move through device memory) for the dispatch
    /// recorded last, when it is being timed: the profile's achieved bandwidth per kernel.
    pub(crate) fn moved(&self, bytes: u64) {
        let mut step = lock(&self.step);
        if step.profiling
            && let Some(last) = step.profiled.last_mut()
        {
            last.bytes = bytes;
        }
    }

    fn record_dispatch(
        &self,
        key: PipelineKey,
        source: impl FnOnce() -> String,
        buffers: &[&wgpu::Buffer],
        params: &[u32],
        groups: [u32; 3],
    ) {
        let pipeline = self.pipeline(key, source);
        let bytes: &[u8] = bytemuck::cast_slice(params);
        let mut step = lock(&self.step);
        // Before this dispatch's parameters join the ring: a submission writes the whole ring.
        let part_done = !step.profiling && self.submit_every > 0 && step.in_encoder >= self.submit_every;
        if step.params.len() + bytes.len() > RING_BYTES
            || (step.profiling && step.profiled.len() == MAX_PROFILED_DISPATCHES)
            || part_done
        {
            self.submit_part(&mut step);
        }
        step.in_encoder += 1;
        let offset = step.params.len();
        step.params.extend_from_slice(bytes);
        step.params.resize((offset + bytes.len()).next_multiple_of(self.param_align), 0);
        assert!(buffers.len() <= MAX_BINDINGS, "{key} binds {} buffers", buffers.len());
        let label = key;
        let key = BindKey {
            pipeline: pipeline.clone(),
            buffers: std::array::from_fn(|i| buffers.get(i).map(|&b| b.clone())),
            params_offset: offset,
            params_len: bytes.len(),
        };
        let now = step.steps;
        let bind_group = match step.bind_groups.get_mut(&key) {
            Some((group, used)) => {
                *used = now;
                group.clone()
            }
            None => {
                lock(&self.recorded).objects_created += 1;
                let group = self.bind_group(label, &key);
                step.bind_groups.insert(key, (group.clone(), now));
                group
            }
        };
        if step.profiling {
            // A pass of its own, timed at its beginning and end.
            step.pass = None;
            let i = step.profiled.len();
            let Step { encoder, profiler, profiled, .. } = &mut *step;
            let encoder = encoder.get_or_insert_with(|| self.new_encoder());
            let writes = profiler.as_ref().expect("profiling only with a profiler").writes(i);
            let name = label.to_string();
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some(&name),
                timestamp_writes: Some(writes),
            });
            pass.set_pipeline(&pipeline);
            pass.set_bind_group(0, &bind_group, &[]);
            pass.dispatch_workgroups(groups[0], groups[1], groups[2]);
            drop(pass);
            profiled.push(Profiled { kernel: name, bytes: 0 });
            return;
        }
        if step.pass.is_none() {
            let pass = self
                .encoder(&mut step)
                .begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("step"), timestamp_writes: None })
                .forget_lifetime();
            step.pass = Some(pass);
        }
        let pass = step.pass.as_mut().expect("opened above");
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &bind_group, &[]);
        pass.dispatch_workgroups(groups[0], groups[1], groups[2]);
    }

    /// A bind group for `key`: its buffers at bindings 0, 1, …, then its slice of the ring as the
    /// uniform at the next binding.
    fn bind_group(&self, label: PipelineKey, key: &BindKey) -> wgpu::BindGroup {
        let uniform = wgpu::BindingResource::Buffer(wgpu::BufferBinding {
            buffer: &self.ring,
            offset: key.params_offset as u64,
            size: wgpu::BufferSize::new(key.params_len as u64),
        });
        let entries: Vec<wgpu::BindGroupEntry<'_>> = key
            .buffers
            .iter()
            .flatten()
            .map(|b| b.as_entire_binding())
            .chain(std::iter::once(uniform))
            .enumerate()
            .map(|(i, resource)| wgpu::BindGroupEntry { binding: i as u32, resource })
            .collect();
        let label = label.to_string();
        self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(&label),
            layout: &key.pipeline.get_bind_group_layout(0),
            entries: &entries,
        })
    }

    fn encoder<'s>(&self, step: &'s mut Step) -> &'s mut wgpu::CommandEncoder {
        step.encoder.get_or_insert_with(|| self.new_encoder())
    }

    fn new_encoder(&self) -> wgpu::CommandEncoder {
        self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("step") })
    }

    /// Runs `f` on the pending encoder (made on first use).
    pub(crate) fn record(&self, f: impl FnOnce(&mut wgpu::CommandEncoder)) {
        let mut step = lock(&self.step);
        // Ends the open pass: the encoder is locked while a pass records.
        step.pass = None;
        f(self.encoder(&mut step));
    }

    /// Submits everything recorded so far as one command buffer: the end of a step (bind groups
    /// unused for [`BIND_GROUP_STEPS`] steps are dropped).
    pub(crate) fn submit(&self) {
        let mut step = lock(&self.step);
        self.submit_part(&mut step);
        step.steps += 1;
        let oldest = step.steps.saturating_sub(BIND_GROUP_STEPS);
        step.bind_groups.retain(|_, (_, used)| *used >= oldest);
    }

    /// Writes the ring (queue writes land before the command buffers of the same submission,
    /// after those of earlier ones), then submits the encoder.
    fn submit_part(&self, step: &mut Step) {
        step.pass = None;
        step.in_encoder = 0;
        if !step.params.is_empty() {
            self.queue.write_buffer(&self.ring, 0, &step.params);
            step.params.clear();
        }
        let profiled = std::mem::take(&mut step.profiled);
        if let Some(mut encoder) = step.encoder.take() {
            let profiler = step.profiler.as_mut().filter(|_| !profiled.is_empty());
            if let Some(profiler) = &profiler {
                profiler.resolve(&mut encoder, profiled.len());
            }
            self.queue.submit([encoder.finish()]);
            self.submitted.fetch_add(1, Ordering::Relaxed);
            lock(&self.recorded).submissions += 1;
            if let Some(profiler) = profiler
                && let Err(e) = profiler.collect(&self.device, &profiled)
            {
                lock(&self.errors).push(format!("reading kernel timestamps: {e}"));
            }
        }
    }

    /// Copies `bytes` bytes of `src` to the host: records the copy, submits the step, waits.
    pub(crate) fn read_back(&self, src: &wgpu::Buffer, bytes: u64) -> Result<Vec<u8>, WgpuError> {
        let size = bytes.max(4).next_multiple_of(4);
        // One staging buffer, kept between read-backs (each waits for its map and unmaps it).
        let mut kept = lock(&self.staging);
        if kept.as_ref().is_none_or(|b| b.size() < size) {
            self.created();
            *kept = Some(self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("read back"),
                size: size.next_power_of_two(),
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }));
        }
        let staging = kept.as_ref().expect("made above");
        self.record(|encoder| encoder.copy_buffer_to_buffer(src, 0, staging, 0, size));
        self.submit();
        let read = self.map_and_read(staging, size, bytes as usize);
        if read.is_err() {
            // Possibly still mapped or pending: the next read-back makes a new one.
            *kept = None;
        }
        read
    }

    /// Maps the first `size` bytes of `staging` (once the submitted work has run), copies out
    /// `bytes` of them and unmaps it.
    fn map_and_read(&self, staging: &wgpu::Buffer, size: u64, bytes: usize) -> Result<Vec<u8>, WgpuError> {
        let (tx, rx) = std::sync::mpsc::channel();
        staging.slice(..size).map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        self.device.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| WgpuError::ReadBack(e.to_string()))?;
        let mapped = rx.recv().map_err(|e| WgpuError::ReadBack(e.to_string()))?;
        // A validation error earlier in the step explains a failed map better than the map does.
        self.check()?;
        mapped.map_err(|e| WgpuError::ReadBack(e.to_string()))?;
        let out = {
            let data = staging.slice(..size).get_mapped_range().map_err(|e| WgpuError::ReadBack(e.to_string()))?;
            data[..bytes].to_vec()
        };
        staging.unmap();
        Ok(out)
    }

    /// Waits for all submitted work (uploads included), so staging memory is released.
    pub(crate) fn wait(&self) -> Result<(), WgpuError> {
        self.device.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| WgpuError::ReadBack(e.to_string()))?;
        self.check()
    }

    /// The first error wgpu reported since the last check, if any.
    pub(crate) fn check(&self) -> Result<(), WgpuError> {
        let mut errors = lock(&self.errors);
        match errors.drain(..).next() {
            None => Ok(()),
            // wgpu's messages span lines ("Validation Error", "Caused by:", …): keep one line.
            Some(message) => Err(WgpuError::Device(message.split_whitespace().collect::<Vec<_>>().join(" "))),
        }
    }
}

/// Workgroup counts for `n` groups of one dimension: x ≤ 65535 (the portable limit), the rest in
/// y. Kernels rebuild the flat index as `x + y · 65535 · workgroup_size` (or `x + y · groups_x`).
pub(crate) fn groups_1d(n: u32) -> [u32; 3] {
    if n <= 65535 { [n.max(1), 1, 1] } else { [65535, n.div_ceil(65535), 1] }
}
