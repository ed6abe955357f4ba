#!/usr/bin/env bash
# Serving with and without speculative decoding: one `minerva serve` per speculative configuration,
# and against it the same `cargo xtask loadgen` levels in turns, plain and speculative, per
# workload: `edit` (edit_paragraph.txt: the answer quotes the prompt), `story` (loadgen's free-form
# story prompts) and `explain` (free_explain.txt: free-form, drafts mostly refused).
#
#   benches/speculative/serve_curve.sh models/SmolLM2-135M-Instruct.Q4_1.gguf [threads]
#
# The plain turns run on the same server, each request sending `"speculative": false` (it then
# never drafts, as on a server without `--spec`). A shared VM's speed drifts by ±20 % over minutes,
# more than the differences measured here: separate servers a few minutes apart gave ratios that
# moved by that much between runs. Turns a minute apart, their order alternated (plain first in
# odd rounds, speculative first in even ones), and the median of the turns' ratios cancel most of
# the drift. A warm-up turn of one-token answers runs every prompt first, so that the first turn
# does not alone pay for prompts that later turns find in the prefix cache.
#
# Environment: CONFIGS, speculative flag sets separated by `;` (default: the measured choice, and
# `--spec-fixed`); WORKLOADS (default "edit explain"); SERVE_FLAGS, flags every server gets (e.g.
# `--repack auto`); LEVELS (default 1,2,4,8); REQUESTS per level and turn (default 16); ROUNDS
# (default 3). Needs a release build (`cargo build --release`) and python3 for the summary. Prints,
# per workload and configuration, each level's median tokens/s and inter-token latency of both and
# the median (min–max) of the rounds' ratios, then the speculative counters; run by hand.
set -euo pipefail
model=${1:?model path}
threads=${2:-2}
configs=${CONFIGS:-"--spec ngram;--spec ngram --spec-fixed"}
workloads=${WORKLOADS:-"edit explain"}
levels=${LEVELS:-1,2,4,8}
requests=${REQUESTS:-16}
rounds=${ROUNDS:-3}
read -r -a common <<<"${SERVE_FLAGS:-}"
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
minerva="$root/target/release/minerva"
loadgen="$root/target/release/xtask"
port=18840
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
serve() { # extra flags...
  "$minerva" serve "$model" --threads "$threads" --parallel 8 --ctx-size 2048 --port $port "${common[@]}" "$@" 2>/dev/null &
  pid=$!
  for _ in $(seq 600); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && return; sleep 0.2; done
  echo "server did not start" >&2; exit 1
}
turn() { # json file, extra request fields, loadgen flags...
  local json=$1 extra=$2; shift 2
  "$loadgen" loadgen --url "http://127.0.0.1:$port" --concurrency "$levels" --requests "$requests" --max-tokens 128 \
    --extra "$extra" --json "$json" "$@" >/dev/null 2>&1
}
summary() { # label, round files prefix
  python3 - "$1" "$2" "$rounds" <<'EOF'
import json, statistics, sys
label, prefix, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
load = lambda mode, r: {row["concurrency"]: row for row in json.load(open(f"{prefix}-{mode}-{r}.json"))["rows"]}
plain = [load("plain", r) for r in range(1, rounds + 1)]
spec = [load("spec", r) for r in range(1, rounds + 1)]
med = statistics.median
print(f"### {label}, {rounds} rounds")
print("| clients | plain tok/s | speculative tok/s | ratio, median (min–max) | ITL p50 ms plain / speculative |")
print("|---:|---:|---:|---:|---:|")
for c in sorted(plain[0]):
    ratios = [s[c]["output_tok_s"] / p[c]["output_tok_s"] for p, s in zip(plain, spec)]
    errors = sum(p[c]["errors"] + s[c]["errors"] for p, s in zip(plain, spec))
    print(f"| {c} | {med(p[c]['output_tok_s'] for p in plain):.1f} | {med(s[c]['output_tok_s'] for s in spec):.1f} "
          f"| {med(ratios):.2f} ({min(ratios):.2f}–{max(ratios):.2f}) "
          f"| {med(p[c]['itl_p50_ms'] for p in plain):.1f} / {med(s[c]['itl_p50_ms'] for s in spec):.1f} |"
          + (f" {errors} errors" if errors else ""))
EOF
}
for workload in $workloads; do
  flags=()
  case $workload in
    edit) flags=(--prompt-file "$here/edit_paragraph.txt") ;;
    explain) flags=(--prompt-file "$here/free_explain.txt") ;;
    story) ;;
    *) echo "unknown workload $workload (edit, story, explain)" >&2; exit 2 ;;
  esac
  IFS=';' read -r -a sets <<<"$configs"
  for set in "${sets[@]}"; do
    read -r -a spec <<<"$set"
    serve "${spec[@]}"
    "$loadgen" loadgen --url "http://127.0.0.1:$port" --concurrency "$levels" --requests "$requests" --max-tokens 1 \
      "${flags[@]}" >/dev/null 2>&1
    for round in $(seq "$rounds"); do
      order="plain spec"
      [ $((round % 2)) -eq 0 ] && order="spec plain"
      for mode in $order; do
        extra='{}'
        [ "$mode" = plain ] && extra='{"speculative": false}'
        turn "$out/t-$mode-$round.json" "$extra" "${flags[@]}"
      done
    done
    summary "$workload, $set" "$out/t"
    curl -s "http://127.0.0.1:$port/metrics" | grep -E '^minerva_spec_(drafted|accepted)_tokens_total' || true
    kill $pid; wait $pid 2>/dev/null || true
  done
done
