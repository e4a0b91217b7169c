"""A process's AWS clients and resources come from one botocore session (`pipeline.aws`).

A session reads the endpoint rules, the retry rules and each service's model, and resolves the
credentials, once: a session per client read them again for each on a function's first invocation.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import botocore.handlers
import botocore.session
import pytest

from pipeline import aws
from tests.unit.consumer_support import JOURNAL_TABLE


@pytest.fixture
def sessions(moto_aws: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Each botocore session made while the test runs, from fresh clients on."""
    made: list[Any] = []
    make = botocore.session.get_session

    def counted(env_vars: Any = None) -> Any:
        session = make(env_vars)
        made.append(session)
        return session

    monkeypatch.setattr(botocore.session, "get_session", counted)
    aws.reset_clients()
    yield made
    aws.reset_clients()


def test_every_client_and_the_dynamodb_resource_share_one_session(sessions: list[Any]) -> None:
    sqs, sns = aws.client("sqs"), aws.client("sns")
    once = aws.non_retrying_client("sqs")
    table = aws.resource("dynamodb").Table(JOURNAL_TABLE)

    table.put_item(Item={"id": "one-session", "count": 2})  # Python values: boto3's resource layer
    assert table.get_item(Key={"id": "one-session"})["Item"] == {"id": "one-session", "count": 2}
    assert len(sessions) == 1
    assert aws.client("sqs") is sqs and sns.meta.service_model.service_name == "sns"
    # The client that never repeats a request keeps its own retry setting on the shared session.
    assert once is not sqs
    assert once.meta.config.retries["total_max_attempts"] == 1
    assert sqs.meta.config.retries["total_max_attempts"] == aws.MAX_ATTEMPTS


def test_forgetting_the_clients_forgets_the_session(sessions: list[Any]) -> None:
    aws.client("dynamodb")
    aws.reset_clients()
    aws.client("dynamodb")

    assert len(sessions) == 2


PREPARED = {"clients": ("sqs",), "non_retrying_clients": ("sns",), "resources": ("dynamodb",)}


def test_prepare_builds_nothing_outside_an_execution_environment(
    sessions: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A test importing a handler before it points the endpoint gets no client made too early."""
    monkeypatch.delenv("AWS_LAMBDA_FUNCTION_NAME", raising=False)

    aws.prepare(**PREPARED)

    assert sessions == []
    assert aws.client.cache_info().currsize == aws.resource.cache_info().currsize == 0


def test_prepare_builds_the_named_clients_at_the_init_of_an_execution_environment_and_calls_nothing(
    sessions: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """In Lambda (and `make local`'s hosts, which set the same variable) the init builds them, at
    its full vCPU: the first invocation finds them made, and no AWS call was made to build them."""
    calls: list[str] = []
    monkeypatch.setattr(
        botocore.handlers,
        "BUILTIN_HANDLERS",
        [*botocore.handlers.BUILTIN_HANDLERS, ("before-call", lambda model, **_: calls.append(model.name))],
    )
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "pipeline-dev-store")

    aws.prepare(**PREPARED)

    assert len(sessions) == 1
    cached = (aws.client.cache_info(), aws.non_retrying_client.cache_info(), aws.resource.cache_info())
    assert [info.currsize for info in cached] == [1, 1, 1]
    assert calls == []
    sqs = aws.client("sqs")
    assert aws.client.cache_info().hits == cached[0].hits + 1 and len(sessions) == 1
    assert sqs.meta.service_model.service_name == "sqs"
