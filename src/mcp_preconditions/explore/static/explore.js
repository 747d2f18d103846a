// The policy explorer's page: holds what the user chose (policy text, caller, what-if values, the
// open tab), asks the server's JSON endpoints, and hands each answer to its view. Nothing is stored
// anywhere but in this page.
import { byId, el, fill, plural } from "./dom.js";
import { schemaForm } from "./form.js";
import { renderCall, renderClient, renderLogs, renderWho } from "./views.js";

const config = JSON.parse(byId("config").textContent);
const presets = config.presets.map((p) => p.name);
const claimsOf = Object.fromEntries(config.presets.map((p) => [p.name, p.claims]));
const knowledgeNames = config.knowledge.map((k) => k.name);
const TYPED = "\u0000typed";  // the caller select's value once claims are typed by hand
const state = {
  policy: config.policy_text, preset: presets[0] || "", claims: null, whatIf: {}, tab: "who",
  call: { tool: config.tools[0]?.name || "", asJson: false, form: null },
  client: { preset: config.knowledge_default, text: null, mode: "hide" },
  logs: { file: null, replica: "", revision: "" },
};
let who = null;  // the last "who can do what" answer: grants and facts for the other views
let refused = 0;  // the problems a server would refuse the policy as edited for (0: it runs it)
const ui = { open: new Set(), seeded: false, toggle(name) {
  if (this.open.has(name)) this.open.delete(name); else this.open.add(name);
  if (who) renderWho(who, ui);
} };

// -- talking to the server -------------------------------------------------------------------
function banner(message) {
  const node = byId("banner");
  node.hidden = !message;
  fill(node, message || "");
}

async function api(path, body, raw = false) {
  let response;
  try {
    // Every request carries the run's token, in a header (never in the URL).
    const headers = { [config.token_header]: config.token };
    response = await fetch(path, raw ? { method: "POST", body, headers: { ...headers, "content-type": "application/octet-stream" } }
      : body === undefined ? { headers } : { method: "POST", body: JSON.stringify(body), headers: { ...headers, "content-type": "application/json" } });
  } catch {
    banner("The explorer does not answer: is `mcp-preconditions explore` still running?");
    return null;
  }
  let answer = null;
  try { answer = await response.json(); } catch { /* not JSON: said below */ }
  if (!response.ok || answer === null) {
    banner(answer?.error || `The explorer answered ${response.status} ${response.statusText}.`);
    return null;
  }
  banner(null);
  return answer;
}

function asked(extra = {}) {
  const base = { policy: state.policy, what_if: state.whatIf, ...extra };
  if (state.claims !== null) base.claims = state.claims; else if (state.preset) base.preset = state.preset;
  return base;
}

let sequence = 0;
let timer = null;
function soon(fn = refresh, delay = 250) {
  clearTimeout(timer);
  timer = setTimeout(fn, delay);
}

async function refresh() {
  const mine = ++sequence;
  const answer = await api("/api/decisions", asked());
  if (mine !== sequence || !answer) return;
  who = answer;
  showHead(answer);
  if (answer.facts) showFacts(answer.facts);
  if (answer.tools && !ui.seeded) {  // first sight: a few denied tools open, with their reasons
    answer.tools.filter((t) => !t.allowed).slice(0, 12).forEach((t) => ui.open.add(t.name));
    ui.seeded = true;
  }
  renderWho(answer, ui);
  if (state.tab === "call") { showHints(); await decideCall(); }
  if (state.tab === "client") await refreshClient();
}

