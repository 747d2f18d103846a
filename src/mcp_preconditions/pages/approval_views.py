"""What the approval pages show (SPEC §15): an approval request as HTML, the whole call (the tool,
its server and description, every argument key and value, the caller, who is signed in; a long
value folded but expandable, never cut; every control, format or separator character written as
its JSON escape, marked), the approve and refuse buttons, and the listing of requests (each one's
arguments in short, with a fingerprint); and the JSON for scripts. Plain HTML: one inline style,
allowed by its hash in the pages' Content-Security-Policy; no script (a fold is `<details>`).
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple

from ..approvals.lifecycle import ApprovalRequest, Party, State, escape, hidden, visible

# A value shown in full up to this many characters (pretty-printed); a longer one is folded: its
# start shown, the whole of it one click away (a call's arguments may be 64 KiB:
# binding.MAX_ARGUMENTS_BYTES).
FOLDED_CHARACTERS = 300
FOLD_START = 120
SHORT_CHARACTERS = 100  # the listing: a request's arguments in short

_STYLE = ("body{font-family:system-ui,sans-serif;max-width:52rem;margin:2rem auto;padding:0 1rem;"
          "color:#1f2328}h1{font-size:1.4rem}h2{font-size:1.1rem;margin-top:1.6rem}"
          "dt{font-weight:600;margin-top:.6rem}dd{margin:0}"
          "pre{background:#f6f8fa;border:1px solid #d0d7de;border-radius:6px;padding:.5rem;"
          "margin:.2rem 0;white-space:pre-wrap;word-break:break-all}"
          "table{border-collapse:collapse;width:100%}th,td{text-align:left;vertical-align:top;"
          "border-top:1px solid #d0d7de;padding:.3rem .4rem}th{font-family:monospace;width:12rem;"
          "word-break:break-all}summary{cursor:pointer;color:#0969da}"
          ".esc{background:#ffebe9;color:#82071e;border-radius:3px;font-weight:600}"
          "code{word-break:break-all}form{margin-top:1.2rem}"
          "button{font-size:1rem;padding:.45rem 1.2rem;"
          "margin-right:.6rem;border-radius:6px;border:1px solid #d0d7de;cursor:pointer}"
          "button[value=approve]{background:#1f883d;color:#fff}"
          "button[value=refuse]{background:#cf222e;color:#fff}li{margin:.5rem 0}")
STYLE_HASH = "sha256-" + base64.b64encode(hashlib.sha256(_STYLE.encode()).digest()).decode()
CSP = (f"default-src 'none'; style-src '{STYLE_HASH}'; form-action 'self'; base-uri 'none'; "
       "frame-ancestors 'none'")

class ToolFacts(NamedTuple):
    """What the gateway knows of a tool a request names: its server and its description."""

    server: str
    description: str | None


class Shown(NamedTuple):
    """A request as its page shows it: `complete` when every part of the call could be shown (the
    page offers Approve only then)."""

    html: str
    complete: bool


def marked(text: str) -> str:
    """`text` as HTML: escaped, and every character a person could not see or could misread
    written as its JSON escape, marked (`<span class="esc">\\u202e</span>`)."""
    return "".join(f"<span class=\"esc\">{escape(c)}</span>" if hidden(c) else html.escape(c)
                   for c in text)


def pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


def folded(text: str, name: str) -> str:
    """A value in full; a long one folded: its start, and the whole of it one click away."""
    if len(text) <= FOLDED_CHARACTERS:
        return f"<pre>{marked(text)}</pre>"
    return (f"<details id=\"{name}\"><summary><code>{marked(text[:FOLD_START])}</code> … "
            f"({len(text)} characters: show all)</summary><pre>{marked(text)}</pre></details>")


def fingerprint(canonical: str) -> str:
    """A short name for a call's arguments: the first 8 hex digits of their SHA-256."""
    return hashlib.sha256(canonical.encode()).hexdigest()[:8]


def document(title: str, body: str) -> str:
    return (f"<!doctype html><html><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
            f"<style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1>{body}</body></html>")


