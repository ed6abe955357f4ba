#!/usr/bin/env bash
# Two `minerva serve` replicas behind nginx (benches/serving/nginx-minerva.conf) on loopback:
# streaming chat load through nginx with `cargo xtask loadgen` (one x-session-id per request), one
# replica killed (SIGKILL) mid-run, and how many requests failed against how many streams were
# running on the killed replica at that moment. Run by hand (needs Debian's nginx and a release
# build); not part of CI.
#
#   benches/serving/nginx_failover.sh [MODEL] [KILL_AFTER_S]
#
# Env: MINERVA (binary, default target/release/minerva), CLIENTS (8), REQUESTS (48),
# MAX_TOKENS (48), PARALLEL (4 slots per replica), THREADS (1 per replica).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
MODEL=${1:-$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf}
KILL_AFTER=${2:-20}
MINERVA=${MINERVA:-$ROOT/target/release/minerva}
CLIENTS=${CLIENTS:-8}; REQUESTS=${REQUESTS:-48}; MAX_TOKENS=${MAX_TOKENS:-48}
PARALLEL=${PARALLEL:-4}; THREADS=${THREADS:-1}
PORT_A=18081; PORT_B=18082; PORT_LB=18080
command -v nginx >/dev/null || { echo "nginx_failover: needs nginx (apt-get install nginx-light)" >&2; exit 1; }
. "$ROOT/benches/serving/replicas.sh"
start_replicas $PORT_A $PORT_B
PID_A=${PIDS[0]}
mkdir -p "$DIR"/{body,proxy,fastcgi,uwsgi,scgi}
sed -e "s|@DIR@|$DIR|g" -e "s|@PORT_A@|$PORT_A|g" -e "s|@PORT_B@|$PORT_B|g" -e "s|@PORT_LB@|$PORT_LB|g" \
    "$ROOT/benches/serving/nginx-minerva.conf" >"$DIR/nginx.conf"
nginx -c "$DIR/nginx.conf" -e "$DIR/error.log" &
PIDS+=($!)
until curl -sf "http://127.0.0.1:$PORT_LB/health" >/dev/null; do sleep 0.2; done
echo "nginx_failover: replicas on :$PORT_A (pid $PID_A) and :$PORT_B behind nginx :$PORT_LB; logs in $DIR" >&2

# Streams in a slot plus requests queued for one: everything the replica had accepted.
in_flight() {
    curl -sf "http://127.0.0.1:$1/metrics" |
        awk '$1 == "minerva_running_sequences" || $1 == "minerva_queued_requests" { n += $2 } END { print n + 0 }'
}
(
    sleep "$KILL_AFTER"
    a=$(in_flight $PORT_A); b=$(in_flight $PORT_B)
    kill -9 "$PID_A"
    echo "nginx_failover: killed replica :$PORT_A after ${KILL_AFTER}s with $a requests in flight on it ($b on :$PORT_B)" >&2
    echo "$a" >"$DIR/in_flight"
) &
KILLER=$!
(cd "$ROOT" && cargo xtask loadgen --url "http://127.0.0.1:$PORT_LB" --concurrency "$CLIENTS" \
    --requests "$REQUESTS" --max-tokens "$MAX_TOKENS" --session-header x-session-id --json "$DIR/loadgen.json")
wait "$KILLER"
errors=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['rows'][0]['errors'])" "$DIR/loadgen.json")
in_flight=$(cat "$DIR/in_flight")
# nginx logs each stream the dead replica cut (mid-body, or sent but reset before its response
# headers: a POST already sent is not retried), and each refused connect it retried elsewhere.
cut=$(grep -c -E "upstream prematurely closed connection|recv\(\) failed \(104: Connection reset by peer\) while reading response header" "$DIR/error.log" || true)
retried=$(grep -c "connect() failed (111: Connection refused)" "$DIR/error.log" || true)
echo "nginx_failover: $errors of $REQUESTS requests failed; nginx saw $cut streams cut by the killed replica" \
    "(its /metrics said $in_flight in flight just before) and retried $retried refused connects on the other replica"
if [ "$errors" -eq "$cut" ]; then
    echo "nginx_failover: ok: every failed request was a stream in flight on the killed replica"
else
    echo "nginx_failover: $errors failures but $cut cut streams"
    exit 1
fi
