#!/usr/bin/env python3
"""Minerva against llama.cpp on the same models, in the same run: prefill (pp) and decode (tg)
tokens/s at each thread count, as one markdown table with the ratios.

    benches/llama_cpp/compare.py --llama-bench PATH [--ik-llama-bench PATH] [--model GGUF ...]
                                 [--requant TYPE,...] [--llama-quantize PATH] [-p 512] [-n 128]
                                 [-r 5] [--rounds 1] [--threads 1,2] [--minerva target/release/minerva]
                                 [--minerva-arg=--repack=off ...]

`llama-bench` and `llama-quantize` come from `benches/llama_cpp/build_llama_cpp.sh`
(`TARGETS="llama-bench llama-quantize"`); `minerva` from `cargo build --release -p minerva-cli`.
`--model` may be given several times (default: SmolLM2 Q4_1). `--requant Q8_0,Q4_K_M` adds, for
the first model, copies requantized by `llama-quantize --allow-requantize` (written once next to
it as `<name>.<TYPE>.gguf`), so both engines read the same files.

`--ik-llama-bench` adds ik_llama.cpp (github `ikawrakow/ik_llama.cpp`, the fork that leads CPU
inference; build its `llama-bench` target with `-DGGML_NATIVE=ON -DLLAMA_BUILD_SERVER=OFF`), run
with its run-time repacking (`-rtr 1`), as a third column. `--minerva-arg` passes an argument to
every `minerva bench` (e.g. `--minerva-arg=--repack=off` for the zero-copy kernels).

The programs alternate per (model, thread count), ours then theirs, so load from elsewhere hits
them alike. Each figure is the median of `-r` repetitions (llama-bench's `samples_ts`,
`minerva bench`'s runs). With `--rounds N` the programs take turns N times per (model, thread
count), each turn `-r` repetitions, and each figure is the median of the N turns' medians: on a
shared machine whose neighbours' load comes and goes over minutes, one turn each can land one
program in a quiet minute and the other in a busy one, which turns taken in alternation average
out. The CPU, the kernels Minerva ran, and the load average before and after
are printed: on a shared machine the load decides how far the figures can be trusted.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys


def load():
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def llama(args, model, threads, bench=None, extra=()):
    cmd = [bench or args.llama_bench, "-m", model, "-p", str(args.p), "-n", str(args.n), "-r", str(args.r),
           "-t", str(threads), "-o", "json", *extra]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    result = {}
    for test in json.loads(out):
        samples = test.get("samples_ts") or [test["avg_ts"]]
        key = "prefill" if test["n_prompt"] > 0 else "decode"
        result[key] = statistics.median(samples)
    return result


def median_of(turns):
    """Each test's median over the turns' figures (None for a program that did not run)."""
    if not turns:
        return None
    return {key: statistics.median(turn[key] for turn in turns) for key in turns[0]}


def minerva(args, model, threads):
    cmd = [args.minerva, "bench", model, "-p", str(args.p), "-n", str(args.n), "-r", str(args.r),
           "--threads", str(threads), "--json", *args.minerva_arg]
    out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    return {"prefill": out["prefill_tok_s"], "decode": out["decode_tok_s"]}


def requantized(args, source, dtype):
    stem = source[:-len(".gguf")] if source.endswith(".gguf") else source
    target = f"{stem}.{dtype}.gguf"
    if not os.path.exists(target):
        if not args.llama_quantize:
            sys.exit(f"--requant {dtype}: give --llama-quantize to write {target}")
        tmp = target + ".part"
        subprocess.run([args.llama_quantize, "--allow-requantize", source, tmp, dtype], check=True,
                       capture_output=True)
        os.replace(tmp, target)
    return target


def cpu_line(args, model):
    # `minerva bench` names the CPU and the kernel (ISA) of each weight type.
    cmd = [args.minerva, "bench", model, "-p", "8", "-n", "2", "-r", "1", "--threads", "1", *args.minerva_arg]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if line.startswith(("cpu", "kernels"))]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-bench", required=True)
    ap.add_argument("--ik-llama-bench")
    ap.add_argument("--minerva-arg", action="append", default=[])
    ap.add_argument("--llama-quantize")
    ap.add_argument("--model", action="append")
    ap.add_argument("--requant", default="")
    ap.add_argument("--minerva", default="target/release/minerva")
    ap.add_argument("-p", type=int, default=512)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("-r", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--threads", default="1,2")
    args = ap.parse_args()
    models = args.model or ["models/SmolLM2-135M-Instruct.Q4_1.gguf"]
    models += [requantized(args, models[0], t) for t in args.requant.split(",") if t]
    print(f"load average before: {load()}", file=sys.stderr)
    rows = []
    for model in models:
        for line in cpu_line(args, model):
            print(f"{os.path.basename(model)}: {line}", file=sys.stderr)
        for t in [int(x) for x in args.threads.split(",")]:
            turns = {"minerva": [], "llama.cpp": [], "ik_llama.cpp": []}
            for turn in range(args.rounds):
                turns["minerva"].append(minerva(args, model, t))
                turns["llama.cpp"].append(llama(args, model, t))
                if args.ik_llama_bench:
                    turns["ik_llama.cpp"].append(llama(args, model, t, args.ik_llama_bench, ["-rtr", "1"]))
                figures = ", ".join(f"{name} {runs[-1]}" for name, runs in turns.items() if runs)
                print(f"{os.path.basename(model)} threads {t} turn {turn + 1}: {figures} (load {load()})",
                      file=sys.stderr)
            ours, theirs, ik = (median_of(turns[name]) for name in ("minerva", "llama.cpp", "ik_llama.cpp"))
            rows.append((os.path.basename(model), t, ours, theirs, ik))
    print(f"load average after: {load()}", file=sys.stderr)
    if args.ik_llama_bench:
        print("| model | threads | test | minerva tok/s | llama.cpp tok/s | ik_llama.cpp -rtr 1 tok/s "
              "| minerva / llama.cpp | minerva / ik_llama.cpp |")
        print("|---|---:|---|---:|---:|---:|---:|---:|")
    else:
        print("| model | threads | test | minerva tok/s | llama.cpp tok/s | minerva / llama.cpp |")
        print("|---|---:|---|---:|---:|---:|")
    for name, t, ours, theirs, ik in rows:
        for key, label in (("prefill", f"pp{args.p}"), ("decode", f"tg{args.n}")):
            line = f"| {name} | {t} | {label} | {ours[key]:.1f} | {theirs[key]:.1f} |"
            if ik:
                line += f" {ik[key]:.1f} | {ours[key] / theirs[key]:.2f} | {ours[key] / ik[key]:.2f} |"
            else:
                line += f" {ours[key] / theirs[key]:.2f} |"
            print(line)


if __name__ == "__main__":
    main()
