#!/usr/bin/env bash
# Serving with and without speculative decoding: `minerva serve` on one model, plain and with each
# speculative configuration given, the same `cargo xtask loadgen` levels against each, per workload:
# `edit` (edit_paragraph.txt: the answer quotes the prompt), `story` (loadgen's free-form story
# prompts) and `explain` (free_explain.txt: free-form, drafts mostly refused).
#
#   benches/speculative/serve_curve.sh models/SmolLM2-135M-Instruct.Q4_1.gguf [threads]
#
# Environment: CONFIGS, speculative flag sets separated by `;` (default: the measured choice,
# and the choice bounded to batches of 2); WORKLOADS (default "edit story"); SERVE_FLAGS, flags
# every server gets (e.g. `--repack auto`); LEVELS (default 1,2,4,8); REQUESTS per level
# (default 16). Needs a release build (`cargo build --release`). Prints loadgen's tables and the
# speculative counters of each server; run by hand.
set -euo pipefail
model=${1:?model path}
threads=${2:-2}
configs=${CONFIGS:-"--spec ngram;--spec ngram --spec-max-batch 2"}
workloads=${WORKLOADS:-"edit story"}
levels=${LEVELS:-1,2,4,8}
requests=${REQUESTS:-16}
read -r -a common <<<"${SERVE_FLAGS:-}"
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
minerva="$root/target/release/minerva"
loadgen="$root/target/release/xtask"
port=18840
serve() { # extra flags...
  "$minerva" serve "$model" --threads "$threads" --parallel 8 --ctx-size 2048 --port $port "${common[@]}" "$@" 2>/dev/null &
  pid=$!
  for _ in $(seq 600); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && return; sleep 0.2; done
  echo "server did not start" >&2; exit 1
}
run_levels() { # label, extra loadgen flags...
  local label=$1; shift
  echo "### $label"
  "$loadgen" loadgen --url "http://127.0.0.1:$port" --concurrency "$levels" --requests "$requests" --max-tokens 128 "$@"
}
for workload in $workloads; do
  flags=()
  case $workload in
    edit) flags=(--prompt-file "$here/edit_paragraph.txt") ;;
    explain) flags=(--prompt-file "$here/free_explain.txt") ;;
    story) ;;
    *) echo "unknown workload $workload (edit, story, explain)" >&2; exit 2 ;;
  esac
  serve
  run_levels "$workload, plain" "${flags[@]}"
  kill $pid; wait $pid 2>/dev/null || true
  IFS=';' read -r -a sets <<<"$configs"
  for set in "${sets[@]}"; do
    read -r -a spec <<<"$set"
    serve "${spec[@]}"
    run_levels "$workload, $set" "${flags[@]}"
    curl -s "http://127.0.0.1:$port/metrics" | grep -E '^minerva_spec_(drafted|accepted)_tokens_total' || true
    kill $pid; wait $pid 2>/dev/null || true
  done
done
