"""`bin/ops configure KEY=VALUE ...`: deploy settings kept in cdk.json, checked by the synth's model.

A `-c` given to one `cdk deploy` is gone at the next one: a later plain deploy drops the alarm
e-mail subscription, and a forgotten `telegram_bot_id` changes every event id. Settings written
into cdk.json's "context" apply to every synth and deploy. Each value is stored as the text `-c`
would pass, so a setting means the same from cdk.json as on the command line, and the whole
context is validated with `infra.config.PipelineSettings` (did-you-mean for a misspelt key) before
anything is written: a refused value never reaches the file. A cdk.json that is no JSON object is
refused with one line and left as it is. The new file replaces the old at once (a temporary file
renamed over it), and only if nobody changed it since it was read: an edit made meanwhile (by
hand, or by another `configure`) is never overwritten.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from infra.config import (
    DEFAULT_STAGE,
    STAGES_KEY,
    PipelineSettings,
    SettingsError,
    assignment,
    is_app_key,
    settings_error_lines,
)
from ops.context import Context
from ops.errors import OpsError

CDK_JSON_NAME = "cdk.json"


def parse_assignments(words: list[str]) -> dict[str, str]:
    """`KEY=VALUE` words (the value may contain "="); a bare word is refused."""
    assignments: dict[str, str] = {}
    for word in words:
        try:
            key, value = assignment(word)
        except ValueError as error:
            raise OpsError(f"{error} (to remove a setting: --unset KEY)") from None
        assignments[key] = value
    return assignments


def app_settings(context: dict[str, Any]) -> dict[str, Any]:
    """The keys of this app in a context (not the CDK's feature flags)."""
    return {key: value for key, value in context.items() if is_app_key(key)}


def stage_block(context: dict[str, Any], stage: str) -> dict[str, Any]:
    """The settings of `stage` in a context (its "stages" block; none: empty)."""
    stages = context.get(STAGES_KEY) or {}
    if not isinstance(stages, dict) or not isinstance(stages.get(stage, {}), dict):
        raise OpsError(
            f'{CDK_JSON_NAME}: its "{STAGES_KEY}" is not an object of objects: fix it by hand first'
        )
    return dict(stages.get(stage, {}))


def validated(context: dict[str, Any]) -> None:
    """Refuse a context any stage's synth would refuse: the default stage, the pinned one and
    every stage of "stages" (a top-level change applies to each of them)."""
    stages = context.get(STAGES_KEY)
    named = list(stages) if isinstance(stages, dict) else []
    for stage in dict.fromkeys([context.get("stage") or DEFAULT_STAGE, DEFAULT_STAGE, *named]):
        try:
            PipelineSettings.from_context({**context, "stage": stage})
        except (ValidationError, SettingsError) as error:
            where = f"stage {stage}: " if named else ""
            raise OpsError(where + "; ".join(settings_error_lines(error))) from error


def configured(
    document: dict[str, Any], changes: dict[str, str], unset: list[str], stage: str | None = None
) -> dict[str, Any]:
    """cdk.json's context with the changes applied (to `stage`'s block of "stages" if given),
    validated as the synth of every stage validates it. Only this app's settings are set here: a
    key the synth would ignore (not shaped like this app's, `stack-name`) would deploy without
    the setting, so it is refused like a misspelt one."""
    for key in changes:
        if not is_app_key(key):
            close = PipelineSettings.suggestion(key)
            hint = f"did you mean `{close}`?" if close else "see the table in docs/configuration.md"
            raise OpsError(
                f"{key}: not a setting of this app; {hint} (the CDK's own keys: edit {CDK_JSON_NAME})"
            )
    context = dict(document.get("context", {}))
    if stage is not None:
        for key in changes:
            if key in ("stage", STAGES_KEY):
                raise OpsError(f"{key}: a stage's settings cannot choose the stage (drop --stage)")
    target = stage_block(context, stage) if stage is not None else context
    where = f"{CDK_JSON_NAME} (stage {stage})" if stage is not None else CDK_JSON_NAME
    for key in unset:
        if key not in target:
            raise OpsError(f"{key}: not set in {where}")
        del target[key]
    target.update(changes)
    if stage is not None:
        stages = dict(context.get(STAGES_KEY) or {})
        stages[stage] = target
        context[STAGES_KEY] = stages
    validated(context)
    return context


def read_document(path: Path) -> tuple[bytes, dict[str, Any]]:
    """cdk.json's bytes (to tell a later change) and its document; one line saying why not."""
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise OpsError(f"cannot read {path}: {error.strerror or error}") from None
    try:
        document = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise OpsError(f"{path} is not UTF-8 text (byte {error.start}): fix it by hand first") from None
    except json.JSONDecodeError as error:
        raise OpsError(
            f"{path} is not valid JSON (line {error.lineno}, column {error.colno}: {error.msg}): "
            "fix it by hand first"
        ) from None
    if not isinstance(document, dict):
        raise OpsError(f"{path} is not a JSON object: fix it by hand first")
    if not isinstance(document.get("context", {}), dict):
        raise OpsError(f'{path}: its "context" is not a JSON object: fix it by hand first')
    return raw, document


def write_atomically(path: Path, document: dict[str, Any], read: bytes) -> None:
    """Replace `path` by `document` at once (a temporary file beside it, renamed over it), unless
    it no longer holds the bytes `read` (OpsError: the other change is kept, nothing written)."""
    text = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        try:
            os.chmod(temporary, path.stat().st_mode & 0o7777)
            now = path.read_bytes()
        except OSError as error:
            raise OpsError(f"cannot read {path} again before writing: {error.strerror or error}") from None
        if now != read:
            raise OpsError(
                f"{path} changed while configure ran: nothing written; run it again on the new file"
            )
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


def configure(ctx: Context, cdk_json: Path) -> None:
    """Show (no arguments) or change the settings in cdk.json (with --stage: that stage's own)."""
    read, document = read_document(cdk_json)
    changes = parse_assignments(list(ctx.option("assignments") or []))
    unset = list(ctx.option("unset") or [])
    stage = ctx.option("stage")

    def settings_of(context: dict[str, Any]) -> dict[str, Any]:
        return app_settings(stage_block(context, stage) if stage else context)

    before = settings_of(document.get("context", {}))
    if not changes and not unset:
        if ctx.wants_json():
            ctx.json({"settings": before})
            return
        for key, value in sorted(before.items()):
            ctx.line(f"{key}={value}")
        if not before:
            ctx.line(f"no settings in {CDK_JSON_NAME}: every setting has its default")
        return
    context = configured(document, changes, unset, stage)
    after = settings_of(context)
    changed = sorted(key for key in before.keys() | after.keys() if before.get(key) != after.get(key))
    if not changed:
        ctx.line(f"nothing to change in {CDK_JSON_NAME}")
        return
    summary = ", ".join(f"{key}={after[key]}" if key in after else f"unset {key}" for key in changed)
    if not ctx.confirm(f"write {summary} into {cdk_json}" + (f" for stage {stage}" if stage else "")):
        return
    write_atomically(cdk_json, {**document, "context": context}, read)
    for key in changed:
        ctx.line(f"{key}: {before.get(key, '(default)')} -> {after.get(key, '(default)')}")
    ctx.line("every synth and deploy now uses them (cdk deploy needs no -c for these)")