// -- policy and caller -----------------------------------------------------------------------
function showHead(answer) {
  const { policy, caller } = answer;
  const pill = byId("policy-status");
  pill.className = `pill ${policy.ok ? "ok" : "bad"}`;
  // What a server (or the gateway) with these tools would do with the policy as edited.
  fill(pill, policy.ok ? `✓ servers run it · rev ${policy.revision}`
    : `✗ servers refuse it · ${plural(policy.problems.length, "problem")}`);
  pill.title = policy.ok ? "a server or the gateway with these tools starts with this policy; the revision is the hash `decision_log` records"
    : "a server or the gateway with these tools refuses to start with this policy: see the lines below the editor";
  if (policy.edited) pill.append(el("span", {}, " · edited"));
  refused = policy.ok ? 0 : policy.problems.length;
  const download = byId("policy-download");
  download.classList.toggle("warn", Boolean(refused));
  download.title = refused ? "A server would refuse this policy: you are asked before it is saved" : "Save the edited policy as a file";
  fill(byId("policy-problems"), policy.problems.length ? [
    el("p", { class: "title" }, "A server or the gateway would refuse this policy. The command line reports the same lines:"),
    policy.problems.map((p) => el("div", { class: "line" }, p))] : []);
  const warnings = byId("policy-warnings");
  warnings.hidden = !policy.warnings.length;
  fill(warnings.querySelector("summary"), `${plural(policy.warnings.length, "finding")} of policy validate and lint`);
  fill(warnings.querySelector("ul"), policy.warnings.map((w) => el("li", {}, w)));
  fill(byId("caller-label"), caller.label || "");
  const problem = byId("caller-problem");
  problem.hidden = !caller.problem;
  fill(problem, caller.problem || "");
}

function showFacts(facts) {
  const list = byId("facts-list");
  if (!facts.length) {
    fill(list, el("p", { class: "muted" }, "No tool depends on a state or a flag."));
    return;
  }
  fill(list, facts.map((f) => {
    const choice = el("select", { "aria-label": f.requirement, on: { change: (e) => {
      const value = e.target.value;
      if (value === "") delete state.whatIf[f.requirement]; else state.whatIf[f.requirement] = value === "true";
      soon(refresh, 0);
    } } }, el("option", { value: "" }, "as configured"),
    el("option", { value: "true" }, "true"), el("option", { value: "false" }, "false"));
    choice.value = f.what_if === null || f.what_if === undefined ? "" : String(f.what_if);
    return el("div", { class: `fact${f.what_if === null || f.what_if === undefined ? "" : " set"}` },
      el("div", {}, el("div", { class: "name" }, f.requirement), el("div", { class: "origin" }, `configured: ${f.configured}`)), choice);
  }));
}

function oneLine(value) {  // `{"sub": "alice", "role": "x"}`: JSON that fits a small box
  return JSON.stringify(value, null, 1).replace(/\n\s*/g, " ").replace(/([[{]) /g, "$1").replace(/ ([\]}])/g, "$1");
}

function lineNumbers() {
  const count = state.policy.split("\n").length;
  byId("policy-gutter").textContent = Array.from({ length: count }, (_, i) => i + 1).join("\n");
}

function setupPolicy() {
  const text = byId("policy-text");
  text.value = state.policy;
  lineNumbers();
  text.addEventListener("input", () => { state.policy = text.value; lineNumbers(); soon(); });
  text.addEventListener("scroll", () => { byId("policy-gutter").scrollTop = text.scrollTop; });
  byId("policy-reset").addEventListener("click", () => {
    text.value = state.policy = config.policy_text;
    lineNumbers();
    soon(refresh, 0);
  });
  byId("policy-download").addEventListener("click", () => {
    if (refused && !window.confirm(`A server or the gateway would refuse this policy (${plural(refused, "problem")}, `
      + "listed below the editor). Download it anyway?")) return;
    const url = URL.createObjectURL(new Blob([state.policy], { type: "application/toml" }));
    const link = el("a", { href: url, download: config.policy_path.split(/[\\/]/).pop() || "policy.toml" });
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(url), 1000);
  });
}

function setupCaller() {
  const select = byId("caller-preset");
  const claims = byId("caller-claims");
  fill(select, el("option", { value: "" }, "anonymous (no token)"),
    presets.map((p) => el("option", { value: p }, `${p}${typeof claimsOf[p].sub === "string" ? ` (${claimsOf[p].sub})` : ""}`)),
    el("option", { value: TYPED, disabled: true }, "claims typed below"));
  const pick = (name) => {
    state.preset = name;
    state.claims = null;
    select.value = name;
    claims.value = name ? oneLine(claimsOf[name]) : "";
  };
  pick(state.preset);
  select.addEventListener("change", () => { pick(select.value); soon(refresh, 0); });
  claims.addEventListener("input", () => {
    state.claims = claims.value;
    select.value = claims.value.trim() ? TYPED : "";
    soon();
  });
}

