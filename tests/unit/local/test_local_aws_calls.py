"""The AWS call recorder of the local function processes and the IAM authorizations it derives.

`local.iam_requests` answers, per API call, the IAM actions and resource ARNs AWS authorizes it
as (Service Authorization Reference); `local.aws_calls` records them from botocore's events in
each function process, and only when the local runtime asks for it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from local.aws_calls import Recorder
from local.iam_requests import Authorization, authorizations
from local.runtime import LAYER_DIR, PROJECT_ROOT

REGION = "eu-central-1"
ACCOUNT = "123456789012"
QUEUE_URL = f"http://127.0.0.1:4566/{ACCOUNT}/TelegramCrmPipeline-store"
QUEUE_ARN = f"arn:aws:sqs:{REGION}:{ACCOUNT}:TelegramCrmPipeline-store"
TABLE_ARN = f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/TelegramCrmPipeline-journal"
SMS = f"arn:aws:sms-voice:{REGION}:{ACCOUNT}"


def derive(service: str, operation: str, **params: Any) -> list[tuple[str, str]]:
    return [
        (a.action, a.resource)
        for a in authorizations(service, operation, params, region=REGION, account=ACCOUNT)
    ]


@pytest.mark.parametrize(
    ("operation", "params", "expected"),
    [
        ("ReceiveMessage", {"QueueUrl": QUEUE_URL}, [("sqs:ReceiveMessage", QUEUE_ARN)]),
        ("DeleteMessageBatch", {"QueueUrl": QUEUE_URL, "Entries": []}, [("sqs:DeleteMessage", QUEUE_ARN)]),
        (
            "ChangeMessageVisibility",
            {"QueueUrl": QUEUE_URL, "ReceiptHandle": "r", "VisibilityTimeout": 5},
            [("sqs:ChangeMessageVisibility", QUEUE_ARN)],
        ),
        ("GetQueueUrl", {"QueueName": "TelegramCrmPipeline-store"}, [("sqs:GetQueueUrl", QUEUE_ARN)]),
    ],
)
def test_an_sqs_call_is_authorized_on_the_queue_its_url_names(
    operation: str, params: dict[str, Any], expected: list[tuple[str, str]]
) -> None:
    assert derive("sqs", operation, **params) == expected


def test_dynamodb_calls_are_authorized_on_their_table_and_a_query_on_an_index_on_the_index() -> None:
    assert derive("dynamodb", "GetItem", TableName="TelegramCrmPipeline-journal", Key={}) == [
        ("dynamodb:GetItem", TABLE_ARN)
    ]
    assert derive("dynamodb", "Query", TableName="TelegramCrmPipeline-journal", IndexName="by_state") == [
        ("dynamodb:Query", f"{TABLE_ARN}/index/by_state")
    ]
    # A table named by its ARN, and the actions of a transaction's items.
    assert derive(
        "dynamodb",
        "TransactWriteItems",
        TransactItems=[{"Put": {"TableName": TABLE_ARN}}, {"ConditionCheck": {"TableName": "other"}}],
    ) == [
        ("dynamodb:PutItem", TABLE_ARN),
        ("dynamodb:ConditionCheckItem", f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/other"),
    ]


def test_a_secret_is_authorized_on_its_arn_whether_named_by_arn_or_by_name() -> None:
    arn = f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:TelegramCrmPipeline/crm-AbC123"
    assert derive("secretsmanager", "GetSecretValue", SecretId=arn) == [
        ("secretsmanager:GetSecretValue", arn)
    ]
    # By name: the ARN without its random suffix, which the policy check completes.
    assert derive("secretsmanager", "GetSecretValue", SecretId="TelegramCrmPipeline/crm") == [
        (
            "secretsmanager:GetSecretValue",
            f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:TelegramCrmPipeline/crm",
        )
    ]


def test_bedrock_converse_is_invoke_model_on_the_model_or_on_the_profile_and_its_routed_model() -> None:
    model = "anthropic.claude-3-haiku-20240307-v1:0"
    assert derive("bedrock", "Converse", modelId=model) == [
        ("bedrock:InvokeModel", f"arn:aws:bedrock:{REGION}::foundation-model/{model}")
    ]
    assert derive("bedrock", "Converse", modelId=f"eu.{model}") == [
        ("bedrock:InvokeModel", f"arn:aws:bedrock:{REGION}:{ACCOUNT}:inference-profile/eu.{model}"),
        ("bedrock:InvokeModel", f"arn:aws:bedrock:*::foundation-model/{model}"),
    ]


@pytest.mark.parametrize(
    ("params", "identity_resources"),
    [
        ({"OriginationIdentity": "pool-0123abc"}, [f"{SMS}:pool/pool-0123abc"]),
        ({"OriginationIdentity": "phone-0123abc"}, [f"{SMS}:phone-number/phone-0123abc"]),
        ({"OriginationIdentity": f"{SMS}:pool/pool-9"}, [f"{SMS}:pool/pool-9"]),
        # A sender id's ARN ends in the destination's country.
        ({"OriginationIdentity": "MyShop"}, [f"{SMS}:sender-id/MyShop/DE"]),
        # None given: End User Messaging picks one, so every kind must be allowed.
        ({}, [f"{SMS}:phone-number/*", f"{SMS}:pool/*", f"{SMS}:sender-id/*"]),
    ],
)
def test_send_text_message_is_authorized_on_identity_configuration_set_and_opt_out_list(
    params: dict[str, Any], identity_resources: list[str]
) -> None:
    found = derive(
        "sms-voice",
        "SendTextMessage",
        DestinationPhoneNumber="+4915123456789",
        MessageBody="hello",
        ConfigurationSetName="shop-notifications",
        **params,
    )
    assert found == [
        ("sms-voice:SendTextMessage", resource)
        for resource in [
            *identity_resources,
            f"{SMS}:configuration-set/shop-notifications",
            f"{SMS}:opt-out-list/*",
        ]
    ]


def test_an_operation_without_a_derivation_is_checked_on_star_and_sts_identity_not_at_all() -> None:
    assert derive("dynamodb", "ExecuteStatement", Statement="SELECT 1") == [
        ("dynamodb:ExecuteStatement", "*")
    ]
    assert derive("sts", "GetCallerIdentity") == []


def recorded_session(path: Path, function: str = "store") -> tuple[boto3.session.Session, Recorder]:
    recorder = Recorder(path, function, ACCOUNT)
    session = boto3.session.Session(region_name=REGION)
    session.events.register("before-parameter-build", recorder.on_call)
    return session, recorder


def test_the_recorder_writes_one_line_per_call_with_identifiers_and_no_values(tmp_path: Path) -> None:
    path = tmp_path / "calls" / "sms.jsonl"
    session, _ = recorded_session(path, "sms")
    client = session.client("sqs")
    with Stubber(client) as stub:
        stub.add_response("send_message", {"MessageId": "1"})
        client.send_message(QueueUrl=QUEUE_URL, MessageBody="+4915123456789 secret-body")

    (line,) = path.read_text().splitlines()
    assert json.loads(line) == {
        "function": "sms",
        "by": "handler",
        "service": "sqs",
        "operation": "SendMessage",
        "authorizations": [{"action": "sqs:SendMessage", "resource": QUEUE_ARN}],
    }


@pytest.mark.parametrize(
    ("made_by", "recorded"),
    [
        # The event source mapping's receives are Lambda's, made with the function's role.
        ("as_lambda_service", [("ReceiveMessage", "lambda"), ("DeleteMessage", "handler")]),
        # SNS invokes a subscribed function without any role of the function: the local runtime's
        # queue standing in for that delivery is not the function's to be allowed.
        ("as_local_emulation", [("DeleteMessage", "handler")]),
    ],
)
def test_who_makes_a_call_decides_how_it_is_recorded(
    tmp_path: Path, made_by: str, recorded: list[tuple[str, str]]
) -> None:
    from local import aws_calls

    path = tmp_path / "calls.jsonl"
    session, _ = recorded_session(path)
    client = session.client("sqs")
    with Stubber(client) as stub:
        stub.add_response("receive_message", {})
        with getattr(aws_calls, made_by)():
            client.receive_message(QueueUrl=QUEUE_URL)
        stub.add_response("delete_message", {})
        client.delete_message(QueueUrl=QUEUE_URL, ReceiptHandle="r")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(line["operation"], line["by"]) for line in lines] == recorded


def test_the_sns_subscription_pollers_calls_are_local_emulation() -> None:
    from local.aws_calls import as_local_emulation
    from local.sns_subscription import SnsSubscriptionPoller

    assert SnsSubscriptionPoller.service_calls is as_local_emulation


def test_without_the_variable_nothing_is_registered_and_the_derivation_is_not_imported() -> None:
    """Production pays nothing: the function host imports the hook module, which registers
    nothing and imports nothing more unless the local runtime set LOCAL_AWS_CALLS_FILE."""
    code = (
        "import sys\n"
        "from botocore import handlers\n"
        "before = len(handlers.BUILTIN_HANDLERS)\n"
        "from local import aws_calls, lambda_host\n"
        "assert aws_calls.install_from_environment('123456789012') is None\n"
        "assert len(handlers.BUILTIN_HANDLERS) == before\n"
        "assert 'local.iam_requests' not in sys.modules\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "LOCAL_AWS_CALLS_FILE"}
    env["PYTHONPATH"] = os.pathsep.join([str(LAYER_DIR), str(PROJECT_ROOT)])
    subprocess.run([sys.executable, "-c", code], env=env, check=True, cwd=PROJECT_ROOT)


def test_with_the_variable_every_new_session_records_including_the_pipelines_clients(tmp_path: Path) -> None:
    """As in a function process: the host installs the hook, then `pipeline.aws` builds its clients."""
    path = tmp_path / "crm.jsonl"
    code = (
        "from botocore.stub import Stubber\n"
        "from local import aws_calls\n"
        "assert aws_calls.install_from_environment('123456789012') is not None\n"
        "from pipeline import aws\n"
        "client = aws.client('sqs')\n"
        "with Stubber(client) as stub:\n"
        "    stub.add_response('change_message_visibility', {})\n"
        f"    client.change_message_visibility(QueueUrl={QUEUE_URL!r}, ReceiptHandle='r',\n"
        "                                     VisibilityTimeout=5)\n"
    )
    env = {
        **os.environ,
        "LOCAL_AWS_CALLS_FILE": str(path),
        "POWERTOOLS_SERVICE_NAME": "crm",
        "AWS_REGION": REGION,
        "PYTHONPATH": os.pathsep.join([str(LAYER_DIR), str(PROJECT_ROOT)]),
    }
    subprocess.run([sys.executable, "-c", code], env=env, check=True, cwd=PROJECT_ROOT)
    (line,) = path.read_text().splitlines()
    record = json.loads(line)
    assert record["function"] == "crm"
    assert record["authorizations"] == [{"action": "sqs:ChangeMessageVisibility", "resource": QUEUE_ARN}]


def test_a_derivation_error_is_recorded_and_the_call_still_goes_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "store.jsonl"
    session, recorder = recorded_session(path)

    def broken(*args: Any, **kwargs: Any) -> list[Authorization]:
        raise KeyError("boom")

    monkeypatch.setattr(recorder, "_authorizations", broken)
    client = session.client("sqs")
    with Stubber(client) as stub:
        stub.add_response("get_queue_attributes", {"Attributes": {}})
        assert client.get_queue_attributes(QueueUrl=QUEUE_URL)["Attributes"] == {}
    assert json.loads(path.read_text())["error"] == "KeyError: 'boom'"
