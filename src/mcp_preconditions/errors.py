"""The library's exceptions, the whole hierarchy in one place (the gateway's own are
`gateway/errors.py`, under the same base).

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
    """A command's options do not fit together (printed with the command's name, as argparse does)."""


class PolicyError(InputError):
    """A policy file (or one like it: `what`) is invalid; `problems` lists each by key path."""

    def __init__(self, source: str, problems: list[str], what: str = "invalid policy") -> None:
        self.source = source
        self.problems = problems
        lines = "\n".join(f"  {p}" for p in problems)
        super().__init__(f"{source}: {what} ({len(problems)} problem(s)):\n{lines}")

    def lines(self) -> list[str]:
        return [f"{self.source}: {p}" for p in self.problems]


class BundleError(PolicyError):
    """A policy bundle could not be fetched or verified: one line, `URL: problem`."""

    def __init__(self, source: str, problem: str) -> None:
        self.source = source
        self.problems = [problem]
        InputError.__init__(self, f"{source}: {problem}")  # one line, unlike an invalid-policy list


class BundleNotFound(BundleError):
    """A bundle's server answered 404 (for a signature: the bundle is unsigned)."""


class ToolsFileError(InputError):
    """A tools, knowledge or claims file cannot be read or has the wrong shape."""

    def lines(self) -> list[str]:
        return [str(self)]  # one problem; a line break in it belongs to a file name


class FileReadError(ToolsFileError):
    """An input file cannot be read at all (missing, unreadable, too large); `problem` omits the path."""

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


class NoDocumentError(AuthBackendError):
    """An issuer answered, but not with a JSON document (an HTTP error status, or not JSON)."""


# --- upstream credentials (SPEC §14) --------------------------------------------------------------
class CredentialError(PreconditionsError):
    """No credential for a caller and a server; the message is a reason without any secret."""


class NoCredentialError(CredentialError):
    """There is no credential to be had (anonymous, not connected, refused): `unsatisfied`."""


class CredentialBackendError(CredentialError):
    """An authorization server or a store is down, slow or answered garbage (`error`)."""


class FlowError(CredentialError):
    """A step of a browser flow is refused: `status` its page answers with, the message a person reads."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(message)


class SealError(PreconditionsError):
    """A sealed value does not open: tampered with, moved to another owner, or another key's."""


# --- live facts ---------------------------------------------------------------------------------
class BackendError(PreconditionsError):
    """A state or flag backend is down, slow or returned garbage."""


class DecisionPointError(PreconditionsError):
    """A `pdp:` decision point gave no decision (one line, no token): `error`, which denies."""


# --- what a peer sent -----------------------------------------------------------------------------
class ListingError(PreconditionsError):
    """A server's listing cannot be read: one line naming the method and what is wrong."""


class Malformed(PreconditionsError, ValueError):
    """An AuthZEN request or answer is malformed: one line naming the key path."""


# --- requests a page or an endpoint refuses -------------------------------------------------------
class PageRefused(PreconditionsError):
    """A step the approval pages refuse: its HTTP status, JSON error code, and what a person reads."""

    def __init__(self, status: int, code: str, message: str) -> None:
        self.status, self.code = status, code
        super().__init__(message)


class BadRequest(PreconditionsError):
    """A request the explorer's page would never send (wrong shape, too large): status and message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class TooLarge(PreconditionsError):
    """A request body over the decision point's bound."""
