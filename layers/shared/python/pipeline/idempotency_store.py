"""The Powertools idempotency records in the journal, with our `schema_version` (`pipeline.formats`).

Powertools owns the record (`id`, `status`, `expiration`, `in_progress_expiration`, `data`: the
saved response, the consumer's `process` result as JSON); its key derivation and its saved
response are what a release's upgrade must keep reading. So every record written carries
`schema_version` (the claim's put and the completion's update), and a record of a version this
code does not read (a newer release's, after a rollback) is refused with `FormatTooNew` rather
than taken for a duplicate or a fresh event: the worker retries the record, naming the error.

The layer adds the attribute to the requests Powertools sends (a thin wrapper of its client), not
by copying Powertools' conditional writes, which stay Powertools' own.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.idempotency import DynamoDBPersistenceLayer
from aws_lambda_powertools.utilities.idempotency.persistence.datarecord import DataRecord

from pipeline import aws
from pipeline.formats import SCHEMA_VERSION, by_name

FORMAT = by_name("idempotency_record")


class _Stamping:
    """The DynamoDB client Powertools writes through: each put and update also sets `schema_version`."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def put_item(self, **request: Any) -> Any:
        request["Item"] = {**request["Item"], **FORMAT.written()}
        return self._client.put_item(**request)

    def update_item(self, **request: Any) -> Any:
        expression = request["UpdateExpression"]
        assert expression.startswith("SET "), expression  # Powertools' completion: one SET clause
        request["UpdateExpression"] = f"{expression}, #schema_version = :schema_version"
        request["ExpressionAttributeNames"] = {
            **request.get("ExpressionAttributeNames", {}),
            "#schema_version": SCHEMA_VERSION,
        }
        request["ExpressionAttributeValues"] = {
            **request.get("ExpressionAttributeValues", {}),
            ":schema_version": FORMAT.written()[SCHEMA_VERSION],
        }
        return self._client.update_item(**request)


class VersionedPersistenceLayer(DynamoDBPersistenceLayer):
    """Powertools' DynamoDB layer on the journal, writing and checking `schema_version`."""

    def __init__(self, table_name: str, boto3_client: Any) -> None:
        super().__init__(table_name=table_name, boto3_client=boto3_client)
        self.client = _Stamping(self.client)

    def _item_to_data_record(self, item: dict[str, Any]) -> DataRecord:
        FORMAT.version_of(item)  # versions 0 and 1 differ only by the attribute itself
        return super()._item_to_data_record(item)


def data_record(item: dict[str, Any]) -> DataRecord:
    """A stored record as the worker reads it (the format's reader, `pipeline.formats`)."""
    return VersionedPersistenceLayer(table_name="", boto3_client=aws.client("dynamodb"))._item_to_data_record(
        item
    )
