#!/usr/bin/env bash
# Two `minerva serve` replicas behind nginx (nginx-minerva.conf), scraped by Prometheus
# (prometheus.yml), under streaming load through nginx; then Prometheus is asked, over its HTTP API,
# what the two replicas did together: requests running and waiting (the gauges the Gateway API
# Inference Extension routes on), KV-cache use, tokens per second, time-to-first-token p50 and how
# the load split between replicas. Run by hand (Debian's nginx-light and prometheus, a release
# build); not part of CI.
#
#   benches/serving/prometheus_replicas.sh [MODEL]
#
# Env: MINERVA (binary, default target/release/minerva), CLIENTS (8), REQUESTS (64),
# MAX_TOKENS (48), PARALLEL (4 slots per replica), THREADS (1 per replica).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
MODEL=${1:-$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf}
MINERVA=${MINERVA:-$ROOT/target/release/minerva}
CLIENTS=${CLIENTS:-8}; REQUESTS=${REQUESTS:-64}; MAX_TOKENS=${MAX_TOKENS:-48}
PARALLEL=${PARALLEL:-4}; THREADS=${THREADS:-1}
PORT_A=18181; PORT_B=18182; PORT_LB=18180; PORT_PROM=18190
for tool in nginx prometheus; do
    command -v $tool >/dev/null || { echo "prometheus_replicas: needs $tool (apt-get install nginx-light prometheus)" >&2; exit 1; }
done
. "$ROOT/benches/serving/replicas.sh"
start_replicas $PORT_A $PORT_B
mkdir -p "$DIR"/{body,proxy,fastcgi,uwsgi,scgi,tsdb}
fill() { sed -e "s|@DIR@|$DIR|g" -e "s|@PORT_A@|$PORT_A|g" -e "s|@PORT_B@|$PORT_B|g" -e "s|@PORT_LB@|$PORT_LB|g" "$1"; }
fill "$ROOT/benches/serving/nginx-minerva.conf" >"$DIR/nginx.conf"
fill "$ROOT/benches/serving/prometheus.yml" >"$DIR/prometheus.yml"
nginx -c "$DIR/nginx.conf" -e "$DIR/error.log" &
PIDS+=($!)
prometheus --config.file="$DIR/prometheus.yml" --storage.tsdb.path="$DIR/tsdb" \
    --web.listen-address="127.0.0.1:$PORT_PROM" >"$DIR/prometheus.log" 2>&1 &
PIDS+=($!)
until curl -sf "http://127.0.0.1:$PORT_LB/health" >/dev/null; do sleep 0.2; done
until curl -sf "http://127.0.0.1:$PORT_PROM/-/ready" >/dev/null; do sleep 0.2; done
echo "prometheus_replicas: replicas :$PORT_A :$PORT_B behind nginx :$PORT_LB, Prometheus :$PORT_PROM; logs in $DIR" >&2

cat >"$DIR/show.py" <<'PY'
import json, sys
result = json.load(sys.stdin)["data"]["result"]
print(" ".join("%s=%.3g" % (x["metric"].get("instance", "all"), float(x["value"][1])) for x in result) or "none")
PY
query() {
    curl -sf "http://127.0.0.1:$PORT_PROM/api/v1/query" --data-urlencode "query=$1" | python3 "$DIR/show.py"
}
# Sampled while the load runs: the peak of the routing gauges over both replicas.
(
    sleep 8
    echo "during load: running $(query 'sum(vllm:num_requests_running)') | waiting $(query 'sum(vllm:num_requests_waiting)') | KV use $(query 'vllm:kv_cache_usage_perc')"
) >"$DIR/during.txt" &
SAMPLER=$!
(cd "$ROOT" && cargo xtask loadgen --url "http://127.0.0.1:$PORT_LB" --concurrency "$CLIENTS" \
    --requests "$REQUESTS" --max-tokens "$MAX_TOKENS" --session-header x-session-id --json "$DIR/loadgen.json")
wait "$SAMPLER"
sleep 3  # one more scrape after the last request
cat "$DIR/during.txt"
echo "tokens generated per replica: $(query 'sum by (instance) (minerva_completion_tokens_total)')"
echo "tokens generated, both: $(query 'sum(minerva_completion_tokens_total)')"
echo "output tokens/s over the last 30 s, both: $(query 'sum(rate(minerva_completion_tokens_total[30s]))')"
echo "TTFT p50 s, both: $(query 'histogram_quantile(0.5, sum(rate(minerva_time_to_first_token_seconds_bucket[2m])) by (le))')"
echo "targets up: $(query 'up{job="minerva"}')"
