"""What every policy section shares (SPEC §5): the strict base class, and the value types that
several sections use (a non-empty string, seconds, a JSON Pointer, an argument value, an
`env:VAR` reference), each with the one validator that says what is wrong with a bad value.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

from ..arguments import parse_pointer

NonEmpty = Annotated[str, Field(min_length=1)]
Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]
PositiveSeconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
EnvVarName = Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]


class Section(BaseModel):
    """Every policy section: unknown keys are errors, values are immutable once loaded, and scalars
    are strict (SPEC §5): a key takes only its own TOML type (`true` or `"30"` is not 30 seconds;
    an integer is a fine float)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


def _pointer(value: str) -> str:
    parse_pointer(value)  # raises ValueError naming the problem
    return value


def toml_type(value: object) -> str:
    """The TOML name of a value's type, for an error message."""
    return {float: "float", list: "array", dict: "table", bool: "boolean", int: "integer",
            str: "string"}.get(
        type(value), type(value).__name__)


def _scalar(value: object) -> object:
    """Argument values are JSON strings, integers or booleans: a float, null, array or table is
    refused (it would never equal an argument exactly, or invites numeric coercion)."""
    if isinstance(value, str | int):  # bool is an int
        return value
    raise ValueError(f"must be a string, an integer or a boolean, got {toml_type(value)} {value!r}")


Pointer = Annotated[str, AfterValidator(_pointer)]
ArgumentValue = Annotated[str | int | bool, BeforeValidator(_scalar)]


def _env_reference(value: str) -> str:
    if not re.fullmatch(r"env:[A-Za-z_][A-Za-z0-9_]*", value):
        # the value itself is not shown: it may be the secret, written where it must not be
        raise ValueError("must be env:VAR, naming an environment variable (a secret is never "
                         "written in a policy)")
    return value


EnvReference = Annotated[str, AfterValidator(_env_reference)]
