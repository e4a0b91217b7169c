"""The autoreply texts are the team's `team/autoreply.json`: the stack (and `make local`) reads the
file into the function's AUTOREPLY_REPLIES, refusing a table the function would refuse, naming
the file; the function answers with it, and reads the file itself without the variable."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infra.config import PipelineSettings, SettingsError
from infra.environment import FunctionEnvironments
from pipeline.registry import by_name
from pipeline.replies import REPLIES_ENV, REPLIES_FILE_NAME
from pipeline.team import TEAM_DIR_ENV
from tests.unit.consumer_support import telegram_envelope, telegram_update
from tests.unit.consumers.conftest import DeployedConsumer, FakeHttpServer

THEIRS = {"/start": "Servus! Schreib uns.", "/help": None, "default": "Wir melden uns."}


def stack_environment() -> dict[str, str]:
    """The autoreply function's environment as the stack and the local runtime build it."""
    names = {"journal": "j", "telegram_bot_token": "s"}
    return FunctionEnvironments(PipelineSettings(), "Stack").worker(
        by_name("autoreply"), queue_url="q", dlq_url="d", tables=names, secrets=names
    )


@pytest.fixture
def team(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A team folder holding the team's own texts."""
    monkeypatch.setenv(TEAM_DIR_ENV, str(tmp_path))
    (tmp_path / REPLIES_FILE_NAME).write_text(json.dumps({"version": 1, "replies": THEIRS}))
    return tmp_path


@pytest.fixture
def bot(scripted_autoreply: DeployedConsumer) -> DeployedConsumer:
    return scripted_autoreply


def texts_sent(http_fake: FakeHttpServer) -> dict[int, str]:
    return {request.body["chat_id"]: request.body["text"] for request in http_fake.requests}


@pytest.mark.parametrize("given", ["by the stack", "read by the function"])
def test_the_consumer_answers_with_the_team_s_texts(
    team: Path,
    bot: DeployedConsumer,
    http_fake: FakeHttpServer,
    monkeypatch: pytest.MonkeyPatch,
    given: str,
) -> None:
    if given == "by the stack":
        monkeypatch.setenv(REPLIES_ENV, stack_environment()[REPLIES_ENV])
    else:
        monkeypatch.delenv(REPLIES_ENV, raising=False)

    assert (
        bot.deliver(
            telegram_envelope(telegram_update("private_start")),  # /start
            telegram_envelope(telegram_update("group_command")),  # /help: no reply of its own
        ).failed
        == []
    )

    assert sorted(texts_sent(http_fake).values()) == ["Servus! Schreib uns.", "Wir melden uns."]


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("{not json", "is not valid JSON"),
        ('{"/start": "Hi"}', 'must be {"version": 1, "replies": {...}}'),
        ('{"version": 2, "replies": {}}', "version must be 1, not 2"),
        ('{"version": 1, "replies": {"start": "no slash"}}', 'replies must map "/command"'),
    ],
)
def test_texts_the_function_would_refuse_fail_the_synth_naming_the_file(
    team: Path, text: str, why: str
) -> None:
    (team / REPLIES_FILE_NAME).write_text(text)
    with pytest.raises(SettingsError) as refused:
        stack_environment()
    [line] = str(refused.value).splitlines()
    assert line.startswith(str(team / REPLIES_FILE_NAME)) and why in line


def test_a_missing_texts_file_fails_the_synth_naming_it(team: Path) -> None:
    (team / REPLIES_FILE_NAME).unlink()
    with pytest.raises(SettingsError, match=f"{team / REPLIES_FILE_NAME}: cannot read the autoreply texts"):
        stack_environment()
