# Sourced by the scripts of benches/serving/: a scratch directory, processes killed on exit, and
# `minerva serve` replicas started on loopback ports and waited for.
#
# Needs MINERVA, MODEL, PARALLEL and THREADS set; sets DIR and PIDS (the replicas' pids, in the
# order of the ports given to start_replicas).

[ -x "$MINERVA" ] || { echo "$(basename "$0"): no $MINERVA (cargo build --release -p minerva-cli)" >&2; exit 1; }
DIR=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

# start_replicas PORT...: one replica per port, each logging to $DIR/replica-PORT.log; returns
# once every one answers /health.
start_replicas() {
    for port in "$@"; do
        "$MINERVA" serve -m "$MODEL" --port "$port" --parallel "$PARALLEL" --threads "$THREADS" \
            >"$DIR/replica-$port.log" 2>&1 &
        PIDS+=($!)
    done
    for port in "$@"; do
        until curl -sf "http://127.0.0.1:$port/health" >/dev/null; do sleep 0.2; done
    done
}
