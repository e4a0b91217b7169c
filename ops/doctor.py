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
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path

from infra.config import PipelineSettings, SettingsError
from infra.paths import CDK_JSON
from ops.context import Context
from ops.doctor_checks import CHECKS
from ops.errors import OpsError
from ops.findings import STATUSES, Check, Finding, NotApplicable, Target, why_not_run
from ops.stack import stage_settings


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
