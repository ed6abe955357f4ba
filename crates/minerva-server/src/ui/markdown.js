// Markdown to DOM nodes for the chat page: paragraphs, headings, fenced code (highlighted, with a
// copy button), lists, tables, block quotes, rules, and inline code, bold, italic and links.
// Every piece of text becomes a text node, never HTML: model output cannot inject markup.
"use strict";

(function () {
  const KEYWORDS = new Set((
    "as async await break case catch class const continue def default del do elif else enum export extends " +
    "false fn for from func function if impl import in interface is let loop match mod mut new nil None null " +
    "package pass pub raise return self Self static struct super switch this throw trait true True False try " +
    "type typeof use var void where while with yield lambda int float str bool char string usize u32 i32 f32 f64"
  ).split(" "));
  const HASH_COMMENTS = new Set(["python", "py", "sh", "bash", "shell", "ruby", "rb", "yaml", "yml", "toml", "r", "perl"]);

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // Code with keywords, strings, numbers and comments in spans.
  function highlight(code, lang) {
    const frag = document.createDocumentFragment();
    const comment = HASH_COMMENTS.has(lang) ? "#[^\\n]*" : "\\/\\/[^\\n]*|\\/\\*[\\s\\S]*?\\*\\/";
    const re = new RegExp(
      "(" + comment + ")|(\"(?:\\\\.|[^\"\\\\\\n])*\"|'(?:\\\\.|[^'\\\\\\n])*'|`(?:\\\\.|[^`\\\\])*`)" +
      "|\\b(\\d+(?:\\.\\d+)?)\\b|([A-Za-z_][A-Za-z0-9_]*)", "g");
    let last = 0;
    for (const m of code.matchAll(re)) {
      let cls = null;
      if (m[1]) cls = "tok-com";
      else if (m[2]) cls = "tok-str";
      else if (m[3]) cls = "tok-num";
      else if (m[4] && KEYWORDS.has(m[4])) cls = "tok-kw";
      if (!cls) continue;
      if (m.index > last) frag.append(code.slice(last, m.index));
      frag.append(el("span", cls, m[0]));
      last = m.index + m[0].length;
    }
    frag.append(code.slice(last));
    return frag;
  }

  function codeBlock(code, lang) {
    const pre = el("pre");
    const c = el("code", lang ? "language-" + lang : "");
    c.append(highlight(code, lang.toLowerCase()));
    const copy = el("button", "copy", "Copy");
    copy.type = "button";
    copy.setAttribute("aria-label", "Copy the code");
    copy.addEventListener("click", () => {
      const done = () => { copy.textContent = "Copied"; setTimeout(() => { copy.textContent = "Copy"; }, 1500); };
      if (navigator.clipboard) navigator.clipboard.writeText(code).then(done, () => { copy.textContent = "Copy failed"; });
    });
    pre.append(copy, c);
    return pre;
  }

  const INLINE = /(`+)([\s\S]*?[^`])\1(?!`)|\*\*([\s\S]+?)\*\*|__([\s\S]+?)__|\*([^*\s](?:[^*]*[^*\s])?)\*|\[([^\]\n]+)\]\(([^()\s]+)\)/g;

  function inline(text, into) {
    let last = 0;
    for (const m of text.matchAll(INLINE)) {
      if (m.index > last) appendText(into, text.slice(last, m.index));
      if (m[1]) into.append(el("code", "", m[2]));
      else if (m[3] !== undefined || m[4] !== undefined) inline(m[3] ?? m[4], into.appendChild(el("strong")));
      else if (m[5] !== undefined) inline(m[5], into.appendChild(el("em")));
      else if (m[6] !== undefined) {
        let url = null;
        try { url = new URL(m[7], location.href); } catch (_) { url = null; }
        if (url && (url.protocol === "https:" || url.protocol === "http:" || url.protocol === "mailto:")) {
          const a = el("a", "", m[6]);
          a.href = url.href;
          a.rel = "noopener noreferrer";
          a.target = "_blank";
          into.append(a);
        } else {
          appendText(into, m[0]);
        }
      }
      last = m.index + m[0].length;
    }
    if (last < text.length) appendText(into, text.slice(last));
  }

  // Text with its line breaks kept.
  function appendText(into, text) {
    text.split("\n").forEach((line, i) => {
      if (i > 0) into.append(el("br"));
      if (line) into.append(document.createTextNode(line));
    });
  }

  const FENCE = /^\s{0,3}(```+|~~~+)\s*([\w+#.-]*)/;
  const HEADING = /^(#{1,6})\s+(.*)$/;
  const BULLET = /^\s*[-*+]\s+(.*)$/;
  const NUMBERED = /^\s*(\d+)[.)]\s+(.*)$/;
  const RULE = /^\s*([-*_])(\s*\1){2,}\s*$/;
  const TABLE_RULE = /^\s*\|?\s*:?-{1,}:?\s*(\|\s*:?-{1,}:?\s*)*\|?\s*$/;

  function cells(line) {
    return line.trim().replace(/^\|/, "").replace(/\|$/, "").split("|").map((c) => c.trim());
  }

  function startsBlock(line, next) {
    return FENCE.test(line) || HEADING.test(line) || BULLET.test(line) || NUMBERED.test(line) || RULE.test(line) ||
      /^\s*>/.test(line) || (line.includes("|") && next !== undefined && TABLE_RULE.test(next) && next.includes("-"));
  }

  function render(text) {
    const root = document.createDocumentFragment();
    const lines = text.replace(/\r\n?/g, "\n").split("\n");
    let i = 0;
    while (i < lines.length) {
      const line = lines[i];
      let m;
      if (!line.trim()) { i++; continue; }
      if ((m = line.match(FENCE))) {
        const fence = m[1];
        const body = [];
        i++;
        while (i < lines.length && !lines[i].trim().startsWith(fence)) body.push(lines[i++]);
        i++; // the closing fence (or past the end while a block is still streaming)
        root.append(codeBlock(body.join("\n"), m[2] || ""));
      } else if ((m = line.match(HEADING))) {
        inline(m[2], root.appendChild(el("h" + Math.min(m[1].length + 2, 6))));
        i++;
      } else if (RULE.test(line)) {
        root.append(el("hr"));
        i++;
      } else if (line.includes("|") && i + 1 < lines.length && TABLE_RULE.test(lines[i + 1]) && lines[i + 1].includes("-")) {
        const table = el("table");
        const head = table.appendChild(el("thead")).appendChild(el("tr"));
        cells(line).forEach((c) => inline(c, head.appendChild(el("th"))));
        const body = table.appendChild(el("tbody"));
        i += 2;
        while (i < lines.length && lines[i].includes("|") && lines[i].trim()) {
          const row = body.appendChild(el("tr"));
          cells(lines[i++]).forEach((c) => inline(c, row.appendChild(el("td"))));
        }
        root.append(table);
      } else if (/^\s*>/.test(line)) {
        const quoted = [];
        while (i < lines.length && /^\s*>/.test(lines[i])) quoted.push(lines[i++].replace(/^\s*>\s?/, ""));
        root.appendChild(el("blockquote")).append(render(quoted.join("\n")));
      } else if (BULLET.test(line) || NUMBERED.test(line)) {
        const ordered = NUMBERED.test(line);
        const list = el(ordered ? "ol" : "ul");
        if (ordered) list.start = Number(line.match(NUMBERED)[1]);
        const item = ordered ? NUMBERED : BULLET;
        while (i < lines.length && item.test(lines[i])) {
          const parts = [lines[i].match(item)[ordered ? 2 : 1]];
          i++;
          // Indented continuation lines belong to the item.
          while (i < lines.length && /^\s{2,}\S/.test(lines[i]) && !item.test(lines[i])) parts.push(lines[i++].trim());
          inline(parts.join("\n"), list.appendChild(el("li")));
        }
        root.append(list);
      } else {
        const para = [];
        while (i < lines.length && lines[i].trim() && !(para.length && startsBlock(lines[i], lines[i + 1]))) {
          para.push(lines[i++]);
        }
        inline(para.join("\n"), root.appendChild(el("p")));
      }
    }
    return root;
  }

  window.MinervaMarkdown = { render, highlight };
})();
