//! Structured output over real HTTP on SmolLM2: every spelling (OpenAI's `response_format`,
//! llama.cpp's `json_schema` / `grammar`, vLLM's `structured_outputs` and `guided_*`) holds the
//! answer to its grammar, checked with a JSON-schema validator or the regular expression itself;
//! bad grammars are 400s before any token; constrained and unconstrained requests share a batch
//! without changing each other's text.

mod common;

use common::{chat, chunks, post, post_stream, start};
use serde_json::{Value, json};

/// A schema with each keyword the API documents: bounds on strings, numbers and arrays, a
/// pattern, enum, const, anyOf with a `$ref`, oneOf, a nullable type, no extra properties.
fn pet_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 2, "maxLength": 12, "pattern": "^[A-Z][a-z]+$"},
            "age": {"type": "integer", "minimum": 0, "maximum": 30},
            "color": {"enum": ["black", "white", "ginger"]},
            "kind": {"const": "cat"},
            "toys": {"type": "array", "items": {"type": "string", "maxLength": 10}, "minItems": 1, "maxItems": 3},
            "owner": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/person"}]},
            "nickname": {"type": ["string", "null"], "maxLength": 10},
            "size": {"oneOf": [{"type": "integer", "minimum": 1, "maximum": 9}, {"enum": ["small", "big"]}]}
        },
        "required": ["name", "age", "color", "kind", "toys", "owner", "nickname", "size"],
        "additionalProperties": false,
        "$defs": {
            "person": {
                "type": "object",
                "properties": {"first": {"type": "string", "maxLength": 10}},
                "required": ["first"],
                "additionalProperties": false
            }
        }
    })
}

/// Parses `text` as JSON and validates it against `schema`.
fn assert_valid(schema: &Value, text: &str) -> Value {
    let value: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text:?}"));
    let validator = jsonschema::validator_for(schema).unwrap();
    let errors: Vec<String> = validator.iter_errors(&value).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{text} breaks the schema: {errors:?}");
    value
}

