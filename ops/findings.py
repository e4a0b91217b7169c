"""What a check of `bin/ops doctor` yields and looks at: findings, the target stack, the reason a
check could not run. Apart from `ops.doctor`, so the checks (`ops.doctor_checks`) import these
types and the doctor imports the checks, without a cycle.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError

from infra.config import PipelineSettings
from ops.context import Context
from ops.errors import OpsError
from ops.stack import StackOutputs

Status = Literal["OK", "WARN", "FAIL"]
STATUSES: tuple[Status, ...] = ("OK", "WARN", "FAIL")
# botocore error codes meaning "this caller may not", "this endpoint does not serve that call".
DENIED_CODES = frozenset({"AccessDenied", "AccessDeniedException", "UnauthorizedOperation"})
UNSERVED_CODES = frozenset({"UnknownOperationException", "InvalidAction", "NotImplemented"})


@dataclass(frozen=True)
class Finding:
    check: str
    status: Status
    subject: str
    detail: str
    fix: str | None = None


class NotApplicable(Exception):
    """The check does not apply to this stack (its reason is listed under "not checked")."""


@dataclass(frozen=True)
class Target:
    """What the checks look at: the stack's outputs, the settings it runs with, and how an
    operator's fix command reaches it (`aws --endpoint-url ...` and `bin/ops --local` locally)."""

    stack: StackOutputs
    settings: PipelineSettings | None
    settings_problem: str | None
    local: bool
    aws: str
    ops: str

    def require_settings(self) -> PipelineSettings:
        if self.settings is None:
            raise OpsError(f"cannot read the settings: {self.settings_problem}")
        return self.settings


Check = Callable[[Context, Target], Iterable[Finding]]


def why_not_run(error: Exception) -> str:
    """Why a check could not run, in one line that holds no secret."""
    if isinstance(error, ClientError):
        code = error.response.get("Error", {}).get("Code", "?")
        message = " ".join(str(error.response.get("Error", {}).get("Message", "")).split())[:160]
        if code in DENIED_CODES:
            return f"no permission for {error.operation_name} ({code}): {message}"
        if code in UNSERVED_CODES:
            return f"{error.operation_name} is not served here ({code}: {message})"
        return f"{error.operation_name} failed: {code}: {message}"
    if isinstance(error, EndpointConnectionError):
        return f"cannot reach {error.kwargs.get('endpoint_url', 'the endpoint')}"
    if isinstance(error, (OpsError, BotoCoreError)):
        return " ".join(str(error).split())
    # Anything else: its type only (its text might carry a URL with a credential in it).
    return f"unexpected {type(error).__name__}"


def findings_of(check: str) -> Callable[..., Finding]:
    """A `Finding` factory for one check: `found("FAIL", subject, detail, fix)`."""

    def found(status: Status, subject: str, detail: str, fix: str | None = None) -> Finding:
        return Finding(check, status, subject, detail, fix)

    return found
