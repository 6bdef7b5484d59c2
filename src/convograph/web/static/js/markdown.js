// A small, safe Markdown renderer for model text: DOM nodes only, never HTML.
//
// `parseMarkdown(text)` is a pure function from text to a tree of plain objects; `renderMarkdown`
// builds DOM nodes from it with createElement / textContent, so nothing in model text can become
// markup: raw HTML shows as the text it is, a link is an <a> only for http(s) and mailto URLs, and an
// image is never loaded (it becomes a link saying "image"; the page's CSP forbids other origins too).
//
// Covered (CommonMark / GFM as chat models write it): ATX headings, paragraphs (a single newline is a
// line break, as chat UIs show model text), fenced code with a language, block quotes, bullet and
// ordered lists (nested by indentation), GFM tables with alignment, thematic breaks; inline code,
// **strong**, *emphasis*, ~~strikethrough~~, [links](url), <autolinks>, bare URLs and backslash
// escapes. Not covered: setext headings, indented code blocks, reference links, footnotes, HTML.
// O(length of the text).

import { highlight } from "./highlight.js";

const FENCE = /^ {0,3}(`{3,}|~{3,})[ \t]*([^`\s]*)[^`]*$/;
const HEADING = /^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$/;
const RULE = /^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$/;
const QUOTE = /^ {0,3}> ?(.*)$/;
const ITEM = /^( {0,12})([-*+]|\d{1,9}[.)])([ \t]+|$)(.*)$/;
const TABLE_DELIMITER = /^ {0,3}\|?[ \t]*:?-+:?[ \t]*(\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$/;
const PUNCTUATION = /[!-/:-@[-`{-~]/;
const SAFE_URL = /^(https?:\/\/|mailto:)/i;
const BARE_URL = /^https?:\/\/[^\s<>"]*[^\s<>".,:;'")\]!?*_~]/;

/** Parse `text` into blocks: {type: "p"|"h"|"code"|"quote"|"list"|"table"|"hr", ...}. */
export function parseMarkdown(text) {
  return parseBlocks(text.replace(/\r\n?/g, "\n").split("\n"));
}

/** A closing fence: the opening's character, at least as many, nothing after but spaces. */
function closesFence(line, fence) {
  const m = line.match(/^ {0,3}(`{3,}|~{3,})[ \t]*$/);
  return m !== null && m[1][0] === fence[0] && m[1].length >= fence.length;
}

function startsBlock(line, next) {
  return FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line) || ITEM.test(line) ||
    (line.includes("|") && next !== undefined && TABLE_DELIMITER.test(next) && next.includes("-"));
}

function parseBlocks(lines) {
  const blocks = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (!line.trim()) {
      i += 1;
      continue;
    }
    let m;
    if ((m = line.match(FENCE))) {
      const fence = m[1];
      const body = [];
      i += 1;
      while (i < lines.length && !closesFence(lines[i], fence)) {
        body.push(lines[i]);
        i += 1;
      }
      i += 1; // the closing fence (or the end: an unclosed fence runs to the end, as while streaming)
      blocks.push({ type: "code", lang: m[2].toLowerCase(), text: body.join("\n") });
    } else if ((m = line.match(HEADING))) {
      blocks.push({ type: "h", level: m[1].length, text: m[2] ?? "" });
      i += 1;
    } else if (RULE.test(line)) {
      blocks.push({ type: "hr" });
      i += 1;
    } else if (QUOTE.test(line)) {
      const body = [];
      while (i < lines.length && lines[i].trim()) {
        const q = lines[i].match(QUOTE);
        body.push(q ? q[1] : lines[i]); // a lazy continuation line belongs to the quote
        i += 1;
      }
      blocks.push({ type: "quote", blocks: parseBlocks(body) });
    } else if (ITEM.test(line)) {
      i = parseList(lines, i, blocks);
    } else if (line.includes("|") && i + 1 < lines.length && TABLE_DELIMITER.test(lines[i + 1]) && lines[i + 1].includes("-")) {
      i = parseTable(lines, i, blocks);
    } else {
      const body = [line];
      i += 1;
      while (i < lines.length && lines[i].trim() && !startsBlock(lines[i], lines[i + 1])) {
        body.push(lines[i]);
        i += 1;
      }
      blocks.push({ type: "p", text: body.map((l) => l.trim()).join("\n") });
    }
  }
  return blocks;
}

/** A list starting at line `i`: items at the first item's indentation; deeper lines belong to the
 * current item (its content is parsed as blocks, so lists nest). Returns the next line index. */
function parseList(lines, i, blocks) {
  const first = lines[i].match(ITEM);
  const indent = first[1].length;
  const ordered = /\d/.test(first[2]);
  const list = { type: "list", ordered, start: ordered ? parseInt(first[2], 10) : 1, items: [] };
  let item = null;
  let blank = false;
  while (i < lines.length) {
    const line = lines[i];
    const m = line.match(ITEM);
    if (m && m[1].length === indent && /\d/.test(m[2]) === ordered) {
      item = { lines: [m[4]], width: indent + m[2].length + Math.max(1, m[3].length) };
      list.items.push(item);
      blank = false;
    } else if (!line.trim()) {
      blank = true;
      item.lines.push("");
    } else {
      const lead = line.length - line.trimStart().length;
      if (lead > indent) item.lines.push(line.slice(Math.min(lead, item.width)));
      else if (!blank && !startsBlock(line, lines[i + 1])) item.lines.push(line.trim()); // lazy continuation
      else break;
      blank = false;
    }
    i += 1;
  }
  list.items = list.items.map((it) => parseBlocks(it.lines));
  blocks.push(list);
  return i;
}

function splitRow(line) {
  let row = line.trim();
  if (row.startsWith("|")) row = row.slice(1);
  if (row.endsWith("|") && !row.endsWith("\\|")) row = row.slice(0, -1);
  const cells = [];
  let cell = "";
  for (let k = 0; k < row.length; k++) {
    if (row[k] === "\\" && row[k + 1] === "|") {
      cell += "|";
      k += 1;
    } else if (row[k] === "|") {
      cells.push(cell.trim());
      cell = "";
    } else cell += row[k];
  }
  cells.push(cell.trim());
  return cells;
}

function parseTable(lines, i, blocks) {
  const head = splitRow(lines[i]);
  const align = splitRow(lines[i + 1]).map((c) => (c.startsWith(":") && c.endsWith(":") ? "center" : c.endsWith(":") ? "right" : c.startsWith(":") ? "left" : null));
  const rows = [];
  i += 2;
  while (i < lines.length && lines[i].trim() && lines[i].includes("|")) {
    rows.push(splitRow(lines[i]));
    i += 1;
  }
  blocks.push({ type: "table", head, align, rows });
  return i;
}

/** Inline content of `text` as nodes: {t: "text"|"code"|"strong"|"em"|"del"|"link"|"image"|"br", ...}. */
export function parseInline(text) {
  const out = [];
  let buf = "";
  const flush = () => {
    if (buf) out.push({ t: "text", text: buf });
    buf = "";
  };
  let i = 0;
  while (i < text.length) {
    const c = text[i];
    if (c === "\\" && i + 1 < text.length && PUNCTUATION.test(text[i + 1])) {
      buf += text[i + 1];
      i += 2;
      continue;
    }
    if (c === "\n") {
      flush();
      out.push({ t: "br" });
      i += 1;
      continue;
    }
    if (c === "`") {
      let n = 1;
      while (text[i + n] === "`") n += 1;
      const fence = "`".repeat(n);
      let close = text.indexOf(fence, i + n);
      while (close >= 0 && text[close + n] === "`") close = text.indexOf(fence, close + n + 1);
      if (close >= 0) {
        flush();
        let code = text.slice(i + n, close).replace(/\n/g, " ");
        if (code.length > 2 && code.startsWith(" ") && code.endsWith(" ") && code.trim()) code = code.slice(1, -1);
        out.push({ t: "code", text: code });
        i = close + n;
        continue;
      }
      buf += fence;
      i += n;
      continue;
    }
    if ((c === "[" || (c === "!" && text[i + 1] === "[")) && (i === 0 || text[i - 1] !== "\\")) {
      const link = parseLink(text, c === "!" ? i + 1 : i);
      if (link) {
        flush();
        if (c === "!") out.push({ t: "image", alt: link.label, href: link.href });
        else out.push({ t: "link", href: link.href, children: parseInline(link.label) });
        i = link.end;
        continue;
      }
    }
    if (c === "<") {
      const m = text.slice(i).match(/^<((?:https?:\/\/|mailto:)[^\s<>]+)>/i);
      if (m) {
        flush();
        out.push({ t: "link", href: m[1], children: [{ t: "text", text: m[1] }] });
        i += m[0].length;
        continue;
      }
    }
    if ((c === "h" || c === "H") && (i === 0 || !/\w/.test(text[i - 1]))) {
      const m = text.slice(i, i + 2048).match(BARE_URL);
      if (m) {
        flush();
        out.push({ t: "link", href: m[0], children: [{ t: "text", text: m[0] }] });
        i += m[0].length;
        continue;
      }
    }
    if (c === "*" || c === "_" || c === "~") {
      const span = parseEmphasis(text, i);
      if (span) {
        flush();
        out.push({ t: span.t, children: parseInline(span.inner) });
        i = span.end;
        continue;
      }
      let n = 1;
      while (text[i + n] === c) n += 1;
      buf += c.repeat(n);
      i += n;
      continue;
    }
    buf += c;
    i += 1;
  }
  flush();
  return out;
}

/** `[label](url "title")` at `i` (the "["): {label, href, end}, or null. Labels may nest brackets. */
function parseLink(text, i) {
  let depth = 0;
  let k = i;
  for (; k < text.length; k++) {
    if (text[k] === "\\") k += 1;
    else if (text[k] === "[") depth += 1;
    else if (text[k] === "]" && --depth === 0) break;
  }
  if (k >= text.length || text[k + 1] !== "(") return null;
  const m = text.slice(k + 1).match(/^\(\s*<?([^\s<>()]*(?:\([^\s<>()]*\)[^\s<>()]*)*)>?(?:\s+("[^"]*"|'[^']*'))?\s*\)/);
  if (!m) return null;
  return { label: text.slice(i + 1, k), href: m[1], end: k + 1 + m[0].length };
}

/** `**strong**`, `*em*`, `_em_`, `__strong__`, `~~del~~` at `i`: {t, inner, end}, or null. The
 * opening run must be followed by a non-space, the closing one preceded by one; `_` does not work
 * inside words (snake_case stays as it is). */
function parseEmphasis(text, i) {
  const c = text[i];
  let n = 1;
  while (text[i + n] === c) n += 1;
  if (c === "~" && n !== 2) return null;
  const size = Math.min(n, c === "~" ? 2 : 3);
  if (!text[i + size] || /\s/.test(text[i + size])) return null;
  if (c === "_" && i > 0 && /\w/.test(text[i - 1])) return null;
  const run = c.repeat(size);
  for (let close = text.indexOf(run, i + size + 1); close >= 0; close = text.indexOf(run, close + 1)) {
    if (/\s/.test(text[close - 1])) continue;
    if (text[close + size] === c) continue; // part of a longer run
    if (c === "_" && close + size < text.length && /\w/.test(text[close + size])) continue;
    const inner = text.slice(i + size, close);
    if (inner.includes("\n\n")) return null;
    const t = c === "~" ? "del" : size === 1 ? "em" : size === 2 ? "strong" : "strongem";
    if (t === "strongem") return { t: "strong", inner: `${c}${inner}${c}`, end: close + size };
    return { t, inner, end: close + size };
  }
  return null;
}

// -- DOM ---------------------------------------------------------------------------------------------

/** The DOM of `text` as Markdown: a DocumentFragment of block elements. */
export function renderMarkdown(text, { copyButton } = {}) {
  const fragment = document.createDocumentFragment();
  for (const block of parseMarkdown(text)) fragment.append(blockNode(block, copyButton));
  return fragment;
}

function el(tag, className, ...children) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  for (const child of children) node.append(child);
  return node;
}

function blockNode(block, copyButton) {
  switch (block.type) {
    case "h":
      return el(`h${Math.min(6, block.level + 2)}`, "md-h", ...inlineNodes(parseInline(block.text)));
    case "hr":
      return el("hr");
    case "code": {
      const code = el("code", block.lang ? `language-${block.lang}` : "", highlight(block.text, block.lang));
      const head = el("div", "md-code__head", el("span", "md-code__lang", block.lang || "text"));
      if (copyButton) head.append(copyButton(() => block.text, "Copy code"));
      return el("div", "md-code", head, el("pre", "", code));
    }
    case "quote":
      return el("blockquote", "", ...block.blocks.map((b) => blockNode(b, copyButton)));
    case "list": {
      const list = el(block.ordered ? "ol" : "ul");
      if (block.ordered && block.start !== 1) list.start = block.start;
      for (const item of block.items) {
        // A tight item (one paragraph) shows its text without paragraph margins.
        const tight = item.length === 1 && item[0].type === "p";
        list.append(el("li", "", ...(tight ? inlineNodes(parseInline(item[0].text)) : item.map((b) => blockNode(b, copyButton)))));
      }
      return list;
    }
    case "table": {
      const cell = (tag, text, k) => {
        const node = el(tag, "", ...inlineNodes(parseInline(text ?? "")));
        if (block.align[k]) node.style.textAlign = block.align[k];
        return node;
      };
      const head = el("thead", "", el("tr", "", ...block.head.map((t, k) => cell("th", t, k))));
      const body = el("tbody", "", ...block.rows.map((row) => el("tr", "", ...block.head.map((_, k) => cell("td", row[k], k)))));
      return el("div", "md-table", el("table", "", head, body));
    }
    default:
      return el("p", "", ...inlineNodes(parseInline(block.text)));
  }
}

function inlineNodes(nodes) {
  return nodes.map((n) => {
    switch (n.t) {
      case "text":
        return document.createTextNode(n.text);
      case "br":
        return el("br");
      case "code":
        return el("code", "md-code-inline", n.text);
      case "strong":
      case "em":
      case "del":
        return el(n.t, "", ...inlineNodes(n.children));
      case "link":
        return link(n.href, inlineNodes(n.children));
      case "image":
        // Never loaded: a link that says what it is.
        return link(n.href, [document.createTextNode(`[image${n.alt ? `: ${n.alt}` : ""}]`)]);
      default:
        return document.createTextNode("");
    }
  });
}

function link(href, children) {
  if (!SAFE_URL.test(href)) return el("span", "md-link--unsafe", ...children);
  const a = el("a", "", ...children);
  a.href = href;
  a.rel = "noopener noreferrer nofollow";
  a.target = "_blank";
  return a;
}
