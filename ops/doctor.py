"""`bin/ops doctor`: is the deployed (or local) stack ready to work? One finding per thing checked.

Each finding is OK, WARN (worth a look, or a check that could not run, and why) or FAIL (the
pipeline cannot do its job until it is fixed), with the command that fixes it. A check that
cannot run (no permission, a service the local stand-ins do not serve) is a WARN, never a
traceback; a check that does not apply (no SMS consumer, no CRM connected) is listed as not
checked. Exit codes, as the other commands: 0 nothing failed, 1 a FAIL (with --strict a WARN
too), 2 the stack or its settings could not be read at all.

Secret values are never printed, nor read beyond telling a placeholder from a value.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError

from infra.config import PipelineSettings, SettingsError
from infra.paths import CDK_JSON
from ops.context import Context
from ops.errors import OpsError
from ops.stack import StackOutputs, stage_settings

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


def _local_settings(path: str) -> tuple[PipelineSettings | None, str | None]:
    """The deployment the local runtime runs (its stack file's "deployment", from `make local`)."""
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
        context = document["deployment"]
        return PipelineSettings.from_context(context), None
    except (OSError, ValueError, KeyError, TypeError, SettingsError) as error:
        why = "it has no 'deployment' (restart make local)" if isinstance(error, KeyError) else str(error)
        return None, f"{path}: {' '.join(why.split())[:200]}"


def _cdk_json_settings(stage: str | None) -> tuple[PipelineSettings | None, str | None]:
    """cdk.json's settings of the stage: what its stack was (and the next deploy will be)
    synthesized with."""
    try:
        return stage_settings(stage, CDK_JSON), None
    except OpsError as error:
        return None, str(error)


def target(ctx: Context) -> Target:
    stack = ctx.stack()  # an unreadable stack is the one error that stops the doctor (exit 2)
    if ctx.option("local"):
        settings, problem = _local_settings(str(ctx.local_file()))
        endpoint = os.environ.get("AWS_ENDPOINT_URL", "")
        ops = "bin/ops --local"
        return Target(stack, settings, problem, True, f"aws --endpoint-url {endpoint}", ops)
    settings, problem = _cdk_json_settings(ctx.option("stage"))
    ops = "bin/ops"
    if ctx.option("stage"):
        ops += f" --stage {ctx.option('stage')}"
    if ctx.option("stack"):
        ops += f" --stack {ctx.option('stack')}"
    if ctx.option("region"):
        ops += f" --region {ctx.option('region')}"
    return Target(stack, settings, problem, False, "aws", ops)


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


def run_checks(
    ctx: Context, where: Target, checks: Iterable[tuple[str, Check]]
) -> tuple[list[Finding], list[dict[str, str]]]:
    findings: list[Finding] = []
    skipped: list[dict[str, str]] = []
    for name, check in checks:
        try:
            findings.extend(check(ctx, where))
        except NotApplicable as reason:
            skipped.append({"check": name, "reason": str(reason)})
        except Exception as error:
            findings.append(Finding(name, "WARN", name, f"could not check: {why_not_run(error)}"))
    return findings, skipped


def exit_code(findings: Iterable[Finding], strict: bool) -> int:
    statuses = {finding.status for finding in findings}
    return 1 if "FAIL" in statuses or (strict and "WARN" in statuses) else 0


def _print(ctx: Context, findings: list[Finding], skipped: list[dict[str, str]]) -> None:
    width = max((len(f.check) for f in findings), default=0)
    for finding in findings:
        ctx.line(f"{finding.status:<4}  {finding.check:<{width}}  {finding.subject}: {finding.detail}")
        if finding.fix and finding.status != "OK":
            ctx.line(f"{'':<4}  {'':<{width}}  fix: {finding.fix}")
    for entry in skipped:
        ctx.line(f"not checked: {entry['check']} ({entry['reason']})")
    counts = ", ".join(f"{sum(f.status == s for f in findings)} {s}" for s in reversed(STATUSES))
    ctx.line(f"doctor: {counts}")


def doctor(ctx: Context) -> int:
    from ops.doctor_checks import CHECKS  # the checks import this module's types

    where = target(ctx)
    findings, skipped = run_checks(ctx, where, CHECKS)
    code = exit_code(findings, bool(ctx.option("strict")))
    if ctx.wants_json():
        ctx.json(
            {
                "findings": [asdict(finding) for finding in findings],
                "not_checked": skipped,
                "summary": {status: sum(f.status == status for f in findings) for status in STATUSES},
                "exit_code": code,
            }
        )
    else:
        _print(ctx, findings, skipped)
    return code


def findings_of(check: str) -> Callable[..., Finding]:
    """A `Finding` factory for one check: `found("FAIL", subject, detail, fix)`."""

    def found(status: Status, subject: str, detail: str, fix: str | None = None) -> Finding:
        return Finding(check, status, subject, detail, fix)

    return found
