// A small syntax highlighter for the code blocks of model text: comments, strings, numbers,
// keywords and literals of common languages, as <span class="tok-..."> around text nodes (never
// HTML). One combined regular expression per language, built once; O(length of the code). Code in
// an unknown language, or longer than MAX_CHARS, stays plain text.

const MAX_CHARS = 100_000;

const words = (list) => new RegExp(`\\b(?:${list.trim().split(/\s+/).join("|")})\\b`);
const NUMBER = /\b(?:0[xX][\da-fA-F_]+|0[bB][01_]+|\d[\d_]*(?:\.\d[\d_]*)?(?:[eE][+-]?\d+)?)\b/;
const DQ = /"(?:\\.|[^"\\\n])*"?/;
const SQ = /'(?:\\.|[^'\\\n])*'?/;
// Multi-line tokens end at their closing mark or at the end of the code (never at a line end: the
// combined expressions use the "m" flag, where $ is a line end).
const C_COMMENT = /\/\/.*|\/\*[\s\S]*?(?:\*\/|(?![\s\S]))/;
const HASH_COMMENT = /(?<![^\s])#.*/;

const C_LIKE = "if else for while do switch case default break continue return goto sizeof typedef struct union enum static const extern void";

/** Rules per language: [token class, regex without capturing groups], tried left to right. */
const LANGUAGES = {
  python: [
    ["comment", /#.*/],
    ["string", /(?:[rRbBuUfF]{1,2})?(?:"""[\s\S]*?(?:"""|(?![\s\S]))|'''[\s\S]*?(?:'''|(?![\s\S]))|"(?:\\.|[^"\\\n])*"?|'(?:\\.|[^'\\\n])*'?)/],
    ["keyword", words("and as assert async await break class continue def del elif else except finally for from global if import in is lambda nonlocal not or pass raise return try while with yield match case")],
    ["literal", words("True False None self cls")],
    ["number", NUMBER],
  ],
  javascript: [
    ["comment", C_COMMENT],
    ["string", /`(?:\\[\s\S]|[^`\\])*`?/],
    ["string", DQ],
    ["string", SQ],
    ["keyword", words("async await break case catch class const continue debugger default delete do else export extends finally for from function if import in instanceof interface let new of return static super switch throw try type typeof var void while with yield enum implements private protected public readonly as")],
    ["literal", words("true false null undefined this NaN Infinity")],
    ["number", NUMBER],
  ],
  json: [
    ["property", /"(?:\\.|[^"\\\n])*"(?=\s*:)/],
    ["string", DQ],
    ["literal", words("true false null")],
    ["number", /-?\b\d+(?:\.\d+)?(?:[eE][+-]?\d+)?\b/],
  ],
  bash: [
    ["comment", HASH_COMMENT],
    ["string", DQ],
    ["string", SQ],
    ["keyword", words("if then else elif fi for in do done case esac while until function return export local readonly set unset echo cd exit source sudo")],
    ["literal", /\$(?:\{[^}\n]*\}|[\w@#?*!$-])/],
    ["number", NUMBER],
  ],
  rust: [
    ["comment", C_COMMENT],
    ["string", /b?"(?:\\.|[^"\\])*"?/],
    ["keyword", words("as async await break const continue crate dyn else enum extern fn for if impl in let loop match mod move mut pub ref return static struct super trait type unsafe use where while")],
    ["literal", words("true false self Self None Some Ok Err")],
    ["number", NUMBER],
  ],
  go: [
    ["comment", C_COMMENT],
    ["string", /`[^`]*`?/],
    ["string", DQ],
    ["keyword", words("break case chan const continue default defer else fallthrough for func go goto if import interface map package range return select struct switch type var")],
    ["literal", words("true false nil iota")],
    ["number", NUMBER],
  ],
  c: [
    ["comment", C_COMMENT],
    ["string", DQ],
    ["string", SQ],
    ["keyword", words(`${C_LIKE} class public private protected new delete try catch throw namespace template typename this virtual override final abstract extends implements import package interface int long short char float double bool boolean unsigned signed auto`)],
    ["literal", words("true false null nullptr NULL")],
    ["number", NUMBER],
  ],
  sql: [
    ["comment", /--.*|\/\*[\s\S]*?(?:\*\/|(?![\s\S]))/],
    ["string", SQ],
    ["keyword", words("select from where and or not insert into values update set delete create table index view drop alter add join left right inner outer full on as group by order having limit offset union all distinct case when then else end in is like between exists primary key foreign references with returning match return merge optional unwind")],
    ["literal", words("null true false")],
    ["number", NUMBER],
  ],
  yaml: [
    ["comment", HASH_COMMENT],
    ["property", /^[ \t-]*[\w.-]+(?=[ \t]*:(?:\s|$))/m],
    ["string", DQ],
    ["string", SQ],
    ["literal", words("true false null yes no on off")],
    ["number", NUMBER],
  ],
  diff: [
    ["meta", /^@@.*$/m],
    ["inserted", /^\+.*$/m],
    ["deleted", /^-.*$/m],
  ],
  html: [
    ["comment", /<!--[\s\S]*?(?:-->|(?![\s\S]))/],
    ["keyword", /<\/?[\w:-]+|\/?>/],
    ["string", DQ],
    ["string", SQ],
  ],
};

