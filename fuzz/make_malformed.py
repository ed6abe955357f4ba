#!/usr/bin/env python3
"""Writes the hand-made malformed inputs of crates/minerva-gguf/tests/fuzz_regressions/: one file
per way a GGUF file can be wrong, each built to trip exactly one check of the reader. The test
`crates/minerva-gguf/tests/fuzz_regressions.rs` states the error each must give. Files the fuzzer
found live in the same directory (named `crash_*`) and are not touched by this script.

    python3 fuzz/make_malformed.py      # from the workspace root
"""

import struct
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "crates" / "minerva-gguf" / "tests" / "fuzz_regressions"
MODEL = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"

U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
GGML_F32, GGML_Q8_0 = 0, 8


def u32(x): return struct.pack("<I", x)
def u64(x): return struct.pack("<Q", x)
def s(x): return u64(len(x)) + (x.encode() if isinstance(x, str) else x)
def kv(key, ty, payload): return s(key) + u32(ty) + payload
def tinfo(name, ne, ty, offset):
    return s(name) + u32(len(ne)) + b"".join(u64(d) for d in ne) + u32(ty) + u64(offset)


def gguf(kvs=(), tensors=(), data=b"", version=3, n_tensors=None, n_kv=None, align=32):
    """A file with the given KVs and tensor infos, padded to `align`, then `data`."""
    head = b"GGUF" + u32(version)
    head += u64(len(tensors) if n_tensors is None else n_tensors)
    head += u64(len(kvs) if n_kv is None else n_kv)
    head += b"".join(kvs) + b"".join(tensors)
    if tensors or data:
        head += b"\0" * (-len(head) % align)
    return head + data


ARCH = kv("general.architecture", STRING, s("llama"))
F32x4 = struct.pack("<4f", 1, 2, 3, 4)


def nested(depth):
    """An array value nested `depth` levels deep (the innermost holds one u8)."""
    v = u32(U8) + u64(1) + b"\x07"
    for _ in range(depth - 1):
        v = u32(ARRAY) + u64(1) + v
    return v


FILES = {
    # Header.
    "empty.gguf": b"",
    "magic_only_3_bytes.gguf": b"GGU",
    "bad_magic_ggml.gguf": b"ggml" + bytes(20),
    "version_1.gguf": gguf(version=1),
    "version_4.gguf": gguf(version=4),
    "big_endian_v3.gguf": b"GGUF" + struct.pack(">I", 3) + bytes(16),
    "truncated_header.gguf": gguf()[:19],
    # Counts that cannot fit.
    "kv_count_u64_max.gguf": gguf(n_kv=2**64 - 1),
    "tensor_count_u64_max.gguf": gguf([ARCH], n_tensors=2**64 - 1),
    "key_len_u64_max.gguf": gguf(n_kv=1) + u64(2**64 - 1) + b"k" * 8,
    "string_value_len_past_end.gguf": gguf([kv("k", STRING, u64(1000) + b"short")]),
    "array_count_overflows_u64.gguf": gguf([kv("a", ARRAY, u32(U64) + u64(2**61) + bytes(16))]),
    "string_array_cut_in_length.gguf": gguf([kv("a", ARRAY, u32(STRING) + u64(2) + s("abcd") + b"\0\0\0\0")]),
    # Values.
    "key_invalid_utf8.gguf": gguf([kv(b"\xff\xfe", U8, b"\0")]),
    "array_string_invalid_utf8.gguf": gguf([kv("a", ARRAY, u32(STRING) + u64(1) + s(b"ok\xc3"))]),
    "unknown_value_type_13.gguf": gguf([kv("k", 13, bytes(8))]),
    "unknown_array_elem_type.gguf": gguf([kv("a", ARRAY, u32(0xFFFF_FFFF) + u64(0))]),
    "scalar_value_truncated.gguf": gguf([kv("k", U64, b"\1\2\3")]),
    "arrays_nested_8_ok.gguf": gguf([ARCH, kv("deep", ARRAY, nested(8))]),
    "arrays_nested_9.gguf": gguf([kv("deep", ARRAY, nested(9))]),
    "duplicate_key.gguf": gguf([ARCH, kv("k", U8, b"\1"), kv("k", U8, b"\2")]),
    # Alignment.
    "alignment_48.gguf": gguf([kv("general.alignment", U32, u32(48))]),
    "alignment_0.gguf": gguf([kv("general.alignment", U32, u32(0))]),
    "alignment_2_pow_32.gguf": gguf([kv("general.alignment", U64, u64(2**32))]),
    "alignment_string.gguf": gguf([kv("general.alignment", STRING, s("32"))]),
    "alignment_u8_64_ok.gguf": gguf([kv("general.alignment", U8, b"\x40")],
                                    [tinfo("t", [4], GGML_F32, 0)], F32x4, align=64),
    # Tensor infos.
    "tensor_5_dims.gguf": gguf([ARCH], [tinfo("t", [1, 1, 1, 1, 1], GGML_F32, 0)], F32x4),
    "tensor_ggml_type_4.gguf": gguf([ARCH], [tinfo("t", [4], 4, 0)], F32x4),
    "tensor_name_invalid_utf8.gguf": gguf([ARCH], [tinfo(b"\x80", [4], GGML_F32, 0)], F32x4),
    "tensor_q8_0_partial_block.gguf": gguf([ARCH], [tinfo("t", [48], GGML_Q8_0, 0)], bytes(64)),
    "tensor_shape_overflow.gguf": gguf([ARCH], [tinfo("t", [2**32, 2**32], GGML_F32, 0)], F32x4),
    # The product is 0, but 2^32 * 2^32 overflows when multiplied outermost first (the first crash
    # the fuzzer found: `TensorView::element_count` panicked on such a tensor).
    "tensor_zero_dim_hides_overflow.gguf": gguf([ARCH], [tinfo("t", [0, 2**32, 2**32], GGML_F32, 0)]),
    "tensor_misaligned.gguf": gguf([ARCH], [tinfo("t", [1], GGML_F32, 4)], bytes(8)),
    "tensor_past_end.gguf": gguf([ARCH], [tinfo("t", [8], GGML_F32, 0)], F32x4),
    "tensor_offset_overflow.gguf": gguf([ARCH], [tinfo("t", [4], GGML_F32, 2**64 - 32)], F32x4),
    "tensor_overlap.gguf": gguf([ARCH], [tinfo("a", [4], GGML_F32, 0), tinfo("b", [2], GGML_F32, 0)], F32x4),
    "tensor_duplicate_name.gguf": gguf([ARCH], [tinfo("t", [1], GGML_F32, 0), tinfo("t", [1], GGML_F32, 32)],
                                       bytes(36)),
    "tensor_table_truncated.gguf": gguf([ARCH], n_tensors=1) + tinfo("t", [4], GGML_F32, 0)[:-5],
    # Accepted edge cases.
    "no_tensors_no_padding_ok.gguf": gguf([ARCH]),
    "version_2_ok.gguf": gguf([ARCH], [tinfo("t", [4], GGML_F32, 0)], F32x4, version=2),
    "tensor_zero_size_ok.gguf": gguf([ARCH], [tinfo("z", [0, 7], GGML_F32, 0), tinfo("t", [4], GGML_F32, 0)],
                                     F32x4),
}


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, data in FILES.items():
        (OUT / name).write_bytes(data)
    # A real model's header cut at 4 KiB, inside its 49 152-string token array.
    if MODEL.exists():
        with MODEL.open("rb") as f:
            (OUT / "smollm2_head4096.gguf").write_bytes(f.read(4096))
    print(f"{len(FILES) + MODEL.exists()} files in {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
