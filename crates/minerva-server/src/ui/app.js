// The chat page of `minerva serve`: conversations kept in this browser's local storage, answers
// streamed from /v1/chat/completions, nothing fetched from any other host.
"use strict";

const STORE = "minerva.conversations";
const DEFAULTS = { system: "", temperature: 0.8, top_p: 0.95, max_tokens: 512, seed: "" };
const $ = (id) => document.getElementById(id);

const state = {
  conversations: [],
  current: null,
  controller: null, // the running generation's AbortController
  key: localStorage.getItem("minerva.apiKey") || "",
};

function load() {
  try {
    const saved = JSON.parse(localStorage.getItem(STORE) || "[]");
    state.conversations = Array.isArray(saved) ? saved.filter(isConversation) : [];
  } catch (_) {
    state.conversations = [];
  }
  state.current = localStorage.getItem("minerva.current");
  if (!conversation()) state.current = state.conversations[0]?.id ?? null;
}

function save() {
  localStorage.setItem(STORE, JSON.stringify(state.conversations));
  if (state.current) localStorage.setItem("minerva.current", state.current);
}

function isConversation(c) {
  return c && typeof c.id === "string" && Array.isArray(c.messages) &&
    c.messages.every((m) => m && (m.role === "user" || m.role === "assistant") && typeof m.content === "string");
}

function conversation() {
  return state.conversations.find((c) => c.id === state.current) || null;
}

function newConversation() {
  const c = { id: "c" + Date.now().toString(36) + Math.random().toString(36).slice(2, 8), title: "New chat",
    created: Date.now(), settings: { ...DEFAULTS }, messages: [] };
  state.conversations.unshift(c);
  state.current = c.id;
  save();
  return c;
}

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function button(text, label, onClick) {
  const b = el("button", "", text);
  b.type = "button";
  if (label) b.setAttribute("aria-label", label);
  b.addEventListener("click", onClick);
  return b;
}

// ---- the conversation list ----

function renderList() {
  const list = $("conversations");
  list.replaceChildren();
  for (const c of state.conversations) {
    const li = el("li", c.id === state.current ? "current" : "");
    const open = button(c.title || "New chat", null, () => { select(c.id); $("sidebar").classList.remove("open"); });
    open.className = "open";
    if (c.id === state.current) open.setAttribute("aria-current", "true");
    const rename = button("✎", "Rename " + c.title, () => startRename(li, c));
    const del = button("×", "Delete " + c.title, () => {
      if (del.dataset.armed) return removeConversation(c.id);
      del.dataset.armed = "1";
      del.textContent = "Delete?";
      setTimeout(() => { delete del.dataset.armed; del.textContent = "×"; }, 3000);
    });
    rename.className = del.className = "small";
    li.append(open, rename, del);
    list.append(li);
  }
}

function startRename(li, c) {
  const input = el("input");
  input.value = c.title;
  input.setAttribute("aria-label", "New name");
  li.replaceChildren(input);
  input.focus();
  input.select();
  const done = (keep) => { if (keep && input.value.trim()) c.title = input.value.trim(); save(); renderList(); };
  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter") done(true);
    if (e.key === "Escape") done(false);
  });
  input.addEventListener("blur", () => done(true));
}

function removeConversation(id) {
  if (state.controller && state.current === id) stop();
  state.conversations = state.conversations.filter((c) => c.id !== id);
  if (state.current === id) state.current = state.conversations[0]?.id ?? null;
  save();
  renderAll();
}

function select(id) {
  state.current = id;
  save();
  renderAll();
}

// ---- messages ----

function renderMessages() {
  const box = $("messages");
  box.replaceChildren();
  const c = conversation();
  if (!c) return;
  c.messages.forEach((m, i) => box.append(messageNode(c, m, i)));
  box.scrollTop = box.scrollHeight;
}

function messageNode(c, m, i) {
  const node = el("article", "message " + m.role);
  node.dataset.index = i;
  const bubble = el("div", "bubble");
  fillBubble(bubble, m);
  node.append(bubble);
  if (m.error) {
    const error = el("div", "error", m.error);
    error.setAttribute("role", "alert");
    node.append(error);
  }
  if (m.stats) node.append(el("div", "stats", m.stats));
  const busy = !!state.controller;
  const actions = el("div", "actions");
  if (m.role === "user" && !busy) actions.append(button("Edit", "Edit this message", () => startEdit(node, c, i)));
  if (m.role === "assistant" && !busy) {
    actions.append(button("Regenerate", "Regenerate this answer", () => regenerate(i)));
    actions.append(button("Copy", "Copy this answer", () => navigator.clipboard?.writeText(m.content)));
  }
  if (actions.childElementCount) node.append(actions);
  return node;
}

