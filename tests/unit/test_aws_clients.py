"""A process's AWS clients and resources come from one botocore session (`pipeline.aws`).

A session reads the endpoint rules, the retry rules and each service's model, and resolves the
credentials, once: a session per client read them again for each on a function's first invocation.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

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
