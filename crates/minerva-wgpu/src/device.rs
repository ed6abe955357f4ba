//! Adapter selection and the device's description.

use crate::error::WgpuError;

/// What the opened device is and offers, for `--stats` and `minerva inspect --device`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// The adapter's name (e.g. "llvmpipe (LLVM 15.0.6, 256 bits)").
    pub name: String,
    /// The wgpu backend (Vulkan, Metal, Dx12, Gl).
    pub backend: String,
    /// Discrete / integrated / virtual GPU or CPU.
    pub device_type: String,
    /// Driver name and version, as the adapter reports them.
    pub driver: String,
    /// Whether `SHADER_F16` was requested (the kernels do not need it: f16 is unpacked with
    /// `unpack2x16float`).
    pub shader_f16: bool,
    /// Whether `TIMESTAMP_QUERY` was requested (only to profile: [`crate::WgpuOptions::profile`]).
    pub timestamps: bool,
    /// Whether `SUBGROUP` was requested.
    pub subgroups: bool,
    /// The smallest subgroup the adapter may use (subgroup kernels need at least 8).
    pub subgroup_min_size: u32,
    /// `max_storage_buffer_binding_size` in bytes: larger weights are split into chunks of rows.
    pub max_storage_binding: u64,
    /// `max_buffer_size` in bytes.
    pub max_buffer: u64,
    /// `max_compute_workgroup_storage_size` in bytes.
    pub max_workgroup_storage: u32,
}

impl std::fmt::Display for DeviceInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "adapter:               {}", self.name)?;
        writeln!(f, "backend:               {} ({})", self.backend, self.device_type)?;
        writeln!(f, "driver:                {}", self.driver)?;
        writeln!(f, "shader f16:            {}", if self.shader_f16 { "yes" } else { "no" })?;
        if self.timestamps {
            writeln!(f, "timestamps:            yes (profiling)")?;
        }
        if self.subgroups {
            writeln!(f, "subgroups:             yes (size ≥ {})", self.subgroup_min_size)?;
        } else {
            writeln!(f, "subgroups:             no")?;
        }
        writeln!(f, "max storage binding:   {} MiB", self.max_storage_binding >> 20)?;
        writeln!(f, "max buffer:            {} MiB", self.max_buffer >> 20)?;
        write!(f, "max workgroup storage: {} KiB", self.max_workgroup_storage >> 10)
    }
}

/// How eagerly an adapter is preferred: discrete GPUs first ("high performance"), CPUs last.
fn rank(t: wgpu::DeviceType) -> u32 {
    match t {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Other => 3,
        wgpu::DeviceType::Cpu => 4,
    }
}

/// Every adapter wgpu can see. `WGPU_BACKEND` (e.g. `gl`, `vulkan`) names the backends to
/// search; without it the primary ones (Vulkan, Metal, DX12) are searched first and GL only when
/// they have no adapter (probing GL without a display prints EGL noise on stderr).
pub fn list_adapters() -> (wgpu::Instance, Vec<wgpu::Adapter>, wgpu::Backends) {
    let from_env = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
    let tries = if std::env::var_os("WGPU_BACKEND").is_some() {
        vec![from_env.backends]
    } else {
        vec![wgpu::Backends::PRIMARY, wgpu::Backends::SECONDARY]
    };
    let mut searched = wgpu::Backends::empty();
    let mut last = None;
    for backends in tries {
        searched |= backends;
        let desc =
            wgpu::InstanceDescriptor { backends, ..wgpu::InstanceDescriptor::new_without_display_handle_from_env() };
        let instance = wgpu::Instance::new(desc);
        let adapters = pollster::block_on(instance.enumerate_adapters(backends));
        if !adapters.is_empty() {
            return (instance, adapters, searched);
        }
        last = Some(instance);
    }
    (last.expect("at least one try"), Vec::new(), searched)
}

/// Picks an adapter: the first whose name contains `wanted` (case-insensitive), else the
/// highest-ranked kind (discrete GPU first).
pub(crate) fn select(
    adapters: Vec<wgpu::Adapter>,
    backends: wgpu::Backends,
    wanted: Option<&str>,
) -> Result<wgpu::Adapter, WgpuError> {
    if adapters.is_empty() {
        return Err(WgpuError::NoAdapter { backends: format!("{backends:?}") });
    }
    match wanted {
        Some(w) => {
            let needle = w.to_lowercase();
            let names: Vec<String> = adapters.iter().map(|a| a.get_info().name).collect();
            adapters
                .into_iter()
                .find(|a| a.get_info().name.to_lowercase().contains(&needle))
                .ok_or(WgpuError::AdapterNotFound { wanted: w.to_string(), available: names })
        }
        None => Ok(adapters.into_iter().min_by_key(|a| rank(a.get_info().device_type)).expect("not empty")),
    }
}

/// Opens a device with the adapter's own limits and whichever of SHADER_F16 / SUBGROUP (and,
/// with `profile`, TIMESTAMP_QUERY) it offers.
pub(crate) fn open(
    adapter: &wgpu::Adapter,
    profile: bool,
) -> Result<(wgpu::Device, wgpu::Queue, DeviceInfo), WgpuError> {
    let info = adapter.get_info();
    let mut wanted = wgpu::Features::SHADER_F16 | wgpu::Features::SUBGROUP;
    if profile {
        wanted |= wgpu::Features::TIMESTAMP_QUERY;
    }
    let features = adapter.features() & wanted;
    let limits = adapter.limits();
    let desc = wgpu::DeviceDescriptor {
        label: Some("minerva"),
        required_features: features,
        required_limits: limits.clone(),
        ..Default::default()
    };
    let (device, queue) = pollster::block_on(adapter.request_device(&desc))
        .map_err(|e| WgpuError::RequestDevice { adapter: info.name.clone(), message: e.to_string() })?;
    let device_info = DeviceInfo {
        name: info.name,
        backend: format!("{:?}", info.backend),
        device_type: format!("{:?}", info.device_type),
        driver: format!("{} {}", info.driver, info.driver_info).trim().to_string(),
        shader_f16: features.contains(wgpu::Features::SHADER_F16),
        timestamps: features.contains(wgpu::Features::TIMESTAMP_QUERY),
        subgroups: features.contains(wgpu::Features::SUBGROUP),
        subgroup_min_size: info.subgroup_min_size,
        max_storage_binding: limits.max_storage_buffer_binding_size,
        max_buffer: limits.max_buffer_size,
        max_workgroup_storage: limits.max_compute_workgroup_storage_size,
    };
    Ok((device, queue, device_info))
}
