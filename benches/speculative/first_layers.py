#!/usr/bin/env python3
"""Writes a GGUF holding the first N layers of a LLaMA-family GGUF (everything else as it is): a
smaller model of the same vocabulary, for measuring `--draft-model` where no smaller sibling of a
model can be downloaded (layer-skip drafting, untrained: its drafts are kept less often than a
trained small model's).

    python3 benches/speculative/first_layers.py models/SmolLM2-135M-Instruct.Q4_1.gguf 15 /tmp/draft15.gguf

Needs `pip install gguf`.
"""

import sys

import gguf


def main() -> None:
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    source, layers, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    reader = gguf.GGUFReader(source)
    arch = reader.fields["general.architecture"].contents()
    count_key = f"{arch}.block_count"
    total = reader.fields[count_key].contents()
    if not 1 <= layers <= total:
        sys.exit(f"{source} has {total} layers: need 1 to {total}")
    writer = gguf.GGUFWriter(out, arch)
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name in ("general.architecture", count_key):
            continue
        value = field.contents()
        kind = field.types[0]
        if kind == gguf.GGUFValueType.ARRAY:
            writer.add_key_value(name, value, kind, sub_type=field.types[-1])
        else:
            writer.add_key_value(name, value, kind)
    writer.add_uint32(count_key, layers)
    for t in reader.tensors:
        if t.name.startswith("blk.") and int(t.name.split(".")[1]) >= layers:
            continue
        writer.add_tensor(t.name, t.data, raw_shape=t.data.shape, raw_dtype=t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


if __name__ == "__main__":
    main()