// -- tabs ----------------------------------------------------------------------------------------
function setupTabs() {
  for (const tab of document.querySelectorAll("[role=tab]")) {
    tab.addEventListener("click", () => {
      for (const other of document.querySelectorAll("[role=tab]")) {
        const on = other === tab;
        other.setAttribute("aria-selected", String(on));
        byId(other.getAttribute("aria-controls")).hidden = !on;
      }
      state.tab = tab.id.slice(4);
      if (state.tab === "call") { showHints(); decideCall(); }
      if (state.tab === "client") refreshClient();
      if (state.tab === "logs") refreshLogs();
    });
  }
  byId("who-filter").addEventListener("input", () => who && renderWho(who, ui));
  byId("who-expand").addEventListener("click", () => {
    const all = who?.tools?.map((t) => t.name) || [];
    const opening = all.some((n) => !ui.open.has(n));
    ui.open = new Set(opening ? all : []);
    fill(byId("who-expand"), opening ? "Collapse all" : "Expand all");
    if (who) renderWho(who, ui);
  });
}

// -- try a call ----------------------------------------------------------------------------------
function toolDef() {
  return config.tools.find((t) => t.name === state.call.tool);
}

function buildCallForm() {
  const tool = toolDef();
  fill(byId("call-description"), tool?.description || "");
  state.call.form = schemaForm(byId("call-form"), tool?.inputSchema, () => soon(decideCall));
  byId("call-json").value = "{}";
  showHints();
}

function showHints() {
  const box = byId("call-hints");
  const tool = who?.tools?.find((t) => t.name === state.call.tool);
  if (!tool || !who.grants) { fill(box); return; }
  const names = tool.outcomes.map((o) => o.requirement).filter((r) => r.startsWith("capability:")).map((r) => r.slice(11));
  const grants = who.grants.grants.filter((g) => Object.keys(g.arguments).length && g.capabilities.some((c) => names.includes(c)));
  fill(box, grants.map((g) => el("div", { class: "hint-line" }, `grant #${g.index} (${g.capabilities.join(", ")}) applies only when `,
    Object.entries(g.arguments).map(([pointer, values]) => [el("code", {}, pointer), " is one of ", values.map((v) =>
      el("button", { type: "button", class: "value", title: "use this value", on: { click: () => useValue(pointer, v) } }, JSON.stringify(v))), " "]))));
}

function useValue(pointer, value) {
  const name = pointer.slice(1);
  if (state.call.asJson || name.includes("/") || !state.call.form.set(name.replace(/~1/g, "/").replace(/~0/g, "~"), value)) return;
  decideCall();
}

function argumentsText() {
  return state.call.asJson ? byId("call-json").value : JSON.stringify(state.call.form.read());
}

let callAsked = 0;  // the last call question: an answer to an earlier one (another tool) is dropped
async function decideCall() {
  const mine = ++callAsked;
  let text;
  try { text = argumentsText(); } catch (error) {
    fill(byId("call-result"), el("div", { class: "problem-line" }, `arguments: ${error.message}`));
    return;
  }
  const answer = await api("/api/call", asked({ tool: state.call.tool, arguments: text }));
  if (mine !== callAsked || !answer) return;
  showHead(answer);
  renderCall(answer, who?.grants);
}

function setupCall() {
  const select = byId("call-tool");
  fill(select, config.tools.map((t) => el("option", { value: t.name }, t.name)));
  select.addEventListener("change", () => { state.call.tool = select.value; buildCallForm(); decideCall(); });
  buildCallForm();
  const json = byId("call-json");
  const asForm = byId("call-as-form");
  const asJson = byId("call-as-json");
  const show = (useJson) => {
    if (useJson === state.call.asJson) return;
    try {
      if (useJson) json.value = JSON.stringify(state.call.form.read(), null, 2);
      else state.call.form.write(JSON.parse(json.value || "{}"));
    } catch (error) {
      fill(byId("call-result"), el("div", { class: "problem-line" }, `arguments: ${error.message}`));
      return;
    }
    state.call.asJson = useJson;
    json.hidden = !useJson;
    byId("call-form").hidden = useJson;
    asForm.setAttribute("aria-pressed", String(!useJson));
    asJson.setAttribute("aria-pressed", String(useJson));
  };
  asForm.addEventListener("click", () => show(false));
  asJson.addEventListener("click", () => show(true));
  json.addEventListener("input", () => soon(decideCall));
  byId("call-decide").addEventListener("click", decideCall);
}

