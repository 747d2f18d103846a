"""The library's exceptions, the whole hierarchy in one place.

Lower layers' exceptions (pyjwt, authlib, redis, OpenFeature, pydantic) are mapped into these at the
boundary; inside a resolver they never escape, they become an `error` Outcome instead.
"""

from __future__ import annotations


class PreconditionsError(Exception):
    """Base class of every exception this library raises."""

    def lines(self) -> list[str]:
        """One line per problem, each `<file>: <place>: <problem>` where the error knows them (the
        command line prints each as its own `error:` line)."""
        return str(self).split("\n")


# --- bad input: the user's files and settings ---------------------------------------------------
class InputError(PreconditionsError):
    """A file or value supplied by the user is unusable; the message names the file and place."""


class UsageError(InputError):
    """A command's options do not fit together; the command line prints it with the command's name,
    as argparse prints its own usage errors."""


class PolicyError(InputError):
    """A policy file (or a file like it: `what` says which) is invalid; `problems` lists every
    problem by key path."""

    def __init__(self, source: str, problems: list[str], what: str = "invalid policy") -> None:
        self.source = source
        self.problems = problems
        lines = "\n".join(f"  {p}" for p in problems)
        super().__init__(f"{source}: {what} ({len(problems)} problem(s)):\n{lines}")

    def lines(self) -> list[str]:
        return [f"{self.source}: {p}" for p in self.problems]


class ToolsFileError(InputError):
    """A tools, knowledge or claims file cannot be read or has the wrong shape."""

    def lines(self) -> list[str]:
        return [str(self)]  # one problem; a line break in it belongs to a file name


class FileReadError(ToolsFileError):
    """Any input file cannot be read at all: missing, unreadable, too large. `problem` omits the
    path, so a caller that reports by key path (a policy) can say `(file): <problem>`."""

    def __init__(self, source: str, problem: str) -> None:
        self.source = source
        self.problem = problem
        super().__init__(f"{source}: {problem}")


# --- start-up validation ------------------------------------------------------------------------
class RequirementError(PreconditionsError):
    """One or more tools declare requirements that cannot be enforced; refuses to start."""

    def __init__(self, messages: list[str]) -> None:
        self.messages = messages
        super().__init__("\n".join(messages))

    def lines(self) -> list[str]:
        return list(self.messages)


class RegistryError(PreconditionsError):
    """Resolver registration is inconsistent (e.g. two resolvers for one namespace)."""


# --- authentication -----------------------------------------------------------------------------
class TokenError(PreconditionsError):
    """An access token could not be verified; the message is a reason a user can read."""


class AuthBackendError(PreconditionsError):
    """The token issuer's JWKS or introspection endpoint is unreachable, slow or malformed."""


# --- upstream credentials (SPEC §14) --------------------------------------------------------------
class CredentialError(PreconditionsError):
    """No credential for a caller and a server; the message is a reason without any secret."""


class NoCredentialError(CredentialError):
    """There is none to be had: an anonymous caller, no connected account, no entry, or an
    authorization server that refused (`credential:KEY` is `unsatisfied`)."""


class CredentialBackendError(CredentialError):
    """An authorization server or a store is down, slow or answered garbage (`error`)."""


class FlowError(CredentialError):
    """A step of a browser flow (a connect link, a sign-in, a callback) is refused; `status` is the
    HTTP status its page answers with, the message what the person is told."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(message)


class SealError(PreconditionsError):
    """A sealed (encrypted) value does not open: tampered with, moved to another owner, or sealed
    with another key."""


# --- live facts ---------------------------------------------------------------------------------
class BackendError(PreconditionsError):
    """A state or flag backend is down, slow or returned garbage."""
