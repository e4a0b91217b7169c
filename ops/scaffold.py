"""`make consumer NAME=<name>` (`python -m ops new-consumer <name>`): a new consumer, ready to edit.

A consumer is a folder, and the scaffold writes into that folder only: `functions/<name>/` with
its declaration `consumer.toml` (every Telegram update, the default retries, the journal table
only, no secrets), its handler package (the thin `app.py` every consumer has, and `logic.py` with
the function to fill in), an empty `requirements.txt` for its own pins (bundled into its own
layer), and `tests/` with a unit test running it through the worker runtime. No file outside the
folder changes: the registry discovers it (`pipeline.registry.discover`). A consumer that needs a
secret also needs its local value in `local/resources.py` (`LOCAL_SECRET_VALUES`); one that needs
a new table, a key schema in `infra/tables.py`: `make test` says so by name.

Nothing is written unless every file can be: a bad or taken name changes no file.
"""

from __future__ import annotations

import importlib.util
import json
import keyword
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from pipeline.registry import DECLARATION, REQUIREMENTS

ROOT = Path(__file__).resolve().parents[1]
FUNCTIONS = Path("functions")

_NAME = re.compile(r"[a-z][a-z0-9_]*")
# The description stays one line of the declaration within the project's line length (110).
MAX_DESCRIPTION = 85


class ScaffoldError(Exception):
    """A refused name or a repository the scaffold cannot write to; the message says which."""


@dataclass(frozen=True)
class Scaffold:
    """The new consumer's files (path relative to the root -> text), all inside its folder."""

    name: str
    created: dict[Path, str]


def check_name(name: str, root: Path) -> None:
    if not _NAME.fullmatch(name) or keyword.iskeyword(name):
        raise ScaffoldError(
            f"consumer name {name!r} must be a lowercase Python identifier (letters, digits, '_', "
            "starting with a letter), e.g. loyalty or order_audit"
        )
    folder = FUNCTIONS / name
    if (root / folder).exists():
        raise ScaffoldError(f"{folder} already exists: pick another name or remove it")
    # Its package is imported by its name (handler "<name>.app.lambda_handler"): a name the
    # standard library or an installed package has would hide one or the other.
    if name in sys.stdlib_module_names or name == "conftest" or importlib.util.find_spec(name) is not None:
        raise ScaffoldError(f"consumer name {name!r} is a module's name already: pick another name")


def declaration_source(name: str, description: str) -> str:
    return f"""# The {name} consumer's declaration: the registry (pipeline.registry) reads every
# functions/*/consumer.toml; docs/consumers.md "Adding a consumer" lists every key.
name = "{name}"
description = {json.dumps(description, ensure_ascii=False)}

[events]
# The SNS filter policy on the webhook's attributes: source, type, chat_type, command, status.
source = ["telegram"]

[retry]
max_receive_count = 5
base_delay_seconds = 2
max_delay_seconds = 60
"""


def requirements_source(name: str) -> str:
    return f"""# The {name} consumer's own dependencies, pinned (`package==version`, any number of them):
# bundled into its own layer for python3.13/arm64 at synth, installed by `make install` for
# `make local` and the tests.
"""


def app_source(name: str) -> str:
    return f'''"""The {name} consumer's Lambda handler (see `{name}.logic`)."""

from __future__ import annotations

from pipeline import coldstart

coldstart.begin()  # the collector paused while the init imports, until `coldstart.end()` below

from aws_lambda_powertools.utilities.typing import LambdaContext

# The worker runtime first: Powertools' batch utility builds its pydantic parser models at
# import when pydantic is already loaded (as a consumer's own pydantic models load it), else not.
from pipeline.worker import ConsumerWorker

# isort: split
from {name}.logic import handle

worker = ConsumerWorker(handle)
logger, metrics = worker.logger, worker.metrics


@logger.inject_lambda_context
@metrics.log_metrics
def lambda_handler(event: dict, context: LambdaContext) -> dict:
    return worker.handle(event, context)


coldstart.end()  # the init is done (see `pipeline.coldstart`)
'''


