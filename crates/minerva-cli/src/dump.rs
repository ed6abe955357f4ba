//! `minerva dump`: one tensor, dequantized to f32, as `.npy`.

use std::io::Write;
use std::path::Path;

use minerva_core::TensorView;
use minerva_gguf::Gguf;

use crate::error::CliError;
use crate::npy;

/// Blocks dequantized per step: bounds memory whatever the tensor's size (a GPT-OSS expert tensor
/// is 2.9 GB of f32 once dequantized).
const BLOCKS_PER_CHUNK: usize = 1 << 15;

/// Runs `minerva dump PATH TENSOR -o OUTPUT`.
pub fn run(path: &Path, tensor: &str, output: &Path) -> Result<(), CliError> {
    let gguf = Gguf::open(path).map_err(CliError::gguf(path))?;
    let view = gguf.tensor(tensor).map_err(CliError::gguf(path))?;
    if minerva_quant::dequantizer(view.dtype).is_none() {
        return Err(CliError::Request {
            path: path.to_path_buf(),
            message: format!("tensor {:?} is {}, which minerva cannot dequantize yet", view.name, view.dtype),
        });
    }
    let out_err = |source| CliError::Output { path: output.to_path_buf(), source };
    let file = std::fs::File::create(output).map_err(out_err)?;
    let mut w = std::io::BufWriter::new(file);
    npy::write_f32_header(&mut w, view.shape).map_err(out_err)?;
    write_dequantized(&view, &mut w).map_err(|e| match e {
        DumpError::Io(source) => out_err(source),
        DumpError::Quant(e) => CliError::Request { path: path.to_path_buf(), message: format!("tensor {tensor:?}: {e}") },
    })?;
    w.flush().map_err(out_err)
}

enum DumpError {
    Io(std::io::Error),
    Quant(minerva_quant::QuantError),
}

/// Dequantizes the tensor chunk by chunk, in row-major order, into `w`.
fn write_dequantized(view: &TensorView<'_>, w: &mut impl Write) -> Result<(), DumpError> {
    let (block_bytes, block_elems) = (view.dtype.block_bytes(), view.dtype.block_elems());
    let mut values = Vec::new();
    for chunk in view.bytes.chunks(BLOCKS_PER_CHUNK * block_bytes) {
        values.resize(chunk.len() / block_bytes * block_elems, 0.0);
        minerva_quant::dequantize_fast(view.dtype, chunk, &mut values).map_err(DumpError::Quant)?;
        npy::write_values(&mut *w, &values).map_err(DumpError::Io)?;
    }
    Ok(())
}