fn content(r: &Value, i: usize) -> String {
    r["choices"][i]["message"]["content"].as_str().unwrap_or_else(|| panic!("no content: {r}")).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_format_json_schema_holds_greedy_sampled_and_streamed_answers() {
    let server = start(4).await;
    let format = json!({"type": "json_schema", "json_schema": {"name": "pet", "schema": pet_schema(), "strict": true}});
    let ask = |extra: Value| {
        let mut body = chat("Describe a pet cat.", json!({"response_format": format, "max_tokens": 300}));
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        body
    };
    let (status, _, r) = post(&server.url, "/v1/chat/completions", &ask(json!({"temperature": 0}))).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["choices"][0]["finish_reason"], "stop", "{r}");
    let greedy = content(&r, 0);
    assert_eq!(assert_valid(&pet_schema(), &greedy)["kind"], "cat");
    // Sampled hot, three choices: each its own draw, each valid.
    let (status, _, r) =
        post(&server.url, "/v1/chat/completions", &ask(json!({"temperature": 1.5, "seed": 3, "n": 3}))).await;
    assert_eq!(status, 200, "{r}");
    let drawn: Vec<String> = (0..3).map(|i| content(&r, i)).collect();
    for (i, text) in drawn.iter().enumerate() {
        assert_eq!(r["choices"][i]["finish_reason"], "stop", "{r}");
        assert_valid(&pet_schema(), text);
    }
    assert!(drawn[0] != drawn[1] || drawn[1] != drawn[2], "{drawn:?}");
    // Streamed: the deltas add up to the same answer.
    let events =
        post_stream(&server.url, "/v1/chat/completions", &ask(json!({"temperature": 0, "stream": true}))).await;
    let streamed: String = chunks(&events)
        .iter()
        .filter_map(|c| c["choices"].get(0)?["delta"]["content"].as_str().map(String::from))
        .collect();
    assert_eq!(streamed, greedy);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_object_regex_choice_and_lark_hold_on_both_endpoints() {
    let server = start(2).await;
    let (status, _, r) = post(
        &server.url,
        "/v1/chat/completions",
        &chat(
            "Give me a JSON object with the name and the country of the capital of France.",
            json!({"response_format": {"type": "json_object"}, "temperature": 0, "max_tokens": 200}),
        ),
    )
    .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["choices"][0]["finish_reason"], "stop", "{r}");
    assert!(serde_json::from_str::<Value>(&content(&r, 0)).unwrap().is_object());

    let complete = |extra: Value| {
        let mut body = json!({"prompt": "My phone number is", "temperature": 0, "max_tokens": 40});
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        body
    };
    let phone = regex::Regex::new(r"^ \(\d{3}\) \d{3}-\d{4}$").unwrap();
    for field in [
        json!({"guided_regex": r" \(\d{3}\) \d{3}-\d{4}"}),
        json!({"structured_outputs": {"regex": r" \(\d{3}\) \d{3}-\d{4}"}}),
    ] {
        let (status, _, r) = post(&server.url, "/v1/completions", &complete(field.clone())).await;
        assert_eq!(status, 200, "{r}");
        let text = r["choices"][0]["text"].as_str().unwrap();
        assert!(phone.is_match(text), "{field}: {text:?}");
        assert_eq!(r["choices"][0]["finish_reason"], "stop", "{r}");
    }
    let choices = ["Paris", "London", "Rome"];
    for field in [json!({"guided_choice": choices}), json!({"structured_outputs": {"choice": choices}})] {
        let body = json!({"prompt": "The capital of France is", "temperature": 0, "max_tokens": 10});
        let mut body = body.as_object().unwrap().clone();
        body.extend(field.as_object().unwrap().clone());
        let (status, _, r) = post(&server.url, "/v1/completions", &Value::Object(body)).await;
        assert_eq!(status, 200, "{r}");
        assert_eq!(r["choices"][0]["text"], "Paris", "{field}: {r}");
    }
    // llama.cpp's `json_schema` and `grammar` (Lark) on /v1/completions.
    let schema = json!({"type": "object", "properties": {"digits": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}, "minItems": 3, "maxItems": 3}}, "required": ["digits"], "additionalProperties": false});
    let (status, _, r) = post(
        &server.url,
        "/v1/completions",
        &complete(json!({"prompt": "Three digits as JSON:", "json_schema": schema})),
    )
    .await;
    assert_eq!(status, 200, "{r}");
    assert_valid(&schema, r["choices"][0]["text"].as_str().unwrap());
    let lark = "start: \" \" ANSWER \".\"\nANSWER: \"yes\" | \"no\"";
    for field in [json!({"grammar": lark}), json!({"guided_grammar": lark})] {
        let mut body = json!({"prompt": "Is the sky blue? Answer:", "temperature": 0, "max_tokens": 10});
        body.as_object_mut().unwrap().extend(field.as_object().unwrap().clone());
        let (status, _, r) = post(&server.url, "/v1/completions", &body).await;
        assert_eq!(status, 200, "{r}");
        let text = r["choices"][0]["text"].as_str().unwrap();
        assert!(text == " yes." || text == " no.", "{field}: {text:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_grammars_are_400s_naming_their_field_before_any_token() {
    let server = start(2).await;
    let mut deep = json!({"type": "string"});
    for _ in 0..70 {
        deep = json!({"type": "array", "items": deep});
    }
    let cases = [
        (
            json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}),
            "response_format.json_schema.schema",
            "needs",
        ),
        (
            json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "frog"}}}}),
            "response_format.json_schema.schema",
            "",
        ),
        (json!({"response_format": {"type": "yaml"}}), "response_format.type", "yaml"),
        (json!({"json_schema": {"type": "integer", "minimum": 5, "maximum": 1}}), "json_schema", ""),
        (json!({"json_schema": deep}), "json_schema", "levels deep"),
        (json!({"grammar": "root ::= \"yes\""}), "grammar", "GBNF"),
        (json!({"grammar": "start: undefined_rule"}), "grammar", ""),
        (json!({"guided_choice": []}), "guided_choice", "empty"),
        (json!({"guided_regex": "[0-9]+", "guided_choice": ["a"]}), "guided_choice", "one output constraint"),
    ];
    for (fields, param, words) in cases {
        for stream in [false, true] {
            let mut body = chat("x", json!({"max_tokens": 5, "stream": stream}));
            body.as_object_mut().unwrap().extend(fields.as_object().unwrap().clone());
            let (status, _, e) = post(&server.url, "/v1/chat/completions", &body).await;
            assert_eq!(status, 400, "{fields}: {e}");
            assert_eq!(e["error"]["param"], param, "{fields}: {e}");
            assert!(e["error"]["message"].as_str().unwrap().contains(words), "{fields}: {e}");
        }
    }
    assert_eq!(common::metric(&server.url, "minerva_completion_tokens_total").await, 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unconstrained_greedy_answer_is_the_same_beside_constrained_ones() {
    let server = start(4).await;
    let plain = json!({"prompt": "The history of Rome", "temperature": 0, "max_tokens": 24});
    let (_, _, alone) = post(&server.url, "/v1/completions", &plain).await;
    let constrained = |i: usize| {
        json!({"prompt": format!("Record {i} as JSON:"), "temperature": 0.7, "seed": i, "max_tokens": 40,
               "response_format": {"type": "json_object"}})
    };
    let url = server.url.clone();
    let others = (0..3).map(|i| {
        let url = url.clone();
        let body = constrained(i);
        async move { post(&url, "/v1/completions", &body).await }
    });
    let (beside, _) =
        tokio::join!(post(&server.url, "/v1/completions", &plain), futures_util::future::join_all(others));
    assert_eq!(beside.2["choices"][0]["text"], alone["choices"][0]["text"]);
}
