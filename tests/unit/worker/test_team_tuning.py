"""A team tunes any consumer in its own `team/consumers.toml`, not in the consumer's declaration
(the pipeline's): the registry applies it over the declarations, checked as a declaration is,
and a function without the file (in Lambda) reads the same tuning from PIPELINE_CONSUMER_TUNING."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.pacing import SEND_RATE_ENV, paced_environment
from pipeline.registry import (
    TUNING_ENV,
    TUNING_FILE_NAME,
    DeclarationError,
    RetryPolicy,
    by_name,
    discover,
    read_tuning,
    tuned,
)
from pipeline.team import TEAM_DIR_ENV

DECLARED = discover()
TUNING = """
[autoreply]
max_concurrency = 10
timeout_seconds = 40
memory_mb = 512

[autoreply.retry]
max_receive_count = 8

[store]
batch_size = 50
batching_window_seconds = 5
"""


@pytest.fixture
def team(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(TEAM_DIR_ENV, str(tmp_path))
    monkeypatch.delenv(TUNING_ENV, raising=False)
    return tmp_path


def test_the_team_s_tuning_is_applied_over_the_declarations_and_nothing_else_changes(team: Path) -> None:
    (team / TUNING_FILE_NAME).write_text(TUNING)
    consumers = tuned(DECLARED, read_tuning(), "consumers.toml")

    autoreply, declared = by_name("autoreply", consumers), by_name("autoreply", DECLARED)
    assert (autoreply.max_concurrency, autoreply.timeout_seconds, autoreply.memory_mb) == (10, 40, 512)
    # Only the retry key given changes; the others stay the declaration's.
    assert autoreply.retry == RetryPolicy(
        max_receive_count=8,
        base_delay_seconds=declared.retry.base_delay_seconds,
        max_delay_seconds=declared.retry.max_delay_seconds,
    )
    # Derived from the concurrency: each environment's share of Telegram's rate follows it.
    assert autoreply.environment[SEND_RATE_ENV] == paced_environment(10)[SEND_RATE_ENV]
    assert autoreply.environment[SEND_RATE_ENV] != declared.environment[SEND_RATE_ENV]
    store = by_name("store", consumers)
    assert (store.batch_size, store.batching_window_seconds) == (50, 5)
    untouched = [c.name for c in consumers if c.name not in ("autoreply", "store")]
    assert [by_name(name, consumers) for name in untouched] == [by_name(name, DECLARED) for name in untouched]


def test_a_function_without_the_file_reads_the_same_tuning_from_its_environment(
    team: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (team / TUNING_FILE_NAME).write_text(TUNING)
    from_file = read_tuning()
    (team / TUNING_FILE_NAME).unlink()
    assert read_tuning() == {}  # no file, no variable: the declarations as they are
    monkeypatch.setenv(TUNING_ENV, json.dumps(from_file))
    assert read_tuning() == from_file
    assert tuned(DECLARED, read_tuning(), TUNING_ENV) == tuned(DECLARED, from_file, "consumers.toml")


def test_the_shipped_file_is_an_example_that_tunes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TEAM_DIR_ENV, raising=False)
    monkeypatch.delenv(TUNING_ENV, raising=False)
    assert read_tuning() == {}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[autorepli]\nmax_concurrency = 10\n", r"\['autorepli'\] name no consumer; known: \[.*'autoreply'"),
        ("[autoreply]\nordered = true\n", r"\[autoreply\]: \['ordered'\] cannot be tuned here; tunable: "),
        ("[autoreply]\nmax_concurrency = 1\n", r"autoreply: max_concurrency must be 2\.\.1000"),
        ('[autoreply]\nmax_concurrency = "ten"\n', r"\[.max_concurrency.\] must be whole numbers"),
        ("[autoreply.retry]\nmax_receive_count = 2\n", r"\[autoreply\]: \[retry\] max_receive_count must be"),
        ("[autoreply.retry]\ntries = 3\n", r"\[autoreply\]: unknown \[retry\] keys \['tries'\]"),
        # A tuning the consumer's own rules refuse: its batch would not leave the last record its call.
        ("[autoreply]\nbatch_size = 10\ntimeout_seconds = 12\n", r"leaves no call the time"),
        ("autoreply = 3\n", r"\[autoreply\] must be a table"),
        ("[autoreply\n", "not TOML"),
    ],
)
def test_a_tuning_the_consumer_would_refuse_fails_naming_the_file_and_the_consumer(
    team: Path, text: str, message: str
) -> None:
    path = team / TUNING_FILE_NAME
    path.write_text(text)
    with pytest.raises(DeclarationError, match=message) as refused:
        tuned(DECLARED, read_tuning(), str(path))
    assert str(refused.value).startswith(f"{path}")
