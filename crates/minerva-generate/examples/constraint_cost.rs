//! What constrained decoding costs: building the grammar compiler for a vocabulary, compiling a
//! JSON schema, and the mask of each step of a greedy answer held to it (mean, median, p99), next
//! to the forward step it rides beside.
//!
//! ```sh
//! cargo run --release -p minerva-generate --example constraint_cost -- models/SmolLM2-135M-Instruct.Q4_1.gguf [THREADS]
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use minerva_generate::{ChatTemplate, Grammar, GrammarCompiler, Message, Tokenizer};
use minerva_model::{CpuBackend, LogitsFor, Model, SequenceInput, argmax};

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or("usage: constraint_cost MODEL.gguf [THREADS]")?;
    let threads: usize = args.next().map_or(Ok(2), |t| t.parse())?;
    let gguf = Arc::new(minerva_gguf::Gguf::open(&path)?);
    let tok = Tokenizer::from_gguf(&gguf)?;
    let model = Model::from_gguf(gguf, CpuBackend::new(Some(threads))?)?;
    let t = Instant::now();
    let compiler = GrammarCompiler::new(&tok, model.config.vocab)?;
    let build = t.elapsed();
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 20},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "city": {"type": "string", "maxLength": 30},
            "hobbies": {"type": "array", "items": {"type": "string", "maxLength": 20}, "maxItems": 4},
            "member": {"type": "boolean"}
        },
        "required": ["name", "age", "city", "hobbies", "member"],
        "additionalProperties": false
    });
    let t = Instant::now();
    let mut constraint = compiler.compile(&Grammar::JsonSchema(schema))?;
    let compile = t.elapsed();

    let text = ChatTemplate::from_tokenizer(&tok)?.render(
        &[Message::new("user", "Describe a person as JSON with name, age, city, hobbies and member.")],
        true,
        None,
    )?;
    let prompt = tok.encode(&text, false)?;
    let mut cache = model.new_cache(1, 1024)?;
    let mut logits =
        model.forward(&mut cache, &[SequenceInput { tokens: &prompt, start_pos: 0, slot: 0 }], LogitsFor::Last)?.data;
    let (mut masks, mut steps) = (Vec::new(), Vec::new());
    let mut answer = Vec::new();
    for pos in prompt.len()..prompt.len() + 200 {
        let t = Instant::now();
        constraint.mask(&mut logits)?;
        masks.push(t.elapsed());
        let id = argmax(&logits);
        if tok.is_stop(id) || constraint.accept(id)? {
            if !tok.is_stop(id) {
                answer.push(id);
            }
            break;
        }
        answer.push(id);
        let t = Instant::now();
        logits = model
            .forward(&mut cache, &[SequenceInput { tokens: &[id], start_pos: pos, slot: 0 }], LogitsFor::Last)?
            .data;
        steps.push(t.elapsed());
    }
    println!("answer: {}", tok.decode(&answer, true)?);
    masks.sort();
    steps.sort();
    let mean = |v: &[Duration]| v.iter().sum::<Duration>() / v.len().max(1) as u32;
    println!(
        "vocabulary {} | compiler built in {:.1} ms | schema compiled in {:.2} ms",
        model.config.vocab,
        build.as_secs_f64() * 1e3,
        compile.as_secs_f64() * 1e3
    );
    println!(
        "mask per token over {} steps: mean {:.1} us, median {:.1} us, p99 {:.1} us, max {:.1} us",
        masks.len(),
        mean(&masks).as_secs_f64() * 1e6,
        percentile(&masks, 0.5).as_secs_f64() * 1e6,
        percentile(&masks, 0.99).as_secs_f64() * 1e6,
        masks.last().map_or(0.0, |d| d.as_secs_f64() * 1e6),
    );
    if !steps.is_empty() {
        println!(
            "decode step ({threads} threads): median {:.2} ms; the mean mask is {:.1} % of it",
            percentile(&steps, 0.5).as_secs_f64() * 1e3,
            100.0 * mean(&masks).as_secs_f64() / percentile(&steps, 0.5).as_secs_f64()
        );
    }
    Ok(())
}
