"""The policy check denies exactly the call whose grant is missing from the synthesized stack.

The end-to-end suite checks every AWS call of a whole run against the local deployment's
template (`tests/e2e`, `local.policy_check`). Here, cheaply: calls recorded the way the function
processes record them (`local.aws_calls`, real botocore clients, stubbed answers), made by the
production code with each function's deployed environment, against the `full` stack (End User
Messaging with a pool and a configuration set, so the reconciler and the `sms` worker send
SMS), first as synthesized, then with one grant removed.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from synthesized import SMS_CONFIGURATION_SET, SMS_POOL_ID, Synthesized
from template_queries import of_type

from local.aws_calls import Recorder
from local.policy_check import PolicyReport, StackResolver, evaluate, read_recorded
from pipeline import aws
from pipeline.sms.gateways import EndUserMessagingGateway, OutgoingSms, build_gateway
from pipeline.sms.journal import BY_STATE_INDEX
from pipeline.sms.settings import SmsSettings

REGION = "eu-central-1"
ACCOUNT = "123456789012"
SMS = f"arn:aws:sms-voice:{REGION}:{ACCOUNT}"


@pytest.fixture(scope="module")
def template(full_synth: Synthesized) -> dict[str, Any]:
    document: dict[str, Any] = full_synth.template.to_json()
    return document


def resolver_for(template: dict[str, Any]) -> StackResolver:
    # No local runtime: every resource resolves to its stand-in, consistently for calls and policies.
    return StackResolver(template, {}, region=REGION, stack_name="TelegramCrmPipeline")


def deployed_environment(template: dict[str, Any], function: str) -> dict[str, str]:
    resolver = resolver_for(template)
    for resource in of_type(template["Resources"], "AWS::Lambda::Function").values():
        variables = resource["Properties"]["Environment"]["Variables"]
        if variables["POWERTOOLS_SERVICE_NAME"] == function:
            return {key: str(resolver.resolve(value)) for key, value in variables.items()}
    raise AssertionError(f"no function {function}")


def recorded_client(directory: Path, function: str, service: str) -> Any:
    recorder = Recorder(directory / f"{function}.jsonl", function, ACCOUNT)
    session = boto3.session.Session(region_name=REGION)
    session.events.register("before-parameter-build", recorder.on_call)
    return session.client(service)  # type: ignore[call-overload]


def send_sms_as(
    directory: Path, template: dict[str, Any], function: str, monkeypatch: pytest.MonkeyPatch
) -> EndUserMessagingGateway:
    """What `function` sends an SMS with: its gateway, built from its deployed environment."""
    with monkeypatch.context() as patch:
        for key, value in deployed_environment(template, function).items():
            patch.setenv(key, value)
        gateway = build_gateway(SmsSettings.from_env())
    assert isinstance(gateway, EndUserMessagingGateway)
    client = recorded_client(directory, function, "pinpoint-sms-voice-v2")
    with Stubber(client) as stub, monkeypatch.context() as patch:
        patch.setattr(aws, "non_retrying_client", lambda service: client)
        stub.add_response("send_text_message", {"MessageId": "m-1"})
        gateway.send(OutgoingSms(key="order-1:ready", phone="+4915123456789", body="Your order is ready"))
    return gateway


@pytest.fixture(scope="module")
def calls_dir(template: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """What the reconciler and the `sms` worker do with AWS when they (re)send an SMS."""
    directory = tmp_path_factory.mktemp("aws-calls")
    with pytest.MonkeyPatch.context() as monkeypatch:
        for function in ("reconciler", "sms"):
            send_sms_as(directory, template, function, monkeypatch)
    reconciler = deployed_environment(template, "reconciler")
    dynamodb = recorded_client(directory, "reconciler", "dynamodb")
    with Stubber(dynamodb) as stub:
        stub.add_response("query", {"Items": []})
        dynamodb.query(
            TableName=reconciler["JOURNAL_TABLE"],
            IndexName=BY_STATE_INDEX,
            KeyConditionExpression="#s = :s",
            ExpressionAttributeNames={"#s": "state"},
            ExpressionAttributeValues={":s": {"S": "unknown"}},
        )
    sqs = recorded_client(directory, "sms", "sqs")
    with Stubber(sqs) as stub:
        stub.add_response("change_message_visibility", {})
        sqs.change_message_visibility(
            QueueUrl=deployed_environment(template, "sms")["QUEUE_URL"],
            ReceiptHandle="r",
            VisibilityTimeout=30,
        )
    yield directory


def without_grant(template: dict[str, Any], function: str, action: str) -> dict[str, Any]:
    """The template with `action` taken out of every statement of `function`'s role."""
    changed = copy.deepcopy(template)
    role = resolver_for(changed).role_of(function)
    removed = 0
    for policy in of_type(changed["Resources"], "AWS::IAM::Policy").values():
        if {"Ref": role} not in policy["Properties"]["Roles"]:
            continue
        statements = policy["Properties"]["PolicyDocument"]["Statement"]
        for statement in statements:
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            removed += action in actions
            statement["Action"] = [a for a in actions if a != action]
        policy["Properties"]["PolicyDocument"]["Statement"] = [s for s in statements if s["Action"]]
    assert removed, f"{function}'s role has no {action} to remove"
    return changed


def check(template: dict[str, Any], calls_dir: Path) -> PolicyReport:
    report = evaluate(resolver_for(template), read_recorded(calls_dir))
    print(report.text())
    return report


