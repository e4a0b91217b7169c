"""Issue 22: `make local ARGS="--bot mybot.main:build"` (`python -m local --bot ...`) runs another
python-telegram-bot bot without touching cdk.json, refused as the synth refuses a reference
whose module is not under functions/."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from local.__main__ import main, parse_args
from local.settings import PROJECT_ROOT, LocalSettings


def test_bot_names_the_application_and_cannot_be_combined_with_no_bot() -> None:
    assert parse_args(["--bot", "mybot.main:build"]).bot == "mybot.main:build"
    assert parse_args([]).bot is None
    with pytest.raises(SystemExit):
        parse_args(["--bot", "mybot.main:build", "--no-bot"])


def test_the_bot_replaces_cdk_json_s_and_turns_the_bot_consumer_on() -> None:
    settings = LocalSettings(bot_consumer=False).with_bot("bot.examples.lead_bot:build")

    assert settings.deployment.bot_application == "bot.examples.lead_bot:build"
    assert settings.bot_consumer is True


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            "nosuchbot.main:build",
            "no module 'nosuchbot.main' under functions/ (no functions/nosuchbot/main.py ",
        ),
        ("mybot/main.py", "bot_application must be 'package.module:callable'"),
    ],
)
def test_a_bot_that_is_not_there_is_refused_before_anything_starts(
    value: str, message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        LocalSettings().with_bot(value)

    assert main(["--bot", value, "--port", "0", "--state-dir", str(tmp_path)]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"--bot {value}: ") and message in error
    assert not (tmp_path / "logs").exists()  # nothing was started


def test_make_local_hands_args_to_python_m_local() -> None:
    makefile = (PROJECT_ROOT / "Makefile").read_text(encoding="utf-8")
    assert re.search(
        r"^local: .*\n\t\$\(PY\) -m local (\$\(STAGE_ARG\) )?\$\(ARGS\)$", makefile, re.MULTILINE
    )
