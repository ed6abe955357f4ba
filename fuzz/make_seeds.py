#!/usr/bin/env python3
"""Writes the gguf-py-made seeds of fuzz/seeds/gguf_reader/ (the GgufWriter-made ones come from
`cargo run --example make_seeds` in fuzz/). Run from the workspace root:

    python3 fuzz/make_seeds.py

Needs `pip install gguf numpy`. Output is deterministic, so rerunning only rewrites the same bytes.
"""

from pathlib import Path

import numpy as np
import gguf

ROOT = Path(__file__).resolve().parent.parent
SEEDS = ROOT / "fuzz" / "seeds" / "gguf_reader"
MODEL = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
Q = gguf.GGMLQuantizationType


def all_types(path: Path) -> None:
    """Every scalar type, string and nested arrays, and F32 / F16 / Q8_0 / Q4_K tensors."""
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_uint8("t.u8", 200)
    w.add_int8("t.i8", -100)
    w.add_uint16("t.u16", 60000)
    w.add_int16("t.i16", -30000)
    w.add_uint32("llama.block_count", 2)
    w.add_int32("t.i32", -2_000_000_000)
    w.add_float32("t.f32", 1.5)
    w.add_bool("t.bool", True)
    w.add_string("general.name", "tiny-\u00e9\u4e16")
    w.add_uint64("llama.context_length", 1 << 40)
    w.add_int64("t.i64", -(1 << 60))
    w.add_float64("t.f64", -2.25)
    w.add_array("tokenizer.ggml.tokens", ["<s>", "</s>", "a", "b", "ab", ""])
    w.add_array("tokenizer.ggml.scores", [0.0, -1.0, -2.0, -3.0, -4.0, -5.0])
    w.add_array("tokenizer.ggml.token_type", [3, 3, 1, 1, 1, 1])
    w.add_array("tokenizer.ggml.merges", ["a b"])
    w.add_array("t.nested", [[1, 2, 3], [4], [5, 6]])
    w.add_array("t.nested_strings", [["x", "yz"], ["w"]])
    w.add_array("t.nested3", [[[1.0, 2.0]], [[3.0], [4.0, 5.0]]])
    w.add_array("t.bools", [True, False, True])
    rng = np.random.default_rng(0)
    w.add_tensor("token_embd.weight", rng.standard_normal((8, 4), dtype=np.float32))
    w.add_tensor("output_norm.weight", np.ones(4, dtype=np.float16))
    # Quantized tensors are given as raw blocks: bytes per row on the last axis.
    w.add_tensor("blk.0.attn_q.weight", rng.integers(0, 256, (2, 2 * 34), dtype=np.uint8), raw_dtype=Q.Q8_0)
    w.add_tensor("blk.0.ffn_up.weight", rng.integers(0, 256, (1, 144), dtype=np.uint8), raw_dtype=Q.Q4_K)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def minimal(path: Path) -> None:
    """Just the architecture, no tensors: the shortest complete file gguf-py writes."""
    w = gguf.GGUFWriter(str(path), "gpt2")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def aligned(path: Path) -> None:
    """A non-default general.alignment, with tensors that must honour it."""
    w = gguf.GGUFWriter(str(path), "qwen2")
    w.add_custom_alignment(64)
    w.add_tensor("a", np.arange(3, dtype=np.float32))
    w.add_tensor("b", np.arange(5, dtype=np.int32))
    w.add_tensor("c", np.arange(32, dtype=np.int8).reshape(2, 16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main() -> None:
    SEEDS.mkdir(parents=True, exist_ok=True)
    all_types(SEEDS / "py_all_types.gguf")
    minimal(SEEDS / "py_minimal.gguf")
    aligned(SEEDS / "py_aligned64.gguf")
    # The header of a real model: its tokenizer arrays are cut off after 4 KiB, so this is a
    # truncated file whose first keys are real-world metadata.
    if MODEL.exists():
        with MODEL.open("rb") as f:
            (SEEDS / "smollm2_head4096.gguf").write_bytes(f.read(4096))
    for p in sorted(SEEDS.iterdir()):
        print(f"{p.stat().st_size:>7} {p.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
