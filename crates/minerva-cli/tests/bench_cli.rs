//! `minerva bench` on the real model: small runs, JSON and text output, one-line errors.

mod common;
/// The AVX2 check the kernel tests share (it reports, or fails under CI, when AVX2 is missing).
#[path = "../../minerva-quant/tests/common/mod.rs"]
mod quant_common;

use common::{assert_one_line_error, minerva, os, real_model};

#[test]
fn json_reports_both_rates_and_every_run() {
    let model = real_model();
    let out = minerva(&[
        os("bench"),
        model.as_os_str(),
        os("-p"),
        os("16"),
        os("-n"),
        os("4"),
        os("-r"),
        os("2"),
        os("--threads"),
        os("1"),
        os("--json"),
    ]);
    assert!(out.status.success(), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    for key in ["prefill_tok_s", "decode_tok_s"] {
        let v = json[key].as_f64().unwrap_or_else(|| panic!("{key} in {json}"));
        assert!(v.is_finite() && v > 0.0, "{key} = {v}");
    }
    assert_eq!(json["prefill_runs_tok_s"].as_array().map(Vec::len), Some(2));
    assert_eq!(json["decode_runs_tok_s"].as_array().map(Vec::len), Some(2));
    assert_eq!((json["prompt_tokens"].as_u64(), json["gen_tokens"].as_u64()), (Some(16), Some(4)));
    assert_eq!(json["threads"].as_u64(), Some(1));
    // Which CPU and which kernels the figures come from: SmolLM2 Q4_1 has Q4_1 and Q8_0 matrices.
    assert!(json["cpu"].as_str().is_some_and(|c| !c.is_empty()), "{json}");
    let kernels: Vec<&str> = json["kernels"].as_array().unwrap().iter().map(|k| k.as_str().unwrap()).collect();
    assert_eq!(kernels.len(), 2, "{json}");
    assert!(kernels[0].starts_with("Q4_1: matmul ") && kernels[1].starts_with("Q8_0: matmul "), "{kernels:?}");
    assert_eq!(json["vector_kernels"].as_str(), Some(minerva_quant::vector::vector_isa()), "{json}");
}

/// `--repack`: `auto` repacks SmolLM2 (LLaMA: 8-bit activations hold) — all 211 of its matrices
/// (30 layers × 7, and the tied head), as many bytes as their blocks — and says so; `off` copies
/// nothing; on Gemma 3 `auto` repacks its K-quants (Q8_K activations either way) and its Q5_0 /
/// Q8_0 matrices (8-bit activations hold for its architecture too), where their kernels pay on
/// this CPU.
#[test]
fn repacking_is_reported_where_it_happens() {
    let run = |model: &std::path::Path, mode: &str| {
        let args = [os("bench"), model.as_os_str(), os("-p"), os("8"), os("-n"), os("2"), os("-r"), os("1")];
        let out = minerva(&[&args[..], &[os("--json"), os("--repack"), os(mode)]].concat());
        assert!(out.status.success(), "stderr: {}", String::from_utf8_lossy(&out.stderr));
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
        (json["repacked_matrices"].as_u64().unwrap(), json["repacked_bytes"].as_u64().unwrap())
    };
    let smollm2 = real_model();
    // Q4_1 layers (20 bytes per 32 values) and the Q8_0 head (34), rows whole groups of 16.
    let (e, ff, vocab, layers) = (576u64, 1536u64, 49152u64, 30u64);
    let layer = (e * e * 2 + e * 192 * 2 + 3 * e * ff) / 32 * 20;
    let expected = layers * layer + vocab * e / 32 * 34;
    // `auto` repacks where the kernel pays on this CPU (AVX2 or AVX-512 for the 32-value formats).
    let pays = minerva_quant::repacking_pays(minerva_core::DType::Q4_1);
    assert_eq!(run(&smollm2, "auto"), if pays { (211, expected) } else { (0, 0) });
    assert_eq!(run(&smollm2, "on"), (211, expected));
    assert_eq!(run(&smollm2, "off"), (0, 0));
    let gemma = common::root().join("models/gemma-3-270m-q4_k_m.gguf");
    // 18 attention outputs Q4_K 640×1024, 9 FFN downs Q4_K and 9 Q6_K 640×2048: 40 groups of 16
    // rows, super-blocks of 2368 (Q4_K: 16 × 144 and its unpacked scales) and 3360 (Q6_K: 16 × 210)
    // bytes.
    let q4_k = |cols: u64| 40 * cols / 256 * 2368;
    let expected = 18 * q4_k(1024) + 9 * q4_k(2048) + 9 * (40 * 2048 / 256 * 3360);
    // The K-quants' repacked kernels pay with AVX-512 VNNI; with AVX2, Q6_K's only (the Q4_K
    // and Q5_K ones decode slower).
    let q6_k = 9 * (40 * 2048 / 256 * 3360);
    let pays = minerva_quant::repacking_pays;
    let (matrices, bytes) = match (pays(minerva_core::DType::Q4_K), pays(minerva_core::DType::Q6_K)) {
        (true, true) => (36, expected),
        (false, true) => (9, q6_k),
        (false, false) => (0, 0),
        (true, false) => unreachable!("no CPU's kernels pay for Q4_K and not Q6_K"),
    };
    // Its 32-value matrices, 640 columns each: Q5_0 (22 bytes per 32 values) 18 q of 1024 rows,
    // 36 gate / up of 2048, 27 k / v of 256; Q8_0 (34 bytes) 9 v of 256 and the tied head of
    // 262144 rows. Where their kernels pay (AVX2 and up), `auto` repacks them all, blocks as stored.
    let blocks = |rows: u64, bytes: u64| rows * 640 / 32 * bytes;
    let small = match (pays(minerva_core::DType::Q5_0), pays(minerva_core::DType::Q8_0)) {
        (true, true) => {
            (18 + 36 + 27 + 9 + 1, blocks(18 * 1024 + 36 * 2048 + 27 * 256, 22) + blocks(9 * 256 + 262144, 34))
        }
        (false, false) => (0, 0),
        other => unreachable!("the 32-value formats' kernels pay together: {other:?}"),
    };
    assert_eq!(run(&gemma, "auto"), (matrices + small.0, bytes + small.1));
    // And on: its Q5_0 (q, k, gate, up) and Q8_0 (v) matrices and the tied Q8_0 head too.
    assert_eq!(run(&gemma, "on").0, 36 + 18 * 5 + 1);
    assert_eq!(run(&gemma, "off"), (0, 0));
    let text =
        minerva(&[os("bench"), smollm2.as_os_str(), os("-p"), os("8"), os("-n"), os("0"), os("--repack"), os("on")]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("repacked 211 matrices"), "{text}");
}

/// `--repack-memory`: `auto` copies no more than it allows and says what it left in place.
#[test]
fn repacking_memory_budget_is_kept_and_reported() {
    let smollm2 = real_model();
    let bench = |extra: &[&str]| {
        let mut args = vec![os("bench"), smollm2.as_os_str(), os("-p"), os("8"), os("-n"), os("0"), os("-r"), os("1")];
        args.extend([os("--repack"), os("auto")]);
        args.extend(extra.iter().map(|s| os(s)));
        let out = minerva(&args);
        assert!(out.status.success(), "stderr: {}", String::from_utf8_lossy(&out.stderr));
        out
    };
    let json = |extra: &[&str]| -> serde_json::Value {
        serde_json::from_slice(&bench(&[extra, &["--json"]].concat()).stdout).expect("one JSON object")
    };
    let counts = |json: &serde_json::Value, what: &str| {
        (json[format!("{what}_matrices")].as_u64().unwrap(), json[format!("{what}_bytes")].as_u64().unwrap())
    };
    let all = json(&[]);
    let copied = counts(&all, "repacked");
    if copied.0 == 0 {
        // No repacked kernel pays on this CPU: nothing to budget (repacking_is_reported_where_it_happens).
        assert!(!minerva_quant::repacking_pays(minerva_core::DType::Q4_1));
        return;
    }
    assert_eq!(counts(&all, "repack_declined"), (0, 0));
    let budget = copied.1 / 3;
    let part = json(&["--repack-memory", &budget.to_string()]);
    let (made, declined) = (counts(&part, "repacked"), counts(&part, "repack_declined"));
    assert!(made.0 > 0 && made.1 <= budget && declined.0 > 0, "{part}");
    assert_eq!((made.0 + declined.0, made.1 + declined.1), copied);
    let text = bench(&["--repack-memory", "1KiB"]);
    let text = String::from_utf8_lossy(&text.stdout);
    let mib = copied.1 as f64 / (1 << 20) as f64;
    let expected = format!("left {} matrices in place: their copies ({mib:.1} MiB) would pass", copied.0);
    assert!(text.contains(&expected) && !text.lines().any(|l| l.starts_with("repacked ")), "{text}");
    assert_one_line_error(
        &minerva(&[os("bench"), smollm2.as_os_str(), os("--repack-memory"), os("lots")]),
        "--repack-memory",
    );
    // A budget with a mode that has none is refused rather than ignored.
    for mode in ["on", "off"] {
        let args = [os("bench"), smollm2.as_os_str(), os("--repack"), os(mode), os("--repack-memory"), os("1MiB")];
        assert_one_line_error(&minerva(&args), "--repack-memory");
    }
}

#[test]
fn text_output_and_skipped_phases() {
    let model = real_model();
    let out = minerva(&[os("bench"), model.as_os_str(), os("-p"), os("0"), os("-n"), os("3"), os("-r"), os("1")]);
    assert!(out.status.success(), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("decode   tg3") && !text.contains("prefill"), "{text}");
}

#[test]
fn bad_requests_are_one_line_errors() {
    let model = real_model();
    let cases: [(&[&str], &str); 6] = [
        (&["--device", "tpu"], "--device"),
        (&["--threads", "5000"], "cannot start 5000 threads"),
        (&["-r", "0"], "-r must be at least 1"),
        (&["-p", "0", "-n", "0"], "nothing to measure"),
        (&["-p", "100000"], "exceed the model's context"),
        (&["--repack", "sometimes"], "--repack"),
    ];
    for (extra, what) in cases {
        let mut args = vec![os("bench"), model.as_os_str()];
        args.extend(extra.iter().map(|s| os(s)));
        assert_one_line_error(&minerva(&args), what);
    }
}

/// `MINERVA_CPU_ISAS` limits every kernel, the f32 vector kernels included: empty, the scalar
/// reference runs throughout (and still gives figures); limited to AVX2 on an x86 CPU that has
/// it, AVX2 throughout.
#[test]
fn the_isa_limit_reaches_every_kernel() {
    let model = real_model();
    let run = |isas: &str| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_minerva"))
            .args([
                os("bench"),
                model.as_os_str(),
                os("-p"),
                os("4"),
                os("-n"),
                os("2"),
                os("-r"),
                os("1"),
                os("--json"),
            ])
            .env(minerva_quant::ISAS_VAR, isas)
            .output()
            .expect("run minerva");
        assert!(out.status.success(), "stderr: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("one JSON object")
    };
    let scalar = run("");
    assert_eq!(scalar["vector_kernels"].as_str(), Some("scalar"), "{scalar}");
    for kernel in scalar["kernels"].as_array().unwrap() {
        let kernel = kernel.as_str().unwrap();
        assert!(kernel.contains("matmul scalar") && !kernel.contains("avx") && !kernel.contains("neon"), "{kernel}");
    }
    assert!(scalar["prefill_tok_s"].as_f64().is_some_and(|v| v > 0.0), "{scalar}");
    if quant_common::avx2_or_say_why_not("the_isa_limit_reaches_every_kernel (its AVX2 half)") {
        let avx2 = run("avx2+fma+f16c,avx2");
        assert_eq!(avx2["vector_kernels"].as_str(), Some("avx2+fma"), "{avx2}");
        for kernel in avx2["kernels"].as_array().unwrap() {
            let kernel = kernel.as_str().unwrap();
            assert!(kernel.contains("matmul avx2+fma+f16c") && !kernel.contains("avx512"), "{kernel}");
        }
    }
}
