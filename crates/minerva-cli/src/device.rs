//! `--device cpu|wgpu` and `minerva inspect --device`: which backend runs the model.

use std::io::Write;

use minerva_wgpu::{WgpuBackend, WgpuOptions};

use crate::error::CliError;

/// Where the model runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Device {
    /// The CPU backend (quantized kernels, rayon).
    #[default]
    Cpu,
    /// The GPU through wgpu (Vulkan, Metal, DX12, GL); `MINERVA_ADAPTER` picks the adapter by name.
    Wgpu,
}

/// Opens the wgpu backend, or says in one line why there is none.
pub fn open_wgpu() -> Result<WgpuBackend, CliError> {
    WgpuBackend::new(WgpuOptions::default()).map_err(CliError::Device)
}

/// `minerva inspect --device [--json]`: the adapter the wgpu backend would use.
pub fn inspect(as_json: bool, out: &mut dyn Write) -> Result<(), CliError> {
    let backend = open_wgpu()?;
    let info = backend.info();
    let written = if as_json {
        let value = serde_json::json!({
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
        writeln!(out, "{info}")
    };
    written.map_err(|source| CliError::Output { path: "<stdout>".into(), source })
}
