//! Writes the `GgufWriter`-made seeds of `fuzz/seeds/gguf_reader/` (the gguf-py-made ones come
//! from `make_seeds.py`). Run from `fuzz/`: `cargo run --example make_seeds`.
//!
//! Each seed holds something gguf-py cannot or does not write, so the fuzzer starts next to it:
//! empty and 8-deep arrays, alignment 1, zero-sized and 0-d tensors, every GGUF tensor type, v2.

use std::path::Path;

use minerva_gguf::{DType, GgufWriter, MAX_ARRAY_DEPTH, MetadataValue, Result, ValueType};

fn write(dir: &Path, name: &str, w: &GgufWriter) -> Result<Vec<u8>> {
    let mut bytes = Vec::new();
    w.write_to(&mut bytes)?;
    std::fs::write(dir.join(name), &bytes)?;
    println!("{:>7} {name}", bytes.len());
    Ok(bytes)
}

/// A tensor of `dtype` with `rows` rows of one block, filled with a byte pattern.
fn blocks(w: &mut GgufWriter, name: &str, dtype: DType, rows: usize) -> Result<()> {
    let data = (0..rows * dtype.block_bytes()).map(|i| (i * 7 + 3) as u8).collect();
    w.add_tensor(name, dtype, &[rows, dtype.block_elems()], data)
}

fn main() -> Result<()> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds/gguf_reader");
    std::fs::create_dir_all(&dir)?;

    // Metadata edge cases: empty arrays of every kind and arrays nested as deep as allowed.
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", "llama")?;
    w.add_metadata("llama.block_count", 1u64)?;
    w.add_metadata("llama.attention.head_count", MetadataValue::i32s([4]))?;
    w.add_metadata("empty.string", "")?;
    w.add_metadata("empty.u8s", MetadataValue::Array { elem_type: ValueType::U8, values: vec![] })?;
    w.add_metadata("empty.strings", MetadataValue::strings(Vec::<String>::new()))?;
    w.add_metadata("empty.arrays", MetadataValue::Array { elem_type: ValueType::Array, values: vec![] })?;
    let mut deep = MetadataValue::strings(["bottom"]);
    for _ in 1..MAX_ARRAY_DEPTH {
        deep = MetadataValue::Array { elem_type: ValueType::Array, values: vec![deep.clone(), deep] };
    }
    w.add_metadata("deep.max", deep)?;
    w.add_metadata(
        "mixed.inner",
        MetadataValue::Array {
            elem_type: ValueType::Array,
            values: vec![MetadataValue::f32s([1.0, f32::NAN]), MetadataValue::strings(["s"]), MetadataValue::i32s([])],
        },
    )?;
    w.add_metadata("f64.inf", f64::INFINITY)?;
    w.add_metadata("u64.max", u64::MAX)?;
    w.add_metadata("i64.min", i64::MIN)?;
    w.add_tensor("empty", DType::F32, &[0, 3], vec![])?;
    w.add_tensor("scalar", DType::F32, &[], 1.0f32.to_le_bytes().to_vec())?;
    w.add_tensor("four_d", DType::F16, &[1, 2, 1, 2], vec![0; 8])?;
    let v3 = write(&dir, "rs_edge_cases.gguf", &w)?;

    // The same file as version 2: identical layout, 64-bit counts.
    let mut v2 = v3;
    v2[4..8].copy_from_slice(&2u32.to_le_bytes());
    std::fs::write(dir.join("rs_edge_cases_v2.gguf"), &v2)?;
    println!("{:>7} rs_edge_cases_v2.gguf", v2.len());

    // One tensor of every type GGUF can store, packed with alignment 1.
    let mut w = GgufWriter::new();
    w.add_metadata("general.alignment", 1u32)?;
    w.add_metadata("general.architecture", "test")?;
    for dtype in DType::all().filter(|d| d.ggml_id().is_some()) {
        blocks(&mut w, &format!("t.{}", dtype.name().to_lowercase()), dtype, 1)?;
    }
    write(&dir, "rs_every_dtype_align1.gguf", &w)?;

    // A tokenizer-shaped file: long string array, scores, types, merges, quantized weights.
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", "llama")?;
    w.add_metadata("llama.context_length", 2048u32)?;
    w.add_metadata("llama.embedding_length", 256u32)?;
    w.add_metadata("tokenizer.ggml.model", "gpt2")?;
    let tokens: Vec<String> = (0..200).map(|i| format!("tok{i}\u{2581}")).collect();
    w.add_metadata("tokenizer.ggml.tokens", MetadataValue::strings(tokens))?;
    w.add_metadata("tokenizer.ggml.scores", MetadataValue::f32s((0..200).map(|i| -(i as f32))))?;
    w.add_metadata("tokenizer.ggml.token_type", MetadataValue::i32s((0..200).map(|i| i % 6)))?;
    w.add_metadata("tokenizer.ggml.merges", MetadataValue::strings(["t o", "to k"]))?;
    blocks(&mut w, "blk.0.attn_q.weight", DType::Q8_0, 2)?;
    blocks(&mut w, "blk.0.ffn_down.weight", DType::Q4_K, 1)?;
    blocks(&mut w, "blk.0.attn_k.weight", DType::Q4_1, 2)?;
    w.add_tensor("output_norm.weight", DType::F32, &[4], vec![0; 16])?;
    write(&dir, "rs_tokenizer.gguf", &w)?;
    Ok(())
}
