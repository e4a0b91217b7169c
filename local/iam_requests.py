"""What IAM authorizes for one AWS API call: its actions and the resource ARN each is checked on.

`authorizations(service, operation, params, region=..., account=...)` takes what botocore knows
before it builds a request (the IAM service prefix is the service model's signing name:
`bedrock` for bedrock-runtime, `sms-voice` for pinpoint-sms-voice-v2) and answers as the
Service Authorization Reference does for that action, e.g.

    sqs ChangeMessageVisibilityBatch {QueueUrl: .../123456789012/q}  -> sqs:ChangeMessageVisibility on
                                                                        arn:aws:sqs:<region>:123456789012:q
    dynamodb Query {TableName: t, IndexName: i}                       -> dynamodb:Query on .../table/t/index/i
    bedrock Converse {modelId: eu.anthropic...}                       -> bedrock:InvokeModel on the inference
                                                                        profile and on the model it routes to

A part of a resource that is only decided after the request (the region an inference profile
routes to, the identity End User Messaging picks when none is given, the identity's opt-out
list) is written `*`: only a grant that covers every value passes (`local.policy_check`).
An operation this module does not know is checked on `*`, so it is reported until its resource
is derived here, never silently allowed. Only identifiers are read from `params`, never values.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

PARTITION = "aws"
UNKNOWN = "*"
# Operations authorized as another action (batch forms, Bedrock's Converse API).
ACTION_OF: dict[tuple[str, str], str] = {
    ("sqs", "SendMessageBatch"): "SendMessage",
    ("sqs", "DeleteMessageBatch"): "DeleteMessage",
    ("sqs", "ChangeMessageVisibilityBatch"): "ChangeMessageVisibility",
    ("sns", "PublishBatch"): "Publish",
    ("bedrock", "Converse"): "InvokeModel",
    ("bedrock", "ConverseStream"): "InvokeModelWithResponseStream",
}
# Calls IAM does not authorize (anyone may ask who they are).
UNAUTHORIZED: frozenset[tuple[str, str]] = frozenset({("sts", "GetCallerIdentity")})
# A system-defined cross-region inference profile id starts with its geography: `eu.anthropic...`.
INFERENCE_PROFILE_ID = re.compile(r"^(us|eu|apac|us-gov|jp|au|ca|global)\.(.+)$")
# DynamoDB transaction items and the action each is authorized as.
TRANSACT_ACTIONS = {
    "Put": "PutItem",
    "Update": "UpdateItem",
    "Delete": "DeleteItem",
    "ConditionCheck": "ConditionCheckItem",
    "Get": "GetItem",
}


@dataclass(frozen=True)
class Authorization:
    """One check IAM makes for a call: `action` (e.g. "sqs:DeleteMessage") on `resource` (an ARN or "*")."""

    action: str
    resource: str


def authorizations(
    service: str, operation: str, params: Mapping[str, Any], *, region: str, account: str
) -> list[Authorization]:
    """Every (action, resource) IAM checks for `operation` of `service` (IAM prefix) with `params`."""
    if (service, operation) in UNAUTHORIZED:
        return []
    action = f"{service}:{ACTION_OF.get((service, operation), operation)}"
    arn = _Arns(region, account)
    derive = _DERIVERS.get(service)
    resources = derive(arn, operation, params) if derive is not None else None
    if resources is None:
        return [Authorization(action, UNKNOWN)]
    return [
        Authorization(f"{service}:{named}" if named else action, resource) for named, resource in resources
    ]


@dataclass(frozen=True)
class _Arns:
    region: str
    account: str

    def __call__(
        self, service: str, resource: str, *, region: str | None = None, account: str | None = None
    ) -> str:
        return (
            f"arn:{PARTITION}:{service}:{self.region if region is None else region}:"
            f"{self.account if account is None else account}:{resource}"
        )


# A deriver answers [(action or "" for the call's own, resource)], or None for "not known here".
Resources = list[tuple[str, str]] | None


def _sqs(arn: _Arns, operation: str, params: Mapping[str, Any]) -> Resources:
    if "QueueUrl" in params:
        path = [part for part in urlparse(str(params["QueueUrl"])).path.split("/") if part]
        if not path:
            return None
        account = path[-2] if len(path) >= 2 and re.fullmatch(r"\d{12}", path[-2]) else None
        return [("", arn("sqs", path[-1], account=account))]
    if "QueueName" in params:  # GetQueueUrl, CreateQueue
        return [("", arn("sqs", str(params["QueueName"]), account=params.get("QueueOwnerAWSAccountId")))]
    if operation == "ListQueues":
        return [("", UNKNOWN)]
    return None


def _sns(arn: _Arns, operation: str, params: Mapping[str, Any]) -> Resources:
    for key in ("TopicArn", "TargetArn", "ResourceArn"):
        if key in params:
            return [("", str(params[key]))]
    if operation == "Publish" and "PhoneNumber" in params:
        return [("", UNKNOWN)]  # a direct SMS has no resource
    return None


def _table_arn(arn: _Arns, table: str, index: str | None = None) -> str:
    base = table if table.startswith("arn:") else arn("dynamodb", f"table/{table}")
    return f"{base}/index/{index}" if index else base


def _dynamodb(arn: _Arns, operation: str, params: Mapping[str, Any]) -> Resources:
    if operation in ("BatchGetItem", "BatchWriteItem"):
        return [("", _table_arn(arn, str(table))) for table in params.get("RequestItems", {})]
    if operation in ("TransactWriteItems", "TransactGetItems"):
        found: list[tuple[str, str]] = []
        for item in params.get("TransactItems", []):
            for kind, request in item.items():
                if kind in TRANSACT_ACTIONS and "TableName" in request:
                    found.append((TRANSACT_ACTIONS[kind], _table_arn(arn, str(request["TableName"]))))
        return found or None
    if "TableName" in params:
        index = params.get("IndexName") if operation in ("Query", "Scan") else None
        return [("", _table_arn(arn, str(params["TableName"]), index))]
    if "ResourceArn" in params:
        return [("", str(params["ResourceArn"]))]
    if operation == "ListTables":
        return [("", UNKNOWN)]
    return None


def _secretsmanager(arn: _Arns, operation: str, params: Mapping[str, Any]) -> Resources:
    if "SecretId" not in params:
        return [("", UNKNOWN)] if operation in ("ListSecrets", "GetRandomPassword") else None
    secret = str(params["SecretId"])
    # A name stands for the secret's ARN, which ends in a random suffix `local.policy_check` completes.
    return [("", secret if secret.startswith("arn:") else arn("secretsmanager", f"secret:{secret}"))]


def _bedrock(arn: _Arns, operation: str, params: Mapping[str, Any]) -> Resources:
    model = params.get("modelId")
    if not isinstance(model, str):
        return None
    if model.startswith("arn:"):
        profile = re.fullmatch(r"arn:[^:]+:bedrock:[^:]*:\d*:inference-profile/(.+)", model)
        routed = profile and INFERENCE_PROFILE_ID.match(profile.group(1))
        if routed:
            return [
                ("", model),
                ("", arn("bedrock", f"foundation-model/{routed.group(2)}", region=UNKNOWN, account="")),
            ]
        return [("", model)]
    routed = INFERENCE_PROFILE_ID.match(model)
    if routed:
        # Through a cross-region profile: the profile, and the model in whichever region it routes to.
        return [
            ("", arn("bedrock", f"inference-profile/{model}")),
            ("", arn("bedrock", f"foundation-model/{routed.group(2)}", region=UNKNOWN, account="")),
        ]
    return [("", arn("bedrock", f"foundation-model/{model}", account=""))]


# Origination identities by their id's prefix (an ARN is used as it is; anything else is a sender id).
SMS_IDENTITY_KINDS = (("phone-", "phone-number"), ("pool-", "pool"))


def _sms_voice(arn: _Arns, operation: str, params: Mapping[str, Any]) -> Resources:
    """SendTextMessage is authorized on its origination identity (phone-number, pool or sender-id),
    its configuration set, the identity's opt-out list and its protect configuration, each when
    the send involves one (Service Authorization Reference, AWS End User Messaging SMS and Voice v2)."""
    if operation not in ("SendTextMessage", "SendMediaMessage", "SendVoiceMessage"):
        return None
    found: list[tuple[str, str]] = []
    identity = params.get("OriginationIdentity")
    if not identity:
        # End User Messaging picks one of the account's identities: any of them must be allowed.
        found += [
            ("", arn("sms-voice", f"{kind}/{UNKNOWN}")) for kind in ("phone-number", "pool", "sender-id")
        ]
    elif str(identity).startswith("arn:"):
        found.append(("", str(identity)))
    elif str(identity).startswith("+"):
        # An E.164 number is authorized as its phone-number resource, whose id the request lacks.
        found.append(("", arn("sms-voice", f"phone-number/{UNKNOWN}")))
    else:
        kind = next((kind for prefix, kind in SMS_IDENTITY_KINDS if str(identity).startswith(prefix)), None)
        if kind is not None:
            found.append(("", arn("sms-voice", f"{kind}/{identity}")))
        else:
            country = _country_of(params.get("DestinationPhoneNumber"))
            found.append(("", arn("sms-voice", f"sender-id/{identity}/{country}")))
    configuration_set = params.get("ConfigurationSetName")
    if configuration_set:
        name = str(configuration_set)
        found.append(("", name if name.startswith("arn:") else arn("sms-voice", f"configuration-set/{name}")))
    # Which opt-out list the identity has is configured on the identity, not in the request.
    found.append(("", arn("sms-voice", f"opt-out-list/{UNKNOWN}")))
    protect = params.get("ProtectConfigurationId")
    if protect:
        name = str(protect)
        found.append(
            ("", name if name.startswith("arn:") else arn("sms-voice", f"protect-configuration/{name}"))
        )
    return found


def _country_of(phone: Any) -> str:
    """The ISO country code of an E.164 number (a sender id's ARN ends in it), `*` when unknown."""
    try:
        import phonenumbers  # the shared layer's dependency; only needed for a sender id

        region = phonenumbers.region_code_for_number(phonenumbers.parse(str(phone), None))
    except Exception:
        return UNKNOWN
    return str(region) if region and region != "ZZ" else UNKNOWN


def _kms(arn: _Arns, operation: str, params: Mapping[str, Any]) -> Resources:
    key = params.get("KeyId")
    if not isinstance(key, str):
        return None
    if key.startswith("arn:"):
        return [("", key)]
    return [("", arn("kms", key if key.startswith("alias/") else f"key/{key}"))]


_DERIVERS = {
    "sqs": _sqs,
    "sns": _sns,
    "dynamodb": _dynamodb,
    "secretsmanager": _secretsmanager,
    "bedrock": _bedrock,
    "sms-voice": _sms_voice,
    "kms": _kms,
}
