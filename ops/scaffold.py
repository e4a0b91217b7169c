"""`make consumer NAME=<name>` (`python -m ops new-consumer <name>`): a new consumer, ready to edit.

Writes what the project's own checks require of a consumer, so the new one passes them as
generated: its registry entry (appended to `CONSUMERS`: every Telegram update, the default
retries, the journal table only, no secrets), its handler package `functions/<name>/` (the thin
`app.py` every consumer has, and `logic.py` with the function to fill in), a unit test running
it through the worker runtime, and its row in the README's consumer table. A consumer that needs
a secret also needs its local value in `local/resources.py` (`LOCAL_SECRET_VALUES`); one that
needs a new table, a key schema in `infra/tables.py`: `make test` says so by name.

Nothing is written unless every file can be: a bad or taken name changes no file.
"""

from __future__ import annotations

import json
import keyword
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REGISTRY = Path("layers/shared/python/pipeline/registry.py")
README = Path("README.md")
FUNCTIONS = Path("functions")
TESTS = Path("tests/unit/consumers")

# Where the entry goes: the end of the CONSUMERS tuple.
_CONSUMERS_START = "CONSUMERS: tuple[Consumer, ...] = (\n"
_NAME = re.compile(r"[a-z][a-z0-9_]*")
# The description's registry line stays within the project's line length (110).
MAX_DESCRIPTION = 85


class ScaffoldError(Exception):
    """A refused name or a repository the scaffold cannot edit; the message says which."""


@dataclass(frozen=True)
class Scaffold:
    """The new consumer's files (path relative to the root -> text) and the two edited files."""

    name: str
    created: dict[Path, str]
    edited: dict[Path, str]


def check_name(name: str, existing: set[str]) -> None:
    if not _NAME.fullmatch(name) or keyword.iskeyword(name):
        raise ScaffoldError(
            f"consumer name {name!r} must be a lowercase Python identifier (letters, digits, '_', "
            "starting with a letter), e.g. loyalty or order_audit"
        )
    if name in existing:
        raise ScaffoldError(f"a consumer named {name!r} already exists in {REGISTRY}")


def registry_entry(name: str, description: str) -> str:
    return (
        "    Consumer(\n"
        f'        name="{name}",\n'
        f"        description={json.dumps(description, ensure_ascii=False)},\n"
        '        filter_policy={"source": ["telegram"]},\n'
        "        retry=RetryPolicy(max_receive_count=5, base_delay_seconds=2, max_delay_seconds=60),\n"
        "    ),\n"
    )


def readme_row(name: str, description: str) -> str:
    return f"| `{name}` | {description} | `source=telegram` | 5, 2 s .. 60 s |\n"


def app_source(name: str) -> str:
    return f'''"""The {name} consumer's Lambda handler (see `{name}.logic`)."""

from __future__ import annotations

from aws_lambda_powertools.utilities.typing import LambdaContext

# The worker runtime first: Powertools' batch utility builds its pydantic parser models at
# import when pydantic is already loaded (as the consumer's own code loads it), else not.
from pipeline.worker import ConsumerWorker

# isort: split
from {name}.logic import handle

worker = ConsumerWorker(handle)
logger, metrics = worker.logger, worker.metrics


@logger.inject_lambda_context
@metrics.log_metrics
def lambda_handler(event: dict, context: LambdaContext) -> dict:
    return worker.handle(event, context)
'''


def logic_source(name: str) -> str:
    return f'''"""What the {name} consumer does with each event its filter policy lets through.

The worker runs `handle` at most once per event (Powertools idempotency on the journal) and
keeps what it returns in the journal. Raise `TransientError` to have the record retried later
(backoff per the registry's `RetryPolicy`), `PermanentError` to dead-letter it now.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger
from pydantic import ValidationError

from pipeline.envelope import Envelope
from pipeline.errors import PermanentError
from pipeline.telegram import TelegramUpdate, chat_type

logger = Logger(child=True)


def handle(envelope: Envelope) -> dict[str, Any]:
    """One Telegram update (the registry entry's filter policy: `source=telegram`)."""
    if envelope.source != "telegram":
        raise PermanentError(f"{name} takes Telegram updates, got a {{envelope.source}} event")
    try:
        update = TelegramUpdate.model_validate(envelope.payload)
    except ValidationError as error:
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


def _insert_registry_entry(text: str, entry: str) -> str:
    start = text.find(_CONSUMERS_START)
    end = text.find("\n)\n", start)
    if start < 0 or end < 0:
        raise ScaffoldError(f"cannot find the CONSUMERS tuple in {REGISTRY}")
    return text[: end + 1] + entry + text[end + 1 :]


def _insert_readme_row(text: str, row: str) -> str:
    section = re.search(r"^## Consumers\n(.*?)(?=^## )", text, flags=re.S | re.M)
    if not section:
        raise ScaffoldError(f"{README} has no '## Consumers' section")
    rows = list(re.finditer(r"^\| `[^`]+` \|.*\n", section.group(1), flags=re.M))
    if not rows:
        raise ScaffoldError(f"cannot find the consumer table in the '## Consumers' section of {README}")
    at = section.start(1) + rows[-1].end()
    return text[:at] + row + text[at:]


def plan(name: str, root: Path | None = None, description: str | None = None) -> Scaffold:
    """What `new_consumer` would write, without writing; raises ScaffoldError on a refused name."""
    root = root or ROOT
    registry_text = (root / REGISTRY).read_text()
    existing = set(re.findall(r"^\s+name=[\"']([^\"']+)[\"'],", registry_text, flags=re.M))
    check_name(name, existing)
    package = root / FUNCTIONS / name
    test = TESTS / f"test_{name}.py"
    taken = [str(path.relative_to(root)) for path in (package, root / test) if path.exists()]
    if taken:
        raise ScaffoldError(f"{', '.join(taken)} already exist(s): pick another name or remove it")
    text = " ".join((description or f"TODO: what {name} does with each Telegram update.").split())
    if "|" in text or "`" in text:
        raise ScaffoldError("the description goes in a markdown table cell: no '|' or '`' in it")
    if len(json.dumps(text, ensure_ascii=False)) > MAX_DESCRIPTION + 2:
        raise ScaffoldError(f"the description is one line of at most {MAX_DESCRIPTION} characters")
    return Scaffold(
        name=name,
        created={
            FUNCTIONS / name / "__init__.py": "",
            FUNCTIONS / name / "app.py": app_source(name),
            FUNCTIONS / name / "logic.py": logic_source(name),
            test: test_source(name),
        },
        edited={
            REGISTRY: _insert_registry_entry(registry_text, registry_entry(name, text)),
            README: _insert_readme_row((root / README).read_text(), readme_row(name, text)),
        },
    )


def new_consumer(name: str, root: Path | None = None, description: str | None = None) -> Scaffold:
    """Write the new consumer's files under `root` (the repository); returns what was written."""
    root = root or ROOT
    scaffold = plan(name, root, description)
    for path, text in scaffold.created.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    for path, text in scaffold.edited.items():
        (root / path).write_text(text)
    return scaffold
