// The four views, drawn from the server's JSON answers. No decision is made here: the server's
// Guard, client filter and log summary decided everything shown.
import { byId, el, fill, plural, table } from "./dom.js";

const MAX_ROWS = 300;  // a long tool list: the first ones drawn, the filter finds the rest
const STATUS_CLASS = { satisfied: "sat", unsatisfied: "unsat", error: "err", not_asked: "notasked",
                       asks_the_caller: "approval", needs_an_approver: "approval",
                       needs_a_credential: "credential" };
// A quota of a call refused for another requirement: no store was asked, so it has no outcome.
// An approval is decided per call, by a person: the caller, or an approver. A credential is
// obtained per call, by the gateway, for the caller: nothing here can say whether it will be.
const STATUS_TEXT = { not_asked: "not asked", asks_the_caller: "asks the caller",
                      needs_an_approver: "needs an approver", needs_a_credential: "needs a credential" };
// The decision badge (the server's `verdict`, as `check` decides it).
const VERDICT_BADGE = {
  allowed: ["allowed", "ALLOWED", null],
  denied: ["denied", "DENIED", null],
  needs_approval: ["person", "NEEDS A PERSON", "Decided per call by a person: the caller confirms it, or an approver approves it on the gateway's approval page."],
  needs_credential: ["credential", "NEEDS A CREDENTIAL", "Decided per call at the gateway: the caller's own credential for the server (an account they connect, their token exchanged, a secret kept for them), which nothing offline can obtain."],
};

function statusText(status) {
  return STATUS_TEXT[status] ?? status;
}

export function decisionBadge(tool, big = false) {
  const verdict = tool.verdict ?? (tool.allowed ? "allowed" : "denied");
  const [cls, text, title] = verdict === "denied" && tool.some_arguments
    ? ["maybe", "DEPENDS ON ARGUMENTS", "Denied without arguments; a grant with argument conditions allows some calls (see Try a call)."]
    : VERDICT_BADGE[verdict];
  return el("span", { class: `decision ${cls}${big ? " big" : ""}`, title }, text);
}

function chip(outcome) {
  const cls = ["chip", STATUS_CLASS[outcome.status], outcome.confidential ? "conf" : "", outcome.what_if ? "whatif" : ""];
  return el("span", { class: cls.join(" "), title: `${statusText(outcome.status)}: ${outcome.reason}` }, outcome.requirement);
}

function grantsFor(requirement, grants) {
  if (!grants || !requirement.startsWith("capability:")) return null;
  const name = requirement.slice("capability:".length);
  const giving = grants.grants.filter((g) => g.capabilities.includes(name));
  const lines = giving.map((g) => el("div", { class: "grant" }, `grant #${g.index}: when `,
    el("code", {}, g.when.length ? g.when.join(", ") : "(always)"),
    Object.keys(g.arguments).length ? [" · arguments ", el("code", {}, Object.entries(g.arguments)
      .map(([p, vs]) => `${p} ∈ ${vs.map((v) => JSON.stringify(v)).join(", ")}`).join("; "))] : null));
  if (grants.claim) lines.push(el("div", { class: "grant" }, "or the token claim ", el("code", {}, grants.claim), " lists it"));
  return lines.length ? lines : el("div", { class: "grant" }, "no grant gives it");
}