def logic_source(name: str) -> str:
    return f'''"""What the {name} consumer does with each event its filter policy lets through.

The worker runs `handle` at most once per event (Powertools idempotency on the journal) and
keeps what it returns in the journal. Raise `TransientError` to have the record retried later
(backoff per its declaration's [retry]), `PermanentError` to dead-letter it now.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger
from pipeline.envelope import Envelope
from pipeline.errors import PermanentError
from pipeline.telegram import TelegramUpdate, chat_type
from pipeline.validation import Invalid

logger = Logger(child=True)


def handle(envelope: Envelope) -> dict[str, Any]:
    """One Telegram update (its declaration's [events]: `source=telegram`)."""
    if envelope.source != "telegram":
        raise PermanentError(f"{name} takes Telegram updates, got a {{envelope.source}} event")
    try:
        update = TelegramUpdate.parse(envelope.payload)
    except Invalid as error:
        raise PermanentError(f"payload is not a Telegram update ({{error.error_count()}} errors)") from error
    result = {{"update_type": envelope.type, "chat_type": chat_type(update) or "none"}}
    logger.info("{name}", extra=result)
    return result
'''


def test_source(name: str) -> str:
    return f'''"""The {name} consumer's real handler, run through the worker runtime on moto queues."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.unit.consumer_support import (
    crm_envelope,
    crm_event,
    journal_items,
    telegram_envelope,
    telegram_update,
)
from tests.unit.consumers.conftest import DeployedConsumer

NAME = "{name}"


def completed_records() -> list[dict[str, object]]:
    return [
        item
        for item in journal_items()
        if item["id"]["S"].startswith(f"{{NAME}}#") and item["status"]["S"] == "COMPLETED"
    ]


@pytest.mark.parametrize("fixture", ["private_start", "group_message", "callback_query"])
def test_a_telegram_update_is_handled_once_and_journaled(
    run_consumer: Callable[[str], DeployedConsumer], fixture: str
) -> None:
    consumer = run_consumer(NAME)
    published = telegram_envelope(telegram_update(fixture))
    assert consumer.deliver(published).failed == []
    assert len(completed_records()) == 1
    assert consumer.deliver(published).failed == []  # a redelivery: same record, not run again
    assert len(completed_records()) == 1
    assert consumer.dead_letter_reasons() == []


def test_an_event_of_another_source_is_dead_lettered(run_consumer: Callable[[str], DeployedConsumer]) -> None:
    consumer = run_consumer(NAME)
    assert consumer.deliver(crm_envelope(crm_event())).failed == []
    [reason] = consumer.dead_letter_reasons()
    assert "Telegram updates" in reason
'''


def plan(name: str, root: Path | None = None, description: str | None = None) -> Scaffold:
    """What `new_consumer` would write, without writing; raises ScaffoldError on a refused name."""
    root = root or ROOT
    check_name(name, root)
    text = " ".join((description or f"TODO: what {name} does with each Telegram update.").split())
    if len(json.dumps(text, ensure_ascii=False)) > MAX_DESCRIPTION + 2:
        raise ScaffoldError(f"the description is one line of at most {MAX_DESCRIPTION} characters")
    folder = FUNCTIONS / name
    return Scaffold(
        name=name,
        created={
            folder / DECLARATION: declaration_source(name, text),
            folder / REQUIREMENTS: requirements_source(name),
            folder / "__init__.py": "",
            folder / "app.py": app_source(name),
            folder / "logic.py": logic_source(name),
            folder / "tests" / "__init__.py": "",
            folder / "tests" / f"test_{name}.py": test_source(name),
        },
    )


def new_consumer(name: str, root: Path | None = None, description: str | None = None) -> Scaffold:
    """Write the new consumer's folder under `root` (the repository); returns what was written."""
    root = root or ROOT
    scaffold = plan(name, root, description)
    for path, text in scaffold.created.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    return scaffold
