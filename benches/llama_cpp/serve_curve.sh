#!/usr/bin/env bash
# The serving curve: `minerva serve` and llama.cpp's `llama-server` (same model, 2 threads, 32
# slots of 1024 tokens), one after the other, each under `cargo xtask loadgen` at 1, 2, 4, 8, 16
# and 32 streaming clients (48 greedy chat requests per level, 64-word prompts distinct per
# level, 64 tokens each), after one warm-up request. Writes /tmp/curve_{minerva,llama}.{txt,json}.
# Run by hand from the repository root:
#
#   benches/llama_cpp/serve_curve.sh [LLAMA_SERVER]
#
# MINERVA_ARGS adds flags to `minerva serve` (e.g. MINERVA_ARGS="--repack auto"); MODEL picks
# another GGUF file.
# (llama-server from benches/llama_cpp/build_llama_cpp.sh; a release build of minerva and xtask.)
set -u
cd "$(dirname "$0")/../.."
M=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
LS=${1:-/tmp/llamacpp/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin/llama-server}
LEVELS=1,2,4,8,16,32
wait_up() { for i in $(seq 1 200); do curl -sf localhost:$1/health >/dev/null && break; sleep 0.3; done; curl -s localhost:$1/v1/chat/completions -H 'Content-Type: application/json' -d '{"messages":[{"role":"user","content":"warm up"}],"max_tokens":8}' > /dev/null; }
target/release/minerva serve $M --threads 2 --parallel 32 --ctx-size 1024 --port 8093 ${MINERVA_ARGS:-} > /tmp/curve_minerva.log 2>&1 &
P=$!; wait_up 8093; sleep 1
target/release/xtask loadgen --url http://127.0.0.1:8093 --concurrency $LEVELS --requests 48 --max-tokens 64 --json /tmp/curve_minerva.json > /tmp/curve_minerva.txt 2>&1
kill $P; sleep 2
$LS -m $M -t 2 -np 32 -c 32768 --port 8094 > /tmp/curve_llama.log 2>&1 &
P=$!; wait_up 8094; sleep 1
target/release/xtask loadgen --url http://127.0.0.1:8094 --concurrency $LEVELS --requests 48 --max-tokens 64 --json /tmp/curve_llama.json > /tmp/curve_llama.txt 2>&1
kill $P
echo finished
