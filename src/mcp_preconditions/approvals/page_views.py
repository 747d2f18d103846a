"""What the approval pages show (SPEC §15): an approval request as HTML (the tool, its arguments
escaped and bounded, the caller, the approval, the expiry, the approve and refuse buttons) and as
JSON for scripts, and the listing of requests waiting. Plain HTML: one inline style, allowed by its
hash in the pages' Content-Security-Policy; no script.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from .lifecycle import ApprovalRequest, State

# Arguments shown up to this many characters (pretty-printed); the rest is cut, and the page says
# how large they were: a call's arguments may be 64 KiB (binding.MAX_ARGUMENTS_BYTES).
SHOWN_CHARACTERS = 4000

_STYLE = ("body{font-family:system-ui,sans-serif;max-width:46rem;margin:2rem auto;padding:0 1rem;"
          "color:#1f2328}h1{font-size:1.4rem}dt{font-weight:600;margin-top:.6rem}dd{margin:0}"
          "pre{background:#f6f8fa;border:1px solid #d0d7de;border-radius:6px;padding:.7rem;"
          "white-space:pre-wrap;word-break:break-all}button{font-size:1rem;padding:.45rem 1.2rem;"
          "margin-right:.6rem;border-radius:6px;border:1px solid #d0d7de;cursor:pointer}"
          "button[value=approve]{background:#1f883d;color:#fff}"
          "button[value=refuse]{background:#cf222e;color:#fff}li{margin:.3rem 0}")
STYLE_HASH = "sha256-" + base64.b64encode(hashlib.sha256(_STYLE.encode()).digest()).decode()
CSP = (f"default-src 'none'; style-src '{STYLE_HASH}'; form-action 'self'; base-uri 'none'; "
       "frame-ancestors 'none'")


def document(title: str, body: str) -> str:
    return (f"<!doctype html><html><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
            f"<style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1>{body}</body></html>")


def when(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def shown_arguments(canonical: str) -> str:
    """The arguments pretty-printed, cut at SHOWN_CHARACTERS (saying so)."""
    text = json.dumps(json.loads(canonical), indent=2, ensure_ascii=False)
    if len(text) <= SHOWN_CHARACTERS:
        return text
    return text[:SHOWN_CHARACTERS] + f"\n… (cut: {len(canonical.encode())} bytes in all)"


def _caller(request: ApprovalRequest) -> str:
    caller = request.binding.caller
    return f"{caller.subject} ({caller.issuer})" if caller is not None else "anonymous"


_STANDING = {State.APPROVED: "approved", State.REFUSED: "refused", State.USED: "approved and used",
             State.EXPIRED: "expired"}


def request_page(request: ApprovalRequest, csrf: str | None) -> str:
    """One request; the buttons while it waits (`csrf` the form's token), else where it stands."""
    b = request.binding
    rows = [("Approval", b.approval), ("Tool", b.tool), ("Caller", _caller(request)),
            ("Requested", when(request.created_at)),
            ("Expires" if request.state is State.REQUESTED else "Decision holds until",
             when(request.expires_at))]
    fields = "".join(f"<dt>{html.escape(k)}</dt><dd id=\"{html.escape(k.split()[0].lower())}\">"
                     f"{html.escape(v)}</dd>" for k, v in rows)
    body = (f"<dl>{fields}<dt>Arguments</dt><dd><pre id=\"arguments\">"
            f"{html.escape(shown_arguments(b.arguments))}</pre></dd></dl>")
    if request.state is State.REQUESTED and csrf is not None:
        body += ("<form method=\"post\"><input type=\"hidden\" name=\"csrf\" "
                 f"value=\"{html.escape(csrf)}\"><button type=\"submit\" name=\"decision\" "
                 "value=\"approve\">Approve</button><button type=\"submit\" name=\"decision\" "
                 "value=\"refuse\">Refuse</button></form>")
    else:
        body += f"<p id=\"message\">This request is {_STANDING.get(request.state, 'waiting')}.</p>"
    return document(f"Approve a call to {b.tool}?", body)


def listing_page(requests: Sequence[ApprovalRequest]) -> str:
    if not requests:
        return document("Approvals", "<p id=\"message\">No request is waiting for you.</p>")
    items = "".join(f"<li><a href=\"/approvals/{html.escape(r.id)}\">{html.escape(r.binding.tool)}"
                    f"</a>: approval {html.escape(r.binding.approval)}, by "
                    f"{html.escape(_caller(r))}, expires {when(r.expires_at)}</li>" for r in requests)
    return document("Approvals", f"<ul id=\"requests\">{items}</ul>")


def as_json(request: ApprovalRequest) -> dict[str, Any]:
    """A request for a script: what the page shows (never who else decided it)."""
    b = request.binding
    return {"id": request.id, "approval": b.approval, "tool": b.tool,
            "arguments": json.loads(b.arguments),
            "caller": b.caller.to_dict() if b.caller else None, "state": request.state.value,
            "expires_at": request.expires_at}
