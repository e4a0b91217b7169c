"""Secrets Manager secrets: the three the webhook verifies requests with, and the consumers' ones.

The webhook's secrets are generated here (the operator reads them and gives them to Telegram's
setWebhook and to the CRM). Consumer secrets hold credentials only the operator has (a bot
token, a CRM URL), so the stack creates them with a placeholder the operator replaces.
"""

from __future__ import annotations

from collections.abc import Iterable

from aws_cdk import Acknowledgment as Ack
from aws_cdk import RemovalPolicy, SecretValue, Validations
from aws_cdk import aws_iam as iam
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from infra.naming import pascal_case
from infra.secret_specs import GENERATED_SECRET_LENGTH, consumer_secret_spec


def grant_secret_value(secret: secretsmanager.ISecret, grantee: iam.IGrantable) -> None:
    """secretsmanager:GetSecretValue on the secret, all a function reading it calls (current and
    AWSPREVIOUS values alike: `pipeline.secrets`); not CDK's grant_read, which adds DescribeSecret.
    The secrets are encrypted with the AWS managed key, so no KMS grant is needed."""
    iam.Grant.add_to_principal(
        grantee=grantee, actions=["secretsmanager:GetSecretValue"], resource_arns=[secret.secret_arn]
    )


def _acknowledge_manual_rotation(secret: secretsmanager.Secret, why: str) -> None:
    Validations.of(secret).acknowledge(Ack(id="AwsSolutions-SMG4", reason=why))


class WebhookSecrets(Construct):
    """Telegram's webhook secret_token and the CRM's HMAC signing key, generated; with `crm_token`,
    the CRM's static token too (for senders that cannot sign, amoCRM's webhook URL among them);
    with `bitrix24`, the portal's application token, which Bitrix24 issues (a placeholder to
    replace). A secret costs $0.40 a month: none is created for a feature that is off."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        removal_policy: RemovalPolicy,
        crm_token: bool = False,
        bitrix24: bool = False,
        sms_inbound: bool = False,
    ) -> None:
        super().__init__(scope, construct_id)
        self.removal_policy = removal_policy
        self.telegram = self._generated(
            "TelegramSecretToken",
            "Telegram webhook secret_token: pass it to setWebhook; checked on every request.",
        )
        self.crm = self._generated(
            "CrmSigningKey",
            "HMAC-SHA256 key the CRM signs its notifications with; checked on every request.",
        )
        rotation = (
            "Rotated by the operator: the new value must also be registered with {} at the same "
            "time, and the webhook accepts AWSPREVIOUS for SECRET_ROTATION_GRACE_SECONDS meanwhile."
        )
        _acknowledge_manual_rotation(self.telegram, rotation.format("Telegram setWebhook"))
        _acknowledge_manual_rotation(self.crm, rotation.format("the CRM"))
        self.crm_token: secretsmanager.Secret | None = None
        if crm_token:
            self.crm_token = self._generated(
                "CrmToken",
                "Static token of CRM senders that cannot sign (crm_auth=token or signature_or_token, "
                "amoCRM): Authorization: Bearer <token>, X-Crm-Token: <token>, or POST /crm/events/<token>.",
            )
            _acknowledge_manual_rotation(self.crm_token, rotation.format("the CRM's templates"))
        self.bitrix24_app_token: secretsmanager.Secret | None = None
        if bitrix24:
            # Generated until the operator pastes the portal's token: no request can match it before.
            self.bitrix24_app_token = self._generated(
                "Bitrix24ApplicationToken",
                "Application token of the Bitrix24 outgoing webhook (shown by the portal when the webhook "
                "is saved, sent as auth[application_token]): replace this generated value with it.",
            )
            _acknowledge_manual_rotation(
                self.bitrix24_app_token,
                "Issued by the Bitrix24 portal (a new outgoing webhook issues a new one); the operator "
                "replaces it, and the webhook accepts AWSPREVIOUS for SECRET_ROTATION_GRACE_SECONDS.",
            )

        self.sms_inbound_token: secretsmanager.Secret | None = None
        if sms_inbound:
            self.sms_inbound_token = self._generated(
                "SmsInboundToken",
                "Token of the HTTP SMS gateway's inbound-message callback (STOP/START replies): "
                "POST /sms/inbound/<token>; paste that URL into the gateway's console.",
            )
            _acknowledge_manual_rotation(self.sms_inbound_token, rotation.format("the SMS gateway's console"))

    @property
    def all(self) -> list[secretsmanager.Secret]:
        """Every secret the webhook checks requests against."""
        optional = (self.crm_token, self.bitrix24_app_token, self.sms_inbound_token)
        return [self.telegram, self.crm, *(secret for secret in optional if secret is not None)]

    def _generated(self, construct_id: str, description: str) -> secretsmanager.Secret:
        return secretsmanager.Secret(
            self,
            construct_id,
            description=description,
            generate_secret_string=secretsmanager.SecretStringGenerator(
                password_length=GENERATED_SECRET_LENGTH,
                exclude_punctuation=True,
                include_space=False,
            ),
            removal_policy=self.removal_policy,
        )


class ConsumerSecrets(Construct):
    """One secret per logical name used by an enabled consumer (shared if several use it)."""

    def __init__(
        self, scope: Construct, construct_id: str, *, names: Iterable[str], removal_policy: RemovalPolicy
    ) -> None:
        super().__init__(scope, construct_id)
        self.by_name: dict[str, secretsmanager.Secret] = {}
        for name in sorted(set(names)):
            spec = consumer_secret_spec(name)
            secret = secretsmanager.Secret(
                self,
                pascal_case(name),
                description=spec.description,
                # Not a credential: a visible placeholder the operator overwrites after deploy.
                secret_string_value=SecretValue.unsafe_plain_text(spec.placeholder),
                removal_policy=removal_policy,
            )
            _acknowledge_manual_rotation(
                secret,
                f"'{name}' is issued by a third party (Telegram/CRM) that has no rotation API we "
                "can call; the operator replaces the value when the issuer re-issues it.",
            )
            self.by_name[name] = secret
