"""Access tokens from the local IdP (examples/local-idp/idp.mjs), for docs/credentials-on-your-machine.md.

    python examples/local-idp/get_token.py alice
        alice's token for the gateway, as her MCP client gets it: authorization code with PKCE
    python examples/local-idp/get_token.py --service URL
        "Bearer ...": the gateway's own token for the server at URL (its tool list and pings),
        client credentials with $GW_CLIENT_SECRET

A person's sign-in needs a browser; the local IdP's login page takes any password, so this script
answers it for the person named, as a browser would, and prints the token it gets (on stdout only).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import re
import secrets
import sys
from urllib.parse import parse_qs, urlencode, urljoin, urlsplit

import httpx2

IDP = "http://127.0.0.1:9400"
GATEWAY = "http://127.0.0.1:9401/mcp"  # the resource (RFC 8707) a person's token is for: its `aud`
REDIRECT = "http://127.0.0.1/callback"  # the `cli` client's; nothing listens: its URL holds the code


def person(name: str) -> str:
    """`name`'s access token for the gateway: the code flow of a public client, signed in as `name`."""
    verifier = secrets.token_urlsafe(32)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=")
    query = {"client_id": "cli", "response_type": "code", "redirect_uri": REDIRECT, "scope": "openid mcp",
             "resource": GATEWAY, "state": secrets.token_urlsafe(16), "code_challenge_method": "S256",
             "code_challenge": challenge.decode()}
    with httpx2.Client(timeout=10) as browser:
        back = _sign_in(browser, f"{IDP}/auth?{urlencode(query)}", name)
        answer = parse_qs(urlsplit(back).query)
        if answer.get("state") != [query["state"]] or "code" not in answer:
            sys.exit(f"the sign-in did not end well: {back}")
        response = browser.post(f"{IDP}/token", data={
            "grant_type": "authorization_code", "code": answer["code"][0], "redirect_uri": REDIRECT,
            "code_verifier": verifier, "client_id": "cli", "resource": GATEWAY})
    return _access_token(response)


def _sign_in(browser: httpx2.Client, url: str, name: str) -> str:
    """Follow the IdP's redirects, answering its login page (as `name`) and its consent page, until
    it sends the browser to REDIRECT: that URL."""
    response = browser.get(url)
    for _ in range(20):
        location = response.headers.get("location")
        if response.is_redirect and location:
            url = urljoin(url, location)
            if url.startswith(REDIRECT + "?"):
                return url
            response = browser.get(url)
            continue
        form = re.search(r'<form[^>]*action="([^"]+)"', response.text)
        if form is None:
            sys.exit(f"the IdP answered {response.status_code} at {url}: is it running?")
        fields = {"prompt": "login", "login": name, "password": "any"} if 'name="login"' in response.text \
            else {"prompt": "consent"}
        url = urljoin(url, form.group(1))
        response = browser.post(url, data=fields)
    sys.exit("the sign-in went round in circles")


def service(resource: str) -> str:
    """The gateway's own token for the server at `resource`, as a header value."""
    secret = os.environ.get("GW_CLIENT_SECRET")
    if not secret:
        sys.exit("set GW_CLIENT_SECRET: the gateway's client secret at the IdP")
    response = httpx2.post(f"{IDP}/token", auth=("gateway", secret), timeout=10,
                           data={"grant_type": "client_credentials", "resource": resource})
    return "Bearer " + _access_token(response)


def _access_token(response: httpx2.Response) -> str:
    body = response.json()
    if response.status_code != 200 or "access_token" not in body:
        sys.exit(f"the IdP refused: {body.get('error')}: {body.get('error_description')}")
    return str(body["access_token"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("person", nargs="?", help="who signs in (alice or bob; any password)")
    parser.add_argument("--service", metavar="URL", help="the gateway's own token for this server")
    args = parser.parse_args()
    if (args.person is None) == (args.service is None):
        parser.error("name a person, or --service URL")
    try:
        print(person(args.person) if args.service is None else service(args.service))
    except httpx2.HTTPError as exc:
        sys.exit(f"cannot reach the IdP at {IDP}: {exc}")


if __name__ == "__main__":
    main()