function fillBubble(bubble, m) {
  bubble.replaceChildren();
  if (m.role === "user") {
    bubble.textContent = m.content;
    return;
  }
  if (m.reasoning) {
    const details = el("details", "reasoning");
    details.append(el("summary", "", "Reasoning"), el("div", "text", m.reasoning));
    bubble.append(details);
  }
  bubble.append(window.MinervaMarkdown.render(m.content));
}

function startEdit(node, c, i) {
  const area = el("textarea");
  area.value = c.messages[i].content;
  area.rows = 3;
  area.style.width = "100%";
  area.setAttribute("aria-label", "Edit the message");
  const actions = el("div", "actions");
  actions.append(
    button("Save and send", null, () => {
      c.messages = c.messages.slice(0, i);
      c.messages.push({ role: "user", content: area.value });
      save();
      generate();
    }),
    button("Cancel", null, () => renderMessages()));
  node.replaceChildren(area, actions);
  area.focus();
}

// ---- settings ----

const SETTINGS = ["system", "temperature", "top_p", "max_tokens", "seed"];

function renderSettings() {
  const c = conversation();
  const s = { ...DEFAULTS, ...(c?.settings || {}) };
  for (const k of SETTINGS) $(k).value = s[k];
}

function readSettings() {
  const c = conversation() || newConversation();
  for (const k of SETTINGS) c.settings[k] = k === "system" ? $(k).value : $(k).value.trim();
  save();
}

// ---- talking to the server ----

function headers() {
  const h = { "Content-Type": "application/json" };
  if (state.key) h.Authorization = "Bearer " + state.key;
  return h;
}

async function errorText(response) {
  try {
    const body = await response.json();
    return body?.error?.message || response.statusText;
  } catch (_) {
    return response.status + " " + response.statusText;
  }
}

async function loadModel() {
  try {
    const r = await fetch("v1/models", { headers: headers() });
    if (r.status === 401) return askKey();
    if (!r.ok) { $("model").textContent = "server: " + (await errorText(r)); return; }
    const models = await r.json();
    $("model").textContent = models.data?.[0]?.id || "";
    $("key-prompt").hidden = true;
  } catch (e) {
    $("model").textContent = "server unreachable";
  }
}

function askKey() {
  $("key-prompt").hidden = false;
  $("api-key").focus();
}

function request(c) {
  const s = { ...DEFAULTS, ...c.settings };
  const messages = [];
  if (s.system.trim()) messages.push({ role: "system", content: s.system });
  for (const m of c.messages) {
    if (m.role === "assistant" && (m.error || m.stopped) && !m.content) continue;
    messages.push({ role: m.role, content: m.content });
  }
  const body = { messages, stream: true, stream_options: { include_usage: true } };
  const number = (v) => (v === "" || v === undefined || Number.isNaN(Number(v)) ? undefined : Number(v));
  for (const k of ["temperature", "top_p", "max_tokens", "seed"]) {
    const v = number(s[k]);
    if (v !== undefined) body[k] = v;
  }
  return body;
}

async function generate() {
  const c = conversation();
  if (!c || state.controller) return;
  const body = request(c);
  const answer = { role: "assistant", content: "", reasoning: "" };
  c.messages.push(answer);
  if (c.title === "New chat") {
    c.title = (c.messages.find((m) => m.role === "user")?.content || "Chat").replace(/\s+/g, " ").trim().slice(0, 40);
  }
  save();
  state.controller = new AbortController();
  setBusy(true);
  renderAll();
  const bubble = () => $("messages").lastElementChild?.querySelector(".bubble");
  const started = performance.now();
  let first = null;
  let usage = null;
  let pending = false;
  const redraw = () => {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => { pending = false; const b = bubble(); if (b) fillBubble(b, answer); });
  };
  try {
    const r = await fetch("v1/chat/completions", {
      method: "POST", headers: headers(), body: JSON.stringify(body), signal: state.controller.signal });
    if (r.status === 401) askKey();
    if (!r.ok) throw new Error(await errorText(r));
    const reader = r.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const event = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        for (const line of event.split("\n")) {
          if (!line.startsWith("data: ")) continue;
          const data = line.slice(6);
          if (data === "[DONE]") continue;
          const chunk = JSON.parse(data);
          if (chunk.error) throw new Error(chunk.error.message || "the server failed");
          if (chunk.usage) usage = chunk.usage;
          const delta = chunk.choices?.[0]?.delta;
          if (!delta) continue;
          if (delta.content || delta.reasoning_content) first ??= performance.now();
          answer.content += delta.content || "";
          answer.reasoning += delta.reasoning_content || "";
          redraw();
        }
      }
    }
  } catch (e) {
    if (e.name === "AbortError") answer.stopped = true;
    else answer.error = e.message || String(e);
  } finally {
    const ended = performance.now();
    if (usage) {
      const seconds = first ? (ended - first) / 1000 : 0;
      const rate = seconds > 0 && usage.completion_tokens > 1 ? ((usage.completion_tokens - 1) / seconds).toFixed(1) : "–";
      answer.stats = `${usage.completion_tokens} tokens · ${rate} tok/s · prompt ${usage.prompt_tokens} tokens · ` +
        `first token ${first ? Math.round(first - started) : "–"} ms`;
    } else if (answer.stopped) {
      answer.stats = "stopped";
    }
    state.controller = null;
    setBusy(false);
    save();
    renderAll();
  }
}

