"""HTTP API, webhook function, events topic, webhook secrets and stack outputs."""

from __future__ import annotations

import json
import re

import pytest
from synthesized import Synthesized
from template_queries import function_env, of_type, props, ref_name, role_permissions, xray_grant

from infra.constructs.ingress import ACCESS_LOG_FIELDS
from infra.environment import CRM_PATH, CRM_TOKEN_PATH, SMS_INBOUND_PATH, TELEGRAM_PATH
from infra.naming import pascal_case

# What a function reading a secret calls (`pipeline.secrets`): never DescribeSecret.
SECRET_READ = {"secretsmanager:GetSecretValue"}


@pytest.fixture(scope="module")
def synth(default_synth: Synthesized) -> Synthesized:
    return default_synth


@pytest.fixture(scope="module")
def ids(synth: Synthesized) -> dict[str, str]:
    """Logical ids of the resources these tests look at."""
    stack = synth.stack
    return {
        "api": synth.logical_id(stack.ingress.api),
        "webhook": synth.logical_id(stack.ingress.webhook.function),
        "webhook_role": synth.logical_id(stack.ingress.webhook.role),
        "webhook_logs": synth.logical_id(stack.ingress.webhook.log_group),
        "access_logs": synth.logical_id(stack.ingress.access_logs),
        "topic": synth.logical_id(stack.events.topic),
        "key": synth.logical_id(stack.events.key),
        "telegram_secret": synth.logical_id(stack.webhook_secrets.telegram),
        "crm_secret": synth.logical_id(stack.webhook_secrets.crm),
    }


def test_api_routes_post_telegram_and_crm_to_the_webhook_with_payload_v2(
    synth: Synthesized, ids: dict[str, str]
) -> None:
    (api,) = of_type(synth.resources, "AWS::ApiGatewayV2::Api").values()
    assert api["Properties"]["ProtocolType"] == "HTTP"
    ((integration_id, integration),) = of_type(synth.resources, "AWS::ApiGatewayV2::Integration").items()
    assert integration["Properties"]["IntegrationType"] == "AWS_PROXY"
    assert integration["Properties"]["PayloadFormatVersion"] == "2.0"
    assert ref_name(integration["Properties"]["IntegrationUri"]) == ids["webhook"]
    routes = of_type(synth.resources, "AWS::ApiGatewayV2::Route").values()
    assert sorted(r["Properties"]["RouteKey"] for r in routes) == sorted(
        [f"POST {TELEGRAM_PATH}", f"POST {CRM_PATH}", f"POST {CRM_TOKEN_PATH}"]
    )
    for route in routes:
        assert ref_name(route["Properties"]["ApiId"]) == ids["api"]
        assert route["Properties"]["Target"] == {"Fn::Join": ["", ["integrations/", {"Ref": integration_id}]]}


def test_api_gateway_may_invoke_the_webhook_only_from_those_routes(
    synth: Synthesized, ids: dict[str, str]
) -> None:
    every_permission = of_type(synth.resources, "AWS::Lambda::Permission").values()
    permissions = [p for p in every_permission if ref_name(p["Properties"]["FunctionName"]) == ids["webhook"]]
    source_arns = sorted(ref_name(p["Properties"]["SourceArn"]) for p in permissions)
    assert all(p["Properties"]["Principal"] == "apigateway.amazonaws.com" for p in permissions)
    others = [p for p in every_permission if p not in permissions]
    assert all(p["Properties"]["Principal"] != "apigateway.amazonaws.com" for p in others)
    assert [arn.rsplit(":", 1)[1] for arn in source_arns] == sorted(
        [
            f"${{{ids['api']}}}/*/*{CRM_PATH}",
            f"${{{ids['api']}}}/*/*{CRM_TOKEN_PATH}",
            f"${{{ids['api']}}}/*/*{TELEGRAM_PATH}",
        ]
    )


