"""The stack's CloudFormation output keys, shared by the stack and the ops CLI (no CDK import)."""

from __future__ import annotations

from infra.naming import pascal_case
from pipeline.registry import CONSUMERS


class OutputKey:
    """CloudFormation output keys: `infra/stack.py` names its outputs with these, and the ops CLI
    reads them back; tests/infra checks that every output the stack has is one of `every()`."""

    WEBHOOK_URL = "WebhookUrl"
    CRM_URL = "CrmUrl"
    EVENTS_TOPIC_ARN = "EventsTopicArn"
    # Output names, not secrets:
    TELEGRAM_SECRET_ID = "TelegramSecretId"  # noqa: S105
    CRM_SECRET_ID = "CrmSecretId"  # noqa: S105
    CRM_TOKEN_SECRET_ID = "CrmTokenSecretId"  # noqa: S105
    BOT_TOKEN_SECRET_ID = "TelegramBotTokenSecretId"  # noqa: S105
    # CRMs posting their own webhooks (where connected): the URLs to paste into the CRM.
    BITRIX24_URL = "Bitrix24WebhookUrl"
    BITRIX24_APP_TOKEN_SECRET_ID = "Bitrix24AppTokenSecretId"  # noqa: S105
    AMOCRM_URL = "AmoCrmWebhookUrl"
    JOURNAL_TABLE = "JournalTableName"
    # Monitoring: subscribe to the alarm topic; the dashboard shows the whole pipeline.
    ALARM_TOPIC_ARN = "AlarmTopicArn"
    DASHBOARD_NAME = "DashboardName"
    # The release deployed (`infra.version`): `ops doctor` compares it with the checkout's.
    VERSION = "Version"
    # SMS (with the `sms` consumer); the delivery events exist only with End User Messaging.
    SMS_RECONCILER_NAME = "SmsReconcilerName"
    SMS_EVENTS_TOPIC_ARN = "SmsEventsTopicArn"
    SMS_CONFIGURATION_SET = "SmsConfigurationSet"
    # An HTTP gateway's inbound-message callback (STOP/START replies) and its token's secret.
    SMS_INBOUND_URL = "SmsInboundUrl"
    SMS_INBOUND_TOKEN_SECRET_ID = "SmsInboundTokenSecretId"  # noqa: S105
    # What the delivery-event handler failed on, and what SNS could not hand to it.
    SMS_EVENTS_DLQ_ROLES = ("failed", "undelivered")

    @staticmethod
    def table_name(table: str) -> str:
        return f"{pascal_case(table)}TableName"

    @staticmethod
    def secret_id(secret: str) -> str:
        return f"{pascal_case(secret)}SecretId"

    @staticmethod
    def queue_url(consumer: str) -> str:
        return f"{pascal_case(consumer)}QueueUrl"

    @staticmethod
    def dlq_url(consumer: str) -> str:
        return f"{pascal_case(consumer)}DlqUrl"

    @staticmethod
    def delivery_dlq_url(consumer: str) -> str:
        """Where SNS puts what it could not deliver to the consumer's queue."""
        return f"{pascal_case(consumer)}DeliveryDlqUrl"

    @staticmethod
    def sms_events_dlq_url(role: str) -> str:
        return f"SmsEvents{pascal_case(role)}DlqUrl"

    @classmethod
    def every(cls) -> list[str]:
        """Every output a stack of this version may have (for any registry consumer), in the order
        `python -m ops outputs` shows them."""
        tables = sorted({table for consumer in CONSUMERS for table in consumer.tables})
        secrets = sorted({secret for consumer in CONSUMERS for secret in consumer.secrets})
        return [
            cls.WEBHOOK_URL,
            cls.CRM_URL,
            cls.EVENTS_TOPIC_ARN,
            cls.TELEGRAM_SECRET_ID,
            cls.CRM_SECRET_ID,
            cls.CRM_TOKEN_SECRET_ID,
            cls.BITRIX24_URL,
            cls.BITRIX24_APP_TOKEN_SECRET_ID,
            cls.AMOCRM_URL,
            *(cls.secret_id(secret) for secret in secrets),
            *(cls.table_name(table) for table in tables),
            *(
                key
                for consumer in CONSUMERS
                for key in (
                    cls.queue_url(consumer.name),
                    cls.dlq_url(consumer.name),
                    cls.delivery_dlq_url(consumer.name),
                )
            ),
            cls.ALARM_TOPIC_ARN,
            cls.DASHBOARD_NAME,
            cls.VERSION,
            cls.SMS_RECONCILER_NAME,
            cls.SMS_EVENTS_TOPIC_ARN,
            cls.SMS_CONFIGURATION_SET,
            *(cls.sms_events_dlq_url(role) for role in cls.SMS_EVENTS_DLQ_ROLES),
            cls.SMS_INBOUND_URL,
            cls.SMS_INBOUND_TOKEN_SECRET_ID,
        ]
