"""Reading a model catalog file; tools files are read by the project's shared `files` module.

Every problem becomes an InputError whose message names the file and the place.
"""

from __future__ import annotations

from pathlib import Path

from ..files import read_json
from .routing import Catalog, parse_catalog


def load_catalog(path: str | Path) -> Catalog:
    """The model catalog in a JSON file `{"default": NAME, "models": [...]}`."""
    return parse_catalog(read_json(path), str(path))