export function outcomesTable(tool, grants, withSource = true) {
  if (!tool.outcomes.length) return el("p", { class: "muted" }, "No requirements: every caller may call it.");
  const rows = tool.outcomes.map((o) => el("tr", { class: o.was ? "changed" : null },
    el("td", {}, el("span", { class: `status ${o.status}` }, statusText(o.status)),
      o.was ? el("span", { class: "was", title: "compared with the policy file as read" },
        o.was === "new" ? "new" : `was ${o.was}`) : null),
    el("td", {}, o.requirement, o.confidential ? el("span", { class: "tag conf", title: "never named in a denial" }, "confidential") : null,
      o.what_if ? el("span", { class: "tag whatif" }, "what if") : null),
    el("td", { class: "reason" }, o.reason || "—", grantsFor(o.requirement, grants)),
    withSource ? el("td", { class: "muted", title: o.from === "tool" ? "declared by the tool itself"
      : "added by the policy's [tools.NAME]" }, o.from) : null));
  const removed = (tool.removed || []).map((r) => el("tr", { class: "changed" },
    el("td", {}, el("span", { class: "was" }, "removed")), el("td", {}, r), el("td", { class: "reason" }, "no longer required"),
    withSource ? el("td") : null));
  return table(["Status", "Requirement", "Reason", ...(withSource ? ["From"] : [])], [...rows, ...removed]);
}

const NAMED = 20;  // tool names listed per caller in "who gains or loses"; the rest counted

function names(tools) {
  return tools.length > NAMED ? `${tools.slice(0, NAMED).join(", ")} and ${tools.length - NAMED} more` : tools.join(", ");
}

function renderAccess(access) {  // every caller the page offers, not only the one selected
  const box = byId("who-access");
  box.hidden = !access;
  if (!access) return;
  fill(box, access.length ? [el("p", { class: "title" }, "Your edit changes who can call what:"),
    access.map((c) => el("div", { class: "access-line", dataset: { preset: c.preset ?? "" } }, el("b", {}, c.label), ": ",
      c.gained.length ? el("span", { class: "gains" }, `gains ${names(c.gained)}`) : null, c.gained.length && c.lost.length ? "; " : null,
      c.lost.length ? el("span", { class: "loses" }, `loses ${names(c.lost)}`) : null))]
    : el("p", { class: "muted" }, "Your edit changes no caller's access."));
}

export function renderWho(answer, ui) {
  const body = byId("who-body");
  renderAccess(answer.access ?? null);
  if (!answer.tools) {
    fill(byId("who-summary"), "");
    fill(body, el("p", { class: "placeholder" }, answer.policy.ok
      ? "Fix the caller's claims to see decisions." : "A server would refuse this policy. Fix the policy's problems (left) to see decisions."));
    return;
  }
  const tools = answer.tools;
  const allowed = tools.filter((t) => t.allowed).length;
  const maybe = tools.filter((t) => t.some_arguments).length;
  const person = tools.filter((t) => t.verdict === "needs_approval").length;
  const credential = tools.filter((t) => t.verdict === "needs_credential").length;
  const changed = tools.filter((t) => t.changed).length;
  fill(byId("who-summary"), el("b", {}, answer.caller.label), ": ", el("b", {}, `${allowed} of ${tools.length}`),
    " tools allowed", maybe ? `, ${maybe} more for some arguments` : "",
    person ? `, ${plural(person, "tool")} when a person approves` : "",
    credential ? `, ${plural(credential, "tool")} with the caller's own credential` : "",
    changed ? el("span", { class: "was" }, `${plural(changed, "tool")} changed by your edit`) : "");
  const filter = byId("who-filter").value.trim().toLowerCase();
  const rows = [];
  const matching = filter ? tools.filter((t) => t.name.toLowerCase().includes(filter)) : tools;
  for (const tool of matching.slice(0, MAX_ROWS)) {
    const open = ui.open.has(tool.name);
    const row = el("tr", { class: `tool-row${tool.changed ? " changed" : ""}`, dataset: { tool: tool.name },
      "aria-expanded": String(open), on: { click: () => ui.toggle(tool.name) } },
      el("td", {}, open ? "▾ " : "▸ ", tool.name),
      el("td", {}, decisionBadge(tool), tool.changed && tool.was_allowed !== tool.allowed
        ? el("span", { class: "was" }, `was ${tool.was_allowed ? "allowed" : "denied"}`) : null),
      el("td", {}, el("div", { class: "chips" }, tool.outcomes.length ? tool.outcomes.map(chip)
        : el("span", { class: "muted" }, "no requirements"))));
    rows.push(row);
    if (open) rows.push(el("tr", { class: "detail" }, el("td", { colspan: 3 }, outcomesTable(tool, answer.grants))));
  }
  fill(body, table(["Tool", "Decision", "Requirements"], rows), matching.length > MAX_ROWS
    ? el("p", { class: "muted" }, `Showing ${MAX_ROWS} of ${matching.length} tools: type in the filter to find the others.`) : null);
}

