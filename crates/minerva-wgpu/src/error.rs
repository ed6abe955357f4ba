//! The crate's error type.

/// What can go wrong finding or talking to a GPU.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WgpuError {
    /// No adapter of any usable kind was found.
    #[error("no GPU adapter found (backends tried: {backends}); install a Vulkan driver, e.g. mesa-vulkan-drivers")]
    NoAdapter {
        /// The wgpu backends that were searched.
        backends: String,
    },
    /// `MINERVA_ADAPTER` (or `--adapter`) matched none of the adapters.
    #[error("no GPU adapter name contains {wanted:?} (available: {})", available.join(", "))]
    AdapterNotFound {
        /// The requested name substring.
        wanted: String,
        /// The adapters that exist.
        available: Vec<String>,
    },
    /// The adapter refused to open a device with its own features and limits.
    #[error("cannot open a device on {adapter}: {message}")]
    RequestDevice {
        /// The adapter's name.
        adapter: String,
        /// wgpu's message.
        message: String,
    },
    /// wgpu reported an error (validation, out of memory) while recording or running a step.
    #[error("GPU error: {0}")]
    Device(String),
    /// Reading a buffer back failed.
    #[error("reading back from the GPU failed: {0}")]
    ReadBack(String),
    /// A KV cache element type other than F16 and F32 was asked for.
    #[error("the GPU KV cache holds F16 or F32, not {0}")]
    KvDtype(minerva_core::DType),
    /// `WgpuOptions::tile` names a tile larger than the adapter's workgroup memory.
    #[error("tiles of {tile} need {needs} bytes of workgroup memory; the adapter offers {has}")]
    TileTooLarge {
        /// The tile asked for.
        tile: crate::TileShape,
        /// Its workgroup memory.
        needs: usize,
        /// The adapter's.
        has: usize,
    },
    /// Profiling was asked of a device opened without timestamp queries.
    #[error(
        "no kernel timestamps: open the backend with WgpuOptions::profile on an adapter that offers TIMESTAMP_QUERY"
    )]
    NoTimestamps,
}

impl From<WgpuError> for minerva_model::ModelError {
    fn from(e: WgpuError) -> Self {
        minerva_model::ModelError::Device { message: e.to_string() }
    }
}