const ALIASES = {
  py: "python", python3: "python", js: "javascript", jsx: "javascript", mjs: "javascript", ts: "javascript",
  tsx: "javascript", typescript: "javascript", sh: "bash", shell: "bash", zsh: "bash", console: "bash",
  shellsession: "bash", rs: "rust", golang: "go", cpp: "c", "c++": "c", h: "c", hpp: "c", java: "c",
  cs: "c", csharp: "c", kotlin: "c", swift: "c", yml: "yaml", xml: "html", svg: "html", patch: "diff",
  cypher: "sql", postgresql: "sql", sqlite: "sql", jsonl: "json", json5: "json",
};

const compiled = new Map();

function scanner(lang) {
  const name = ALIASES[lang] ?? lang;
  const rules = LANGUAGES[name];
  if (!rules) return null;
  let entry = compiled.get(name);
  if (!entry) {
    const flags = name === "sql" ? "gmi" : "gm";
    entry = { re: new RegExp(rules.map(([, re]) => `(${re.source})`).join("|"), flags), classes: rules.map(([cls]) => cls) };
    compiled.set(name, entry);
  }
  return entry;
}

/** `code` as a DocumentFragment of text nodes and <span class="tok-CLASS"> tokens. */
export function highlight(code, lang) {
  const fragment = document.createDocumentFragment();
  const entry = code.length <= MAX_CHARS ? scanner((lang || "").toLowerCase()) : null;
  if (!entry) {
    fragment.append(code);
    return fragment;
  }
  for (const [cls, text] of tokens(code, entry)) {
    if (!cls) fragment.append(text);
    else {
      const span = document.createElement("span");
      span.className = `tok-${cls}`;
      span.textContent = text;
      fragment.append(span);
    }
  }
  return fragment;
}

/** [class or null, text] pairs covering `code` exactly, in order. */
export function tokens(code, entry) {
  const out = [];
  const re = entry.re;
  re.lastIndex = 0;
  let at = 0;
  let m;
  while ((m = re.exec(code)) !== null) {
    if (m[0] === "") {
      re.lastIndex += 1;
      continue;
    }
    if (m.index > at) out.push([null, code.slice(at, m.index)]);
    let group = 1;
    while (m[group] === undefined) group += 1;
    out.push([entry.classes[group - 1], m[0]]);
    at = m.index + m[0].length;
  }
  if (at < code.length) out.push([null, code.slice(at)]);
  return out;
}

/** The highlighter's scanner for `lang` (for tests), or null when the language is unknown. */
export { scanner };
