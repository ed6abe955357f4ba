//! `synth --arch llama --preset 8b|1b|tiny --format gguf [--quant q4_0|q8_0] OUT`: a synthetic
//! model with random weights at real shapes (run through `cargo xtask synth`).

use std::process::ExitCode;

use minerva_benches::synth::{llama_preset, write_llama_gguf};
use minerva_core::DType;

fn main() -> ExitCode {
    match run(std::env::args().skip(1).collect()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("synth: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(args: Vec<String>) -> Result<(), String> {
    let (mut arch, mut preset, mut format, mut quant, mut out) = (None, None, None, "q8_0".to_string(), None);
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        let mut value = || it.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--arch" => arch = Some(value()?),
            "--preset" => preset = Some(value()?),
            "--format" => format = Some(value()?),
            "--quant" => quant = value()?,
            _ if !a.starts_with('-') && out.is_none() => out = Some(a),
            _ => return Err(format!("unknown argument {a}")),
        }
    }
    let usage = "usage: synth --arch llama --preset 8b|1b|tiny --format gguf [--quant q4_0|q8_0] OUT";
    let (Some(arch), Some(preset), Some(format), Some(out)) = (arch, preset, format, out) else {
        return Err(usage.to_string());
    };
    if arch != "llama" || format != "gguf" {
        return Err(format!("--arch {arch} --format {format}: this version writes only --arch llama --format gguf"));
    }
    let shape = llama_preset(&preset).ok_or(format!("unknown preset {preset} (8b, 1b, tiny)"))?;
    let quant = match quant.as_str() {
        "q4_0" => DType::Q4_0,
        "q8_0" => DType::Q8_0,
        q => return Err(format!("--quant {q}: q4_0 or q8_0")),
    };
    let len = write_llama_gguf(&shape, quant, out.as_ref(), 0x5EED).map_err(|e| format!("{out}: {e}"))?;
    println!("{out}: {len} bytes ({preset} {quant})");
    Ok(())
}
