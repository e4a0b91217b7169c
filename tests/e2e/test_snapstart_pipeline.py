"""`make local` with SnapStart on the reply path (`snapstart=webhook,autoreply`): each of the two
hosts runs the function's runtime hooks after its init, as Lambda does between a version's
snapshot and its first invocation, and the reply still comes, once.

A runtime of its own (the webhook and autoreply), beside the session's, whose settings leave
SnapStart off as the default stack does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from infra.config import PipelineSettings
from local.lambda_host import RESTORED
from pipeline.registry import by_name
from tests.e2e.support import Ids, Pipeline, other_pipeline, user, wait_for
from tests.e2e.test_pipeline import start

SNAPSTART_SCENARIO = 93
ON = ("webhook", "autoreply")


@pytest.fixture(scope="module")
def snapstart_pipeline(pipeline: Pipeline, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    deployment = PipelineSettings.from_context(
        {**pipeline.settings.deployment.to_context(), "snapstart": ",".join(ON)}
    )
    settings = dataclasses.replace(pipeline.settings, deployment=deployment)
    with other_pipeline(tmp_path_factory, "snapstart", settings, (by_name("autoreply"),)) as other:
        yield other


def test_the_hosts_run_the_hooks_after_the_init_and_the_reply_comes_once(
    snapstart_pipeline: Pipeline, pipeline: Pipeline
) -> None:
    status = snapstart_pipeline.status()
    # Each handler's init registered one hook (`pipeline.snapstart`), which its host ran.
    assert {name: status[name]["detail"] for name in ON} == {
        name: f"{RESTORED}: 1 runtime hook ran" for name in ON
    }
    assert pipeline.status()["webhook"]["detail"] is None  # the session's stack: SnapStart off

    ids = Ids(SNAPSTART_SCENARIO)
    sent = start(ids, user(ids.number()))
    assert snapstart_pipeline.send_update(sent.update) == 200
    assert snapstart_pipeline.send_update(sent.update) == 200  # Telegram's retry: one reply still

    def replies() -> list[object]:
        return [
            call
            for call in snapstart_pipeline.fake("telegram").calls("/sendMessage")
            if call["body"].get("chat_id") == sent.reply_chat and call["fault"] is None
        ]

    wait_for(lambda: replies(), 30, "autoreply's answer")
    assert snapstart_pipeline.runtime.wait_until_drained(timeout=30)
    assert len(replies()) == 1
