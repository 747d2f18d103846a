"""The one TLS context of every connection this package opens (auth metadata and JWKS, token
introspection, policy bundles, the gateway's HTTP servers, the `tools` command): built once, on first
use, so a private CA is set once, with SSL_CERT_FILE (a PEM bundle) or SSL_CERT_DIR (a hashed folder).
"""

from __future__ import annotations

import functools
import os
import ssl


@functools.cache
def client_context() -> ssl.SSLContext:
    """The shared client context: the CA bundle or folder named by SSL_CERT_FILE / SSL_CERT_DIR when
    set, else the system's. Building one costs ~50 ms; every client reuses this one."""
    cafile = os.environ.get("SSL_CERT_FILE") or None
    capath = os.environ.get("SSL_CERT_DIR") or None
    if cafile is not None or capath is not None:
        return ssl.create_default_context(cafile=cafile, capath=capath)
    return ssl.create_default_context()
