"""`make consumer NAME=<name>`: the scaffold writes a consumer the project's checks accept.

Every test scaffolds into a temporary tree (copies of the files it edits, or of the code a
consumer test needs), never into the repository.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from infra.constructs.layers import consumer_requirements
from ops import scaffold
from ops.cli import main
from ops.stack import local_runtime_running
from pipeline.envelope import Envelope, utc_now
from pipeline.errors import PermanentError
from pipeline.registry import CONSUMERS, WORKER_JOURNAL_ACTIONS, RetryPolicy, by_name, discover
from tests.support.repository import changed, tracked_copy
from tests.unit.consumer_support import crm_envelope, crm_event, telegram_envelope, telegram_update

ROOT = Path(__file__).resolve().parents[3]
NAME = "scaffolded_probe"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A temporary root holding a copy of the consumer folders (all the scaffold looks at)."""
    shutil.copytree(ROOT / "functions", tmp_path / "functions", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


@pytest.fixture
def generated(tree: Path) -> Iterator[tuple[Path, ModuleType, ModuleType]]:
    """A scaffolded consumer's `app` and `logic`, imported from the temporary tree."""
    scaffold.new_consumer(NAME, root=tree)
    before = set(sys.modules)
    sys.path.insert(0, str(tree / "functions"))
    try:
        app = importlib.import_module(f"{NAME}.app")
        yield tree, app, importlib.import_module(f"{NAME}.logic")
    finally:
        sys.path.remove(str(tree / "functions"))
        for name in set(sys.modules) - before:
            del sys.modules[name]


def test_the_new_folder_is_discovered_as_a_consumer_with_the_defaults(tree: Path) -> None:
    written = scaffold.new_consumer(NAME, root=tree, description="Counts loyalty points per user.")
    consumers = discover(tree / "functions")
    consumer = by_name(NAME, consumers)
    assert consumer.filter_policy == {"source": ["telegram"]}
    assert consumer.description == "Counts loyalty points per user."
    assert (consumer.secrets, consumer.tables, consumer.handler) == (
        (),
        {"journal": WORKER_JOURNAL_ACTIONS},
        f"{NAME}.app.lambda_handler",
    )
    assert consumer.retry == RetryPolicy(max_receive_count=5, base_delay_seconds=2, max_delay_seconds=60)
    assert sorted(c.name for c in consumers) == sorted([*(c.name for c in CONSUMERS), NAME])
    assert sorted(map(str, written.created)) == [
        f"functions/{NAME}/__init__.py",
        f"functions/{NAME}/app.py",
        f"functions/{NAME}/consumer.toml",
        f"functions/{NAME}/logic.py",
        f"functions/{NAME}/requirements.txt",
        f"functions/{NAME}/tests/__init__.py",
        f"functions/{NAME}/tests/test_{NAME}.py",
    ]
    assert consumer_requirements(tree / "functions" / NAME) == ()


def test_make_consumer_changes_no_file_outside_the_new_folder(tmp_path: Path) -> None:
    """`git status` after `python -m ops new-consumer` (what `make consumer` runs): only new
    files, all inside functions/<name>/."""
    copy = tracked_copy(tmp_path / "copy")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
    subprocess.run(
        [sys.executable, "-m", "ops", "new-consumer", NAME],
        cwd=copy,
        env=env,
        check=True,
        capture_output=True,
    )
    status = changed(copy)
    assert status, "the scaffold wrote nothing"
    assert [line for line in status if not line.startswith(f"?? functions/{NAME}/")] == []


def test_the_generated_handler_is_the_thin_worker_shape_and_its_logic_runs(
    generated: tuple[Path, ModuleType, ModuleType],
) -> None:
    _, app, logic = generated
    assert callable(app.lambda_handler)
    assert app.worker.process is logic.handle
    assert logic.handle(telegram_envelope(telegram_update("private_start")).envelope) == {
        "update_type": "message",
        "chat_type": "private",
    }
    with pytest.raises(PermanentError, match="takes Telegram updates"):
        logic.handle(crm_envelope(crm_event()).envelope)
    broken = Envelope(
        event_id="telegram:default:1", source="telegram", type="message", correlation_id="c",
        received_at=utc_now(), payload={"update_id": "not a number"},
    )  # fmt: skip
    with pytest.raises(PermanentError, match="not a Telegram update"):
        logic.handle(broken)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("Loyalty", "lowercase Python identifier"),
        ("2fa", "lowercase Python identifier"),
        ("order-audit", "lowercase Python identifier"),
        ("class", "lowercase Python identifier"),
        ("", "lowercase Python identifier"),
        ("crm", "already exists"),
        ("analytics", "already exists"),
        ("json", "a module's name already"),
        ("pipeline", "a module's name already"),
        ("conftest", "a module's name already"),
    ],
)
def test_a_bad_or_taken_name_is_refused_and_nothing_is_written(tree: Path, name: str, message: str) -> None:
    before = {path: path.read_text() for path in tree.rglob("*") if path.is_file()}
    with pytest.raises(scaffold.ScaffoldError, match=message):
        scaffold.new_consumer(name, root=tree)
    assert {path: path.read_text() for path in tree.rglob("*") if path.is_file()} == before


