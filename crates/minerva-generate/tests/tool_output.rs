//! `ToolOutput`: completions in each text tool format, fed whole, a character at a time and in
//! uneven chunks, split into the same answer, reasoning and calls; calls whose header streams
//! send their name before any argument text.

use minerva_generate::{OutputPiece, ThinkStart, ToolFormat, ToolOutput};

/// What a whole completion split into.
#[derive(Debug, Default, PartialEq)]
struct Split {
    answer: String,
    reasoning: String,
    calls: Vec<(String, String)>,
}

fn collect(pieces: impl IntoIterator<Item = OutputPiece>, split: &mut Split, name_first: &mut bool) {
    for p in pieces {
        match p {
            OutputPiece::Answer(t) => split.answer.push_str(&t),
            OutputPiece::Reasoning(t) => split.reasoning.push_str(&t),
            OutputPiece::ToolCall { index, name } => {
                assert_eq!(index, split.calls.len(), "calls are numbered in order");
                split.calls.push((name, String::new()));
            }
            OutputPiece::ToolArguments { index, text } => match split.calls.get_mut(index) {
                Some(call) => call.1.push_str(&text),
                None => *name_first = false,
            },
        }
    }
}

/// Splits `text` fed in chunks of `size` characters (0: whole).
fn split_by(format: Option<ToolFormat>, think: ThinkStart, text: &str, size: usize) -> Split {
    let mut out = ToolOutput::new(format, think);
    let mut split = Split::default();
    let mut name_first = true;
    let chars: Vec<char> = text.chars().collect();
    let size = if size == 0 { chars.len().max(1) } else { size };
    for chunk in chars.chunks(size) {
        let chunk: String = chunk.iter().collect();
        collect(out.push(&chunk), &mut split, &mut name_first);
    }
    collect(out.finish(), &mut split, &mut name_first);
    assert!(name_first, "an argument fragment came before its call's name");
    assert_eq!(out.tool_calls(), split.calls.len());
    split
}

fn check(format: Option<ToolFormat>, think: ThinkStart, text: &str, want: Split) {
    for size in [0, 1, 2, 3, 7] {
        assert_eq!(split_by(format, think, text, size), want, "{text:?} in chunks of {size}");
    }
}

fn calls(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter().map(|(n, a)| (n.to_string(), a.to_string())).collect()
}

#[test]
fn hermes_calls_after_text_stream_their_arguments_as_written() {
    let text = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"n\": [1, \"}\"]}}\n</tool_call>\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>";
    let want = Split {
        answer: "Let me check.\n".into(),
        reasoning: String::new(),
        calls: calls(&[("get_weather", "{\"city\": \"Paris\", \"n\": [1, \"}\"]}"), ("f", "{}")]),
    };
    check(Some(ToolFormat::Hermes), ThinkStart::Never, text, want);
}

#[test]
fn text_that_only_looks_like_a_marker_stays_text() {
    let text = "a <tool_ca> b <tool_c";
    let want = Split { answer: text.into(), ..Split::default() };
    check(Some(ToolFormat::Hermes), ThinkStart::Never, text, want);
    let text = "[TOOL_CALLS]oops";
    check(Some(ToolFormat::Mistral), ThinkStart::Never, text, Split { answer: "oops".into(), ..Split::default() });
}

#[test]
fn a_call_with_arguments_before_its_name_is_read_whole() {
    let text = "<tool_call>\n{\"arguments\": {\"a\": 1}, \"name\": \"f\"}\n</tool_call>";
    let want = Split { calls: calls(&[("f", "{\"a\":1}")]), ..Split::default() };
    check(Some(ToolFormat::Hermes), ThinkStart::Never, text, want);
}

