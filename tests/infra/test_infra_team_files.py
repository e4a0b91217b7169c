"""The synth reads the team's files (`team/`, or PIPELINE_TEAM_DIR): the autoreply texts and the
tuning of a consumer reach the template (its function, its queue, its event source), every
function carries the tuning it reads the registry with, and a tuning the consumer would refuse
fails the synth in one line naming the file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from synthesized import BASE_CONTEXT, run_app

from pipeline.registry import TUNING_ENV, TUNING_FILE_NAME
from pipeline.replies import REPLIES_ENV, REPLIES_FILE_NAME
from pipeline.sms.rules import RULES_FILE_NAME
from pipeline.team import TEAM_DIR_ENV

PROJECT_TEAM = Path(__file__).resolve().parents[2] / "team"
TUNING = """
[autoreply]
max_concurrency = 10
timeout_seconds = 40
memory_mb = 512

[autoreply.retry]
max_receive_count = 8
"""
TEXTS = {"/start": "Servus!", "default": "Wir melden uns."}


def team_folder(folder: Path, tuning: str) -> Path:
    folder.mkdir()
    (folder / RULES_FILE_NAME).write_text((PROJECT_TEAM / RULES_FILE_NAME).read_text())
    (folder / REPLIES_FILE_NAME).write_text(json.dumps({"version": 1, "replies": TEXTS}))
    (folder / TUNING_FILE_NAME).write_text(tuning)
    return folder


def of_type(resources: dict[str, Any], kind: str) -> dict[str, Any]:
    return {rid: r["Properties"] for rid, r in resources.items() if r["Type"] == kind}


@pytest.mark.slow
def test_the_team_s_texts_and_tuning_are_in_the_template(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TEAM_DIR_ENV, str(team_folder(tmp_path / "team", TUNING)))
    monkeypatch.delenv(TUNING_ENV, raising=False)
    (tmp_path / "out").mkdir()
    result = run_app(tmp_path / "out", BASE_CONTEXT)
    assert result.returncode == 0, result.stderr[-3000:]
    [template] = (tmp_path / "out").glob("*.template.json")
    resources = json.loads(template.read_text())["Resources"]

    functions = of_type(resources, "AWS::Lambda::Function")
    variables = {rid: f["Environment"]["Variables"] for rid, f in functions.items() if "Environment" in f}
    [(autoreply_id, autoreply)] = [
        (rid, functions[rid]) for rid, v in variables.items() if v["POWERTOOLS_SERVICE_NAME"] == "autoreply"
    ]
    assert (autoreply["Timeout"], autoreply["MemorySize"]) == (40, 512)
    assert json.loads(variables[autoreply_id][REPLIES_ENV]) == TEXTS
    # Every function reads the registry with the tuning the stack was built with.
    tuning = {"autoreply": {"max_concurrency": 10, "timeout_seconds": 40, "memory_mb": 512,
                            "retry": {"max_receive_count": 8}}}  # fmt: skip
    assert {rid: json.loads(v.get(TUNING_ENV, "null")) for rid, v in variables.items()} == dict.fromkeys(
        variables, tuning
    )

    [mapping] = [
        m for m in of_type(resources, "AWS::Lambda::EventSourceMapping").values()
        if m["FunctionName"] == {"Ref": autoreply_id}
    ]  # fmt: skip
    assert mapping["ScalingConfig"]["MaximumConcurrency"] == 10
    queue = of_type(resources, "AWS::SQS::Queue")[mapping["EventSourceArn"]["Fn::GetAtt"][0]]
    assert queue["VisibilityTimeout"] == 6 * 40
    assert queue["RedrivePolicy"]["maxReceiveCount"] == 8


def test_a_tuning_the_consumer_refuses_fails_the_synth_naming_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    team = team_folder(tmp_path / "team", "[autoreply]\nmax_concurrency = 1\n")
    monkeypatch.setenv(TEAM_DIR_ENV, str(team))
    monkeypatch.delenv(TUNING_ENV, raising=False)
    result = run_app(tmp_path, BASE_CONTEXT)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        "invalid consumer declarations or tuning:",
        f"{team / TUNING_FILE_NAME}: [autoreply]: autoreply: max_concurrency must be 2..1000"
        " (SQS event source limit)",
    ]
