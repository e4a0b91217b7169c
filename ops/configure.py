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

from infra.config import PipelineSettings, SettingsError, assignment, is_app_key, settings_error_lines
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


def configured(document: dict[str, Any], changes: dict[str, str], unset: list[str]) -> dict[str, Any]:
    """cdk.json's context with the changes applied, validated as the synth validates it. Only
    this app's settings are set here: a key the synth would ignore (not shaped like this app's,
    `stack-name`) would deploy without the setting, so it is refused like a misspelt one."""
    for key in changes:
        if not is_app_key(key):
            close = PipelineSettings.suggestion(key)
            hint = f"did you mean `{close}`?" if close else "see README's Configuration table"
            raise OpsError(
                f"{key}: not a setting of this app; {hint} (the CDK's own keys: edit {CDK_JSON_NAME})"
            )
    context = dict(document.get("context", {}))
    for key in unset:
        if key not in context:
            raise OpsError(f"{key}: not set in {CDK_JSON_NAME}")
        del context[key]
    context.update(changes)
    try:
        PipelineSettings.from_context(context)
    except (ValidationError, SettingsError) as error:
        raise OpsError("; ".join(settings_error_lines(error))) from error
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
    """Show (no arguments) or change the settings in cdk.json."""
    read, document = read_document(cdk_json)
    changes = parse_assignments(list(ctx.option("assignments") or []))
    unset = list(ctx.option("unset") or [])
    before = app_settings(document.get("context", {}))
    if not changes and not unset:
        if ctx.wants_json():
            ctx.json({"settings": before})
            return
        for key, value in sorted(before.items()):
            ctx.line(f"{key}={value}")
        if not before:
            ctx.line(f"no settings in {CDK_JSON_NAME}: every setting has its default")
        return
    context = configured(document, changes, unset)
    after = app_settings(context)
    changed = sorted(key for key in before.keys() | after.keys() if before.get(key) != after.get(key))
    if not changed:
        ctx.line(f"nothing to change in {CDK_JSON_NAME}")
        return
    summary = ", ".join(f"{key}={after[key]}" if key in after else f"unset {key}" for key in changed)
    if not ctx.confirm(f"write {summary} into {cdk_json}"):
        return
    write_atomically(cdk_json, {**document, "context": context}, read)
    for key in changed:
        ctx.line(f"{key}: {before.get(key, '(default)')} -> {after.get(key, '(default)')}")
    ctx.line("every synth and deploy now uses them (cdk deploy needs no -c for these)")