export function renderCall(answer, grants) {
  const box = byId("call-result");
  const call = answer.call;
  if (!call) {
    fill(box, el("p", { class: "placeholder" }, answer.policy.ok ? "Fix the caller's claims to decide a call."
      : "Fix the policy's problems (left) to decide a call."));
    return;
  }
  if (call.problem) {
    fill(box, el("div", { class: "problem-line" }, call.problem));
    return;
  }
  const d = call.decision;
  fill(box,
    el("div", { class: "verdict" }, decisionBadge({ allowed: d.allowed, verdict: d.verdict }, true),
      el("span", {}, el("b", {}, call.tool), " for ", answer.caller.label),
      d.changed && d.was_allowed !== d.allowed ? el("span", { class: "was" }, `was ${d.was_allowed ? "allowed" : "denied"}`) : null),
    el("h3", {}, "Why"), outcomesTable(d, grants, false),
    el("h3", {}, d.allowed ? "The tool runs with" : "What the caller is sent"),
    call.decided_per_call ? el("p", { class: "per-call" }, d.verdict === "needs_credential"
      ? "Decided per call, at the gateway: with the caller's own credential the call goes on (to an approval, if it needs one); "
        + "without one the gateway says what to do (connect an account at its /connections page)."
      : "Decided per call, by a person: the caller is asked to confirm, or an approver approves it on the gateway's "
        + "/approvals page; the denial says which and where.") : null,
    call.decided_per_call ? null : el("pre", { lines: true }, d.allowed ? JSON.stringify(call.arguments ?? {}, null, 2)
      : `${call.denial_text}\n\nstructuredContent: ${JSON.stringify(call.denial, null, 2)}`));
}

export function renderClient(answer) {
  const body = byId("client-body");
  const client = answer.client;
  byId("client-problem").hidden = !(client && client.problem);
  if (!client || client.problem) {
    if (client) fill(byId("client-problem"), client.problem);
    fill(byId("client-summary"), "");
    fill(body, el("p", { class: "placeholder" }, client ? "Fix the knowledge to see the client's view."
      : "Fix the policy's problems (left) to see the client's view."));
    return null;
  }
  const shown = client.tools.filter((t) => t.fate !== "hidden").length;
  const failing = client.tools.filter((t) => t.verdict === "will_fail").length;
  fill(byId("client-summary"), `In ${client.mode} mode a strict client lists `, el("b", {}, `${shown} of ${client.tools.length}`),
    " tools; ", el("b", {}, plural(failing, "tool")), failing === 1 ? " will fail." : " will fail.");
  const rows = client.tools.slice(0, MAX_ROWS).map((t) => el("tr", { class: t.fate === "hidden" ? "hidden-tool" : null, dataset: { tool: t.name } },
    el("td", { class: "num" }, t.position ?? "—"),
    el("td", { class: "mono" }, t.name),
    el("td", {}, el("span", { class: `fate ${t.fate}` }, t.fate)),
    el("td", {}, el("div", { class: "chips" }, t.requirements.length ? t.requirements.map((r) =>
      el("span", { class: `chip ${{ satisfied: "sat", unsatisfiable: "unsat", unknown: "unknown" }[r.known]}`, title: r.known }, r.requirement))
      : el("span", { class: "muted" }, "none"),
    t.withheld ? el("span", { class: "muted small", title: "confidential requirements are enforced but never listed" },
      `+${t.withheld} confidential, not listed`) : null)),
    el("td", { class: "reason why" }, t.why),
    el("td", {}, t.server_allows === null || t.server_allows === undefined ? "—"
      : decisionBadge({ allowed: t.server_allows }),
      t.server_allows && t.fate !== "kept" ? el("span", { class: "mismatch" }, "the server allows it: the knowledge is wrong") : null)));
  fill(body, table(["##", "Tool", "Client", "Requirements (as the client knows them)", "Why", "Server"], rows),
    client.tools.length > MAX_ROWS ? el("p", { class: "muted" }, `Showing the first ${MAX_ROWS} of ${client.tools.length} tools, `
      + "in the order the client would list them.") : null,
    client.warnings.length ? el("div", { class: "problems" }, client.warnings.map((w) => el("div", { class: "line" }, w))) : null);
  return client.knowledge;
}