def test_default_stage_is_throttled_and_writes_json_access_logs(
    synth: Synthesized, ids: dict[str, str]
) -> None:
    (stage,) = of_type(synth.resources, "AWS::ApiGatewayV2::Stage").values()
    properties = stage["Properties"]
    assert properties["StageName"] == "$default"
    assert properties["AutoDeploy"] is True
    assert properties["DefaultRouteSettings"] == {"ThrottlingRateLimit": 50, "ThrottlingBurstLimit": 100}
    access = properties["AccessLogSettings"]
    assert ref_name(access["DestinationArn"]) == ids["access_logs"]
    log_format = json.loads(access["Format"])
    assert log_format["requestId"] == "$context.requestId"
    assert log_format["status"] == "$context.status"
    assert not any("header" in value.lower() for value in log_format.values()), "headers carry the secret"
    assert props(synth.resources, ids["access_logs"])["RetentionInDays"] == 30


# $context variables that would record a path, a header or a body: the Telegram secret and the
# CRM token travel in headers, the CRM token also in the path of POST /crm/events/{token}.
REQUEST_CONTENT_VARIABLES = re.compile(
    r"\$(context\.(path|resourcePath)|request\.|input\.|context\.requestOverride|context\.authorizer)",
    flags=re.IGNORECASE,
)


def test_the_access_log_records_the_route_key_and_no_path_header_or_body(synth: Synthesized) -> None:
    (stage,) = of_type(synth.resources, "AWS::ApiGatewayV2::Stage").values()
    log_format = json.loads(stage["Properties"]["AccessLogSettings"]["Format"])

    assert log_format == ACCESS_LOG_FIELDS
    # The route key shows `POST /crm/events/{token}` with the placeholder, never the token.
    assert log_format["routeKey"] == "$context.routeKey"
    assert all(value.startswith("$context.") for value in log_format.values())
    recorded = [value for value in log_format.values() if REQUEST_CONTENT_VARIABLES.search(value)]
    assert recorded == []
    assert not any("path" in value.lower() for value in log_format.values())


def test_webhook_environment_names_topic_secrets_and_bot(synth: Synthesized, ids: dict[str, str]) -> None:
    env = function_env(synth.resources, ids["webhook"])
    assert ref_name(env["EVENTS_TOPIC_ARN"]) == ids["topic"]
    assert ref_name(env["TELEGRAM_SECRET_ID"]) == ids["telegram_secret"]
    assert ref_name(env["CRM_SECRET_ID"]) == ids["crm_secret"]
    assert "CRM_TOKEN_SECRET_ID" not in env, "no CRM token where crm_auth is signature and amoCRM is off"
    assert env["CRM_AUTH"] == "signature", "the CRM signs its events unless token auth is asked for"
    assert env["TELEGRAM_BOT_ID"] == "default"
    assert env["SECRET_ROTATION_GRACE_SECONDS"] == "3600"
    assert env["TELEGRAM_IP_ALLOWLIST"] == "", "the IP allow-list is off unless asked for"
    assert env["PHONE_DEFAULT_REGION"] == "", "only international phone forms unless a region is set"
    assert props(synth.resources, ids["webhook"])["Handler"] == "webhook.app.lambda_handler"


def test_the_ip_allow_list_setting_gives_the_webhook_telegrams_ranges(full_synth: Synthesized) -> None:
    webhook_id = full_synth.logical_id(full_synth.stack.ingress.webhook.function)
    env = function_env(full_synth.resources, webhook_id)
    assert env["TELEGRAM_IP_ALLOWLIST"] == "149.154.160.0/20,91.108.4.0/22"


def test_webhook_role_may_only_publish_to_the_topic_and_read_its_two_secrets(
    synth: Synthesized, ids: dict[str, str]
) -> None:
    assert role_permissions(synth.resources, ids["webhook_role"]) == {
        ids["topic"]: {"sns:Publish"},
        ids["key"]: {"kms:Decrypt", "kms:GenerateDataKey"},
        ids["telegram_secret"]: SECRET_READ,
        ids["crm_secret"]: SECRET_READ,
        ids["webhook_logs"]: {"logs:CreateLogStream", "logs:PutLogEvents"},
        **xray_grant(synth.stack.settings.tracing),
    }