def denied(report: PolicyReport) -> list[tuple[str, str, str]]:
    return [(d.check.function, d.check.action, d.check.resource) for d in report.denials]


def test_the_calls_are_recorded_with_the_resources_iam_checks_them_on(calls_dir: Path) -> None:
    checks = {(c.function, c.action, c.resource) for c in read_recorded(calls_dir).checks}
    assert {
        ("reconciler", "sms-voice:SendTextMessage", f"{SMS}:pool/{SMS_POOL_ID}"),
        ("reconciler", "sms-voice:SendTextMessage", f"{SMS}:configuration-set/{SMS_CONFIGURATION_SET}"),
        ("reconciler", "sms-voice:SendTextMessage", f"{SMS}:opt-out-list/*"),
        ("sms", "sms-voice:SendTextMessage", f"{SMS}:pool/{SMS_POOL_ID}"),
    } <= checks


def test_every_recorded_call_is_allowed_by_the_stack_as_synthesized(
    template: dict[str, Any], calls_dir: Path
) -> None:
    report = check(template, calls_dir)
    assert report.ok
    assert report.calls == 4
    # Grants no recorded call used are listed (here: most of them, these few calls being all there
    # is); the end-to-end runs, which make every call, fail on those not explained (report.unexplained).
    assert ("sms", "sqs:DeleteMessage") in {(g.function, g.action) for g in report.unused}


def test_without_the_reconcilers_send_text_message_grant_exactly_its_sends_are_denied(
    template: dict[str, Any], calls_dir: Path
) -> None:
    report = check(without_grant(template, "reconciler", "sms-voice:SendTextMessage"), calls_dir)
    assert denied(report) == [
        ("reconciler", "sms-voice:SendTextMessage", f"{SMS}:configuration-set/{SMS_CONFIGURATION_SET}"),
        ("reconciler", "sms-voice:SendTextMessage", f"{SMS}:opt-out-list/*"),
        ("reconciler", "sms-voice:SendTextMessage", f"{SMS}:pool/{SMS_POOL_ID}"),
    ]
    text = report.text()
    assert "DENIED reconciler (handler): sms-voice:SendTextMessage on " in text
    assert "action does not match" in text  # each of the role's statements, and why it did not allow


def test_without_a_workers_change_message_visibility_grant_exactly_that_call_is_denied(
    template: dict[str, Any], calls_dir: Path
) -> None:
    report = check(without_grant(template, "sms", "sqs:ChangeMessageVisibility"), calls_dir)
    queue_name = deployed_environment(template, "sms")["QUEUE_URL"].rsplit("/", 1)[1]
    queue_arn = f"arn:aws:sqs:{REGION}:{ACCOUNT}:{queue_name}"
    assert denied(report) == [("sms", "sqs:ChangeMessageVisibility", queue_arn)]


def with_grant(template: dict[str, Any], function: str, action: str, on: str) -> dict[str, Any]:
    """The template with `action` added to the statement of `function`'s role that grants `on`."""
    changed = copy.deepcopy(template)
    role = resolver_for(changed).role_of(function)
    for policy in of_type(changed["Resources"], "AWS::IAM::Policy").values():
        if {"Ref": role} in policy["Properties"]["Roles"]:
            for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
                if on in json.dumps(statement["Action"]):
                    statement["Action"] = [*statement["Action"], action]
                    return changed
    raise AssertionError(f"{function}'s role grants no {on}")


@pytest.fixture(scope="module")
def store_calls(template: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What the `store` worker does with AWS for one update: the journal claim and its completion,
    the conversation's item, and the event source mapping's receive and delete."""
    directory = tmp_path_factory.mktemp("store-calls")
    env = deployed_environment(template, "store")
    dynamodb = recorded_client(directory, "store", "dynamodb")
    key = {"id": {"S": "store#telegram:default:1"}}
    with Stubber(dynamodb) as stub:
        stub.add_response("put_item", {})
        stub.add_response("update_item", {})
        stub.add_response("update_item", {})
        dynamodb.put_item(TableName=env["JOURNAL_TABLE"], Item=key)
        dynamodb.update_item(TableName=env["JOURNAL_TABLE"], Key=key)
        dynamodb.update_item(
            TableName=env["CONVERSATIONS_TABLE"], Key={"pk": {"S": "chat#1"}, "sk": {"S": "update#1"}}
        )
    sqs = recorded_client(directory, "store", "sqs")
    with Stubber(sqs) as stub:
        stub.add_response("receive_message", {})
        stub.add_response("delete_message", {})
        sqs.receive_message(QueueUrl=env["QUEUE_URL"])
        sqs.delete_message(QueueUrl=env["QUEUE_URL"], ReceiptHandle="r")
    return directory


def test_store_is_granted_nothing_its_calls_do_not_need_and_a_grant_more_is_reported(
    template: dict[str, Any], store_calls: Path
) -> None:
    """Issue 23: every (function, action) a role grants must be used by a call, or explained in
    `local.policy_grants.ALLOWED_UNUSED` (the Lambda service's logs, the worker's failure paths).
    `store`'s role is exactly its calls; one action more (a Scan it never makes) is reported."""
    report = check(template, store_calls)
    assert report.ok
    assert report.unexplained(["store"]) == []
    wider = check(with_grant(template, "store", "dynamodb:Scan", on="dynamodb:PutItem"), store_calls)
    assert wider.unexplained(["store"]) == [("store", "dynamodb:Scan")]
    assert "UNUSED GRANT store: dynamodb:Scan" in wider.text()
