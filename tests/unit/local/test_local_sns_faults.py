"""Failures injected at the SNS proxy, as the webhook's SNS client sees them.

local/README.md tells a rehearsal how many `fail_next` it takes for the webhook to see SNS fail:
as many as the client's attempts, `pipeline.aws.MAX_ATTEMPTS`. These tests hold the text, the
setting and the client's behaviour together.
"""

from __future__ import annotations

import re
import types
from collections.abc import Iterator
from pathlib import Path

import botocore.endpoint
import pytest
from botocore.exceptions import ClientError

from local.fakes.sns import SnsFaultProxy
from local.resources import EVENTS_TOPIC_ATTRIBUTES
from pipeline import aws
from tests.support.moto_server import serialized_moto_server

LOCAL_README = (Path(__file__).resolve().parents[3] / "local" / "README.md").read_text()


@pytest.fixture
def proxy(monkeypatch: pytest.MonkeyPatch) -> Iterator[SnsFaultProxy]:
    """The proxy in front of moto, and `aws.client("sns")` pointed at it as the local runtime
    points the webhook's (`AWS_ENDPOINT_URL_SNS`); botocore's backoff between attempts skipped."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "t",
        "AWS_SECRET_ACCESS_KEY": "t",
        "AWS_DEFAULT_REGION": "eu-central-1",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(botocore.endpoint, "time", types.SimpleNamespace(sleep=lambda seconds: None))
    with serialized_moto_server() as moto_url:
        proxy = SnsFaultProxy(upstream=lambda: moto_url).start()
        monkeypatch.setenv("AWS_ENDPOINT_URL_SNS", proxy.url)
        aws.reset_clients()
        try:
            yield proxy
        finally:
            aws.reset_clients()
            proxy.stop()


def publish(topic_arn: str) -> None:
    aws.client("sns").publish(TopicArn=topic_arn, Message="m", MessageGroupId="g", MessageDeduplicationId="d")


def test_the_webhooks_sns_client_outlasts_one_failure_fewer_than_its_attempts(proxy: SnsFaultProxy) -> None:
    topic_arn = aws.client("sns").create_topic(Name="events.fifo", Attributes=EVENTS_TOPIC_ATTRIBUTES)[
        "TopicArn"
    ]
    proxy.add_faults({"fail_next": aws.MAX_ATTEMPTS - 1, "status": 500, "match": "Publish"})

    publish(topic_arn)

    publishes = [call for call in proxy.calls() if call["body"].get("Action") == "Publish"]
    assert [call["fault"] is not None for call in publishes] == [True] * (aws.MAX_ATTEMPTS - 1) + [False]


def test_as_many_failures_as_its_attempts_reach_the_webhook(proxy: SnsFaultProxy) -> None:
    topic_arn = aws.client("sns").create_topic(Name="events.fifo", Attributes=EVENTS_TOPIC_ATTRIBUTES)[
        "TopicArn"
    ]
    proxy.add_faults({"fail_next": aws.MAX_ATTEMPTS, "status": 500, "match": "Publish"})

    with pytest.raises(ClientError):
        publish(topic_arn)

    assert sum(call["body"].get("Action") == "Publish" for call in proxy.calls()) == aws.MAX_ATTEMPTS


def test_the_local_readme_states_the_attempts_the_client_makes() -> None:
    """It said 3 while the client made 4 (botocore's `max_attempts: 3` counts retries only)."""
    stated = re.search(r"webhook's SNS client \((\d+) attempts in all", LOCAL_README)
    needed = re.search(r"`fail_next` needs at least (\d+)", LOCAL_README)
    assert stated and needed, "local/README.md no longer says how many attempts the SNS client makes"
    assert int(stated[1]) == int(needed[1]) == aws.MAX_ATTEMPTS
