"""Builds the functions' asset's `pipeline.dataclass_code.CODE_FILE`: the compiled `@dataclass`
methods of every function's init and first invocation (why: `pipeline.dataclass_code`).

A Python of the runtime's version imports every function's handler module, and what a first
invocation imports, from the staged functions' asset and the shared layer's source, with
`dataclasses`' `exec` recording each source text it is given; it compiles each text as `exec`
would (`pipeline.dataclass_code.compiled`) and writes the file. With no such Python, or one
without the functions' dependencies (Powertools, pydantic, python-telegram-bot), the asset ships
without it and the synth prints a note: every dataclass is then compiled at its cold start, as
before. `python -m bench imports` measures the built asset and fails if a cold path compiles any
dataclass.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from infra.bytecode import source_files, source_key
from infra.environment import CRM_SWEEP, RECONCILER, SMS_EVENTS, WEBHOOK
from infra.paths import ASSET_EXCLUDES, PHONENUMBERS_LAYER_DIR, PROJECT_ROOT, SHARED_LAYER_DIR
from pipeline import dataclass_code
from pipeline.registry import CONSUMERS, FUNCTIONS_DIR_ENV

# A change to how the file is built must change the asset's key (`derived_key`).
BUILD_FORMAT = 1
# What a first invocation imports besides its init: `pipeline.worker`'s idempotency, and
# `pipeline.secrets` (the bot's engine is its init's: `pipeline.telegram_bot.runner`).
FIRST_USE_MODULES = ("aws_lambda_powertools.utilities.idempotency", "pipeline.secrets")
# The pins of the third-party code the imports load, outside the functions' folder (a consumer's
# own requirements.txt is in it, so in the asset's key already).
KEYED_FILES = (PROJECT_ROOT / "requirements.txt", PHONENUMBERS_LAYER_DIR / "requirements.txt")
# Run by the runtime's Python: argv[1:] are the modules; the file's bytes on stdout.
_RECORDER = """\
import builtins, dataclasses, importlib, sys
from pipeline import dataclass_code
texts = []
def recording(source, globals=None, locals=None):
    if isinstance(source, str):
        texts.append(source)
    builtins.exec(source, globals, locals)
dataclasses.exec = recording
for module in sys.argv[1:]:
    importlib.import_module(module)
codes = {text: dataclass_code.compiled(text) for text in texts}
sys.stdout.buffer.write(dataclass_code.payload(codes))
"""


def recorded_modules() -> tuple[str, ...]:
    """Every function's handler module, then what first invocations import."""
    handlers = [spec.handler for spec in (WEBHOOK, RECONCILER, SMS_EVENTS, CRM_SWEEP)]
    handlers += [consumer.handler for consumer in CONSUMERS]
    modules = [handler.rsplit(".", 1)[0] for handler in handlers]
    return (*dict.fromkeys(modules), *FIRST_USE_MODULES)


def derived_key() -> str:
    """What the file depends on beyond the functions' folder: the shared layer's sources, the
    pins, the modules recorded (a stale file is harmless, only slower: the lookup is by text)."""
    digest = hashlib.sha256(f"{BUILD_FORMAT}\n{dataclass_code.FORMAT_VERSION}\n".encode())
    layer_files = source_files(SHARED_LAYER_DIR, ASSET_EXCLUDES)  # as the shared layer's own key reads them
    digest.update(source_key(SHARED_LAYER_DIR, layer_files, compiled_by="dataclass-code").encode())
    for path in KEYED_FILES:
        digest.update(path.read_bytes() if path.is_file() else b"-")
    digest.update("\n".join(recorded_modules()).encode())
    return digest.hexdigest()[:32]


def recorded(python: str, functions_dir: Path, modules: Sequence[str]) -> bytes | None:
    """The file's content, recorded by `python` importing `modules` from `functions_dir` and the
    shared layer; None, with a note, if that Python cannot import them."""
    env = {
        "PATH": os.environ.get("PATH", os.defpath),
        "PYTHONPATH": os.pathsep.join(map(str, (functions_dir, SHARED_LAYER_DIR / "python"))),
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        FUNCTIONS_DIR_ENV: str(functions_dir),  # its declarations, as Lambda reads them
        # What an init reads; no call is made (nothing in an init calls AWS).
        "AWS_DEFAULT_REGION": "eu-central-1",
        "AWS_REGION": "eu-central-1",
        "POWERTOOLS_SERVICE_NAME": "build",
        "POWERTOOLS_TRACE_DISABLED": "1",
    }
    done = subprocess.run(  # noqa: S603
        [python, "-c", _RECORDER, *modules], env=env, cwd=functions_dir, capture_output=True, check=False
    )
    if done.returncode != 0:
        error = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
        print(
            f"note: {python} could not import the functions to precompile their dataclasses"
            f" ({error[0]}): the functions' asset ships without {dataclass_code.CODE_FILE}",
            file=sys.stderr,
        )
        return None
    return done.stdout


class PrecompiledDataclasses:
    """The functions' asset's derived file (`infra.bytecode.Derived`)."""

    def key(self) -> str:
        return derived_key()

    def files(self, staged: Path, python: str) -> dict[str, bytes]:
        """The file for the functions' asset staged at `staged` (none if it cannot be built)."""
        content = recorded(python, staged, recorded_modules())
        return {dataclass_code.CODE_FILE: content} if content is not None else {}
