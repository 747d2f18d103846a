"""The gateway's approvals (SPEC §15), wired from the command line: where the approval pages are (a
denial's `url` remedy names them), and the refusal of a stdio gateway that has no pages while its
policy has an approval that approvers decide there. Bad input is one line and exit 2.
"""

from __future__ import annotations

import argparse

from ..approvals import needing_pages
from ..errors import InputError
from ..policy.load import PolicySource
from ._credentials import own_url


def pages_url(args: argparse.Namespace, source: PolicySource, listen: tuple[str, int] | None
              ) -> str | None:
    """The base URL of the approval pages (`--public-url`, else the listener's or
    `--pages-listen`'s own). InputError for a stdio gateway without `--pages-listen` whose policy
    has an approval decided by approvers: nobody could reach the page to approve."""
    name = needing_pages(source)
    if name is not None and listen is None and args.pages_listen is None:
        raise InputError(f"{source.source}: approvals.{name}: approvers decide it on the gateway's "
                         "approval pages, which a stdio gateway serves only with --pages-listen "
                         "http://127.0.0.1:PORT")
    url: str | None = args.public_url or own_url(args, listen)
    return url.rstrip("/") if url else None
