#!/usr/bin/env bash
# Everything the wgpu backend's real-GPU figures need, in one run on a GPU machine that reaches no
# package registry: bring release binaries built elsewhere (`benches/gpu/build.sh` puts them in
# .gpubin/), then
#
#   benches/gpu/run_gpu.sh [BIN_DIR] [OUT_DIR]
#
# It measures the device's copy bandwidth (PyTorch, when the machine has it; else set BANDWIDTH in
# GB/s), writes the synthetic models on the machine's disk (`xtask synth`: GPT-OSS-20B MXFP4,
# SmolLM2-135M's shapes, Llama-3.1-8B's shapes at Q4_0) and runs `bench_gpu` on each: prefill,
# decode against the roofline, batched decode, and the kernels' times from timestamp queries.
# Each step has its own time limit, so one slow step leaves the others' figures.
set -u
BIN=${1:-.gpubin}
OUT=${2:-${OUT:-/tmp/minerva-gpu-out}}
WORK=${WORK:-/tmp/minerva-gpu-models}
STEP_LIMIT=${STEP_LIMIT:-150}
mkdir -p "$OUT" "$WORK"
log() { echo "== $(date +%T) $*"; }

log machine
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,clocks.mem,driver_version --format=csv 2>&1 | tail -n +1
nproc

if [ -z "${BANDWIDTH:-}" ] && command -v python3 >/dev/null; then
    log "copy bandwidth (device to device, bytes read + written)"
    BANDWIDTH=$(timeout 60 python3 - <<'EOF'
import torch
n = 1 << 30  # 4 GiB of f32 per buffer, far over the L2
a = torch.empty(n, dtype=torch.float32, device="cuda").uniform_()
b = torch.empty_like(a)
for _ in range(3):
    b.copy_(a)
times = []
for _ in range(20):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record(); b.copy_(a); e.record(); e.synchronize()
    times.append(s.elapsed_time(e) / 1e3)
times.sort()
print(f"{2 * 4 * n / times[len(times) // 2] / 1e9:.0f}")
EOF
    )
fi
BANDWIDTH=${BANDWIDTH:-0}
echo "bandwidth: $BANDWIDTH GB/s"
bw_arg=()
[ "$BANDWIDTH" != 0 ] && bw_arg=(--bandwidth "$BANDWIDTH")

synth() { # NAME ARGS...
    local name=$1; shift
    log "synth $name"
    timeout "$STEP_LIMIT" "$BIN/xtask" synth "$@" "$WORK/$name.gguf" 2>&1 | tail -n 3
}
bench() { # NAME ARGS...
    local name=$1; shift
    log "bench_gpu $name $*"
    timeout "$STEP_LIMIT" "$BIN/bench_gpu" "$WORK/$name.gguf" "${bw_arg[@]}" "$@" 2>&1 | tee "$OUT/$name.txt"
}

synth smollm2-q8_0 --arch llama --preset 135m --format gguf --quant q8_0
bench smollm2-q8_0 --prompt 512 --decode 128 --batch 8,16 --profile
synth gpt-oss-20b --arch gpt-oss --preset 20b --format gguf
bench gpt-oss-20b --prompt 512 --decode 128 --batch 8,16 --profile --no-cpu
rm -f "$WORK/gpt-oss-20b.gguf"
synth llama-8b-q4_0 --arch llama --preset 8b --format gguf --quant q4_0
bench llama-8b-q4_0 --prompt 512 --decode 64 --profile --no-cpu
log done
