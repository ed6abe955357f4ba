#!/usr/bin/env bash
# Builds what benches/gpu/run_gpu.sh runs on a GPU machine that reaches no registry: release
# `xtask` (synth) and the `bench_gpu` example, stripped, into DIR (default .gpubin, git-ignored
# through .git/info/exclude). Carry DIR to the GPU machine with the working tree, then run
# `benches/gpu/run_gpu.sh DIR OUT` there (the Vulkan loader, libvulkan1, must be installed there).
set -euo pipefail
DIR=${1:-.gpubin}
cd "$(dirname "$0")/../.."
cargo build --release -p xtask
cargo build --release -p minerva-wgpu --example bench_gpu
mkdir -p "$DIR"
strip -o "$DIR/xtask" target/release/xtask
strip -o "$DIR/bench_gpu" target/release/examples/bench_gpu
EXCLUDE=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$EXCLUDE")"
grep -qx "/$DIR/" "$EXCLUDE" 2>/dev/null || echo "/$DIR/" >> "$EXCLUDE"
ls -l "$DIR"
