"""The people's pages (SPEC §14, §15): what a person opens in a browser, or a script calls with a
bearer token, on the gateway's HTTP listener or a stdio gateway's `--pages-listen`. Starlette apps,
imported on their own by a gateway that serves them; `cli/_pages.py` composes them into one.

credentials.py (`/connect/ID`, `/oauth/callback`, `/connections` for scripts) with connections.py
(`/connections` in a browser); approvals.py (`/approvals`, `/approvals/ID`) with approval_views.py
(what a request shows), approval_requests.py (bodies, refusals) and approver_sessions.py (the
approver's sealed session, CSRF); parts.py (what the credential pages share) and cookies.py (the one
cookie rule, `HostCookies`). The logic and the stores they show stay in `credentials/` (accounts,
connect links, the sign-in) and `approvals/` (requests, approvers): the pages only read and ask.
"""
