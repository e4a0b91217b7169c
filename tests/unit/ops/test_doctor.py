"""`bin/ops doctor`: each check's OK and FAIL on moto (stubbed where moto has no such service),
and the command's output, JSON and exit codes."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from infra.config import PipelineSettings, powertools_parameter_name
from infra.outputs import OutputKey
from infra.secret_specs import CONSUMER_SECRET_SPECS, unfilled
from ops import doctor_checks
from ops.context import Context
from ops.doctor import exit_code, run_checks
from ops.findings import Finding, Target
from ops.stack import StackOutputs
from ops.webhook import allowed_updates
from pipeline import aws
from pipeline.errors import AccountRefused
from pipeline.pause import note, pause_seconds
from pipeline.registry import by_name
from tests.unit.ops.support import BOT_TOKEN, WEBHOOK_URL, Deployed, FakeTelegram, Result, dead_letter

PLACEHOLDER_CRM_API = CONSUMER_SECRET_SPECS["crm_api"].placeholder
FILLED_CRM_API = json.dumps(
    {"kind": "webhook", "url": "https://crm.example.com/leads", "auth_header": "Bearer s3cr3t-value"}
)


def check(
    function: Callable[[Context, Target], Any],
    outputs: dict[str, str],
    settings: PipelineSettings | None = None,
) -> list[Finding]:
    stack = StackOutputs(origin="test", values=outputs)
    where = Target(stack, settings or PipelineSettings(), None, False, "aws", "bin/ops")
    ctx = Context(argparse.Namespace(local=False), _stack=stack)
    return list(function(ctx, where))


def statuses(findings: list[Finding]) -> dict[str, str]:
    return {finding.subject: finding.status for finding in findings}


def secret(value: str) -> str:
    return str(
        boto3.client("secretsmanager").create_secret(Name=f"s-{abs(hash(value))}", SecretString=value)["ARN"]
    )


# -- secrets ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(CONSUMER_SECRET_SPECS))
def test_every_placeholder_the_stack_creates_reads_as_unfilled(name: str) -> None:
    assert unfilled(name, CONSUMER_SECRET_SPECS[name].placeholder) is not None


def test_a_placeholder_secret_fails_and_a_filled_one_passes(deployed: Deployed) -> None:
    outputs = {**deployed.outputs, OutputKey.secret_id("crm_api"): secret(PLACEHOLDER_CRM_API)}
    found = check(doctor_checks.check_secrets, outputs)
    failed = [f for f in found if f.status == "FAIL"]
    assert [f.subject for f in failed] == ["crm_api"]
    assert "placeholder" in failed[0].detail
    assert failed[0].fix is not None and "put-secret-value" in failed[0].fix
    assert statuses(found)["telegram_bot_token"] == "OK"

    outputs[OutputKey.secret_id("crm_api")] = secret(FILLED_CRM_API)
    found = check(doctor_checks.check_secrets, outputs)
    assert {f.status for f in found} == {"OK"}
    assert "s3cr3t" not in repr(found)


def test_a_bot_token_secret_that_is_no_bot_token_fails(deployed: Deployed) -> None:
    outputs = {**deployed.outputs, OutputKey.BOT_TOKEN_SECRET_ID: secret("not-a-token")}
    assert statuses(check(doctor_checks.check_secrets, outputs))["telegram_bot_token"] == "FAIL"


def test_the_sms_gateway_placeholder_only_matters_for_the_http_gateway(deployed: Deployed) -> None:
    placeholder = secret(CONSUMER_SECRET_SPECS["sms_gateway"].placeholder)
    outputs = {**deployed.outputs, OutputKey.secret_id("sms_gateway"): placeholder}
    assert statuses(check(doctor_checks.check_secrets, outputs))["sms_gateway"] == "FAIL"
    outputs[OutputKey.SMS_CONFIGURATION_SET] = "pipeline-sms"
    assert statuses(check(doctor_checks.check_secrets, outputs))["sms_gateway"] == "OK"


def test_a_bitrix24_application_token_still_generated_warns(deployed: Deployed) -> None:
    outputs = {**deployed.outputs, OutputKey.BITRIX24_APP_TOKEN_SECRET_ID: secret("A1" * 32)}
    assert statuses(check(doctor_checks.check_secrets, outputs))["Bitrix24 application token"] == "WARN"
    outputs[OutputKey.BITRIX24_APP_TOKEN_SECRET_ID] = secret("0123456789abcdef0123456789abcdef")
    assert statuses(check(doctor_checks.check_secrets, outputs))["Bitrix24 application token"] == "OK"


# -- webhook ---------------------------------------------------------------------------------------
def test_an_unset_webhook_fails_with_set_webhook_as_the_fix(
    deployed: Deployed, telegram: FakeTelegram
) -> None:
    found = check(doctor_checks.check_webhook, deployed.outputs)
    assert [(f.subject, f.status) for f in found] == [("url", "FAIL")]
    assert found[0].fix == "bin/ops set-webhook --yes"


def test_the_stacks_webhook_with_the_registrys_kinds_passes(
    deployed: Deployed, telegram: FakeTelegram
) -> None:
    telegram.webhook_info.update(url=WEBHOOK_URL, allowed_updates=allowed_updates(), pending_update_count=3)
    assert statuses(check(doctor_checks.check_webhook, deployed.outputs)) == {
        "url": "OK",
        "allowed_updates": "OK",
        "delivery": "OK",
    }


def test_a_foreign_url_missing_kinds_and_a_401_fail(deployed: Deployed, telegram: FakeTelegram) -> None:
    telegram.webhook_info.update(
        url="https://elsewhere.example.com/hook",
        allowed_updates=["message"],
        last_error_date=1_767_225_600,
        last_error_message="Wrong response from the webhook: 401 Unauthorized",
    )
    assert statuses(check(doctor_checks.check_webhook, deployed.outputs)) == {
        "url": "FAIL",
        "allowed_updates": "FAIL",
        "delivery": "FAIL",
    }


def test_no_bot_token_makes_the_webhook_check_a_warning(deployed: Deployed, telegram: FakeTelegram) -> None:
    outputs = {**deployed.outputs, OutputKey.BOT_TOKEN_SECRET_ID: secret("REPLACE_WITH_BOT_TOKEN")}
    found = check(doctor_checks.check_webhook, outputs)
    assert [(f.subject, f.status) for f in found] == [("getWebhookInfo", "WARN")]
    assert "placeholder" in found[0].detail
    assert telegram.calls == []


# -- alarms ----------------------------------------------------------------------------------------
def test_a_confirmed_subscription_passes_and_none_warns(deployed: Deployed) -> None:
    sns = boto3.client("sns")
    topic = sns.create_topic(Name="alarms")["TopicArn"]
    outputs = {**deployed.outputs, OutputKey.ALARM_TOPIC_ARN: topic}
    assert [f.status for f in check(doctor_checks.check_alarm_subscriptions, outputs)] == ["WARN"]
    sns.subscribe(TopicArn=topic, Protocol="email", Endpoint="ops@example.com")  # moto confirms it
    found = check(doctor_checks.check_alarm_subscriptions, outputs)
    assert [(f.subject, f.status) for f in found] == [("email o***@example.com", "OK")]


def test_a_pending_confirmation_fails(deployed: Deployed) -> None:
    topic = "arn:aws:sns:eu-central-1:123456789012:alarms"
    with Stubber(aws.client("sns")) as stub:
        stub.add_response(
            "list_subscriptions_by_topic",
            {
                "Subscriptions": [
                    {
                        "SubscriptionArn": "PendingConfirmation",
                        "Protocol": "email",
                        "Endpoint": "ops@example.com",
                    }
                ]
            },
            {"TopicArn": topic},
        )
        found = check(doctor_checks.check_alarm_subscriptions, {OutputKey.ALARM_TOPIC_ARN: topic})
    assert [f.status for f in found] == ["FAIL"]
    assert "ops@example.com" not in repr(found)


# -- DLQs ------------------------------------------------------------------------------------------
def test_empty_dlqs_pass_and_a_dead_letter_fails_naming_peek_and_redrive(deployed: Deployed) -> None:
    assert {f.status for f in check(doctor_checks.check_dlqs, deployed.outputs)} == {"OK"}
    dead_letter(deployed.dlq_urls["crm"], 7)
    failed = [f for f in check(doctor_checks.check_dlqs, deployed.outputs) if f.status == "FAIL"]
    assert [(f.subject, f.detail) for f in failed] == [("crm DLQ", "holds 1 message(s)")]
    assert failed[0].fix == "bin/ops dlq peek crm; fix the cause; bin/ops dlq redrive crm"


# -- pauses ----------------------------------------------------------------------------------------
def test_a_consumer_paused_by_its_account_fails_naming_the_cause_and_the_fix(deployed: Deployed) -> None:
    """The worker notes each pause in the journal (`pipeline.pause.note`); the doctor reads it."""
    crm = by_name("crm")
    assert {f.status for f in check(doctor_checks.check_pauses, deployed.outputs)} == {"OK"}
    note(deployed.journal_table, crm, AccountRefused("bitrix24 crm.lead.add: HTTP 402 ...", "unpaid"))

    found = {f.subject: f for f in check(doctor_checks.check_pauses, deployed.outputs)}

    assert found["crm"].status == "FAIL"
    assert "unpaid" in found["crm"].detail and "HTTP 402" in found["crm"].detail
    assert found["crm"].fix == "pay for the plan; its messages resume by themselves"
    assert {f.status for name, f in found.items() if name != "crm"} == {"OK"}


def test_a_pause_older_than_two_waits_is_over(deployed: Deployed) -> None:
    crm = by_name("crm")
    note(deployed.journal_table, crm, AccountRefused("telegram: 401", "unauthorized"))
    aws.client("dynamodb").update_item(
        TableName=deployed.journal_table,
        Key={"id": {"S": "crm#paused"}},
        UpdateExpression="SET paused_at = :then",
        ExpressionAttributeValues={":then": {"N": str(int(time.time()) - 2 * pause_seconds(crm) - 1)}},
    )

    [finding] = [f for f in check(doctor_checks.check_pauses, deployed.outputs) if f.subject == "crm"]

    assert finding.status == "OK" and finding.detail.startswith("running (last paused")


# -- End User Messaging ----------------------------------------------------------------------------
EUM_OUTPUTS = {OutputKey.queue_url("sms"): "https://q/sms", OutputKey.SMS_CONFIGURATION_SET: "pipeline-sms"}


def eum_responses(stub: Stubber, tier: str, limit: int, phone_found: bool) -> None:
    stub.add_response(
        "describe_account_attributes", {"AccountAttributes": [{"Name": "ACCOUNT_TIER", "Value": tier}]}
    )
    if phone_found:
        stub.add_response(
            "describe_phone_numbers", {"PhoneNumbers": []}, {"PhoneNumberIds": ["phone-number-1"]}
        )
    else:
        stub.add_client_error("describe_phone_numbers", "ResourceNotFoundException", "no such number")
    stub.add_response(
        "describe_spend_limits",
        {
            "SpendLimits": [
                {
                    "Name": "TEXT_MESSAGE_MONTHLY_SPEND_LIMIT",
                    "EnforcedLimit": limit,
                    "MaxLimit": limit,
                    "Overridden": False,
                }
            ]
        },
    )


@pytest.mark.parametrize(
    ("tier", "limit", "phone_found", "expected"),
    [
        ("PRODUCTION", 500, True, {"account tier": "OK", "origination identity": "OK", "spend limit": "OK"}),
        (
            "SANDBOXED",
            1,
            False,
            {"account tier": "WARN", "origination identity": "FAIL", "spend limit": "WARN"},
        ),
    ],
)
def test_end_user_messaging(tier: str, limit: int, phone_found: bool, expected: dict[str, str]) -> None:
    settings = PipelineSettings(sms_origination_identity="phone-number-1")
    with Stubber(aws.client("pinpoint-sms-voice-v2")) as stub:
        eum_responses(stub, tier, limit, phone_found)
        found = check(doctor_checks.check_end_user_messaging, EUM_OUTPUTS, settings)
        stub.assert_no_pending_responses()
    assert statuses(found) == expected


def test_no_origination_identity_anywhere_fails() -> None:
    with Stubber(aws.client("pinpoint-sms-voice-v2")) as stub:
        stub.add_response("describe_account_attributes", {"AccountAttributes": []})
        for operation, key in (
            ("describe_phone_numbers", "PhoneNumbers"),
            ("describe_pools", "Pools"),
            ("describe_sender_ids", "SenderIds"),
        ):
            stub.add_response(operation, {key: []})
        stub.add_response("describe_spend_limits", {"SpendLimits": []})
        found = check(doctor_checks.check_end_user_messaging, EUM_OUTPUTS)
    assert statuses(found)["origination identity"] == "FAIL"


# -- Bedrock ---------------------------------------------------------------------------------------
AI_OUTPUTS = {OutputKey.queue_url("ai"): "https://q/ai"}
MODEL = "anthropic.claude-3-haiku-20240307-v1:0"


def test_a_model_that_answers_passes_and_one_without_access_fails() -> None:
    settings = PipelineSettings(bedrock_model_id=MODEL)
    with Stubber(aws.client("bedrock-runtime")) as stub:
        stub.add_response(
            "converse",
            {
                "output": {"message": {"role": "assistant", "content": [{"text": "p"}]}},
                "stopReason": "max_tokens",
                "usage": {"inputTokens": 8, "outputTokens": 1, "totalTokens": 9},
                "metrics": {"latencyMs": 10},
            },
        )
        assert statuses(check(doctor_checks.check_bedrock, AI_OUTPUTS, settings)) == {MODEL: "OK"}
        stub.add_client_error("converse", "AccessDeniedException", "You don't have access to the model")
        found = check(doctor_checks.check_bedrock, AI_OUTPUTS, settings)
    assert statuses(found) == {MODEL: "FAIL"}
    assert found[0].fix is not None and "Model access" in found[0].fix


# -- Powertools ------------------------------------------------------------------------------------
def test_the_powertools_parameter_present_passes_and_missing_fails_naming_a_listed_version() -> None:
    ssm = aws.client("ssm")
    name = powertools_parameter_name("3.37.0")
    with Stubber(ssm) as stub:
        stub.add_response(
            "get_parameter", {"Parameter": {"Name": name, "Value": "arn:layer"}}, {"Name": name}
        )
        assert [f.status for f in check(doctor_checks.check_powertools, {})] == ["OK"]
        stub.add_client_error("get_parameter", "ParameterNotFound", "not found")
        listed = [{"Name": name.replace("3.37.0", v)} for v in ("3.9.0", "3.30.1", "latest")]
        stub.add_response("get_parameters_by_path", {"Parameters": listed})
        found = check(doctor_checks.check_powertools, {})
    assert [f.status for f in found] == ["FAIL"]
    assert found[0].fix is not None and "powertools_version=3.30.1" in found[0].fix


# -- CRMs ------------------------------------------------------------------------------------------
@pytest.fixture
def crm_answers(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Exception | None]]:
    """What the CRM clients do: None answers, an exception is raised."""
    from pipeline.crm.amocrm import AmoCrmApi
    from pipeline.crm.bitrix24 import Bitrix24Rest

    outcome: dict[str, Exception | None] = {"bitrix24": None, "amocrm": None}

    def bitrix(self: Any, method: str, params: Any) -> list[Any]:
        if outcome["bitrix24"]:
            raise outcome["bitrix24"]
        return [{"STATUS_ID": "NEW"}]

    def amo(self: Any, query: Any, page: int = 1) -> tuple[list[Any], bool]:
        if outcome["amocrm"]:
            raise outcome["amocrm"]
        return [], False

    monkeypatch.setattr(Bitrix24Rest, "call", bitrix)
    monkeypatch.setattr(AmoCrmApi, "status_events", amo)
    yield outcome


def test_crms_answering_pass_and_a_refused_token_fails(
    deployed: Deployed, crm_answers: dict[str, Any]
) -> None:
    from pipeline.errors import RemoteRefused

    outputs = {
        OutputKey.secret_id("bitrix24_api"): secret(
            json.dumps({"url": "https://p.bitrix24.ru/rest/1/code/"})
        ),
        OutputKey.secret_id("amocrm_api"): secret(
            json.dumps({"base_url": "https://a.amocrm.ru", "token": "t0k"})
        ),
    }
    assert statuses(check(doctor_checks.check_crms, outputs)) == {"bitrix24": "OK", "amocrm": "OK"}
    crm_answers["amocrm"] = RemoteRefused("amocrm events: HTTP 401 Unauthorized", "unauthorized")
    found = check(doctor_checks.check_crms, outputs)
    assert statuses(found) == {"bitrix24": "OK", "amocrm": "FAIL"}
    assert "t0k" not in repr(found)


# -- the command -----------------------------------------------------------------------------------
def test_a_check_that_raises_becomes_a_warning_saying_why() -> None:
    def broken(ctx: Context, where: Target) -> list[Finding]:
        raise aws.client("sqs").exceptions.ClientError(
            {"Error": {"Code": "AccessDenied", "Message": "not allowed"}}, "GetQueueAttributes"
        )

    stack = StackOutputs("test", {})
    where = Target(stack, None, "x", False, "aws", "bin/ops")
    found, skipped = run_checks(Context(argparse.Namespace()), where, [("dlqs", broken)])
    assert [(f.status, f.detail) for f in found] == [
        ("WARN", "could not check: no permission for GetQueueAttributes (AccessDenied): not allowed")
    ]
    assert skipped == []


def test_exit_codes() -> None:
    ok, warn, fail = (Finding("c", s, "x", "y") for s in ("OK", "WARN", "FAIL"))  # type: ignore[arg-type]
    assert exit_code([ok, warn], strict=False) == 0
    assert exit_code([ok, warn], strict=True) == 1
    assert exit_code([ok, fail], strict=False) == 1


def test_doctor_json_and_text_report_findings_without_secret_values(
    deployed: Deployed, telegram: FakeTelegram, run: Callable[..., Result]
) -> None:
    result = run("doctor", "--json")
    document = json.loads(result.out)
    assert result.code == 1 == document["exit_code"]
    webhook = [f for f in document["findings"] if f["check"] == "webhook"]
    assert webhook == [
        {
            "check": "webhook",
            "status": "FAIL",
            "subject": "url",
            "detail": "no webhook set: Telegram delivers no update",
            "fix": "bin/ops set-webhook --yes",
        }
    ]
    assert {"check": "sms", "reason": "sms_gateway is http"} in document["not_checked"]
    text = run("doctor")
    assert text.code == 1
    assert "FAIL  webhook" in text.out and "fix: bin/ops set-webhook --yes" in text.out
    assert text.out.rstrip().splitlines()[-1].startswith("doctor: ")
    assert BOT_TOKEN not in result.out + text.out + text.err


def test_a_deleted_or_unreadable_secret_fails_and_every_other_secret_is_still_checked(
    deployed: Deployed, telegram: FakeTelegram, run: Callable[..., Result]
) -> None:
    """Issue 40: a secret deleted out of band made the whole secrets check a WARN ("could not
    check") that stopped at that secret, and `doctor` passed it without a FAIL."""
    secrets = boto3.client("secretsmanager")
    secrets.delete_secret(SecretId=deployed.telegram_secret_id, ForceDeleteWithoutRecovery=True)
    secrets.delete_secret(SecretId="pipeline/crm-signing-key", RecoveryWindowInDays=7)

    result = run("doctor", "--json")

    document = json.loads(result.out)
    found = {f["subject"]: f for f in document["findings"] if f["check"] == "secrets"}
    assert found["Telegram secret_token"]["status"] == "FAIL"
    assert found["Telegram secret_token"]["detail"].startswith("deleted: ")
    assert found["CRM signing key"]["status"] == "FAIL"
    assert found["CRM signing key"]["fix"] == (
        "aws secretsmanager restore-secret --secret-id pipeline/crm-signing-key"
    )
    # the secrets after the unreadable ones: still each checked
    assert (found["CRM token"]["status"], found["telegram_bot_token"]["status"]) == ("OK", "OK")
    assert result.code == 1 == document["exit_code"]
    assert BOT_TOKEN not in result.out + result.err


def test_a_missing_secret_fails_without_stopping_the_consumer_secrets_after_it(deployed: Deployed) -> None:
    unreadable = "arn:aws:secretsmanager:eu-central-1:123456789012:secret:gone-AbCdEf"
    outputs = {**deployed.outputs, OutputKey.CRM_TOKEN_SECRET_ID: unreadable}

    found = statuses(check(doctor_checks.check_secrets, outputs))

    assert found["CRM token"] == "FAIL"
    assert found["telegram_bot_token"] == "OK"


# -- formats ---------------------------------------------------------------------------------------
def test_the_journal_of_a_newer_release_fails_and_a_known_one_is_ok(deployed: Deployed) -> None:
    """An item whose schema_version is newer than this code's means a newer release wrote it:
    deploying this checkout would run code that cannot read it."""
    dynamodb = aws.client("dynamodb")
    dynamodb.put_item(
        TableName=deployed.journal_table, Item={"id": {"S": "crm-sweep-cursor#amocrm"}, "cursor": {"S": "x"}}
    )
    assert statuses(check(doctor_checks.check_formats, deployed.outputs)) == {"journal": "OK"}
    newer = {"id": {"S": "crm-sweep-cursor#bitrix24"}, "schema_version": {"N": "99"}}
    dynamodb.put_item(TableName=deployed.journal_table, Item=newer)
    dynamodb.put_item(TableName=deployed.journal_table, Item={"id": {"S": "mystery#1"}})

    found = {f.subject: f for f in check(doctor_checks.check_formats, deployed.outputs)}

    assert (
        found["crm_sweep_cursor"].status == "FAIL" and "schema_version 99" in found["crm_sweep_cursor"].detail
    )
    assert found["journal"].status == "WARN"
