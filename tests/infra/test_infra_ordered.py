"""The events topic is FIFO; an ordered consumer gets a FIFO queue and DLQ, the others keep theirs.

The ordered consumer is the registry's own `bot` (ordered=True), in the full synth (which sets
`bot_application`); every other consumer must keep its standard queue.
"""

from __future__ import annotations

import pytest
from synthesized import Synthesized
from template_queries import function_env, of_type, props, ref_name, role_permissions

from infra.constructs.consumers import ConsumerPipeline
from pipeline.registry import CONSUMERS, by_name
from pipeline.worker import ALARM_TOPIC_ENV

ORDERED = by_name("bot")


def test_the_bot_is_the_registrys_only_ordered_consumer() -> None:
    assert [c.name for c in CONSUMERS if c.ordered] == [ORDERED.name]


@pytest.fixture(scope="module")
def synth(full_synth: Synthesized) -> Synthesized:
    assert ORDERED.name in full_synth.stack.pipelines
    return full_synth


def _props(synth: Synthesized, construct: object) -> dict:
    return props(synth.resources, synth.logical_id(construct))


def test_the_events_topic_is_fifo_with_throughput_per_message_group(synth: Synthesized) -> None:
    topic = _props(synth, synth.stack.events.topic)
    assert topic["FifoTopic"] is True
    assert topic["ContentBasedDeduplication"] is False
    assert topic["FifoThroughputScope"] == "MessageGroup"
    assert topic["TopicName"] == f"{synth.stack.stack_name}-events.fifo"
    assert "KmsMasterKeyId" in topic


def test_only_the_ordered_consumer_gets_a_high_throughput_fifo_queue_and_dlq(synth: Synthesized) -> None:
    pipelines: dict[str, ConsumerPipeline] = synth.stack.pipelines
    assert ORDERED.name in pipelines
    for name, pipeline in pipelines.items():
        queue, dlq = _props(synth, pipeline.queue), _props(synth, pipeline.dlq)
        if name == ORDERED.name:
            for fifo in (queue, dlq):
                assert fifo["FifoQueue"] is True
                assert fifo["DeduplicationScope"] == "messageGroup"
                assert fifo["FifoThroughputLimit"] == "perMessageGroupId"
                assert fifo["ContentBasedDeduplication"] is False
            # Receives include the times a record is skipped behind its group's failure.
            assert (
                queue["RedrivePolicy"]["maxReceiveCount"]
                == ORDERED.retry.max_receive_count * ORDERED.batch_size
            )
        else:
            assert "FifoQueue" not in queue and "FifoQueue" not in dlq
            assert queue["RedrivePolicy"]["maxReceiveCount"] == pipeline.consumer.retry.max_receive_count
        assert ref_name(queue["RedrivePolicy"]["deadLetterTargetArn"]) == synth.logical_id(pipeline.dlq)
        # A FIFO topic's subscriptions dead-letter into FIFO queues, whatever the queue's kind.
        assert _props(synth, pipeline.delivery_dlq)["FifoQueue"] is True


def test_every_queue_is_subscribed_raw_to_the_fifo_topic(synth: Synthesized) -> None:
    topic_id = synth.logical_id(synth.stack.events.topic)
    subscriptions = [
        p["Properties"]
        for p in of_type(synth.resources, "AWS::SNS::Subscription").values()
        if ref_name(p["Properties"]["TopicArn"]) == topic_id
    ]
    assert len(subscriptions) == len(synth.stack.pipelines)
    assert all(s["RawMessageDelivery"] is True for s in subscriptions)


def test_the_ordered_event_source_has_no_batching_window_and_reports_item_failures(
    synth: Synthesized,
) -> None:
    pipeline = synth.stack.pipelines[ORDERED.name]
    [mapping] = [
        m["Properties"]
        for m in of_type(synth.resources, "AWS::Lambda::EventSourceMapping").values()
        if ref_name(m["Properties"]["EventSourceArn"]) == synth.logical_id(pipeline.queue)
    ]
    assert mapping["BatchSize"] == ORDERED.batch_size <= 10
    assert "MaximumBatchingWindowInSeconds" not in mapping
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert mapping["ScalingConfig"] == {"MaximumConcurrency": ORDERED.max_concurrency}


def test_the_ordered_worker_may_do_what_its_fifo_path_calls(synth: Synthesized) -> None:
    pipeline = synth.stack.pipelines[ORDERED.name]
    role = synth.logical_id(pipeline.worker.function.role)
    permissions = role_permissions(synth.resources, role)
    queue, dlq = synth.logical_id(pipeline.queue), synth.logical_id(pipeline.dlq)
    # Release held records (ChangeMessageVisibilityBatch is authorized as ChangeMessageVisibility),
    # send to the FIFO DLQ, count attempts in the journal.
    assert any(
        "sqs:ChangeMessageVisibility" in actions and queue in arn for arn, actions in permissions.items()
    )
    assert any("sqs:SendMessage" in actions and dlq in arn for arn, actions in permissions.items())
    assert any("dynamodb:UpdateItem" in actions for actions in permissions.values())


def test_the_ordered_dlq_alarm_says_where_the_chat_is(synth: Synthesized) -> None:
    alarms = {
        p["Properties"]["AlarmDescription"]
        for p in of_type(synth.resources, "AWS::CloudWatch::Alarm").values()
        if isinstance(p["Properties"].get("AlarmDescription"), str)
    }
    [ordered] = [a for a in alarms if a.startswith(f"{ORDERED.name}-dlq ")]
    assert "MessageGroupId" in ordered and "ops dlq peek" in ordered and "message_group" in ordered
    [plain] = [a for a in alarms if a.startswith("store-dlq ")]
    assert "MessageGroupId" not in plain
    # Every dead letter's chat also arrives as its own notice on the alarm topic.
    assert "notice of their own on this topic" in ordered
    assert "notice" not in plain


def test_only_the_ordered_worker_may_publish_its_dead_letter_notices_to_the_alarm_topic(
    synth: Synthesized,
) -> None:
    topic_id = synth.logical_id(synth.stack.alarm_topic.topic)
    key_id = synth.logical_id(synth.stack.alarm_topic.key)
    assert key_id == synth.logical_id(synth.stack.events.key)  # the stack's one key
    assert ORDERED.name in synth.stack.pipelines and len(synth.stack.pipelines) > 1
    for name, pipeline in synth.stack.pipelines.items():
        env = function_env(synth.resources, synth.logical_id(pipeline.worker.function))
        permissions = role_permissions(synth.resources, synth.logical_id(pipeline.worker.function.role))
        if pipeline.consumer.ordered:
            assert ref_name(env[ALARM_TOPIC_ENV]) == topic_id
            assert permissions[topic_id] == {"sns:Publish"}
            # Publishing to an encrypted topic: exactly these two on its key, no wildcard.
            assert permissions[key_id] == {"kms:Decrypt", "kms:GenerateDataKey"}
        else:
            assert ALARM_TOPIC_ENV not in env, name
            assert topic_id not in permissions, name
            if not pipeline.consumer.topic_publisher:  # a publisher has the key for the events topic
                assert key_id not in permissions, name