function stat(n, label, cls = "") {
  return el("div", { class: `stat ${cls}` }, el("div", { class: "n" }, String(n)), el("div", { class: "l" }, label));
}

export function renderLogs(answer) {
  const problems = [...answer.problems, ...answer.bad_lines];
  fill(byId("logs-problems"), problems.map((p) => el("div", { class: "line" }, p)));
  const s = answer.summary;
  const allowed = s.tools.reduce((n, t) => n + t.allowed, 0);
  const denied = s.tools.reduce((n, t) => n + t.denied, 0);
  const body = byId("logs-body");
  if (!answer.sources.length) {
    fill(body, el("p", { class: "placeholder" }, "No decision log yet: start the explorer with --log FILE, or load one above."));
    return;
  }
  const chart = answer.chart ? new DOMParser().parseFromString(answer.chart, "image/svg+xml").documentElement : null;
  fill(body,
    el("div", { class: "stats" }, stat(s.records, "decision records"), stat(allowed, "allowed", "ok"),
      stat(denied, "denied", "no"), stat(answer.skipped, "lines skipped")),
    chart ? el("div", { class: "chart-box", id: "logs-chart" }, document.importNode(chart, true))
      : el("p", { class: "placeholder" }, "No decision records match."),
    el("h3", { class: "section" }, "Per tool (as log summarize prints it)"),
    table(["Tool", "Allowed#", "Denied#", "Errors#", "Top unmet", "Revisions", "Replicas"], s.tools.map((t) =>
      el("tr", { dataset: { tool: t.tool } }, el("td", { class: "mono" }, t.tool), el("td", { class: "num" }, String(t.allowed)),
        el("td", { class: "num" }, String(t.denied)), el("td", { class: "num" }, String(t.errors)),
        el("td", {}, t.top_unmet.length ? t.top_unmet.map((u) => el("div", { class: "mono" }, `${u.requirement} (${u.count})`)) : "—"),
        el("td", { class: "mono" }, t.revisions.join(", ") || "—"), el("td", { class: "mono" }, t.replicas.join(", ") || "—")))),
    s.revisions.length ? [el("h3", { class: "section" }, "Per policy revision"),
      table(["Revision", "Records#", "First seen (UTC)", "Last seen (UTC)", "Replicas"], s.revisions.map((r) =>
        el("tr", {}, el("td", { class: "mono" }, r.revision), el("td", { class: "num" }, String(r.records)),
          el("td", {}, when(r.first_time)), el("td", {}, when(r.last_time)), el("td", { class: "mono" }, r.replicas.join(", ") || "—"))))] : null,
    s.replicas.length ? [el("h3", { class: "section" }, "Per replica"),
      table(["Replica", "Records#", "Last revision", "Revisions"], s.replicas.map((r) =>
        el("tr", {}, el("td", { class: "mono" }, r.replica), el("td", { class: "num" }, String(r.records)),
          el("td", { class: "mono" }, r.last_revision || "—"), el("td", { class: "mono" }, r.revisions.join(", ")))))] : null);
}

function when(seconds) {
  // As `log summarize` prints it: UTC, whole seconds.
  return seconds === null ? "—" : new Date(seconds * 1000).toISOString().slice(0, 19) + "Z";
}
