#!/usr/bin/env python3
"""Speculative decoding with n-gram drafts: Minerva (`minerva bench --spec ngram`, plain and
speculative decoding of the same binary, alternated) against llama.cpp's `llama-server` of the
same build, plain and with each n-gram `--spec-type` named, on the same prompts (the text files
of this folder, sent as one user message of the chat template), greedy, at most --max-tokens
tokens, 1 and 2 threads. llama-server's figure is its own `timings.predicted_per_second`; the
median of --reps requests, each on a fresh server (its n-gram caches would otherwise draft a
repeated request from its earlier answer), after a warm-up start, prompt cache off.

  python3 benches/speculative/compare.py --minerva target/release/minerva \\
      --llama-server /tmp/llamacpp/.../build/bin/llama-server \\
      --model models/SmolLM2-135M-Instruct.Q4_1.gguf [--minerva-arg=--repack=auto]

Standard library only. Prints a Markdown table per thread count; --json FILE writes the rows.
"""

import argparse
import glob
import http.client
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "llama_cpp"))
from serve_compare import wait_healthy  # noqa: E402

# llama.cpp's n-gram speculation types: defaults, and lookups sized like ours (2-4 tokens).
LLAMA_SPECS = {
    "plain": [],
    "ngram-simple": ["--spec-type", "ngram-simple"],
    "ngram-simple n3 m8": ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "3",
                           "--spec-ngram-simple-size-m", "8"],
    "ngram-map-k": ["--spec-type", "ngram-map-k"],
    "ngram-mod": ["--spec-type", "ngram-mod"],
}


def llama_run(args, spec_args, prompts, threads, port):
    """Each repetition on a fresh llama-server: its n-gram drafters keep what earlier requests
    wrote (ngram-mod, ngram-map-k), so a repeated request would be drafted from its own earlier
    answer; Minerva's drafter sees only the request's own prompt and output."""
    runs = {name: {"speeds": [], "drafted": 0, "accepted": 0, "tokens": 0} for name in prompts}
    for rep in range(args.reps + 1):
        cmd = [args.llama_server, "-m", args.model, "--port", str(port), "-np", "1", "-t", str(threads),
               "-c", "4096", "--no-webui"] + spec_args
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_healthy(port, proc)
            for name, text in prompts.items():
                body = json.dumps({"messages": [{"role": "user", "content": text}], "temperature": 0,
                                   "max_tokens": args.max_tokens, "cache_prompt": False})
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
                c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
                r = json.loads(c.getresponse().read())
                t = r.get("timings", {})
                if rep > 0:  # the first server start warms the page cache
                    run = runs[name]
                    run["speeds"].append(t["predicted_per_second"])
                    run["drafted"] += t.get("draft_n", 0)
                    run["accepted"] += t.get("draft_n_accepted", 0)
                    run["tokens"] = r["usage"]["completion_tokens"]
        finally:
            proc.terminate()
            proc.wait()
    return {name: {"tok_s": statistics.median(r["speeds"]), "drafted": r["drafted"], "accepted": r["accepted"],
                   "tokens": r["tokens"]} for name, r in runs.items()}


def minerva_run(args, files, threads):
    cmd = [args.minerva, "bench", args.model, "--threads", str(threads), "--spec", "ngram", "--chat",
           "-n", str(args.max_tokens), "-r", str(args.reps), "--json"] + args.minerva_arg
    for f in files:
        cmd += ["--prompt-file", f]
    r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    return {p["prompt"]: p for p in r["prompts"]}, r["pass_ms"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--minerva", required=True)
    ap.add_argument("--llama-server", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json")
    ap.add_argument("--minerva-arg", action="append", default=[],
                    help="an extra argument of `minerva bench` (repeatable), e.g. --minerva-arg=--repack=auto")
    args = ap.parse_args()
    files = sorted(glob.glob(os.path.join(HERE, "*.txt")))
    prompts = {os.path.splitext(os.path.basename(f))[0]: open(f).read().rstrip() for f in files}
    rows = []
    for threads in [int(t) for t in args.threads.split(",")]:
        ours, passes = minerva_run(args, files, threads)
        theirs = {kind: llama_run(args, spec, prompts, threads, 18790) for kind, spec in LLAMA_SPECS.items()}
        print(f"\n### {os.path.basename(args.model)}, {threads} thread(s)\n")
        kinds = [k for k in LLAMA_SPECS if k != "plain"]
        print("| prompt | Minerva plain | Minerva ngram | ratio | kept/drafted | llama.cpp plain | "
              + " | ".join(f"llama.cpp {k}" for k in kinds) + " | Minerva ngram / best llama.cpp |")
        print("|---|---:|---:|---:|---:|---:|" + "---:|" * len(kinds) + "---:|")
        for name in prompts:
            m = ours[name]
            best = max(theirs[k][name]["tok_s"] for k in LLAMA_SPECS if k != "plain")
            cells = [f"{theirs[k][name]['tok_s']:.1f} ({theirs[k][name]['accepted']}/{theirs[k][name]['drafted']})"
                     for k in kinds]
            print(f"| {name} | {m['plain_decode_tok_s']:.1f} | {m['spec_decode_tok_s']:.1f} | {m['ratio']:.2f} | "
                  f"{m['accepted']}/{m['drafted']} | {theirs['plain'][name]['tok_s']:.1f} | " + " | ".join(cells)
                  + f" | {m['spec_decode_tok_s'] / best:.2f} |")
            rows.append({"threads": threads, "prompt": name, "minerva": m,
                         "llama_cpp": {k: theirs[k][name] for k in LLAMA_SPECS}})
        print("\nMinerva pass ms by rows: " + ", ".join(f"{p['rows']}: {p['ms']:.1f}" for p in passes))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
