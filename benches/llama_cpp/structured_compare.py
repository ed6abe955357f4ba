#!/usr/bin/env python3
"""The same structured-output and tool-calling requests sent to `minerva serve` and to llama.cpp's
`llama-server --jinja` on the same model, one server at a time: how many answers are valid on
each (parsed, finished, and valid under the JSON schema or the tool's parameters by the
`jsonschema` package), and how long they took.

  python3 benches/llama_cpp/structured_compare.py --minerva target/release/minerva \\
      --llama-server /tmp/llamacpp/.../build/bin/llama-server \\
      --model models/SmolLM2-135M-Instruct.Q4_1.gguf --threads 2 --samples 6

Needs `jsonschema` (installed by `cargo xtask setup`). Prints a Markdown table; --json FILE
writes the rows.
"""

import argparse
import http.client
import json
import os
import subprocess
import sys
import time

import jsonschema

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_compare import wait_healthy  # noqa: E402 - the same start-up wait as the throughput comparison

PET = {
    "type": "object", "additionalProperties": False,
    "required": ["name", "age", "color", "toys"],
    "properties": {
        "name": {"type": "string", "pattern": "^[A-Z][a-z]{1,10}$"},
        "age": {"type": "integer", "minimum": 1, "maximum": 20},
        "color": {"enum": ["black", "white", "ginger"]},
        "toys": {"type": "array", "items": {"type": "string", "maxLength": 12}, "minItems": 1, "maxItems": 3},
    },
}
PERSON = {
    "type": "object", "additionalProperties": False, "required": ["first", "last", "born", "email"],
    "properties": {
        "first": {"type": "string", "minLength": 2, "maxLength": 12},
        "last": {"type": "string", "minLength": 2, "maxLength": 12},
        "born": {"type": "integer", "minimum": 1900, "maximum": 2020},
        "email": {"type": ["string", "null"], "pattern": "^[a-z]+@[a-z]+\\.com$"},
    },
}
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "additionalProperties": False, "required": ["city", "days"],
                   "properties": {"city": {"type": "string", "maxLength": 20},
                                  "days": {"type": "integer", "minimum": 1, "maximum": 7}}}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "Local time in a time zone",
    "parameters": {"type": "object", "additionalProperties": False, "required": ["zone"],
                   "properties": {"zone": {"type": "string", "maxLength": 10}}}}}
TOOLS = [WEATHER, TIME]
ASKS = ["Describe a pet cat.", "Invent a person.", "What is the weather in Paris for three days?",
        "What time is it in Tokyo?", "Tell me about a dog.", "Weather in Rome tomorrow?"]


def kinds():
    """(name, extra request fields, validator of the response)."""
    def schema_answer(schema):
        def check(r):
            c = r["choices"][0]
            assert c["finish_reason"] == "stop", c["finish_reason"]
            jsonschema.validate(json.loads(c["message"]["content"]), schema)
        return check

    def object_answer(r):
        c = r["choices"][0]
        assert c["finish_reason"] == "stop", c["finish_reason"]
        assert isinstance(json.loads(c["message"]["content"]), dict)

    def calls(allowed):
        def check(r):
            c = r["choices"][0]
            assert c["finish_reason"] == "tool_calls", c["finish_reason"]
            assert c["message"].get("tool_calls"), "no tool call"
            for call in c["message"]["tool_calls"]:
                name = call["function"]["name"]
                assert name in allowed, name
                schema = next(t for t in TOOLS if t["function"]["name"] == name)["function"]["parameters"]
                jsonschema.validate(json.loads(call["function"]["arguments"]), schema)
        return check

    def call_or_text(r):
        c = r["choices"][0]
        if c["message"].get("tool_calls"):
            calls(["get_weather", "get_time"])(r)
        else:
            assert c["finish_reason"] == "stop" and c["message"]["content"], c

    pet = {"type": "json_schema", "json_schema": {"name": "pet", "schema": PET, "strict": True}}
    person = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}
    named = {"type": "function", "function": {"name": "get_time"}}
    return [
        ("response_format json_schema (pattern, bounds, enum, array)", {"response_format": pet}, schema_answer(PET)),
        ("response_format json_schema (lengths, range, nullable pattern)", {"response_format": person},
         schema_answer(PERSON)),
        ("response_format json_object", {"response_format": {"type": "json_object"}}, object_answer),
        ("llama.cpp json_schema field", {"json_schema": PET}, schema_answer(PET)),
        ("tools, tool_choice required", {"tools": TOOLS, "tool_choice": "required"},
         calls(["get_weather", "get_time"])),
        ("tools, tool_choice named", {"tools": TOOLS, "tool_choice": named}, calls(["get_time"])),
        ("tools, tool_choice auto", {"tools": TOOLS, "tool_choice": "auto"}, call_or_text),
    ]


def post(port, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    text = r.read().decode()
    return r.status, text


def run(name, cmd, port, samples):
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_healthy(port, proc)
        rows = []
        for kind, extra, check in kinds():
            valid, seconds, failures = 0, 0.0, []
            for i in range(samples):
                body = {"messages": [{"role": "user", "content": ASKS[i % len(ASKS)]}], "max_tokens": 200,
                        "temperature": 0 if i == 0 else 0.8, "seed": i}
                body.update(extra)
                start = time.perf_counter()
                status, text = post(port, body)
                seconds += time.perf_counter() - start
                try:
                    assert status == 200, f"HTTP {status}: {text[:200]}"
                    check(json.loads(text))
                    valid += 1
                except Exception as e:  # noqa: BLE001 - every failure is counted and shown
                    failures.append(str(e).splitlines()[0][:160])
            rows.append({"server": name, "kind": kind, "valid": valid, "samples": samples,
                         "seconds": round(seconds, 2), "failures": failures[:3]})
            print(f"{name:9} {kind}: {valid}/{samples} valid" + (f" ({failures[0]})" if failures else ""),
                  file=sys.stderr)
        return rows
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minerva", required=True)
    ap.add_argument("--llama-server", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--samples", type=int, default=6)
    ap.add_argument("--json")
    a = ap.parse_args()
    rows = run("minerva", [a.minerva, "serve", "-m", a.model, "--port", "8391", "--parallel", "1", "-c", "2048",
                           "--threads", str(a.threads)], 8391, a.samples)
    rows += run("llama.cpp", [a.llama_server, "-m", a.model, "--port", "8392", "--jinja", "-np", "1", "-c", "2048",
                              "-t", str(a.threads)], 8392, a.samples)
    print("| request | minerva valid | llama-server --jinja valid | minerva s | llama-server s |")
    print("|---|---|---|---|---|")
    for kind, _, _ in kinds():
        m = next(r for r in rows if r["server"] == "minerva" and r["kind"] == kind)
        ll = next(r for r in rows if r["server"] == "llama.cpp" and r["kind"] == kind)
        print(f"| {kind} | {m['valid']}/{m['samples']} | {ll['valid']}/{ll['samples']} | {m['seconds']} | "
              f"{ll['seconds']} |")
    total = {s: sum(r["valid"] for r in rows if r["server"] == s) for s in ("minerva", "llama.cpp")}
    print(f"\nvalid in all: minerva {total['minerva']}, llama-server {total['llama.cpp']} "
          f"of {a.samples * len(kinds())} each")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
