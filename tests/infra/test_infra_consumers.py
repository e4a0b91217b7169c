"""Per consumer of the registry: queue, DLQs, subscription, worker, event source and its role.

Parametrized over every registry entry against the `full` synth (all consumers switched on), so
a new registry entry is covered without touching these tests.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk import App, Stack
from synthesized import BASE_CONTEXT, BEDROCK_FOUNDATION_MODEL, BEDROCK_MODEL_ID, Synthesized
from template_queries import (
    as_list,
    function_env,
    of_type,
    props,
    ref_name,
    role_permissions,
    role_statements,
    xray_grant,
)

from infra.application import build_app, settings_error_message
from infra.constructs.consumers import BedrockModel, ConsumerPipeline, bedrock_invoke_statements
from infra.environment import (
    JOURNAL,
    SMS_CONSUMER,
    SettingsError,
    autoreply_texts,
)
from infra.naming import pascal_case
from pipeline.registry import CONSUMERS, Consumer, enabled, secret_env_var, table_env_var
from pipeline.replies import REPLIES_ENV
from pipeline.retention import IDEMPOTENCY_TTL_SECONDS
from pipeline.sms.journal import BY_STATE_INDEX
from pipeline.telegram_bot.state import BY_CHAT_INDEX

FOURTEEN_DAYS = 14 * 24 * 3600
# What a function reading a secret calls (`pipeline.secrets`): never DescribeSecret.
SECRET_READ = {"secretsmanager:GetSecretValue"}
CONSUMER_NAMES = [c.name for c in CONSUMERS]
# Bedrock ARNs of this stack's region and account, and of foundation models in any region.
BEDROCK_HERE = "arn:${AWS::Partition}:bedrock:${AWS::Region}:${AWS::AccountId}"
ANY_REGION_MODEL = "arn:${AWS::Partition}:bedrock:*::foundation-model/"


@pytest.fixture
def synth(request: pytest.FixtureRequest, full_synth: Synthesized) -> Synthesized:
    """The `full` synth; for a consumer that stands down there (`autoreply`, for the `bot`: its
    `unless_setting`), the default synth, where it exists."""
    if "consumer" in request.fixturenames:
        consumer: Consumer = request.getfixturevalue("consumer")
        if consumer.name not in full_synth.stack.pipelines:
            default: Synthesized = request.getfixturevalue("default_synth")
            return default
    return full_synth


@pytest.fixture(params=CONSUMER_NAMES)
def consumer(request: pytest.FixtureRequest) -> Consumer:
    by_name: dict[str, Consumer] = {c.name: c for c in CONSUMERS}
    return by_name[request.param]


@pytest.fixture
def pipeline(synth: Synthesized, consumer: Consumer) -> ConsumerPipeline:
    return synth.stack.pipelines[consumer.name]


def _id(synth: Synthesized, construct: Any) -> str:
    return synth.logical_id(construct)


def test_full_context_enables_every_registry_consumer_but_those_standing_down(synth: Synthesized) -> None:
    standing_down = {c.name for c in CONSUMERS if c.unless_setting}
    assert standing_down == {"autoreply"}
    assert [c.name for c in synth.stack.consumers] == [n for n in CONSUMER_NAMES if n not in standing_down]


def test_the_bot_state_table_is_the_bot_consumers_alone(synth: Synthesized) -> None:
    table_id = _id(synth, synth.stack.tables.by_name["bot_state"])
    reaching = {
        name
        for name, pipeline in synth.stack.pipelines.items()
        if table_id in role_permissions(synth.resources, _id(synth, pipeline.worker.role))
    }
    assert reaching == {"bot"}
    env = function_env(synth.resources, _id(synth, synth.stack.pipelines["bot"].worker.function))
    assert env["BOT_APPLICATION"] == "bot.examples.lead_bot:build"
    assert ref_name(env["BOT_STATE_TABLE"]) == table_id


def test_queue_hides_messages_for_six_worker_timeouts_plus_its_window_and_redrives_to_its_dlq(
    synth: Synthesized, consumer: Consumer, pipeline: ConsumerPipeline
) -> None:
    queue = props(synth.resources, _id(synth, pipeline.queue))
    # AWS's guidance: 6x the timeout; plus the batching window, through which the records wait received.
    assert queue["VisibilityTimeout"] == 6 * consumer.timeout_seconds + consumer.batching_window_seconds
    assert queue["SqsManagedSseEnabled"] is True
    assert queue["RedrivePolicy"]["maxReceiveCount"] == consumer.redrive_max_receive_count
    assert ref_name(queue["RedrivePolicy"]["deadLetterTargetArn"]) == _id(synth, pipeline.dlq)


def test_both_dead_letter_queues_keep_messages_fourteen_days_encrypted(
    synth: Synthesized, pipeline: ConsumerPipeline
) -> None:
    for dlq in (pipeline.dlq, pipeline.delivery_dlq):
        properties = props(synth.resources, _id(synth, dlq))
        assert properties["MessageRetentionPeriod"] == FOURTEEN_DAYS
        assert properties["SqsManagedSseEnabled"] is True
        assert "RedrivePolicy" not in properties


def test_every_queue_of_the_consumer_refuses_requests_without_tls(
    synth: Synthesized, pipeline: ConsumerPipeline
) -> None:
    policies = of_type(synth.resources, "AWS::SQS::QueuePolicy").values()
    for queue in (pipeline.queue, pipeline.dlq, pipeline.delivery_dlq):
        queue_id = _id(synth, queue)
        (policy,) = [p for p in policies if {"Ref": queue_id} in p["Properties"]["Queues"]]
        denies = [s for s in policy["Properties"]["PolicyDocument"]["Statement"] if s["Effect"] == "Deny"]
        assert [d["Condition"] for d in denies] == [{"Bool": {"aws:SecureTransport": "false"}}]


def test_subscription_delivers_raw_filtered_messages_with_its_own_delivery_dlq(
    synth: Synthesized, consumer: Consumer, pipeline: ConsumerPipeline
) -> None:
    subscriptions = [
        s["Properties"]
        for s in of_type(synth.resources, "AWS::SNS::Subscription").values()
        if ref_name(s["Properties"]["Endpoint"]) == _id(synth, pipeline.queue)
    ]
    (subscription,) = subscriptions
    assert ref_name(subscription["TopicArn"]) == _id(synth, synth.stack.events.topic)
    assert subscription["Protocol"] == "sqs"
    assert subscription["RawMessageDelivery"] is True
    assert subscription["FilterPolicy"] == consumer.filter_policy
    assert ref_name(subscription["RedrivePolicy"]["deadLetterTargetArn"]) == _id(synth, pipeline.delivery_dlq)


def test_worker_runs_the_registry_handler_with_its_limits(
    synth: Synthesized, consumer: Consumer, pipeline: ConsumerPipeline
) -> None:
    function = props(synth.resources, _id(synth, pipeline.worker.function))
    assert function["Handler"] == consumer.handler
    assert function["Timeout"] == consumer.timeout_seconds
    assert function["MemorySize"] == consumer.memory_mb


def test_event_source_reports_partial_batch_failures_within_concurrency_cap(
    synth: Synthesized, consumer: Consumer, pipeline: ConsumerPipeline
) -> None:
    mappings = [
        m["Properties"]
        for m in of_type(synth.resources, "AWS::Lambda::EventSourceMapping").values()
        if ref_name(m["Properties"]["FunctionName"]) == _id(synth, pipeline.worker.function)
    ]
    (mapping,) = mappings
    assert ref_name(mapping["EventSourceArn"]) == _id(synth, pipeline.queue)
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert mapping["ScalingConfig"] == {"MaximumConcurrency": consumer.max_concurrency}
    assert mapping["BatchSize"] == consumer.batch_size
    assert mapping.get("MaximumBatchingWindowInSeconds", 0) == consumer.batching_window_seconds


def test_worker_environment_follows_the_contract(
    synth: Synthesized, consumer: Consumer, pipeline: ConsumerPipeline
) -> None:
    env = function_env(synth.resources, _id(synth, pipeline.worker.function))
    tables = synth.stack.tables.by_name
    secrets = synth.stack.consumer_secrets.by_name
    expected: dict[str, Any] = {
        "CONSUMER_NAME": consumer.name,
        "QUEUE_URL": _id(synth, pipeline.queue),
        "DLQ_URL": _id(synth, pipeline.dlq),
        "JOURNAL_TABLE": _id(synth, tables[JOURNAL]),
        "IDEMPOTENCY_TTL_SECONDS": str(IDEMPOTENCY_TTL_SECONDS),
        **{table_env_var(t): _id(synth, tables[t]) for t in consumer.tables},
        **{secret_env_var(s): _id(synth, secrets[s]) for s in used_secrets(synth, consumer)},
        **consumer.environment,
    }
    if consumer.requires_setting:
        expected[consumer.requires_setting.upper()] = str(
            synth.stack.settings.registry_settings()[consumer.requires_setting]
        )
    if consumer.topic_publisher:
        # The topic it publishes order events (or look requests: pipeline.crm.look) to.
        expected["EVENTS_TOPIC_ARN"] = _id(synth, synth.stack.events.topic)
    if consumer.publishes:
        # The region it reads their phones in.
        expected["PHONE_DEFAULT_REGION"] = synth.stack.settings.phone_default_region or ""
        # How late a CRM transition may be first seen and still texted (pipeline.crm.sync).
        expected["SMS_MAX_AGE_SECONDS"] = str(synth.stack.settings.sms_max_age_minutes * 60)
    if consumer.ordered:
        # Where it publishes a notice per dead letter, naming the chat.
        expected["ALARM_TOPIC_ARN"] = _id(synth, synth.stack.alarm_topic.topic)
    if consumer.broadcasts:
        # Whether its messages are paid broadcasts (the `allow_paid_broadcast` setting).
        expected["BROADCAST_PAID"] = "true" if synth.stack.settings.allow_paid_broadcast else ""
    if consumer.name == "autoreply" and REPLIES_ENV not in consumer.environment:
        # The team's texts (team/autoreply.json), read at synth.
        expected[REPLIES_ENV] = autoreply_texts()
    if consumer.name == SMS_CONSUMER:
        # The SMS settings the stack adds (their values: test_infra_sms).
        assert synth.stack.sms is not None
        expected.update(synth.stack.sms.environment)
    actual = {key: ref_name(value) for key, value in env.items() if not key.startswith("POWERTOOLS_")}
    assert actual == expected


def test_worker_role_reaches_only_its_own_queue_dlq_tables_and_secrets(
    synth: Synthesized, consumer: Consumer, pipeline: ConsumerPipeline
) -> None:
    permissions = role_permissions(synth.resources, _id(synth, pipeline.worker.role))
    own_tables = {_id(synth, synth.stack.tables.by_name[t]) for t in {JOURNAL, *consumer.tables}}
    own_secrets = {_id(synth, synth.stack.consumer_secrets.by_name[s]) for s in used_secrets(synth, consumer)}
    queue_id, dlq_id = _id(synth, pipeline.queue), _id(synth, pipeline.dlq)
    bedrock = {r for r in permissions if ":bedrock:" in r}
    sms_voice = {r for r in permissions if ":sms-voice:" in r}  # exactly which: test_infra_sms
    xray = xray_grant(synth.stack.settings.tracing)
    expected = {queue_id, dlq_id, *own_tables, *own_secrets, _id(synth, pipeline.worker.log_group), *xray}
    # A consumer that publishes: the events topic, and its key for exactly what publishing needs.
    topic_id, key_id = _id(synth, synth.stack.events.topic), _id(synth, synth.stack.events.key)
    if consumer.topic_publisher:
        expected |= {topic_id, key_id}
        assert permissions[topic_id] == {"sns:Publish"}
        assert permissions[key_id] == {"kms:Decrypt", "kms:GenerateDataKey"}
    # An ordered consumer: the alarm topic (its notice per dead letter), encrypted with that key.
    alarm_id = _id(synth, synth.stack.alarm_topic.topic)
    if consumer.ordered:
        expected |= {alarm_id, key_id}
        assert permissions[alarm_id] == {"sns:Publish"}
        assert permissions[key_id] == {"kms:Decrypt", "kms:GenerateDataKey"}
    assert set(permissions) == expected | bedrock | sms_voice
    assert not sms_voice or consumer.name == SMS_CONSUMER, "only the sms worker may send SMS"
    assert not [r for r in permissions if "/index/" in r], "no worker queries an index"
    assert {resource: actions for resource, actions in permissions.items() if resource == "*"} == xray
    assert {"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility"} <= permissions[queue_id]
    assert "sqs:SendMessage" in permissions[dlq_id]
    assert not permissions[dlq_id] & {"sqs:ReceiveMessage", "sqs:DeleteMessage"}
    # Issue 23: on each table, exactly the item actions the registry says its code calls (store:
    # no Scan, Query, batch or ConditionCheckItem; no DescribeTable for anyone).
    for table, actions in consumer.tables.items():
        assert permissions[_id(synth, synth.stack.tables.by_name[table])] == set(actions)
    for secret_id in own_secrets:
        assert permissions[secret_id] == SECRET_READ
    others = [p for name, p in synth.stack.pipelines.items() if name != consumer.name]
    foreign = {_id(synth, q) for p in others for q in (p.queue, p.dlq, p.delivery_dlq)}
    assert not foreign & set(permissions), "a worker must not reach another consumer's queues"


def used_secrets(synth: Synthesized, consumer: Consumer) -> tuple[str, ...]:
    return consumer.used_secrets(synth.stack.settings.registry_settings())


def rendered(statement: dict[str, Any]) -> dict[str, Any]:
    """A policy statement with its resources and condition values as `ref_name` renders them."""
    conditions = {
        operator: {key: ref_name(value) for key, value in keys.items()}
        for operator, keys in statement.get("Condition", {}).items()
    }
    return {
        "Action": as_list(statement["Action"]),
        "Resource": [ref_name(r) for r in as_list(statement["Resource"])],
        **({"Condition": conditions} if conditions else {}),
    }


def test_only_the_bedrock_consumer_may_invoke_exactly_its_configured_model(synth: Synthesized) -> None:
    for consumer in synth.stack.consumers:
        role_id = _id(synth, synth.stack.pipelines[consumer.name].worker.role)
        bedrock = [
            rendered(s)
            for s in role_statements(synth.resources, role_id)
            if any(a.startswith("bedrock:") for a in as_list(s["Action"]))
        ]
        if consumer.requires_setting != "bedrock_model_id":
            assert bedrock == []
            continue
        # An inference profile: the profile, and its model in any region but only through it.
        profile = f"{BEDROCK_HERE}:inference-profile/{BEDROCK_MODEL_ID}"
        assert bedrock == [
            {"Action": ["bedrock:InvokeModel"], "Resource": [profile]},
            {
                "Action": ["bedrock:InvokeModel"],
                "Resource": [
                    f"arn:${{AWS::Partition}}:bedrock:*::foundation-model/{BEDROCK_FOUNDATION_MODEL}"
                ],
                "Condition": {"StringEquals": {"bedrock:InferenceProfileArn": profile}},
            },
        ]


APPLICATION_PROFILE = "arn:aws:bedrock:eu-central-1:123456789012:application-inference-profile/a1b2c3d4e5f6"


@pytest.mark.parametrize(
    ("model_id", "expected"),
    [
        (
            BEDROCK_FOUNDATION_MODEL,
            [
                {
                    "Action": ["bedrock:InvokeModel"],
                    "Resource": [
                        f"arn:${{AWS::Partition}}:bedrock:${{AWS::Region}}::foundation-model/{BEDROCK_FOUNDATION_MODEL}"
                    ],
                }
            ],
        ),
        *[
            (
                f"{prefix}.{BEDROCK_FOUNDATION_MODEL}",
                [
                    {
                        "Action": ["bedrock:InvokeModel"],
                        "Resource": [f"{BEDROCK_HERE}:inference-profile/{prefix}.{BEDROCK_FOUNDATION_MODEL}"],
                    },
                    {
                        "Action": ["bedrock:InvokeModel"],
                        "Resource": [ANY_REGION_MODEL + BEDROCK_FOUNDATION_MODEL],
                        "Condition": {
                            "StringEquals": {
                                "bedrock:InferenceProfileArn": f"{BEDROCK_HERE}:inference-profile/"
                                f"{prefix}.{BEDROCK_FOUNDATION_MODEL}"
                            }
                        },
                    },
                ],
            )
            for prefix in ("us", "eu", "apac", "global")
        ],
        (
            APPLICATION_PROFILE,
            [
                {"Action": ["bedrock:InvokeModel"], "Resource": [APPLICATION_PROFILE]},
                {
                    "Action": ["bedrock:InvokeModel"],
                    "Resource": [ANY_REGION_MODEL + "*"],
                    "Condition": {"StringEquals": {"bedrock:InferenceProfileArn": APPLICATION_PROFILE}},
                },
            ],
        ),
    ],
)
def test_converse_may_invoke_a_foundation_model_an_inference_profile_or_an_application_profile(
    model_id: str, expected: list[dict[str, Any]]
) -> None:
    stack = Stack(App(), "Bedrock")
    statements = bedrock_invoke_statements(stack, BedrockModel.parse(model_id))
    assert [rendered(stack.resolve(s.to_statement_json())) for s in statements] == expected


@pytest.mark.parametrize(
    "model_id",
    [
        "claude-3-haiku",  # no provider
        "eu.claude",  # a profile prefix before no foundation model id
        "anthropic.claude haiku",
        "arn:aws:bedrock:eu-central-1::foundation-model/anthropic.claude-3-haiku-20240307-v1:0",
        "arn:aws:bedrock:eu-central-1:123456789012:inference-profile/eu.anthropic.claude-3-haiku-20240307-v1:0",
    ],
)
def test_a_bedrock_model_id_of_no_known_shape_fails_the_synth_naming_the_key(model_id: str) -> None:
    with pytest.raises(SettingsError) as refused:
        build_app({**BASE_CONTEXT, "bedrock_model_id": model_id}, nag=False)
    [line] = settings_error_message(refused.value).splitlines()
    assert line.startswith("bedrock_model_id: not a foundation model id")
    assert line.endswith(")") and "(given " in line  # the value given, shortened


@pytest.mark.parametrize("table", ["journal", "conversations", "bot_state"])
def test_tables_are_on_demand_recoverable_encrypted_with_ttl_and_retained(
    synth: Synthesized, table: str
) -> None:
    resource = synth.resources[_id(synth, synth.stack.tables.by_name[table])]
    properties = resource["Properties"]
    assert properties["BillingMode"] == "PAY_PER_REQUEST"
    assert properties["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert properties["TimeToLiveSpecification"] == {"AttributeName": "expiration", "Enabled": True}
    assert properties["SSESpecification"]["SSEEnabled"] is True
    assert resource["DeletionPolicy"] == "Retain"
    assert resource["UpdateReplacePolicy"] == "Retain"


def test_table_keys_match_the_environment_contract(synth: Synthesized) -> None:
    def key_schema(table: str) -> list[tuple[str, str, str]]:
        properties = props(synth.resources, _id(synth, synth.stack.tables.by_name[table]))
        types = {a["AttributeName"]: a["AttributeType"] for a in properties["AttributeDefinitions"]}
        return [
            (k["AttributeName"], k["KeyType"], types[k["AttributeName"]]) for k in properties["KeySchema"]
        ]

    assert key_schema("journal") == [("id", "HASH", "S")]
    assert key_schema("conversations") == [("pk", "HASH", "S"), ("sk", "RANGE", "S")]
    assert key_schema("bot_state") == [("pk", "HASH", "S")]


def test_journal_has_the_sparse_by_state_index_the_sms_journal_queries(synth: Synthesized) -> None:
    properties = props(synth.resources, _id(synth, synth.stack.tables.journal))
    types = {a["AttributeName"]: a["AttributeType"] for a in properties["AttributeDefinitions"]}
    (index,) = properties["GlobalSecondaryIndexes"]
    assert index["IndexName"] == BY_STATE_INDEX
    assert [(k["AttributeName"], k["KeyType"], types[k["AttributeName"]]) for k in index["KeySchema"]] == [
        ("sms_state", "HASH", "S"),
        ("state_since", "RANGE", "S"),
    ]
    # Readers take the key from the index and read the record itself (consistently).
    assert index["Projection"] == {"ProjectionType": "KEYS_ONLY"}
    conversations = props(synth.resources, _id(synth, synth.stack.tables.by_name["conversations"]))
    assert "GlobalSecondaryIndexes" not in conversations


def test_bot_state_has_the_sparse_by_chat_index_the_console_queries(synth: Synthesized) -> None:
    """The console reads one chat's conversations by its id (issue 40), never scanning the table;
    the bot function is granted nothing on the index (grant_items: the table's items only)."""
    properties = props(synth.resources, _id(synth, synth.stack.tables.by_name["bot_state"]))
    types = {a["AttributeName"]: a["AttributeType"] for a in properties["AttributeDefinitions"]}
    (index,) = properties["GlobalSecondaryIndexes"]
    assert index["IndexName"] == BY_CHAT_INDEX
    assert [(k["AttributeName"], k["KeyType"], types[k["AttributeName"]]) for k in index["KeySchema"]] == [
        ("chat", "HASH", "S"),
        ("pk", "RANGE", "S"),
    ]
    assert index["Projection"] == {"ProjectionType": "KEYS_ONLY"}


def test_without_settings_only_unconditional_consumers_exist(default_synth: Synthesized) -> None:
    expected = enabled({})
    assert [c.name for c in default_synth.stack.consumers] == [c.name for c in expected]
    optional = [c for c in CONSUMERS if c.requires_setting]
    assert optional, "the registry is expected to hold at least one optional consumer (ai)"
    handlers = {
        p["Properties"]["Handler"] for p in of_type(default_synth.resources, "AWS::Lambda::Function").values()
    }
    outputs = default_synth.template.to_json()["Outputs"]
    for consumer in optional:
        assert consumer.handler not in handlers
        assert f"{pascal_case(consumer.name)}QueueUrl" not in outputs
    policies = json.dumps(of_type(default_synth.resources, "AWS::IAM::Policy"))
    assert "bedrock:" not in policies


def test_with_a_bedrock_model_the_ai_consumer_exists(synth: Synthesized) -> None:
    ai = synth.stack.pipelines["ai"]
    env = function_env(synth.resources, _id(synth, ai.worker.function))
    assert env["BEDROCK_MODEL_ID"] == BEDROCK_MODEL_ID
    assert "AiQueueUrl" in synth.template.to_json()["Outputs"]


@pytest.mark.parametrize("synth_name", ["default_synth", "full_synth", "custom_synth"])
def test_dlqs_secrets_and_tables_follow_the_removal_policy_and_retained_tables_refuse_deletion(
    synth_name: str, request: pytest.FixtureRequest
) -> None:
    synth: Synthesized = request.getfixturevalue(synth_name)
    retain = synth.stack.settings.removal_policy == "retain"
    expected = "Retain" if retain else "Delete"
    stack = synth.stack
    dlqs = [q for p in stack.pipelines.values() for q in (p.dlq, p.delivery_dlq)]
    dlqs += list(stack.sms.delivery_events_dlqs.values()) if stack.sms else []
    secrets = [
        *stack.webhook_secrets.all,
        *stack.consumer_secrets.by_name.values(),
    ]
    tables = list(stack.tables.by_name.values())
    assert dlqs and secrets and tables
    for construct in [*dlqs, *secrets, *tables]:
        resource = synth.resources[_id(synth, construct)]
        assert (resource["DeletionPolicy"], resource["UpdateReplacePolicy"]) == (expected, expected), (
            construct.node.path
        )
    assert len(of_type(synth.resources, "AWS::SecretsManager::Secret")) == len(secrets)
    for table in tables:
        assert props(synth.resources, _id(synth, table)).get("DeletionProtectionEnabled", False) is retain


def test_a_telegram_only_deploy_has_no_crm_consumer_nor_crm_api_secret(
    default_synth: Synthesized, full_synth: Synthesized
) -> None:
    """Issue 23: `crm` needs `crm_leads`; without it (the default) there is no consumer to
    dead-letter every new contact on an unfilled `crm_api` secret, and no such secret. With it, or
    with the bot (its example makes leads through crm.logic), the secret exists."""
    assert "crm" not in default_synth.stack.pipelines
    assert "crm_api" not in default_synth.stack.consumer_secrets.by_name
    assert full_synth.stack.settings.crm_leads
    assert "crm" in full_synth.stack.pipelines
    assert "crm_api" in full_synth.stack.consumer_secrets.by_name
    bot_only = build_app({**BASE_CONTEXT, "bot_application": "bot.examples.lead_bot:build"}, nag=False)[1]
    assert "crm" not in bot_only.pipelines
    assert "crm_api" in bot_only.consumer_secrets.by_name
