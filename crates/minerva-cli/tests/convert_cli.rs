//! `minerva convert` as users run it: SmolLM2 GGUF → SafeTensors → GGUF keeps its tokenizer
//! (same ids from `minerva tokenize` at every step) and prints one summary line; bad requests are
//! one-line errors with exit code 2.

mod common;

use common::{assert_one_line_error, minerva, os, real_model, root};

fn ids(model: &std::path::Path, text: &str) -> String {
    let out = minerva(&[os("tokenize"), model.as_os_str(), os("--text"), os(text), os("--json")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn smollm2_to_safetensors_and_back_tokenizes_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let (hf, gguf) = (dir.path().join("smol"), dir.path().join("smol.gguf"));
    let out = minerva(&[os("convert"), real_model().as_os_str(), os("--to"), os("safetensors"), hf.as_os_str()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let line = String::from_utf8(out.stdout).unwrap();
    assert_eq!(line.lines().count(), 1, "{line}");
    assert!(line.contains("lossy: converted 210 Q4_1→BF16, 1 Q8_0→BF16"), "{line}");
    for file in
        ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "generation_config.json"]
    {
        assert!(hf.join(file).exists(), "{file}");
    }
    let out = minerva(&[os("convert"), hf.as_os_str(), os("--to"), os("gguf"), gguf.as_os_str()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("lossless"), "bf16 → GGUF keeps bf16");
    let text = "Hello world! In 1492, Columbus sailed the ocean blue; <|im_start|>user\nwhat's 2+2?<|im_end|>";
    let want = ids(&real_model(), text);
    assert_eq!(ids(&hf, text), want);
    assert_eq!(ids(&gguf, text), want);
}

#[test]
fn refusals_are_one_line_errors() {
    let dir = tempfile::tempdir().unwrap();
    let tiny = root().join("fixtures/gpt_oss/hf");
    let out_path = dir.path().join("out.gguf");
    let convert = |args: &[&std::ffi::OsStr]| minerva(&[&[os("convert")], args].concat());

    let out = convert(&[tiny.as_os_str(), os("--to"), os("onnx"), out_path.as_os_str()]);
    assert_one_line_error(&out, "--to onnx");
    let out = convert(&[tiny.as_os_str(), os("--to"), os("gguf"), os("--quant"), os("q3_k"), out_path.as_os_str()]);
    assert_one_line_error(&out, "--quant q3_k");
    let mlx_out = dir.path().join("mlx");
    let out = convert(&[tiny.as_os_str(), os("--to"), os("mlx"), os("--mlx-bits"), os("7"), mlx_out.as_os_str()]);
    assert_one_line_error(&out, "--mlx-bits 7");
    let out = convert(&[tiny.as_os_str(), os("--to"), os("gguf"), os("--mlx-bits"), os("8"), out_path.as_os_str()]);
    assert_one_line_error(&out, "only for --to mlx");
    let bad = dir.path().join("bad.gguf");
    std::fs::write(&bad, b"not a model").unwrap();
    let out = convert(&[bad.as_os_str(), os("--to"), os("safetensors"), dir.path().join("x").as_os_str()]);
    assert_one_line_error(&out, "bad.gguf");

    // The word-level test tokenizer has no GGUF form: a warning, and the weights are converted.
    let out = convert(&[tiny.as_os_str(), os("--to"), os("gguf"), out_path.as_os_str()]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("warning: tokenizer not converted"));
    let out = convert(&[tiny.as_os_str(), os("--to"), os("gguf"), out_path.as_os_str()]);
    assert_one_line_error(&out, "exists (give --force");
    let out = convert(&[tiny.as_os_str(), os("--to"), os("gguf"), os("--force"), out_path.as_os_str()]);
    assert!(out.status.success());
}

/// `--to mlx` quantizes to 8-bit MLX affine unless told otherwise, and says so; `--mlx-bits none`
/// keeps the floats, losslessly.
#[test]
fn mlx_output_is_8_bit_by_default() {
    let dir = tempfile::tempdir().unwrap();
    let tiny = root().join("fixtures/gpt_oss/hf");
    let config = |dir: &std::path::Path| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(dir.join("config.json")).unwrap()).unwrap()
    };
    let quantized = dir.path().join("q");
    let out = minerva(&[os("convert"), tiny.as_os_str(), os("--to"), os("mlx"), quantized.as_os_str()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("float→MLX affine"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let q = &config(&quantized)["quantization"];
    assert_eq!((q["mode"].as_str(), q["lm_head"]["bits"].as_u64()), (Some("mxfp4"), Some(8)));
    let floats = dir.path().join("f");
    let out = minerva(&[
        os("convert"),
        tiny.as_os_str(),
        os("--to"),
        os("mlx"),
        os("--mlx-bits"),
        os("none"),
        floats.as_os_str(),
    ]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains(": lossless"), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(config(&floats)["quantization"].get("lm_head").is_none());
}