def test_topic_is_encrypted_with_a_rotating_customer_key_that_sns_may_use(
    synth: Synthesized, ids: dict[str, str]
) -> None:
    assert ref_name(props(synth.resources, ids["topic"])["KmsMasterKeyId"]) == ids["key"]
    key = props(synth.resources, ids["key"])
    assert key["EnableKeyRotation"] is True
    sns_statements = [
        s for s in key["KeyPolicy"]["Statement"] if s["Principal"] == {"Service": "sns.amazonaws.com"}
    ]
    assert len(sns_statements) == 1
    assert set(sns_statements[0]["Action"]) == {"kms:Decrypt", "kms:GenerateDataKey*"}
    assert "aws:SourceAccount" in sns_statements[0]["Condition"]["StringEquals"]


@pytest.mark.parametrize("synth_name", ["default_synth", "full_synth"])
def test_the_events_key_is_the_stacks_only_key_and_encrypts_every_topic(
    synth_name: str, request: pytest.FixtureRequest
) -> None:
    """One customer-managed key ($1 a month each): the alarm and SMS delivery-event topics use the
    events topic's, whose policy names each AWS service that publishes once, under its own sid."""
    synthesized: Synthesized = request.getfixturevalue(synth_name)
    stack = synthesized.stack
    key_id = synthesized.logical_id(stack.events.key)
    assert list(of_type(synthesized.resources, "AWS::KMS::Key")) == [key_id]
    topics = [stack.events.topic, stack.monitoring.alarm_topic.topic]
    if stack.sms and stack.sms.delivery_events:
        topics.append(stack.sms.delivery_events.topic)
    encrypted = of_type(synthesized.resources, "AWS::SNS::Topic")
    assert set(encrypted) == {synthesized.logical_id(topic) for topic in topics}
    assert {ref_name(t["Properties"]["KmsMasterKeyId"]) for t in encrypted.values()} == {key_id}
    statements = props(synthesized.resources, key_id)["KeyPolicy"]["Statement"]
    services = [s["Principal"]["Service"] for s in statements if "Service" in s["Principal"]]
    expected = ["sns.amazonaws.com", "cloudwatch.amazonaws.com"]
    if stack.sms and stack.sms.delivery_events:
        expected.append("sms-voice.amazonaws.com")
    assert sorted(services) == sorted(expected)
    sids = [s["Sid"] for s in statements if "Sid" in s]
    assert len(sids) == len(set(sids))


def test_topic_policy_denies_publishing_without_tls(synth: Synthesized, ids: dict[str, str]) -> None:
    (policy,) = [
        p
        for p in of_type(synth.resources, "AWS::SNS::TopicPolicy").values()
        if [ref_name(t) for t in p["Properties"]["Topics"]] == [ids["topic"]]
    ]
    (deny,) = [s for s in policy["Properties"]["PolicyDocument"]["Statement"] if s["Effect"] == "Deny"]
    assert deny["Action"] == "sns:Publish"
    assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


@pytest.mark.parametrize("secret", ["telegram_secret", "crm_secret"])
def test_webhook_secrets_are_generated_from_telegram_safe_characters(
    synth: Synthesized, ids: dict[str, str], secret: str
) -> None:
    properties = props(synth.resources, ids[secret])
    assert "SecretString" not in properties, (
        "webhook secrets must be generated, never written in the template"
    )
    generator = properties["GenerateSecretString"]
    assert generator["ExcludePunctuation"] is True
    assert generator["IncludeSpace"] is False
    assert 40 <= generator["PasswordLength"] <= 256


def test_consumer_secrets_start_as_placeholders_the_operator_replaces(synth: Synthesized) -> None:
    registry = synth.stack.settings.registry_settings()
    names = sorted({s for c in synth.stack.consumers for s in c.used_secrets(registry)})
    assert sorted(synth.stack.consumer_secrets.by_name) == names
    for name, secret in synth.stack.consumer_secrets.by_name.items():
        properties = props(synth.resources, synth.logical_id(secret))
        assert properties["Description"]
        assert "GenerateSecretString" not in properties
        if name == "crm_api":
            assert json.loads(properties["SecretString"]).keys() == {"kind", "url", "auth_header"}


