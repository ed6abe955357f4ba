//! Helpers shared by the CLI's integration tests. Each test binary uses a subset.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The real model, fetched by `cargo xtask setup` (which the test command runs first).
pub fn real_model() -> PathBuf {
    let path = root().join("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(path.exists(), "{} is missing: run `cargo xtask setup`", path.display());
    path
}

/// Runs the `minerva` binary.
pub fn minerva(args: &[&OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_minerva")).args(args).output().expect("run minerva")
}

/// `s` as an argument.
pub fn os(s: &str) -> &OsStr {
    s.as_ref()
}

/// Asserts a failure the way users see it: exit code 2 and exactly one line on stderr naming `what`.
pub fn assert_one_line_error(out: &Output, what: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "stderr should be one line: {stderr:?}");
    assert!(stderr.starts_with("minerva: "), "{stderr}");
    assert!(stderr.contains(what), "{stderr:?} should mention {what:?}");
    assert!(!stderr.contains("panicked") && !stderr.contains("RUST_BACKTRACE"), "{stderr}");
}

/// The figure of `minerva score`'s line (`perplexity X over N scored tokens …`).
pub fn perplexity_in(stdout: &str) -> f64 {
    let figure = stdout.strip_prefix("perplexity ").and_then(|rest| rest.split_whitespace().next());
    figure.and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("no perplexity line: {stdout}"))
}

/// The perplexity a `minerva score` run printed, once it is seen to have succeeded.
pub fn perplexity(out: &Output) -> f64 {
    assert!(out.status.success(), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    perplexity_in(&String::from_utf8_lossy(&out.stdout))
}

/// A little-endian f32 `.npy` file, read back.
pub struct Npy {
    /// Its numpy shape.
    pub shape: Vec<usize>,
    /// The raw data bytes after the header.
    pub data: Vec<u8>,
}

impl Npy {
    /// Reads and checks the header of `path` (format 1.0 or 2.0, `<f4`, C order).
    pub fn read(path: &Path) -> Npy {
        let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(&bytes[..6], b"\x93NUMPY");
        let (header_len, header_start) = match bytes[6] {
            1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
            _ => (u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize, 12),
        };
        let header = std::str::from_utf8(&bytes[header_start..header_start + header_len]).unwrap();
        assert!(header.contains("'descr': '<f4'"), "{header}");
        assert!(header.contains("'fortran_order': False"), "{header}");
        assert_eq!((header_start + header_len) % 64, 0, "data must start 64-byte aligned");
        let dims = header.split("'shape': (").nth(1).unwrap().split(')').next().unwrap();
        let shape = dims.split(',').map(str::trim).filter(|d| !d.is_empty()).map(|d| d.parse().unwrap()).collect();
        Npy { shape, data: bytes[header_start + header_len..].to_vec() }
    }

    /// The values.
    pub fn values(&self) -> Vec<f32> {
        self.data.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
    }
}
