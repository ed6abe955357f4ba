//! Chat messages → prompt text: the model's chat template (as `minerva run --chat` renders it),
//! or Harmony for GPT-OSS (reasoning effort, tools, tool calls and results).

use std::collections::HashMap;

use minerva_generate::Message;
use minerva_generate::harmony::{self, ReasoningEffort, Role, SystemContent};
use minerva_generate::template::Value;

use crate::api::request::{ChatMessage, ChatRequest, Content};
use crate::api::tools as tools_api;
use crate::engine::TemplateChat;
use crate::error::ApiError;

/// A message's text: a string, or its text parts joined.
fn text_of(i: usize, m: &ChatMessage) -> Result<String, ApiError> {
    match &m.content {
        None if m.role == "assistant" => Ok(String::new()),
        None => Err(ApiError::invalid(format!("messages[{i}].content"), "a message needs `content`")),
        Some(Content::Text(t)) => Ok(t.clone()),
        Some(Content::Parts(parts)) => {
            let mut text = String::new();
            for (j, part) in parts.iter().enumerate() {
                if part.kind != "text" {
                    return Err(ApiError::unsupported(
                        &format!("messages[{i}].content[{j}].type"),
                        format!("content parts of type `{}` are not supported; only `text` is", part.kind),
                    ));
                }
                text.push_str(part.text.as_deref().unwrap_or_default());
            }
            Ok(text)
        }
    }
}

fn check_role(i: usize, role: &str) -> Result<(), ApiError> {
    match role {
        "system" | "developer" | "user" | "assistant" | "tool" => Ok(()),
        other => Err(ApiError::invalid(
            format!("messages[{i}].role"),
            format!("unknown role `{other}`; expected system, developer, user, assistant or tool"),
        )),
    }
}

/// An earlier call's arguments as the object templates expect (a string that is not JSON stays a
/// string).
fn arguments_value(arguments: &str) -> serde_json::Value {
    serde_json::from_str(arguments).unwrap_or_else(|_| serde_json::Value::String(arguments.to_string()))
}

/// The prompt text of `req` through a Jinja chat template. `developer` messages are given to the
/// template as `system` (templates written before the role existed know only that). With
/// `tools_on`, the tools go to a template that renders them as `tools`; to one that does not,
/// they are described in the system message, and earlier calls and their results are written
/// in the tool format as text.
pub fn render_template(chat: &TemplateChat, req: &ChatRequest, tools_on: bool) -> Result<String, ApiError> {
    if req.messages.is_empty() {
        return Err(ApiError::invalid("messages", "`messages` is empty"));
    }
    let own_tools = chat.renders_tools;
    let mut messages = Vec::with_capacity(req.messages.len() + 1);
    // Call id → function name, to name a `tool` message's function.
    let mut call_names: HashMap<String, String> = HashMap::new();
    for (i, m) in req.messages.iter().enumerate() {
        check_role(i, &m.role)?;
        let role = if m.role == "developer" { "system" } else { m.role.as_str() };
        let mut message = Message::new(role, text_of(i, m)?);
        message.reasoning_content = m.reasoning_content.clone();
        let calls: Vec<(String, serde_json::Value)> = m
            .tool_calls
            .iter()
            .flatten()
            .map(|c| (c.function.name.clone(), arguments_value(&c.function.arguments)))
            .collect();
        for c in m.tool_calls.iter().flatten() {
            if let Some(id) = &c.id {
                call_names.insert(id.clone(), c.function.name.clone());
            }
        }
        let name = m.tool_call_id.as_ref().and_then(|id| call_names.get(id)).cloned().or_else(|| m.name.clone());
        if own_tools {
            if m.tool_calls.is_some() {
                let calls = m.tool_calls.iter().flatten().zip(&calls).map(|(c, (name, args))| {
                    serde_json::json!({
                        "id": c.id, "type": "function", "function": {"name": name, "arguments": args}
                    })
                });
                message.tool_calls = Some(calls.collect());
            }
            message.tool_call_id = m.tool_call_id.clone();
            message.name = name;
        } else if !calls.is_empty() {
            let text = minerva_generate::tools::format_calls(chat.tool_format, &calls);
            message.content = if message.content.is_empty() { text } else { format!("{}\n{text}", message.content) };
        } else if role == "tool" {
            message.role = "user".into();
            message.content =
                minerva_generate::tools::format_tool_result(chat.tool_format, name.as_deref(), &message.content);
        }
        messages.push(message);
    }
    let tools = req.tools.as_deref().unwrap_or_default();
    let mut extra = None;
    if tools_on && own_tools {
        let list: Vec<serde_json::Value> = tools_api::specs(tools).iter().map(|f| f.to_tool_json()).collect();
        extra = Some(Value::from_serialize(serde_json::json!({ "tools": list })));
    } else if tools_on {
        let described = minerva_generate::tools::tools_system_prompt(chat.tool_format, &tools_api::specs(tools));
        match messages.first_mut() {
            Some(first) if first.role == "system" => first.content = format!("{}\n\n{described}", first.content),
            _ => messages.insert(0, Message::new("system", described)),
        }
    }
    chat.template.render(&messages, true, extra.as_ref()).map_err(|e| ApiError::invalid("messages", e.to_string()))
}

