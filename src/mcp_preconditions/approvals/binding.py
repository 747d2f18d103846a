"""What an approval is bound to: moved to lifecycle.py (a request's life, from its binding to its
record). These names stay importable from here."""

from __future__ import annotations

from .lifecycle import MAX_ARGUMENTS_BYTES, Binding, Party, bind

__all__ = ["MAX_ARGUMENTS_BYTES", "Binding", "Party", "bind"]