function stop() {
  state.controller?.abort();
}

function regenerate(i) {
  const c = conversation();
  if (!c || state.controller) return;
  c.messages = c.messages.slice(0, i);
  save();
  generate();
}

function send() {
  const text = $("input").value;
  if (!text.trim() || state.controller) return;
  const c = conversation() || newConversation();
  readSettings();
  c.messages.push({ role: "user", content: text });
  $("input").value = "";
  save();
  generate();
}

function setBusy(busy) {
  $("send").hidden = busy;
  $("stop").hidden = !busy;
}

function renderAll() {
  renderList();
  renderSettings();
  renderMessages();
}

// ---- export, import, theme ----

function exportJson() {
  const blob = new Blob([JSON.stringify(state.conversations, null, 2)], { type: "application/json" });
  const a = el("a");
  a.href = URL.createObjectURL(blob);
  a.download = "minerva-conversations.json";
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 1000);
}

async function importJson(file) {
  try {
    const parsed = JSON.parse(await file.text());
    const list = (Array.isArray(parsed) ? parsed : [parsed]).filter(isConversation);
    if (!list.length) throw new Error("no conversations in this file");
    for (const c of list) {
      c.id = "c" + Date.now().toString(36) + Math.random().toString(36).slice(2, 8);
      c.settings = { ...DEFAULTS, ...(c.settings || {}) };
      c.title = typeof c.title === "string" ? c.title : "Imported chat";
      state.conversations.unshift(c);
    }
    state.current = state.conversations[0].id;
    save();
    renderAll();
  } catch (e) {
    alert("Import failed: " + e.message);
  }
}

function applyTheme(theme) {
  document.documentElement.dataset.theme = theme;
  localStorage.setItem("minerva.theme", theme);
}

// ---- start ----

document.addEventListener("DOMContentLoaded", () => {
  const dark = window.matchMedia?.("(prefers-color-scheme: dark)").matches;
  applyTheme(localStorage.getItem("minerva.theme") || (dark ? "dark" : "light"));
  load();
  renderAll();
  loadModel();
  $("composer").addEventListener("submit", (e) => { e.preventDefault(); send(); });
  $("input").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); send(); }
  });
  document.addEventListener("keydown", (e) => { if (e.key === "Escape" && state.controller) stop(); });
  $("stop").addEventListener("click", stop);
  $("new-chat").addEventListener("click", () => { newConversation(); renderAll(); $("input").focus(); });
  $("toggle-settings").addEventListener("click", () => {
    const open = $("settings").hidden;
    $("settings").hidden = !open;
    $("toggle-settings").setAttribute("aria-expanded", String(open));
  });
  for (const k of SETTINGS) $(k).addEventListener("change", readSettings);
  $("toggle-theme").addEventListener("click", () =>
    applyTheme(document.documentElement.dataset.theme === "dark" ? "light" : "dark"));
  $("export").addEventListener("click", exportJson);
  $("import").addEventListener("change", (e) => { if (e.target.files[0]) importJson(e.target.files[0]); e.target.value = ""; });
  $("open-sidebar").addEventListener("click", () => $("sidebar").classList.add("open"));
  $("close-sidebar").addEventListener("click", () => $("sidebar").classList.remove("open"));
  $("key-form").addEventListener("submit", (e) => {
    e.preventDefault();
    state.key = $("api-key").value.trim();
    localStorage.setItem("minerva.apiKey", state.key);
    loadModel();
  });
  $("input").focus();
});
