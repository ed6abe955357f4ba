#!/usr/bin/env python3
"""Minerva against llama.cpp on the same model, in the same run: prefill (pp) and decode (tg)
tokens/s at each thread count, as a markdown table with the ratios.

    benches/llama_cpp/compare.py --llama-bench PATH [--model GGUF] [-p 512] [-n 128] [-r 5]
                                 [--threads 1,2] [--minerva target/release/minerva]

`llama-bench` comes from `benches/llama_cpp/build_llama_cpp.sh`; `minerva` from
`cargo build --release -p minerva-cli`. The two programs alternate per thread count (ours, theirs,
ours, theirs) so that load from elsewhere hits both alike; each figure is the median of `-r`
repetitions (llama-bench's `samples_ts`, `minerva bench`'s runs). The load average before and after
is printed, since on a shared machine it decides how far the figures can be trusted.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys


def load():
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def llama(args, threads):
    cmd = [args.llama_bench, "-m", args.model, "-p", str(args.p), "-n", str(args.n), "-r", str(args.r),
           "-t", str(threads), "-o", "json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    result = {}
    for test in json.loads(out):
        samples = test.get("samples_ts") or [test["avg_ts"]]
        key = "prefill" if test["n_prompt"] > 0 else "decode"
        result[key] = statistics.median(samples)
    return result


def minerva(args, threads):
    cmd = [args.minerva, "bench", args.model, "-p", str(args.p), "-n", str(args.n), "-r", str(args.r),
           "--threads", str(threads), "--json"]
    out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    return {"prefill": out["prefill_tok_s"], "decode": out["decode_tok_s"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-bench", required=True)
    ap.add_argument("--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--minerva", default="target/release/minerva")
    ap.add_argument("-p", type=int, default=512)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("-r", type=int, default=5)
    ap.add_argument("--threads", default="1,2")
    args = ap.parse_args()
    print(f"load average before: {load()}", file=sys.stderr)
    rows = []
    for t in [int(x) for x in args.threads.split(",")]:
        ours, theirs = minerva(args, t), llama(args, t)
        print(f"threads {t}: minerva {ours}, llama.cpp {theirs}", file=sys.stderr)
        rows.append((t, ours, theirs))
    print(f"load average after: {load()}", file=sys.stderr)
    print(f"| threads | test | minerva tok/s | llama.cpp tok/s | minerva / llama.cpp |")
    print("|---:|---|---:|---:|---:|")
    for t, ours, theirs in rows:
        for key, label in (("prefill", f"pp{args.p}"), ("decode", f"tg{args.n}")):
            print(f"| {t} | {label} | {ours[key]:.1f} | {theirs[key]:.1f} | {ours[key] / theirs[key]:.2f} |")


if __name__ == "__main__":
    main()
