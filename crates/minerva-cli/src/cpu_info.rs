//! Which CPU a figure was measured on and which kernels ran: `bench` prints it beside its
//! figures, `inspect --device` for every weight type.

use std::collections::BTreeSet;
use std::path::Path;

use minerva_core::DType;

use crate::error::CliError;
use crate::model_file::ModelFile;

/// The CPU's model name (`/proc/cpuinfo`), or the architecture where that is not readable.
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines().find_map(|l| Some(l.strip_prefix("model name")?.split_once(':')?.1.trim().to_string()))
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

/// The SIMD features the kernels look for that this CPU has.
pub fn cpu_features() -> Vec<&'static str> {
    let mut found = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        macro_rules! probe {
            ($($f:tt),*) => {$(if std::arch::is_x86_feature_detected!($f) { found.push($f); })*};
        }
        probe!("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vnni", "avx512bf16", "avxvnni");
        // AMX needs the OS's consent besides CPUID, which the kernel table asked for: its ISA is
        // there only where both hold (`is_x86_feature_detected!` has no stable AMX names).
        if minerva_quant::detected_isas().contains(&"amx+avx512") {
            found.push("amx-int8");
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        macro_rules! probe {
            ($($f:tt),*) => {$(if std::arch::is_aarch64_feature_detected!($f) { found.push($f); })*};
        }
        probe!("neon", "dotprod");
    }
    found
}

/// `Q4_1: matmul avx2+fma+f16c, i16 avx2+fma+f16c, dequantize avx2` for one weight type.
pub fn kernels_of(dtype: DType) -> String {
    let k = minerva_quant::cpu_kernels(dtype);
    let mut parts = Vec::new();
    let repacked = minerva_quant::repacked_kernel_isa(dtype);
    for (what, isa) in
        [("matmul", k.matmul), ("i16", k.matmul_i16), ("repacked", repacked), ("dequantize", k.dequantize)]
    {
        if let Some(isa) = isa {
            parts.push(format!("{what} {isa}"));
        }
    }
    format!("{}: {}", dtype.name(), if parts.is_empty() { "none".into() } else { parts.join(", ") })
}

/// The weight types of the matrices (2-D or more) of a model file.
pub fn matrix_dtypes(path: &Path) -> Result<BTreeSet<DType>, CliError> {
    Ok(match ModelFile::open(path)? {
        ModelFile::Gguf(gguf) => gguf.tensor_infos().iter().filter(|t| t.shape.len() >= 2).map(|t| t.dtype).collect(),
        // As the kernels see them: split MXFP4 runs the MXFP4 kernels, MLX affine is dequantized
        // at load to its scales' float type.
        ModelFile::Safetensors(ckpt) => ckpt
            .logical_tensors()
            .filter(|t| t.shape.len() >= 2)
            .map(|t| match t.encoding {
                minerva_safetensors::Encoding::Plain(view) => view.dtype,
                minerva_safetensors::Encoding::HfMxfp4 { .. } | minerva_safetensors::Encoding::MlxMxfp4 { .. } => {
                    DType::MXFP4
                }
                minerva_safetensors::Encoding::MlxAffine { scales, .. } => scales.dtype,
            })
            .collect(),
    })
}
