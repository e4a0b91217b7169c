"""Grants no recorded call used, and the few that are explained (the other half of `local.policy_check`).

"What a function calls in AWS is what its role allows, and it is granted nothing it never calls."
`local.policy_check` checks the first half call by call. For the second, `PolicyReport.unexercised`
lists each (function, action) its role grants that no call it made in the run needed; after an
end-to-end run, every one of them must be listed in ALLOWED_UNUSED with the reason it is granted
anyway, or `unexplained` reports it (and the e2e policy tests fail).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

# Actions the Lambda service and the X-Ray SDK use with the role, never the handler's code.
LAMBDA_OWN_ACTIONS = re.compile(r"^(logs|xray):")
ANY_FUNCTION = "*"
_LAMBDA_LOGS = "the Lambda service writes the function's logs with its role; locally nothing does"
_XRAY = "with `tracing` on, the Lambda service and the X-Ray SDK send traces with the role (off locally)"
_WORKER_FAILURE = (
    "the shared worker's (pipeline.worker) failure path, run end to end by the consumers whose "
    "scenarios fail (crm, bitrix24); a consumer whose handler never fails in the run leaves it unused"
)
# (function or ANY_FUNCTION, action) -> why the role has it although no call of the run used it.
ALLOWED_UNUSED: dict[tuple[str, str], str] = {
    (ANY_FUNCTION, "logs:CreateLogStream"): _LAMBDA_LOGS,
    (ANY_FUNCTION, "logs:PutLogEvents"): _LAMBDA_LOGS,
    (ANY_FUNCTION, "xray:PutTraceSegments"): _XRAY,
    (ANY_FUNCTION, "xray:PutTelemetryRecords"): _XRAY,
    (ANY_FUNCTION, "sqs:GetQueueAttributes"): (
        "Lambda's SQS event source mapping reads its queue's attributes with the function's role "
        "(granted with the event source by the CDK); the local runtime's poller does not"
    ),
    (ANY_FUNCTION, "sqs:GetQueueUrl"): (
        "granted by the CDK's SQS event source (Queue.grantConsumeMessages) with the consume actions; "
        "no code calls it: an excess the L2 construct does not let us drop"
    ),
    # A transient failure's backoff and a permanent failure's dead letter.
    (ANY_FUNCTION, "sqs:ChangeMessageVisibility"): _WORKER_FAILURE,
    (ANY_FUNCTION, "sqs:SendMessage"): _WORKER_FAILURE,
    # Powertools idempotency: releasing the claim of a failed handler run; reading a claim its
    # conditional put did not return (DynamoDB returns it: ReturnValuesOnConditionCheckFailure).
    (ANY_FUNCTION, "dynamodb:DeleteItem"): _WORKER_FAILURE,
    ("reconciler", "sms-voice:SendTextMessage"): (
        "the resend of an `unknown` SMS the gateway proves never arrived; the run's unknowns settle "
        "otherwise (tests/infra/test_infra_policy_check.py records this call and checks its grant)"
    ),
    **dict.fromkeys(
        (("sms", "sns:Publish"), ("sms", "kms:Decrypt"), ("sms", "kms:GenerateDataKey")),
        "the sms consumer asks the CRM consumer to look at an order again (pipeline.sms.recheck: "
        "publishing to the encrypted events topic) only when a notification refused for an invalid "
        "number is redriven; the run redrives none (tests/unit/consumers/test_crm_phone_fixed.py does)",
    ),
    (ANY_FUNCTION, "dynamodb:GetItem"): (
        "Powertools idempotency reads a claim when its conditional put returns no old item, and the "
        "consumers' own reads (contacts, send journal, Bot API journal) happen only on repeats"
    ),
}


@dataclass(frozen=True)
class UnusedGrant:
    """One (action, resource) of a function's role that no call of the run needed."""

    function: str
    action: str
    resource: str


def unused_lines(grants: list[UnusedGrant]) -> list[str]:
    """One line per function and resource: the actions granted on it that no call used."""
    grouped: dict[tuple[str, str], list[str]] = {}
    for grant in grants:
        grouped.setdefault((grant.function, grant.resource), []).append(grant.action)
    lines = []
    for (function, resource), actions in grouped.items():
        own = all(LAMBDA_OWN_ACTIONS.match(action) for action in actions)
        note = "  (the Lambda service's: logs, X-Ray)" if own else ""
        lines.append(f"  {function}: {', '.join(actions)} on {resource}{note}")
    return lines


def unexplained(unexercised: Iterable[tuple[str, str]], functions: Iterable[str]) -> list[tuple[str, str]]:
    """The (function, action) grants of `functions` (those the run ran) that no call used and
    ALLOWED_UNUSED does not explain."""
    ran = set(functions)
    return sorted(
        (function, action)
        for function, action in unexercised
        if function in ran
        and (function, action) not in ALLOWED_UNUSED
        and (ANY_FUNCTION, action) not in ALLOWED_UNUSED
    )


def unexplained_lines(grants: list[tuple[str, str]]) -> list[str]:
    return [
        f"UNUSED GRANT {function}: {action} (no call of the run needed it)" for function, action in grants
    ]