/// `reasoning_effort` → Harmony's.
fn effort(req: &ChatRequest) -> Result<ReasoningEffort, ApiError> {
    match req.reasoning_effort.as_deref() {
        None | Some("medium") => Ok(ReasoningEffort::Medium),
        Some("low") => Ok(ReasoningEffort::Low),
        Some("high") => Ok(ReasoningEffort::High),
        Some(other) => Err(ApiError::invalid(
            "reasoning_effort",
            format!("`reasoning_effort` is `{other}`; it must be low, medium or high"),
        )),
    }
}

/// The Harmony prompt of `req`, ending in `<|start|>assistant`. System and developer messages
/// become the developer message's instructions; tools its `# Tools` section; earlier assistant
/// tool calls and `tool` results are rendered as the model wrote and read them.
pub fn render_harmony(req: &ChatRequest, today: &str) -> Result<String, ApiError> {
    if req.messages.is_empty() {
        return Err(ApiError::invalid("messages", "`messages` is empty"));
    }
    let tools = req.tools.as_deref().unwrap_or_default();
    let use_tools = !tools.is_empty() && req.tool_choice.as_ref().and_then(|c| c.as_str()) != Some("none");
    let mut system = SystemContent {
        reasoning_effort: effort(req)?,
        conversation_start_date: Some(today.to_string()),
        ..SystemContent::default()
    };
    system.function_tools = use_tools;
    let mut instructions = Vec::new();
    let mut rest = Vec::new();
    // Tool call id → function name, to name a `tool` message's author.
    let mut call_names: HashMap<String, String> = HashMap::new();
    for (i, m) in req.messages.iter().enumerate() {
        check_role(i, &m.role)?;
        let text = text_of(i, m)?;
        match m.role.as_str() {
            "system" | "developer" => instructions.push(text),
            "user" => rest.push(harmony::Message::new(Role::User, text)),
            "assistant" => {
                if let Some(reasoning) = m.reasoning_content.as_deref().filter(|r| !r.is_empty()) {
                    rest.push(harmony::Message::new(Role::Assistant, reasoning).with_channel("analysis"));
                }
                if !text.is_empty() {
                    rest.push(harmony::Message::new(Role::Assistant, text).with_channel("final"));
                }
                for call in m.tool_calls.iter().flatten() {
                    if let Some(id) = &call.id {
                        call_names.insert(id.clone(), call.function.name.clone());
                    }
                    rest.push(
                        harmony::Message::new(Role::Assistant, call.function.arguments.clone())
                            .with_channel("commentary")
                            .with_recipient(format!("functions.{}", call.function.name))
                            .with_content_type("<|constrain|>json"),
                    );
                }
            }
            _ => {
                // `tool`: named by its call id, else by the latest call.
                let name = m
                    .tool_call_id
                    .as_ref()
                    .and_then(|id| call_names.get(id))
                    .or_else(|| call_names.values().last())
                    .cloned()
                    .or_else(|| m.name.clone())
                    .ok_or_else(|| {
                        ApiError::invalid(
                            format!("messages[{i}].tool_call_id"),
                            "a `tool` message must answer an earlier assistant tool call",
                        )
                    })?;
                rest.push(
                    harmony::Message::new(Role::Tool(format!("functions.{name}")), text)
                        .with_channel("commentary")
                        .with_recipient("assistant"),
                );
            }
        }
    }
    let mut messages = vec![harmony::Message::system(&system)];
    let mut developer = String::new();
    if !instructions.is_empty() {
        developer = harmony::developer_content(&instructions.join("\n\n"));
    }
    if use_tools {
        let defs: Vec<harmony::FunctionDefinition> = tools
            .iter()
            .map(|t| harmony::FunctionDefinition {
                name: t.function.name.clone(),
                description: t.function.description.clone().unwrap_or_default(),
                parameters: t.function.parameters.clone(),
            })
            .collect();
        if !developer.is_empty() {
            developer.push_str("\n\n");
        }
        developer.push_str(&harmony::render_function_tools(&defs));
    }
    if !developer.is_empty() {
        messages.push(harmony::Message::new(Role::Developer, developer));
    }
    messages.extend(rest);
    Ok(harmony::render_conversation_for_completion(&messages, &Role::Assistant))
}