// -- client's view -------------------------------------------------------------------------------
let clientAsked = 0;  // likewise for the client's view
async function refreshClient() {
  const mine = ++clientAsked;
  const { preset, text, mode } = state.client;
  const answer = await api("/api/client", asked(text !== null ? { knowledge: text, mode } : { knowledge_preset: preset, mode }));
  if (mine !== clientAsked || !answer) return;
  showHead(answer);
  const used = renderClient(answer);
  if (used && state.client.text === null) byId("client-knowledge").value = knowledgeText(used);
}

function knowledgeText(knowledge) {  // one list a line: easy to move a requirement between them
  return `{"satisfied": ${JSON.stringify(knowledge.satisfied)},\n "unsatisfiable": ${JSON.stringify(knowledge.unsatisfiable)}}`;
}

function setupClient() {
  const select = byId("client-preset");
  fill(select, knowledgeNames.map((k) => el("option", { value: k }, k)),
    el("option", { value: TYPED, disabled: true }, "typed below"));
  select.value = state.client.preset;
  select.addEventListener("change", () => {
    state.client = { ...state.client, preset: select.value, text: null };
    refreshClient();
  });
  byId("client-knowledge").addEventListener("input", (e) => {
    state.client.text = e.target.value;
    select.value = TYPED;
    soon(refreshClient);
  });
  const modes = byId("client-mode");
  fill(modes, config.modes.map((m) => el("button", { type: "button", "aria-pressed": String(m === state.client.mode), dataset: { mode: m },
    on: { click: () => {
      state.client.mode = m;
      for (const b of modes.children) b.setAttribute("aria-pressed", String(b.dataset.mode === m));
      refreshClient();
    } } }, m)));
}

// -- what happened -------------------------------------------------------------------------------
function tooLarge(name, size) {
  return `${name}: ${size} bytes, larger than ${config.max_bytes} bytes, the input size bound (set $${config.max_bytes_env} `
    + "to raise it; `mcp-preconditions log summarize` reads a log of any size)";
}

async function refreshLogs() {
  const { file, replica, revision } = state.logs;
  const query = new URLSearchParams({ replica, revision });
  if (file && file.size > config.max_bytes) {  // said here: the upload would be refused anyway
    fill(byId("logs-problems"), el("div", { class: "line" }, tooLarge(file.name, file.size)));
    fill(byId("logs-body"));
    return;
  }
  if (file) query.set("name", file.name);
  const answer = await api(`/api/history?${query}`, file || undefined, Boolean(file));
  if (!answer) return;
  fill(byId("logs-files"), answer.sources.length ? `Reading ${answer.sources.join(", ")}` : "");
  const reload = byId("logs-reload");
  reload.hidden = !config.logs.length;
  fill(reload, file ? "Back to the --log files" : "Read the logs again");
  for (const [id, key, values] of [["logs-replica", "replica", answer.choices.replicas], ["logs-revision", "revision", answer.choices.revisions]]) {
    const select = byId(id);
    fill(select, el("option", { value: "" }, "all"), values.map((v) => el("option", { value: v }, v)));
    select.value = values.includes(state.logs[key]) ? state.logs[key] : "";
  }
  renderLogs(answer);
}

function setupLogs() {
  byId("logs-reload").addEventListener("click", () => { state.logs.file = null; refreshLogs(); });
  byId("logs-upload").addEventListener("change", (e) => {
    state.logs = { file: e.target.files[0] || null, replica: "", revision: "" };
    refreshLogs();
  });
  for (const key of ["replica", "revision"]) {
    byId(`logs-${key}`).addEventListener("change", (e) => { state.logs[key] = e.target.value; refreshLogs(); });
  }
}

setupPolicy();
setupCaller();
setupTabs();
setupCall();
setupClient();
setupLogs();
refresh();