#[test]
fn mistral_lists_llama3_objects_and_generic_replies() {
    let text = "[TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {\"x\": 1}}, {\"name\": \"b\", \"arguments\": {}}]";
    let want = Split { calls: calls(&[("a", "{\"x\": 1}"), ("b", "{}")]), ..Split::default() };
    check(Some(ToolFormat::Mistral), ThinkStart::Never, text, want);

    let text = " {\"name\": \"a\", \"parameters\": {\"x\": \"y\"}}; {\"name\": \"b\", \"parameters\": {}}";
    let want = Split { calls: calls(&[("a", "{\"x\": \"y\"}"), ("b", "{}")]), ..Split::default() };
    check(Some(ToolFormat::Llama3), ThinkStart::Never, text, want);
    check(
        Some(ToolFormat::Llama3),
        ThinkStart::Never,
        "Paris {is} nice",
        Split { answer: "Paris {is} nice".into(), ..Split::default() },
    );

    let text = "{\"tool_calls\": [{\"name\": \"a\", \"arguments\": {\"q\": \"w\"}}]}";
    let want = Split { calls: calls(&[("a", "{\"q\": \"w\"}")]), ..Split::default() };
    check(Some(ToolFormat::Generic), ThinkStart::Never, text, want);
    let text = "{\"response\": \"Hi \\\"you\\\"\\n\\u00e9\"}";
    let want = Split { answer: "Hi \"you\"\né".into(), ..Split::default() };
    check(Some(ToolFormat::Generic), ThinkStart::Never, text, want);
    // Another shape is read whole: its calls if it has them, else its text.
    let text = "{\"other\": 1, \"tool_calls\": [{\"name\": \"a\", \"arguments\": {}}]}";
    check(
        Some(ToolFormat::Generic),
        ThinkStart::Never,
        text,
        Split { calls: calls(&[("a", "{}")]), ..Split::default() },
    );
    check(
        Some(ToolFormat::Generic),
        ThinkStart::Never,
        "{\"x\": 2}",
        Split { answer: "{\"x\": 2}".into(), ..Split::default() },
    );
}

#[test]
fn reasoning_goes_apart_before_answers_and_calls() {
    let text = "<think>\nI should call f.\n</think>\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": true}}\n</tool_call>";
    let want = Split {
        answer: String::new(),
        reasoning: "\nI should call f.\n".into(),
        calls: calls(&[("f", "{\"a\": true}")]),
    };
    check(Some(ToolFormat::Hermes), ThinkStart::MayOpen, text, want);
    // A prompt that opened `<think>` itself.
    let want = Split { answer: "4".into(), reasoning: "2+2 </thin".into(), calls: Vec::new() };
    check(None, ThinkStart::Open, "2+2 </thin</think>\n4", want);
    // No `<think>`: all answer; an unclosed one: all reasoning.
    check(None, ThinkStart::MayOpen, " <thank you", Split { answer: " <thank you".into(), ..Split::default() });
    check(None, ThinkStart::MayOpen, "<think>hm", Split { reasoning: "hm".into(), ..Split::default() });
}

#[test]
fn a_call_cut_off_keeps_what_streamed_and_text_that_never_became_a_call_is_text() {
    let split = split_by(
        Some(ToolFormat::Hermes),
        ThinkStart::Never,
        "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": ",
        1,
    );
    assert_eq!(split.calls, calls(&[("f", "{\"a\": ")]));
    let split = split_by(Some(ToolFormat::Hermes), ThinkStart::Never, "<tool_call>\n{\"nam", 1);
    assert_eq!(split.answer, "{\"nam");
    assert!(split.calls.is_empty());
}

#[test]
fn think_start_is_read_from_the_prompt_and_template() {
    assert_eq!(ThinkStart::of(Some("x"), "<|im_start|>assistant\n<think>\n"), ThinkStart::Open);
    assert_eq!(ThinkStart::of(Some("{{ '</think>' }}"), "<|im_start|>assistant\n"), ThinkStart::MayOpen);
    assert_eq!(ThinkStart::of(Some("plain"), "<|im_start|>assistant\n"), ThinkStart::Never);
}
