#!/usr/bin/env python3
"""Serving throughput of `minerva serve` against llama.cpp's `llama-server` on the same model, in
one run: for each number of concurrent streaming clients, each client sends its own greedy chat
requests one after another; the script reports aggregate output tokens/s, requests/s and time to
first token (median, p90) per server, and the ratio. Servers run one at a time, in alternating
order per repetition, so both see the same machine state.

  python3 benches/llama_cpp/serve_compare.py --minerva target/release/minerva \\
      --llama-server /tmp/llamacpp/.../build/bin/llama-server \\
      --model models/SmolLM2-135M-Instruct.Q4_1.gguf --threads 2 --parallel 8 --clients 1,4,8

Standard library only. Prints a Markdown table; --json FILE writes the rows.
"""

import argparse
import http.client
import json
import math
import os
import statistics
import subprocess
import sys
import threading
import time

TOPICS = ["the sea", "mountains", "a library", "bread", "winter", "trains", "bees", "the moon", "rivers",
          "chess", "music", "gardens", "clocks", "bridges", "rain", "deserts"]


def wait_healthy(port, proc, timeout=120):
    t = time.time()
    while time.time() - t < timeout:
        if proc.poll() is not None:
            sys.exit(f"server exited with {proc.returncode}")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    sys.exit("server never became healthy")


def one_request(port, prompt, max_tokens):
    """A streaming chat request; returns (time to first token, completion tokens, total time)."""
    body = json.dumps({"messages": [{"role": "user", "content": prompt}], "temperature": 0,
                       "max_tokens": max_tokens, "stream": True, "stream_options": {"include_usage": True}})
    start = time.perf_counter()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:200]}")
    first = None
    chunks = 0
    usage = None
    for raw in r:
        line = raw.decode("utf-8").strip()
        if not line.startswith("data: "):
            continue
        data = line[6:]
        if data == "[DONE]":
            break
        event = json.loads(data)
        if event.get("usage"):
            usage = event["usage"]["completion_tokens"]
        for ch in event.get("choices", []):
            if ch.get("delta", {}).get("content"):
                chunks += 1
                if first is None:
                    first = time.perf_counter() - start
    c.close()
    return first or 0.0, usage if usage is not None else chunks, time.perf_counter() - start


def load(port, clients, per_client, max_tokens):
    results = []
    lock = threading.Lock()

    def client(i):
        for j in range(per_client):
            topic = TOPICS[(i * per_client + j) % len(TOPICS)]
            prompt = f"Write a short story (request {i}-{j}) about {topic}."
            res = one_request(port, prompt, max_tokens)
            with lock:
                results.append(res)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    tokens = sum(r[1] for r in results)
    ttft = sorted(r[0] for r in results)
    return {"clients": clients, "requests": len(results), "tokens": tokens, "wall_s": wall,
            "tok_s": tokens / wall, "req_s": len(results) / wall,
            "ttft_p50_ms": 1000 * statistics.median(ttft),
            "ttft_p90_ms": 1000 * ttft[max(0, math.ceil(0.9 * len(ttft)) - 1)]}


def start_server(kind, args, port):
    if kind == "minerva":
        cmd = [args.minerva, "serve", "-m", args.model, "--port", str(port), "--parallel", str(args.parallel),
               "--threads", str(args.threads), "--ctx-size", str(args.ctx)]
    else:
        cmd = [args.llama_server, "-m", args.model, "--port", str(port), "-np", str(args.parallel),
               "-t", str(args.threads), "-c", str(args.ctx * args.parallel), "--no-webui"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_healthy(port, proc)
    return proc


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--minerva", required=True)
    ap.add_argument("--llama-server", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--parallel", type=int, default=8)
    ap.add_argument("--ctx", type=int, default=2048, help="context per sequence")
    ap.add_argument("--clients", default="1,4,8")
    ap.add_argument("--per-client", type=int, default=3, help="requests each client sends")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--json")
    args = ap.parse_args()
    rows = {}
    for rep in range(args.reps):
        order = ["minerva", "llama.cpp"] if rep % 2 == 0 else ["llama.cpp", "minerva"]
        for kind in order:
            proc = start_server(kind, args, 18700 + rep)
            try:
                one_request(18700 + rep, "Warm up.", 8)
                for c in [int(x) for x in args.clients.split(",")]:
                    r = load(18700 + rep, c, args.per_client, args.max_tokens)
                    rows.setdefault((kind, c), []).append(r)
                    print(f"rep {rep} {kind:9} clients {c}: {r['tok_s']:.1f} tok/s, ttft p50 {r['ttft_p50_ms']:.0f} ms",
                          file=sys.stderr)
            finally:
                proc.terminate()
                proc.wait()
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"\nCPU: {cpu}, {os.cpu_count()} cores; {args.threads} threads, {args.parallel} slots, "
          f"{args.max_tokens} tokens per request, greedy; medians of {args.reps} runs\n")
    print("| clients | minerva tok/s | llama-server tok/s | ratio | minerva TTFT p50 / p90 ms | llama-server TTFT p50 / p90 ms |")
    print("|---:|---:|---:|---:|---:|---:|")
    out = []
    for c in [int(x) for x in args.clients.split(",")]:
        m = {k: statistics.median(r[k] for r in rows[("minerva", c)]) for k in rows[("minerva", c)][0]}
        l = {k: statistics.median(r[k] for r in rows[("llama.cpp", c)]) for k in rows[("llama.cpp", c)][0]}
        print(f"| {c} | {m['tok_s']:.1f} | {l['tok_s']:.1f} | {m['tok_s'] / l['tok_s']:.2f} | "
              f"{m['ttft_p50_ms']:.0f} / {m['ttft_p90_ms']:.0f} | {l['ttft_p50_ms']:.0f} / {l['ttft_p90_ms']:.0f} |")
        out.append({"clients": c, "minerva": m, "llama_server": l})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cpu": cpu, "rows": out}, f, indent=1)


if __name__ == "__main__":
    main()
