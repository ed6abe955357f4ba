//! Call grammars on SmolLM2's vocabulary: random walks under each tool format's grammar always
//! parse back (through `ToolOutput`) into calls of allowed functions whose arguments validate
//! against the function's schema; a lazy grammar leaves text free until its trigger and holds
//! everything after it.

mod common;

use minerva_generate::tools::{CallMode, FunctionSpec, call_grammar};
use minerva_generate::{
    Constraint, Grammar, GrammarCompiler, OutputPiece, Rng, ThinkStart, Tokenizer, ToolFormat, ToolOutput,
};
use serde_json::json;

fn functions() -> Vec<FunctionSpec> {
    vec![
        FunctionSpec {
            name: "get_weather".into(),
            description: Some("Weather in a city".into()),
            parameters: Some(json!({
                "type": "object",
                "properties": {
                    "city": {"type": "string", "maxLength": 6},
                    "days": {"type": "integer", "minimum": 1, "maximum": 7}
                },
                "required": ["city", "days"],
                "additionalProperties": false
            })),
        },
        FunctionSpec {
            name: "ping".into(),
            description: None,
            parameters: Some(
                json!({"type": "object", "properties": {"ok": {"enum": ["yes", "no"]}}, "required": ["ok"], "additionalProperties": false}),
            ),
        },
    ]
}

/// Random logits, masked, argmax, accepted, until the grammar is complete; the text. After 60
/// steps, tokens that close a string, object or list (and the stop tokens) are favoured, so free
/// strings end.
fn walk(tok: &Tokenizer, c: &mut Constraint, rng: &mut Rng, start: String) -> String {
    let mut text = start.into_bytes();
    let done = |bytes: Vec<u8>| String::from_utf8(bytes).expect("the grammar keeps the output UTF-8");
    let vocab = tok.vocab_size();
    let table = tok.token_bytes();
    let closing: Vec<usize> = (0..vocab as u32)
        .filter(|&id| tok.is_stop(id) || matches!(table.get(id), b"\"" | b"}" | b"]" | b"\"}" | b"}}"))
        .map(|id| id as usize)
        .collect();
    for step in 0..400 {
        let mut logits: Vec<f32> = (0..vocab).map(|_| rng.next_f64() as f32).collect();
        if step >= 60 {
            for &id in &closing {
                logits[id] += 2.0;
            }
        }
        c.mask(&mut logits).unwrap();
        let id = (0..vocab).max_by(|&a, &b| logits[a].total_cmp(&logits[b])).unwrap() as u32;
        assert!(logits[id as usize].is_finite(), "the mask left no token");
        if tok.is_stop(id) {
            return done(text);
        }
        text.extend_from_slice(table.get(id));
        if c.accept(id).unwrap() {
            return done(text);
        }
    }
    panic!("no end after 400 tokens: {:?}", String::from_utf8_lossy(&text));
}

fn check_calls(format: ToolFormat, text: &str, allowed: &[&str]) -> usize {
    let mut out = ToolOutput::new(Some(format), ThinkStart::Never);
    let mut pieces = out.push(text);
    pieces.extend(out.finish());
    let mut calls: Vec<(String, String)> = Vec::new();
    for p in pieces {
        match p {
            OutputPiece::ToolCall { name, .. } => calls.push((name, String::new())),
            OutputPiece::ToolArguments { index, text } => calls[index].1.push_str(&text),
            OutputPiece::Answer(a) => {
                assert!(a.trim().is_empty() || format == ToolFormat::Generic, "{format:?}: answer {a:?} in {text:?}")
            }
            OutputPiece::Reasoning(_) => panic!("reasoning"),
        }
    }
    for (name, args) in &calls {
        assert!(allowed.contains(&name.as_str()), "{format:?}: call to {name} in {text:?}");
        let schema = functions().into_iter().find(|f| &f.name == name).unwrap().parameters.unwrap();
        let args: serde_json::Value =
            serde_json::from_str(args).unwrap_or_else(|e| panic!("{format:?}: {e}: {args:?}"));
        assert!(jsonschema::is_valid(&schema, &args), "{format:?}: {args} against {schema}");
    }
    calls.len()
}

