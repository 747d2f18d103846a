// A form for a tool's arguments, built from its inputSchema's top-level properties: text, number,
// true/false and enum fields; anything else (objects, arrays) is a small JSON box. Empty fields are
// left out of the call.
import { el, fill } from "./dom.js";

function kindOf(spec) {
  if (Array.isArray(spec.enum)) return "enum";
  const type = Array.isArray(spec.type) ? spec.type.find((t) => t !== "null") : spec.type;
  return ["string", "integer", "number", "boolean"].includes(type) ? type : "json";
}

function field(name, spec, required, onChange) {
  const kind = kindOf(spec);
  let input;
  if (kind === "enum") {
    input = el("select", {}, el("option", { value: "" }, "(not set)"),
      spec.enum.map((v) => el("option", { value: JSON.stringify(v) }, JSON.stringify(v))));
  } else if (kind === "boolean") {
    input = el("select", {}, el("option", { value: "" }, "(not set)"),
      el("option", { value: "true" }, "true"), el("option", { value: "false" }, "false"));
  } else if (kind === "json") {
    input = el("textarea", { rows: 2, spellcheck: "false", placeholder: "JSON" });
  } else {
    input = el("input", { type: kind === "string" ? "text" : "number", step: kind === "integer" ? "1" : "any" });
  }
  input.name = name;
  input.dataset.kind = kind;
  input.addEventListener("input", onChange);
  const type = Array.isArray(spec.type) ? spec.type.join(" | ") : spec.type || "any";
  return el("label", {}, el("span", {}, name, required ? el("span", { class: "req", title: "required" }, " *") : null,
    el("span", { class: "desc" }, `  ${type}${spec.description ? " · " + spec.description : ""}`)), input);
}

function valueOf(input) {
  const text = input.value;
  if (text === "") return undefined;
  switch (input.dataset.kind) {
    case "enum": case "boolean": case "json":
      try { return JSON.parse(text); } catch { throw new Error(`${input.name}: not valid JSON`); }
    case "integer": case "number": {
      const n = Number(text);
      if (!Number.isFinite(n)) throw new Error(`${input.name}: not a number`);
      return n;
    }
    default: return text;
  }
}

export function schemaForm(form, schema, onChange) {
  const properties = schema && typeof schema === "object" && schema.properties && typeof schema.properties === "object"
    ? schema.properties : {};
  const required = new Set(Array.isArray(schema?.required) ? schema.required : []);
  const names = Object.keys(properties);
  fill(form, names.length
    ? names.map((n) => field(n, properties[n] && typeof properties[n] === "object" ? properties[n] : {}, required.has(n), onChange))
    : el("p", { class: "empty" }, "This tool's inputSchema lists no arguments."));
  const inputs = () => [...form.querySelectorAll("[name]")];
  return {
    read() {
      const out = {};
      for (const input of inputs()) {
        const value = valueOf(input);
        if (value !== undefined) out[input.name] = value;
      }
      return out;
    },
    write(values) {
      for (const input of inputs()) {
        const value = values?.[input.name];
        if (value === undefined) input.value = "";
        else if (input.dataset.kind === "string" && typeof value === "string") input.value = value;
        else if (input.dataset.kind === "integer" || input.dataset.kind === "number") input.value = String(value);
        else input.value = JSON.stringify(value);
      }
    },
    set(name, value) {
      const input = inputs().find((i) => i.name === name);
      if (!input) return false;
      input.value = input.dataset.kind === "string" && typeof value === "string" ? value : JSON.stringify(value);
      return true;
    },
  };
}
