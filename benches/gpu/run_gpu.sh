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
# decode against the roofline, batched decode, and the kernels' times from timestamp queries;
# then again with the older matrix kernels (`--no-block-decode --tiled-from 0`) and without the
# fused kernels (`--no-fuse`), and, where
# LLAMA_BENCH names a llama-bench built with llama.cpp's Vulkan backend, llama.cpp on the same
# model and card.
# Each step has its own time limit, so one slow step leaves the others' figures.
set -u
BIN=${1:-.gpubin}
OUT=${2:-${OUT:-/tmp/minerva-gpu-out}}
WORK=${WORK:-/tmp/minerva-gpu-models}
STEP_LIMIT=${STEP_LIMIT:-150}
# SMOKE=1: the same steps on the small presets with short prompts, so the script runs end to end
# on lavapipe (`SMOKE=1 benches/gpu/run_gpu.sh .gpubin`), as a check before a GPU call.
if [ "${SMOKE:-0}" = 1 ]; then
    LLAMA_SMALL=tiny LLAMA_BIG=tiny GPT_OSS=tiny P=32 D=8 P_LONG=64 D_LONG=4 BATCHES=4 BATCHES_OLD=4 VOCAB=
else
    LLAMA_SMALL=135m LLAMA_BIG=8b GPT_OSS=20b P=512 D=128 P_LONG=4096 D_LONG=16 BATCHES=8,16,32,64 BATCHES_OLD=8,16 VOCAB=--vocab
fi
D_BIG=$((D / 2))
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
    timeout "$STEP_LIMIT" "$BIN/xtask" synth "$@" $VOCAB "$WORK/$name.gguf" 2>&1 | tail -n 3
}
bench() { # LABEL MODEL ARGS...: bench_gpu on MODEL, output kept as OUT/LABEL.txt
    local label=$1 name=$2; shift 2
    log "bench_gpu $label: $name $*"
    timeout "$STEP_LIMIT" "$BIN/bench_gpu" "$WORK/$name.gguf" "${bw_arg[@]}" "$@" 2>&1 | tee "$OUT/$label.txt"
}
# llama.cpp's Vulkan backend on the same model, when its llama-bench was brought (LLAMA_BENCH).
peer() { # LABEL MODEL ARGS...
    local label=$1 name=$2; shift 2
    [ -x "${LLAMA_BENCH:-}" ] || return 0
    log "llama-bench (Vulkan) $label: $name $*"
    timeout "$STEP_LIMIT" "$LLAMA_BENCH" -m "$WORK/$name.gguf" -ngl 99 -r 3 "$@" 2>&1 | tee "$OUT/$label.txt"
}
# The kernels this backend had before the block decode and the tiles, for ratios in one run.
OLD=(--no-block-decode --tiled-from 0)

synth smollm2-q8_0 --arch llama --preset $LLAMA_SMALL --format gguf --quant q8_0
bench smollm2 smollm2-q8_0 --prompt $P --decode $D --batch $BATCHES --profile
bench smollm2-old smollm2-q8_0 --prompt $P --decode $D --batch $BATCHES_OLD --no-cpu "${OLD[@]}"
peer smollm2-vulkan smollm2-q8_0 -p $P -n $D
synth llama-8b-q4_0 --arch llama --preset $LLAMA_BIG --format gguf --quant q4_0
bench llama-8b llama-8b-q4_0 --prompt $P --decode $D_BIG --batch $BATCHES --profile --no-cpu
bench llama-8b-old llama-8b-q4_0 --prompt $P --decode $D_BIG --batch $BATCHES_OLD --no-cpu "${OLD[@]}"
# The fused kernels (norms and SwiGLU into the decode products, RoPE into the KV store) against
# each op in a kernel of its own.
bench llama-8b-unfused llama-8b-q4_0 --prompt $P --decode $D_BIG --no-cpu --no-fuse
# The tiles of one shape against the per-product choice (the 64 × 64 tile was the only one
# before; 128 × 128 where the device's workgroup memory holds it).
bench llama-8b-tile64 llama-8b-q4_0 --prompt $P --decode 4 --batch $BATCHES --no-cpu --tile 64x64
bench llama-8b-tile128 llama-8b-q4_0 --prompt $P --decode 4 --batch $BATCHES --no-cpu --tile 128x128
# Where the tiles start paying: the same batches with the tiles from 8 rows.
bench llama-8b-tiled8 llama-8b-q4_0 --prompt 64 --decode 16 --batch $BATCHES --no-cpu --tiled-from 8
peer llama-8b-vulkan llama-8b-q4_0 -p $P -n $D_BIG
rm -f "$WORK/llama-8b-q4_0.gguf"
synth gpt-oss-20b --arch gpt-oss --preset $GPT_OSS --format gguf
bench gpt-oss-20b gpt-oss-20b --prompt $P --decode $D_BIG --batch $BATCHES --profile --no-cpu
bench gpt-oss-20b-old gpt-oss-20b --prompt $P --decode $D_BIG --batch $BATCHES_OLD --no-cpu "${OLD[@]}"
peer gpt-oss-20b-vulkan gpt-oss-20b -p $P,$P_LONG -n $D_BIG
bench gpt-oss-20b-unfused gpt-oss-20b --prompt $P --decode $D_BIG --no-cpu --no-fuse
bench gpt-oss-20b-long gpt-oss-20b --prompt $P_LONG --decode $D_LONG --no-cpu
# Whole steps submitted at the read-back, against the default parts of 128 dispatches.
bench gpt-oss-20b-whole gpt-oss-20b --prompt $P --decode $D_BIG --no-cpu --submit-every 0
log done