#[test]
fn random_walks_under_every_call_grammar_parse_into_valid_calls() {
    let tok = common::tokenizer_from_gguf("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    let compiler = GrammarCompiler::new(&tok, tok.vocab_size()).unwrap();
    let special = |t: &str| tok.token_to_id(t).filter(|&id| tok.is_special(id));
    let mut rng = Rng::new(7);
    for format in ToolFormat::ALL {
        for (mode, allowed) in
            [(CallMode::Required, vec!["get_weather", "ping"]), (CallMode::Named("ping".into()), vec!["ping"])]
        {
            for parallel in [false, true] {
                let g = call_grammar(format, &functions(), &mode, parallel, &special).unwrap();
                assert_eq!(g.trigger, None);
                for _ in 0..3 {
                    let mut c = compiler.compile(&Grammar::Lark(g.lark.clone())).unwrap();
                    let text = walk(&tok, &mut c, &mut rng, String::new());
                    let n = check_calls(format, &text, &allowed);
                    assert!(n >= 1, "{format:?} {mode:?}: no call in {text:?}");
                    assert!(parallel || n == 1, "{format:?}: {n} calls without parallel_tool_calls");
                }
            }
        }
    }
}

#[test]
fn a_lazy_grammar_is_free_until_its_trigger_and_holds_the_call_after_it() {
    let tok = common::tokenizer_from_gguf("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    let compiler = GrammarCompiler::new(&tok, tok.vocab_size()).unwrap();
    let none = |_: &str| None;
    let g = call_grammar(ToolFormat::Hermes, &functions(), &CallMode::Auto, false, &none).unwrap();
    let (trigger, anchored) = g.trigger.clone().unwrap();
    let mut rng = Rng::new(3);
    let mut c = compiler.compile_lazy(&Grammar::Lark(g.lark.clone()), &trigger, anchored, true).unwrap();
    let prose = "Let me look. <tool";
    for id in tok.encode(prose, false).unwrap() {
        let mut logits = vec![0.5f32; tok.vocab_size()];
        c.mask(&mut logits).unwrap();
        assert!(logits.iter().all(|l| l.is_finite()), "text before the trigger is free");
        assert!(!c.accept(id).unwrap());
    }
    assert!(!c.is_active());
    // `_call>` completes the trigger across tokens; the grammar holds from the trigger on.
    for id in tok.encode("_call>", false).unwrap() {
        c.accept(id).unwrap();
    }
    assert!(c.is_active());
    let text = walk(&tok, &mut c, &mut rng, format!("{prose}_call>"));
    let mut out = ToolOutput::new(Some(ToolFormat::Hermes), ThinkStart::Never);
    let mut pieces = out.push(&text);
    pieces.extend(out.finish());
    assert_eq!(pieces.first(), Some(&OutputPiece::Answer("Let me look. ".into())), "{text:?}");
    assert_eq!(check_calls(ToolFormat::Hermes, &text[prose.len() - 5..], &["get_weather", "ping"]), 1, "{text:?}");

    // Anchored (Llama 3: a call is the whole answer): text first means no call, and no mask.
    let g = call_grammar(ToolFormat::Llama3, &functions(), &CallMode::Auto, false, &none).unwrap();
    let (trigger, anchored) = g.trigger.clone().unwrap();
    assert!(anchored);
    let mut c = compiler.compile_lazy(&Grammar::Lark(g.lark.clone()), &trigger, anchored, true).unwrap();
    for id in tok.encode("Hi {", false).unwrap() {
        c.accept(id).unwrap();
    }
    let mut logits = vec![0.5f32; tok.vocab_size()];
    c.mask(&mut logits).unwrap();
    assert!(!c.is_active() && logits.iter().all(|l| l.is_finite()));
    // The same grammar, the answer opening with `{`: held to a call.
    let mut c = compiler.compile_lazy(&Grammar::Lark(g.lark), &trigger, anchored, true).unwrap();
    let open = tok.encode(" {", false).unwrap();
    for &id in &open {
        c.accept(id).unwrap();
    }
    assert!(c.is_active());
    let text = walk(&tok, &mut c, &mut rng, " {".into());
    assert_eq!(check_calls(ToolFormat::Llama3, &text, &["get_weather", "ping"]), 1, "{text:?}");
}

#[test]
fn the_generic_format_is_a_call_or_a_reply_from_the_first_token() {
    let tok = common::tokenizer_from_gguf("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    let compiler = GrammarCompiler::new(&tok, tok.vocab_size()).unwrap();
    let none = |_: &str| None;
    let g = call_grammar(ToolFormat::Generic, &functions(), &CallMode::Auto, true, &none).unwrap();
    let mut rng = Rng::new(11);
    let (mut calls, mut replies) = (0, 0);
    for _ in 0..12 {
        let mut c = compiler.compile(&Grammar::Lark(g.lark.clone())).unwrap();
        let text = walk(&tok, &mut c, &mut rng, String::new());
        let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text:?}"));
        if v.get("response").is_some() {
            assert!(v["response"].is_string(), "{v}");
            replies += 1;
        } else {
            assert!(check_calls(ToolFormat::Generic, &text, &["get_weather", "ping"]) >= 1, "{text:?}");
            calls += 1;
        }
    }
    assert!(calls > 0 && replies > 0, "{calls} calls, {replies} replies: both shapes must be reachable");
}

#[test]
fn a_grammar_after_reasoning_starts_after_the_closing_tag() {
    let tok = common::tokenizer_from_gguf("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    let compiler = GrammarCompiler::new(&tok, tok.vocab_size()).unwrap();
    let mut c = compiler.compile_lazy(&Grammar::JsonObject, "</think>", false, false).unwrap();
    for id in tok.encode("2 + 2 is 4, so {\"a\": 4}.</think>", false).unwrap() {
        let mut logits = vec![0.5f32; tok.vocab_size()];
        c.mask(&mut logits).unwrap();
        assert!(logits.iter().all(|l| l.is_finite()), "reasoning is free");
        assert!(!c.accept(id).unwrap());
    }
    assert!(c.is_active());
    // The answer is an object from its first character: no more space.
    let mut logits = vec![0.5f32; tok.vocab_size()];
    c.mask(&mut logits).unwrap();
    let table = tok.token_bytes();
    let allowed: Vec<u32> = (0..tok.vocab_size() as u32).filter(|&id| logits[id as usize].is_finite()).collect();
    assert!(!allowed.is_empty());
    for id in allowed {
        assert!(table.get(id).starts_with(b"{"), "{:?} may open the answer", String::from_utf8_lossy(table.get(id)));
    }
    let mut rng = Rng::new(5);
    let text = walk(&tok, &mut c, &mut rng, String::new());
    let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text:?}"));
    assert!(v.is_object(), "{text}");
}
