// Building the page's elements. Text always goes in as text (never as HTML): tool names, reasons
// and claims come from files and servers the explorer does not trust.

// Characters a reader cannot see (controls, bidi overrides, zero-width), shown as escapes.
const HIDDEN = /[\u0000-\u001f\u007f-\u009f\u00ad\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]/gu;

export function visible(text, keepLines = false) {
  return String(text).replace(HIDDEN, (c) => keepLines && c === "\n" ? c
    : "\\u" + c.codePointAt(0).toString(16).padStart(4, "0"));
}

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "lines") continue;  // children keep their line breaks (a <pre>)
    if (key === "class") node.className = value;
    else if (key === "on") for (const [event, fn] of Object.entries(value)) node.addEventListener(event, fn);
    else if (key === "dataset") Object.assign(node.dataset, value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  add(node, children, Boolean(attrs.lines));
  return node;
}

function add(node, children, keepLines = false) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) add(node, child, keepLines);
    else node.append(child instanceof Node ? child : visible(child, keepLines));
  }
}

export function fill(node, ...children) {
  node.replaceChildren();
  add(node, children);
  return node;
}

export function byId(id) {
  return document.getElementById(id);
}

export function table(headers, rows) {
  return el("table", {},
    el("thead", {}, el("tr", {}, headers.map((h) => el("th", { class: h.endsWith("#") ? "num" : null }, h.replace(/#$/, ""))))),
    el("tbody", {}, rows));
}

export function plural(n, one, many = one + "s") {
  return `${n} ${n === 1 ? one : many}`;
}
