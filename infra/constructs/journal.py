"""DynamoDB tables named in the registry: the idempotency journal and the conversations store."""

from __future__ import annotations

from collections.abc import Iterable

from aws_cdk import RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from constructs import Construct

from infra.environment import JOURNAL
from infra.naming import pascal_case
from infra.tables import TABLE_KEYS, TTL_ATTRIBUTE, TableKeys


class DataTables(Construct):
    """On-demand, point-in-time-recoverable, encrypted tables with TTL on `expiration`.

    The journal always exists (every worker's idempotency store); other tables only when an
    enabled consumer names them.
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, names: Iterable[str], removal_policy: RemovalPolicy
    ) -> None:
        super().__init__(scope, construct_id)
        wanted = sorted({JOURNAL, *names})
        unknown = [name for name in wanted if name not in TABLE_KEYS]
        if unknown:
            raise ValueError(f"registry names unknown tables {unknown}; declare their keys in TABLE_KEYS")
        self.by_name: dict[str, dynamodb.Table] = {
            name: self._table(name, TABLE_KEYS[name], removal_policy) for name in wanted
        }

    def _table(self, name: str, keys: TableKeys, removal_policy: RemovalPolicy) -> dynamodb.Table:
        string = dynamodb.AttributeType.STRING
        table = dynamodb.Table(
            self,
            pascal_case(name),
            partition_key=dynamodb.Attribute(name=keys.partition, type=string),
            sort_key=dynamodb.Attribute(name=keys.sort, type=string) if keys.sort else None,
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            encryption=dynamodb.TableEncryption.AWS_MANAGED,
            time_to_live_attribute=TTL_ATTRIBUTE,
            removal_policy=removal_policy,
            # A retained table also refuses DeleteTable (a console click, a script) until unset.
            deletion_protection=removal_policy == RemovalPolicy.RETAIN,
        )
        for index in keys.indexes:
            table.add_global_secondary_index(
                index_name=index.name,
                partition_key=dynamodb.Attribute(name=index.partition, type=string),
                sort_key=dynamodb.Attribute(name=index.sort, type=string) if index.sort else None,
                projection_type=dynamodb.ProjectionType.KEYS_ONLY,
            )
        return table

    @property
    def journal(self) -> dynamodb.Table:
        return self.by_name[JOURNAL]


def grant_items(table: dynamodb.ITable, grantee: iam.IGrantable, *actions: str) -> None:
    """Exactly these item actions on the table itself (no index)."""
    iam.Grant.add_to_principal(grantee=grantee, actions=list(actions), resource_arns=[table.table_arn])


def grant_index_query(table: dynamodb.ITable, grantee: iam.IGrantable, index: str) -> None:
    """dynamodb:Query on one named index of the table."""
    iam.Grant.add_to_principal(
        grantee=grantee, actions=["dynamodb:Query"], resource_arns=[f"{table.table_arn}/index/{index}"]
    )
