//! `--device cpu|wgpu` and `minerva inspect --device`: which backend runs the model.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use minerva_wgpu::{UploadProgress, WgpuBackend, WgpuOptions};

use crate::error::CliError;

/// Where the model runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Device {
    /// The CPU backend (quantized kernels on a `ComputePool`).
    #[default]
    Cpu,
    /// The GPU through wgpu (Vulkan, Metal, DX12, GL); `MINERVA_ADAPTER` picks the adapter by name.
    Wgpu,
}

/// `--adapter NAME`, set once from the command line (it wins over `MINERVA_ADAPTER`).
static ADAPTER: OnceLock<String> = OnceLock::new();

/// Remembers `--adapter` for every later [`open_wgpu`].
pub fn set_adapter(name: Option<String>) {
    if let Some(name) = name {
        // Set once, from `main`, before anything opens a device.
        let _ = ADAPTER.set(name);
    }
}

/// `bench --profile`: devices opened from now on get timestamp queries where offered.
static TIMESTAMPS: AtomicBool = AtomicBool::new(false);

/// Asks every later [`open_wgpu`] for timestamp queries (`bench --profile`).
pub fn request_timestamps() {
    TIMESTAMPS.store(true, Ordering::Relaxed);
}

fn options() -> WgpuOptions {
    let mut options = WgpuOptions::default();
    if let Some(name) = ADAPTER.get() {
        options.adapter = Some(name.clone());
    }
    options.profile = TIMESTAMPS.load(Ordering::Relaxed);
    options
}

/// Opens the wgpu backend, or says in one line why there is none.
pub fn open_wgpu() -> Result<WgpuBackend, CliError> {
    WgpuBackend::new(options()).map_err(CliError::Device)
}

/// A progress line on stderr while weights stream to the GPU (only on a terminal); cleared when
/// dropped, i.e. once the model is loaded.
pub struct UploadBar(indicatif::ProgressBar);

impl Drop for UploadBar {
    fn drop(&mut self) {
        self.0.finish_and_clear();
    }
}

/// [`open_wgpu`] with an [`UploadBar`] counting the weight bytes uploaded.
pub fn open_wgpu_with_progress(kv_dtype: minerva_core::DType) -> Result<(WgpuBackend, UploadBar), CliError> {
    let bar = if std::io::stderr().is_terminal() {
        let bar = indicatif::ProgressBar::new_spinner();
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} uploading weights to the GPU: {bytes} ({bytes_per_sec})",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
        );
        bar
    } else {
        indicatif::ProgressBar::hidden()
    };
    let counter = bar.clone();
    let mut options = options();
    options.on_upload = Some(UploadProgress(Arc::new(move |bytes| counter.inc(bytes))));
    options.kv_dtype = kv_dtype;
    let backend = WgpuBackend::new(options).map_err(CliError::Device)?;
    Ok((backend, UploadBar(bar)))
}

/// `minerva inspect --device [--json]`: the CPU and the kernel each weight type runs on it, and
/// the adapter the wgpu backend would use.
pub fn inspect(as_json: bool, out: &mut dyn Write) -> Result<(), CliError> {
    let kernels: Vec<String> = minerva_core::DType::all()
        .filter(|&d| minerva_quant::cpu_kernels(d).matmul.is_some())
        .map(crate::cpu_info::kernels_of)
        .collect();
    let (cpu, features) = (crate::cpu_info::cpu_model(), crate::cpu_info::cpu_features());
    let backend = open_wgpu()?;
    let info = backend.info();
    let written = if as_json {
        let value = serde_json::json!({
            "cpu": cpu,
            "cpu_features": features,
            "cpu_kernels": kernels,
            "cpu_vector_kernels": minerva_quant::vector::vector_isa(),
            "name": info.name,
            "backend": info.backend,
            "device_type": info.device_type,
            "driver": info.driver,
            "shader_f16": info.shader_f16,
            "subgroups": info.subgroups,
            "max_storage_binding": info.max_storage_binding,
            "max_buffer": info.max_buffer,
            "max_workgroup_storage": info.max_workgroup_storage,
        });
        writeln!(out, "{value}")
    } else {
        let vectors = minerva_quant::vector::vector_isa();
        writeln!(
            out,
            "cpu: {cpu} ({})\ncpu kernels: {} | f32 vectors: {vectors}\ngpu: {info}",
            features.join(" "),
            kernels.join(" | ")
        )
    };
    written.map_err(|source| CliError::Output { path: "<stdout>".into(), source })
}
