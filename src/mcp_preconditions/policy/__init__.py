"""Policy files: the model, loading with key-path errors, the JSON Schema, hot-reload snapshots."""

from .load import PolicySource, load_policy, parse_policy, policy_schema
from .model import Policy

__all__ = ["Policy", "PolicySource", "load_policy", "parse_policy", "policy_schema"]