def when(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def who(party: Party | None) -> str:
    return f"{party.subject} ({party.issuer})" if party is not None else "anonymous"


def arguments_table(canonical: str) -> str | None:
    """Every argument, key and value, as a table (None: they are not a JSON object)."""
    try:
        found = json.loads(canonical)
    except (ValueError, RecursionError):
        return None
    if not isinstance(found, dict):
        return None
    if not found:
        return "<p id=\"arguments\">No arguments.</p>"
    try:
        rows = "".join(f"<tr><th>{marked(json.dumps(key, ensure_ascii=False))}</th>"
                       f"<td>{folded(pretty(value), f'value-{i}')}</td></tr>"
                       for i, (key, value) in enumerate(found.items()))
    except RecursionError:
        return None
    return f"<table id=\"arguments\">{rows}</table>"


_STANDING = {State.APPROVED: "approved", State.REFUSED: "refused", State.USED: "approved and used",
             State.EXPIRED: "expired"}


def request_page(request: ApprovalRequest, csrf: str | None, signed_in: str,
                 tool: ToolFacts | None, own: bool = False) -> Shown:
    """One request, the whole call: the buttons while it waits (`csrf` the form's token), Approve
    only when everything could be shown; else where it stands. `own`: the signed-in person is its
    caller (they see it, and decide nothing)."""
    b = request.binding
    described = tool.description if tool is not None else None
    rows = [("Signed in as", "signed-in", marked(signed_in)), ("Approval", "approval", marked(b.approval)),
            ("Tool", "tool", marked(b.tool)),
            ("Server", "server", marked(tool.server) if tool else "<em>unknown: no server lists "
                                                                  "this tool now</em>"),
            ("Description", "description", folded(described, "description-all") if described
             else "<em>none</em>"),
            ("Who asked", "caller", marked(who(b.caller))), ("Requested", "requested",
                                                            html.escape(when(request.created_at))),
            ("Expires" if request.state is State.REQUESTED else "Decision holds until", "expires",
             html.escape(when(request.expires_at))),
            ("Arguments", "fingerprint", f"#{fingerprint(b.arguments)} (the first digits of the "
                                         "SHA-256 of their canonical JSON)")]
    fields = "".join(f"<dt>{html.escape(k)}</dt><dd id=\"{i}\">{v}</dd>" for k, i, v in rows)
    table = arguments_table(b.arguments)
    complete = table is not None and tool is not None
    body = f"<dl>{fields}</dl>" + (table or "<p id=\"arguments\"><em>The arguments cannot be "
                                            "shown.</em></p>")
    if own:
        body += "<p id=\"message\">This is your own request: an approver decides it.</p>"
    elif request.state is State.REQUESTED and csrf is not None:
        approve = ("<button type=\"submit\" name=\"decision\" value=\"approve\">Approve</button>"
                   if complete else "")
        body += ("<form method=\"post\"><input type=\"hidden\" name=\"csrf\" "
                 f"value=\"{html.escape(csrf)}\">{approve}<button type=\"submit\" name=\"decision\" "
                 "value=\"refuse\">Refuse</button></form>")
        if not complete:
            body += ("<p id=\"incomplete\">This page cannot show the whole call, so it cannot be "
                     "approved here.</p>")
    else:
        body += f"<p id=\"message\">This request is {_STANDING.get(request.state, 'waiting')}.</p>"
    return Shown(document(f"Approve a call to {visible(b.tool)}?", body), complete)


def in_short(request: ApprovalRequest) -> str:
    """A request's arguments in short (HTML): their canonical JSON's start, and their fingerprint,
    so two requests that differ only in their arguments look different."""
    text = request.binding.arguments
    short = text if len(text) <= SHORT_CHARACTERS else text[:SHORT_CHARACTERS] + "…"
    return f"<code class=\"args\">{marked(short)}</code> #{fingerprint(text)}"


def _items(requests: Sequence[ApprovalRequest], mine: bool) -> str:
    return "".join(
        f"<li><a href=\"/approvals/{html.escape(r.id)}\">{marked(r.binding.tool)}</a>: approval "
        f"{marked(r.binding.approval)}{'' if mine else ', by ' + marked(who(r.binding.caller))}, "
        f"expires {when(r.expires_at)}<br>{in_short(r)}</li>" for r in requests)


def listing_page(decidable: Sequence[ApprovalRequest], mine: Sequence[ApprovalRequest],
                 signed_in: str) -> str:
    """The requests waiting that the signed-in person may decide, and their own waiting for an
    approver: every one (a caller has at most 16 waiting, bounds.py)."""
    body = f"<p id=\"signed-in\">Signed in as {marked(signed_in)}</p>"
    body += "<h2>Waiting for your decision</h2>" + (
        f"<ul id=\"requests\">{_items(decidable, False)}</ul>" if decidable else
        "<p id=\"message\">No request is waiting for you.</p>")
    body += "<h2>Your requests waiting for an approver</h2>" + (
        f"<ul id=\"mine\">{_items(mine, True)}</ul>" if mine else
        "<p id=\"none-mine\">None of your calls is waiting for an approver.</p>")
    return document("Approvals", body)


def sign_in_page(next_path: str, sign_in_path: str) -> str:
    """What a visitor who is not signed in sees: nothing of any request, and the way to sign in
    (nothing is stored for them until they follow it)."""
    href = html.escape(f"{sign_in_path}?next={next_path}")
    return document("Approvals", "<p id=\"message\">Sign in to see the approval requests you may "
                                 f"decide, and your own.</p><p><a id=\"sign-in\" href=\"{href}\">"
                                 "Sign in</a></p>")


def as_json(request: ApprovalRequest) -> dict[str, Any]:
    """A request for a script: what the page shows (never who else decided it)."""
    b = request.binding
    return {"id": request.id, "approval": b.approval, "tool": b.tool,
            "arguments": json.loads(b.arguments),
            "caller": b.caller.to_dict() if b.caller else None, "state": request.state.value,
            "expires_at": request.expires_at}