def test_outputs_give_operators_every_endpoint_and_id(synth: Synthesized, ids: dict[str, str]) -> None:
    outputs = synth.template.to_json()["Outputs"]
    assert ref_name(outputs["WebhookUrl"]["Value"]).endswith(TELEGRAM_PATH)
    assert ref_name(outputs["CrmUrl"]["Value"]).endswith(CRM_PATH)
    assert ref_name(outputs["EventsTopicArn"]["Value"]) == ids["topic"]
    assert ref_name(outputs["TelegramSecretId"]["Value"]) == ids["telegram_secret"]
    assert ref_name(outputs["CrmSecretId"]["Value"]) == ids["crm_secret"]
    assert "CrmTokenSecretId" not in outputs, "the default stack makes no CRM token"
    for name, table in synth.stack.tables.by_name.items():
        assert ref_name(outputs[f"{pascal_case(name)}TableName"]["Value"]) == synth.logical_id(table)
    for name, secret in synth.stack.consumer_secrets.by_name.items():
        assert ref_name(outputs[f"{pascal_case(name)}SecretId"]["Value"]) == synth.logical_id(secret)
    for consumer in synth.stack.consumers:
        pipeline = synth.stack.pipelines[consumer.name]
        prefix = pascal_case(consumer.name)
        assert ref_name(outputs[f"{prefix}QueueUrl"]["Value"]) == synth.logical_id(pipeline.queue)
        assert ref_name(outputs[f"{prefix}DlqUrl"]["Value"]) == synth.logical_id(pipeline.dlq)


def test_connected_crm_sources_get_their_routes_secret_and_outputs(full_synth: Synthesized) -> None:
    """Bitrix24 and amoCRM connected (`full`): their routes, the application token's secret read by
    the webhook (and only there), the URLs to paste into each CRM; the default stack has none."""
    stack = full_synth.stack
    routes = {
        r["Properties"]["RouteKey"]
        for r in of_type(full_synth.resources, "AWS::ApiGatewayV2::Route").values()
    }
    assert {"POST /crm/bitrix24", "POST /crm/amocrm/{token}"} <= routes
    token = stack.webhook_secrets.bitrix24_app_token
    assert token is not None
    token_id = full_synth.logical_id(token)
    webhook_id = full_synth.logical_id(stack.ingress.webhook.function)
    assert (
        ref_name(function_env(full_synth.resources, webhook_id)["BITRIX24_APP_TOKEN_SECRET_ID"]) == token_id
    )
    assert role_permissions(full_synth.resources, full_synth.logical_id(stack.ingress.webhook.role))[
        token_id
    ] == (SECRET_READ)
    readers = [
        name
        for name, pipeline in stack.pipelines.items()
        if token_id in role_permissions(full_synth.resources, full_synth.logical_id(pipeline.worker.role))
    ]
    assert readers == [], "only the webhook checks the application token"
    outputs = full_synth.template.to_json()["Outputs"]
    assert ref_name(outputs["Bitrix24WebhookUrl"]["Value"]).endswith("/crm/bitrix24")
    assert ref_name(outputs["AmoCrmWebhookUrl"]["Value"]).endswith("/crm/amocrm/{token}")
    assert ref_name(outputs["Bitrix24AppTokenSecretId"]["Value"]) == token_id


def test_the_default_stack_connects_no_crm_source(synth: Synthesized) -> None:
    routes = {
        r["Properties"]["RouteKey"] for r in of_type(synth.resources, "AWS::ApiGatewayV2::Route").values()
    }
    assert not {key for key in routes if "bitrix24" in key or "amocrm" in key}
    assert synth.stack.webhook_secrets.bitrix24_app_token is None
    assert "BITRIX24_APP_TOKEN_SECRET_ID" not in function_env(
        synth.resources, synth.logical_id(synth.stack.ingress.webhook.function)
    )


