#!/usr/bin/env bash
# Serving with and without speculative decoding: `minerva serve` on one model, plain and with
# `--spec ngram` (each --spec-max-batch given), the same `cargo xtask loadgen` levels against each,
# for an editing workload (edit_paragraph.txt) and free-form story prompts (loadgen's default).
#
#   benches/speculative/serve_curve.sh models/SmolLM2-135M-Instruct.Q4_1.gguf [threads] [max-batches]
#
# Needs a release build (`cargo build --release`). Prints loadgen's tables; run by hand.
set -euo pipefail
model=${1:?model path}
threads=${2:-2}
batches=${3:-"1 2 4 8"}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
minerva="$root/target/release/minerva"
loadgen="$root/target/release/xtask"
port=18840
serve() { # extra flags...
  "$minerva" serve "$model" --threads "$threads" --parallel 8 --ctx-size 2048 --port $port "$@" 2>/dev/null &
  pid=$!
  for _ in $(seq 600); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && return; sleep 0.2; done
  echo "server did not start" >&2; exit 1
}
levels() { # label, extra loadgen flags...
  local label=$1; shift
  echo "### $label"
  "$loadgen" loadgen --url "http://127.0.0.1:$port" --concurrency 1,2,4,8 --requests 16 --max-tokens 128 "$@"
}
for workload in edit story; do
  flags=()
  [ "$workload" = edit ] && flags=(--prompt-file "$here/edit_paragraph.txt")
  serve
  levels "$workload, plain" "${flags[@]}"
  kill $pid; wait $pid 2>/dev/null || true
  for b in $batches; do
    serve --spec ngram --spec-max-batch "$b"
    levels "$workload, --spec ngram --spec-max-batch $b" "${flags[@]}"
    curl -s "http://127.0.0.1:$port/metrics" | grep -E '^minerva_spec_(drafted|accepted)_tokens_total' || true
    kill $pid; wait $pid 2>/dev/null || true
  done
done
