"""The policy explorer (`mcp-preconditions explore`): a local web page to see who can do what under a
policy, try calls, edit the policy and see decisions change, see what a strict client would hide,
and read decision logs. It looks, never writes; every decision is the core's.
"""

from .app import build_app
from .workbench import Inputs, Workbench

__all__ = ["Inputs", "Workbench", "build_app"]
