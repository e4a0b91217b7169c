"""A Lambda function subscribed to an SNS topic, played locally (`worker_process sns ...`).

moto cannot invoke Lambda, so the local runtime subscribes an internal SQS queue to the topic
(not raw: each body is the SNS notification envelope) and this poller hands each message to the
handler as Lambda's SNS subscription does: an asynchronous invocation with one SNS record. A
failed invocation leaves the message in the queue, so it comes back after the visibility
timeout; the queue's redrive (`maxReceiveCount` 3: Lambda's first try and its two asynchronous
retries) then moves it to the function's failed-events queue, as its on-failure destination.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from local.aws_calls import as_local_emulation
from local.lambda_host import EXIT_STOPPED, EXIT_TIMED_OUT
from local.sqs_poller import SqsPoller, report_invocation

# Lambda's asynchronous invocation: the first try plus two retries, then the on-failure destination.
ASYNC_ATTEMPTS = 3


def sns_record(notification: dict[str, Any], subscription_arn: str) -> dict[str, Any]:
    """An SNS notification (as SNS delivers it to an SQS queue) in the shape Lambda invokes with."""
    return {
        "EventVersion": "1.0",
        "EventSubscriptionArn": subscription_arn,
        "EventSource": "aws:sns",
        "Sns": {
            "SignatureVersion": notification.get("SignatureVersion", "1"),
            "Timestamp": notification["Timestamp"],
            "Signature": notification.get("Signature", ""),
            "SigningCertUrl": notification.get("SigningCertURL", ""),
            "MessageId": notification["MessageId"],
            "Message": notification["Message"],
            "MessageAttributes": {
                name: {"Type": value.get("Type"), "Value": value.get("Value")}
                for name, value in (notification.get("MessageAttributes") or {}).items()
            },
            "Type": notification.get("Type", "Notification"),
            "UnsubscribeUrl": notification.get("UnsubscribeURL", ""),
            "TopicArn": notification["TopicArn"],
            "Subject": notification.get("Subject"),
        },
    }


class SnsSubscriptionPoller(SqsPoller):
    """One invocation per SNS message; deletes the message only when the invocation succeeded.

    Its queue is the local stand-in for SNS's own delivery, which needs no role of the function in
    AWS: its receives and deletes are left out of the policy check's recording."""

    service_calls = staticmethod(as_local_emulation)

    def run(self) -> int:
        while not self.stopper.stopping:
            messages = self.receive_batch()
            for message in messages:
                if self.stopper.stopping:
                    return EXIT_STOPPED
                try:
                    record = sns_record(json.loads(message["Body"]), self.args.subscription_arn)
                except (ValueError, KeyError, TypeError, AttributeError):
                    # Not an SNS envelope: nothing SNS would deliver. Said without quoting it.
                    print(
                        "local poller: a message that is not an SNS notification", file=sys.stderr, flush=True
                    )
                    continue
                self.status.send("busy", records=1)
                invocation = self.host.invoke({"Records": [record]})
                if invocation.ok:
                    self.delete([message])
                report_invocation(self.status, invocation)
                if invocation.timed_out:
                    return EXIT_TIMED_OUT
        return EXIT_STOPPED

    def delete(self, records: list[dict[str, Any]]) -> None:
        for message in records:
            try:
                with self.service_calls():
                    self.sqs.delete_message(
                        QueueUrl=self.args.queue_url, ReceiptHandle=message["ReceiptHandle"]
                    )
            except (BotoCoreError, ClientError) as error:
                print(f"local poller: delete failed ({type(error).__name__})", file=sys.stderr, flush=True)
