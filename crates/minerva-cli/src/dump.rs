//! `minerva dump`: one tensor, dequantized to f32, as `.npy`.

use std::path::Path;

use minerva_core::{DType, TensorView};
use minerva_gguf::Gguf;

use crate::error::CliError;
use crate::npy;

/// Runs `minerva dump PATH TENSOR -o OUTPUT`.
pub fn run(path: &Path, tensor: &str, output: &Path) -> Result<(), CliError> {
    let gguf = Gguf::open(path).map_err(CliError::gguf(path))?;
    let view = gguf.tensor(tensor).map_err(CliError::gguf(path))?;
    let values = to_f32(&view).map_err(|message| CliError::Request { path: path.to_path_buf(), message })?;
    let file =
        std::fs::File::create(output).map_err(|source| CliError::Output { path: output.to_path_buf(), source })?;
    npy::write_f32(std::io::BufWriter::new(file), view.shape, &values)
        .map_err(|source| CliError::Output { path: output.to_path_buf(), source })
}

/// The tensor's values as f32 in row-major order.
fn to_f32(view: &TensorView<'_>) -> Result<Vec<f32>, String> {
    let bytes = view.bytes;
    Ok(match view.dtype {
        DType::F32 => bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect(),
        DType::F16 => bytes.chunks_exact(2).map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32()).collect(),
        DType::BF16 => bytes.chunks_exact(2).map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32()).collect(),
        other => {
            return Err(format!(
                "tensor {:?} is {other}: dequantizing it is not yet supported (F32, F16 and BF16 are)",
                view.name
            ));
        }
    })
}
