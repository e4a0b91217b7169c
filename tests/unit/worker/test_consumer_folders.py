"""A consumer is a folder: the registry discovers `functions/*/consumer.toml`.

The built-ins are declared the same way; their discovered registry is the one the code
declared before folders (tests/fixtures/registry/builtins_before_folders.json, written from
the last registry literal): same queues, filters, retries, grants and settings.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from pipeline.registry import (
    CONSUMERS,
    DECLARATION,
    WORKER_JOURNAL_ACTIONS,
    Consumer,
    DeclarationError,
    discover,
    functions_dir,
)

ROOT = Path(__file__).resolve().parents[3]
BEFORE = ROOT / "tests" / "fixtures" / "registry" / "builtins_before_folders.json"


def described(consumer: Consumer) -> dict[str, Any]:
    """Everything the stack, the local runtime and the worker derive a consumer from."""
    fields = {
        **dataclasses.asdict(consumer),
        "handler": consumer.handler,
        "visibility_timeout_seconds": consumer.visibility_timeout_seconds,
        "redrive_max_receive_count": consumer.redrive_max_receive_count,
        "least_batch_timeout_seconds": consumer.least_batch_timeout_seconds,
    }
    return json.loads(json.dumps(fields))


def test_the_built_ins_are_folders_whose_registry_is_the_one_before_folders() -> None:
    before = json.loads(BEFORE.read_text())
    assert functions_dir() == ROOT / "functions"
    assert sorted(path.parent.name for path in (ROOT / "functions").glob(f"*/{DECLARATION}")) == sorted(
        before
    )
    assert {c.name: described(c) for c in discover(ROOT / "functions")} == before
    assert {c.name: described(c) for c in CONSUMERS} == before


def write(root: Path, name: str, text: str) -> None:
    (root / name).mkdir(parents=True, exist_ok=True)
    (root / name / DECLARATION).write_text(text)


LOYALTY = 'name = "loyalty"\ndescription = "Counts points."\n\n[events]\nsource = ["telegram"]\n'


def test_a_new_folder_is_a_consumer_with_the_defaults_and_the_journal(tmp_path: Path) -> None:
    write(tmp_path, "loyalty", LOYALTY + '\n[tables]\nconversations = ["dynamodb:UpdateItem"]\n')
    (tmp_path / "webhook").mkdir()  # a function folder without a declaration is no consumer
    [loyalty] = discover(tmp_path)
    assert loyalty == Consumer(
        name="loyalty",
        description="Counts points.",
        filter_policy={"source": ["telegram"]},
        tables={"journal": WORKER_JOURNAL_ACTIONS, "conversations": ("dynamodb:UpdateItem",)},
    )


def test_the_functions_folder_can_be_pointed_at(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIPELINE_FUNCTIONS_DIR", str(tmp_path))
    assert functions_dir() == tmp_path
    monkeypatch.delenv("PIPELINE_FUNCTIONS_DIR")
    monkeypatch.setenv("LAMBDA_TASK_ROOT", "/var/task")  # in Lambda: the functions asset
    assert functions_dir() == Path("/var/task")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (LOYALTY.replace('"loyalty"', '"points"'), "must be its folder's"),
        ("colour = 1\n" + LOYALTY, r"unknown keys \['colour'\]"),
        (LOYALTY.replace('["telegram"]', '"telegram"'), r"\[events\] source must be a non-empty list"),
        ('name = "loyalty"\ndescription = "x"\n', r"needs an \[events\] table"),
        (LOYALTY + "[retry]\ntries = 3\n", r"unknown \[retry\] keys"),
        (LOYALTY + "[retry]\nmax_receive_count = 2\n", "at least 5"),
        (LOYALTY + '[tables]\nconversations = ["dynamodb:Scan"]\n', "unknown table actions"),
        ('least_timeout_seconds = "forever"\n' + LOYALTY, "least_timeout_seconds is seconds or one of"),
        (LOYALTY + "[events\n", "not TOML"),
    ],
)
def test_a_bad_declaration_is_refused_naming_its_file(tmp_path: Path, text: str, message: str) -> None:
    write(tmp_path, "loyalty", text)
    with pytest.raises(DeclarationError, match=message) as refused:
        discover(tmp_path)
    assert str(refused.value).startswith(f"loyalty/{DECLARATION}: ")
