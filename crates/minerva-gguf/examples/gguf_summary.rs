//! Prints a GGUF file's architecture, a few hyper-parameters and its largest tensors.
//!
//! ```sh
//! cargo run -p minerva-gguf --example gguf_summary -- models/SmolLM2-135M-Instruct.Q4_1.gguf
//! ```

use minerva_gguf::Gguf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args().nth(1).ok_or("usage: gguf_summary FILE.gguf")?;
    let gguf = Gguf::open(&path)?;
    println!("{path}: GGUF v{}, {} keys, {} tensors", gguf.version(), gguf.metadata_len(), gguf.tensor_count());
    println!("architecture: {}", gguf.architecture()?);
    for suffix in ["block_count", "embedding_length", "attention.head_count", "context_length"] {
        if let Some(value) = gguf.get_arch(suffix)? {
            println!("  {suffix:<22} {}", value.to_u64().map_or_else(|| format!("{value:?}"), |v| v.to_string()));
        }
    }
    if let Ok(tokens) = gguf.get_array("tokenizer.ggml.tokens") {
        let first: Vec<&str> = tokens.strings().into_iter().flatten().take(3).collect();
        println!("vocabulary: {} tokens, first {first:?}", tokens.len());
    }
    let mut tensors: Vec<_> = gguf.tensors().collect();
    tensors.sort_by_key(|t| std::cmp::Reverse(t.bytes.len()));
    println!("largest tensors:");
    for t in tensors.iter().take(5) {
        println!("  {:<28} {:<6} {:?} {} bytes", t.name, t.dtype, t.shape, t.bytes.len());
    }
    Ok(())
}
