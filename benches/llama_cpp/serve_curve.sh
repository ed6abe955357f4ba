#!/usr/bin/env bash
# The serving curve: `minerva serve` and llama.cpp's `llama-server` (same model, 2 threads, 32
# slots of 1024 tokens), one after the other, each under `cargo xtask loadgen` at 1, 2, 4, 8, 16
# and 32 streaming clients (by default 48 greedy chat requests per level, 64-word prompts
# distinct per level, 64 tokens each), after one warm-up request. Writes
# ${OUT}_{minerva,llama}.{txt,json}.
# Run by hand from the repository root:
#
#   benches/llama_cpp/serve_curve.sh [LLAMA_SERVER]
#
# MINERVA_ARGS adds flags to `minerva serve` (e.g. MINERVA_ARGS="--repack auto"); MODEL picks
# another GGUF file; PROMPT_WORDS, MAX_TOKENS and REQUESTS change the mix (the decode mix of
# docs/benchmarks.md: PROMPT_WORDS=8 MAX_TOKENS=256 REQUESTS=64); OUT names the result files
# (default /tmp/curve).
# (llama-server from benches/llama_cpp/build_llama_cpp.sh; a release build of minerva and xtask.)
set -u
cd "$(dirname "$0")/../.."
M=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
LS=${1:-/tmp/llamacpp/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin/llama-server}
LEVELS=1,2,4,8,16,32
PROMPT_WORDS=${PROMPT_WORDS:-64}
MAX_TOKENS=${MAX_TOKENS:-64}
REQUESTS=${REQUESTS:-48}
OUT=${OUT:-/tmp/curve}
wait_up() { for i in $(seq 1 200); do curl -sf localhost:$1/health >/dev/null && break; sleep 0.3; done; curl -s localhost:$1/v1/chat/completions -H 'Content-Type: application/json' -d '{"messages":[{"role":"user","content":"warm up"}],"max_tokens":8}' > /dev/null; }
target/release/minerva serve $M --threads 2 --parallel 32 --ctx-size 1024 --port 8093 ${MINERVA_ARGS:-} > ${OUT}_minerva.log 2>&1 &
P=$!; wait_up 8093; sleep 1
target/release/xtask loadgen --url http://127.0.0.1:8093 --concurrency $LEVELS --requests $REQUESTS --prompt-tokens $PROMPT_WORDS --max-tokens $MAX_TOKENS --json ${OUT}_minerva.json > ${OUT}_minerva.txt 2>&1
kill $P; sleep 2
$LS -m $M -t 2 -np 32 -c 32768 --port 8094 > ${OUT}_llama.log 2>&1 &
P=$!; wait_up 8094; sleep 1
target/release/xtask loadgen --url http://127.0.0.1:8094 --concurrency $LEVELS --requests $REQUESTS --prompt-tokens $PROMPT_WORDS --max-tokens $MAX_TOKENS --json ${OUT}_llama.json > ${OUT}_llama.txt 2>&1
kill $P
echo finished