@pytest.mark.parametrize("configuration", ["custom", "full"])
def test_the_crm_token_is_made_read_and_exported_only_where_the_webhook_accepts_it(
    configuration: str, custom_synth: Synthesized, full_synth: Synthesized, synth: Synthesized
) -> None:
    """`custom` (crm_auth=token) and `full` (amoCRM connected: its URL carries the token) make the
    generated token, read by the webhook alone and exported; the default makes none (a secret is
    $0.40 a month: `test_outputs_give_operators_every_endpoint_and_id` checks its absence)."""
    chosen = {"custom": custom_synth, "full": full_synth}[configuration]
    stack = chosen.stack
    assert stack.settings.crm_token_needed
    token = stack.webhook_secrets.crm_token
    assert token is not None
    token_id = chosen.logical_id(token)
    generator = props(chosen.resources, token_id)["GenerateSecretString"]
    assert generator["ExcludePunctuation"] is True
    assert generator["IncludeSpace"] is False
    webhook_id = chosen.logical_id(stack.ingress.webhook.function)
    assert ref_name(function_env(chosen.resources, webhook_id)["CRM_TOKEN_SECRET_ID"]) == token_id
    readers = {
        name
        for name, role in {
            "webhook": stack.ingress.webhook.role,
            **{name: pipeline.worker.role for name, pipeline in stack.pipelines.items()},
        }.items()
        if token_id in role_permissions(chosen.resources, chosen.logical_id(role))
    }
    assert readers == {"webhook"}
    outputs = chosen.template.to_json()["Outputs"]
    assert ref_name(outputs["CrmTokenSecretId"]["Value"]) == token_id
    assert synth.stack.webhook_secrets.crm_token is None


def test_an_http_sms_gateway_gets_the_inbound_stop_route_with_its_token_and_only_the_writes_it_makes(
    custom_synth: Synthesized, synth: Synthesized
) -> None:
    """`custom` (sms_gateway=http): `POST /sms/inbound/{token}` (issue 43), its generated token read
    by the webhook alone, and the journal's PutItem/DeleteItem (a STOP puts the number's
    suppression item, a START deletes it), nothing else of the table; the URL and the token's
    secret exported. The default stack (End User Messaging keeps its own list) has none of it."""
    stack = custom_synth.stack
    routes = {
        r["Properties"]["RouteKey"]
        for r in of_type(custom_synth.resources, "AWS::ApiGatewayV2::Route").values()
    }
    assert f"POST {SMS_INBOUND_PATH}" in routes
    token = stack.webhook_secrets.sms_inbound_token
    assert token is not None
    token_id, journal_id = custom_synth.logical_id(token), custom_synth.logical_id(stack.tables.journal)
    assert props(custom_synth.resources, token_id)["GenerateSecretString"]["ExcludePunctuation"] is True
    env = function_env(custom_synth.resources, custom_synth.logical_id(stack.ingress.webhook.function))
    assert ref_name(env["SMS_INBOUND_TOKEN_SECRET_ID"]) == token_id
    assert ref_name(env["JOURNAL_TABLE"]) == journal_id
    webhook = role_permissions(custom_synth.resources, custom_synth.logical_id(stack.ingress.webhook.role))
    assert webhook[token_id] == SECRET_READ
    assert webhook[journal_id] == {"dynamodb:PutItem", "dynamodb:DeleteItem"}
    readers = [
        name
        for name, pipeline in stack.pipelines.items()
        if token_id in role_permissions(custom_synth.resources, custom_synth.logical_id(pipeline.worker.role))
    ]
    assert readers == [], "only the webhook checks the inbound token"
    outputs = custom_synth.template.to_json()["Outputs"]
    assert ref_name(outputs["SmsInboundUrl"]["Value"]).endswith(SMS_INBOUND_PATH)
    assert ref_name(outputs["SmsInboundTokenSecretId"]["Value"]) == token_id

    default_routes = {
        r["Properties"]["RouteKey"] for r in of_type(synth.resources, "AWS::ApiGatewayV2::Route").values()
    }
    assert f"POST {SMS_INBOUND_PATH}" not in default_routes
    assert synth.stack.webhook_secrets.sms_inbound_token is None
    default_env = function_env(synth.resources, synth.logical_id(synth.stack.ingress.webhook.function))
    assert "JOURNAL_TABLE" not in default_env and "SMS_INBOUND_TOKEN_SECRET_ID" not in default_env