def test_an_existing_handler_package_is_not_overwritten(tree: Path) -> None:
    (tree / "functions" / NAME).mkdir(parents=True)
    with pytest.raises(scaffold.ScaffoldError, match=f"functions/{NAME} already exist"):
        scaffold.new_consumer(NAME, root=tree)


@pytest.mark.parametrize("description", ["x" * 90])
def test_a_description_that_breaks_the_table_or_the_line_length_is_refused(
    tree: Path, description: str
) -> None:
    with pytest.raises(scaffold.ScaffoldError, match="description"):
        scaffold.new_consumer(NAME, root=tree, description=description)


def test_the_cli_writes_the_files_or_refuses_in_one_line(
    tree: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(scaffold, "ROOT", tree)
    assert main(["new-consumer", NAME]) == 0
    assert f"wrote functions/{NAME}/app.py" in capsys.readouterr().out
    assert main(["new-consumer", NAME]) == 2
    assert capsys.readouterr().err == (
        f"error: functions/{NAME} already exists: pick another name or remove it\n"
    )


def test_a_consumer_added_while_make_local_runs_says_to_restart_it(
    tree: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(scaffold, "ROOT", tree)
    with socket.socket() as moto:  # the running runtime's AWS endpoint
        moto.bind(("127.0.0.1", 0))
        moto.listen()
        (tree / ".local").mkdir()
        stack_file = tree / ".local" / "stack.json"
        stack_file.write_text(json.dumps({"aws_endpoint": f"http://127.0.0.1:{moto.getsockname()[1]}"}))

        assert main(["new-consumer", NAME]) == 0
        running = capsys.readouterr().out

    assert f"make local is running: restart it (Ctrl-C, then make local) to add {NAME}'s queue" in running
    # Once it has stopped (its file stays behind), nothing to say.
    assert not local_runtime_running(stack_file)


@pytest.mark.slow
def test_the_generated_unit_test_passes_in_a_copy_of_the_project(tmp_path: Path) -> None:
    """The scaffold's own test, run by pytest in a copy of what a consumer test needs."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in ("layers", "functions", "infra", "tests/fixtures"):
        shutil.copytree(ROOT / folder, tmp_path / folder, ignore=ignore)
    for file in (
        "pyproject.toml",
        "README.md",
        "tests/conftest.py",
        "tests/unit/conftest.py",
        "tests/unit/consumer_support.py",
        "tests/unit/consumers/conftest.py",
    ):
        (tmp_path / file).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / file, tmp_path / file)
    scaffold.new_consumer(NAME, root=tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            f"functions/{NAME}/tests/test_{NAME}.py",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "4 passed" in result.stdout
