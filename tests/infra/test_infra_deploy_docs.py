"""docs/deploy.md (Deploy) against the synthesized stack: the idle cost it quotes, what a
`cdk destroy` leaves behind under each removal policy, and the Powertools parameter to check."""

from __future__ import annotations

import re
from typing import Any

import pytest
from synthesized import Synthesized

from infra.config import PipelineSettings
from infra.constructs.layers import powertools_parameter_name
from infra.paths import PROJECT_ROOT
from infra.prices import (
    CUSTOM_METRIC_USD,
    FREE_DASHBOARD_METRICS,
    PRICES,
    PRICES_RECORDED,
    SEARCH_METRICS_RESERVE,
    idle_cost,
)
from tests.unit.test_readme import flowing, section

DEPLOY = section("docs/deploy.md", "Deploy")
# The teardown table's rows, by the resource type each stands for (and, for queues, whether the
# row is about the dead-letter ones: every DLQ's logical id says `Dlq`).
TEARDOWN_ROWS: dict[str, tuple[str, bool | None]] = {
    "DynamoDB tables": ("AWS::DynamoDB::Table", None),
    "CloudWatch log groups": ("AWS::Logs::LogGroup", None),
    "KMS keys": ("AWS::KMS::Key", None),
    "Secrets Manager secrets": ("AWS::SecretsManager::Secret", None),
    "SQS queues": ("AWS::SQS::Queue", False),
    "SQS dead-letter queues": ("AWS::SQS::Queue", True),
    "Lambda layer versions": ("AWS::Lambda::LayerVersion", None),
}


def _alarms(synth: Synthesized) -> int:
    return sum(1 for r in synth.resources.values() if r["Type"] == "AWS::CloudWatch::Alarm")


def test_the_readme_quotes_the_idle_cost_of_the_default_template_per_alarm_profile(
    default_synth: Synthesized, essential_synth: Synthesized
) -> None:
    cost = idle_cost(default_synth.resources)
    essential = idle_cost(essential_synth.resources)
    reconciler = (PROJECT_ROOT / "layers/shared/python/pipeline/sms/reconcile.py").read_text()
    reconciler_metrics = len(set(re.findall(r'add_metric\(\s*name="(Sms\w+)"', reconciler)))
    free = {price.unit: price.free_units for price in PRICES if price.free_units}
    text = flowing(DEPLOY)
    expected = [
        f"about **${cost.within_free_tier:.2f} a month** in fixed charges where the account's"
        f" always-free CloudWatch tier is this stack's alone, **${cost.total:.2f}** at list price",
        f"from the synthesized default template: {cost.breakdown()} ({_alarms(default_synth)} alarms;",
        f"free tier ({free['alarm metric']} alarm metrics, {free['dashboard']} dashboards of at most"
        f" {FREE_DASHBOARD_METRICS} metrics each)",
        f"takes up to ${cost.free_tier_saving:.2f} off",
        f"each of the webhook's two SEARCH lines counted at {SEARCH_METRICS_RESERVE}",
        f"about **${essential.within_free_tier:.2f} a month** within the free tier,"
        f" **${essential.total:.2f}** at list price: {essential.breakdown()}"
        f" ({_alarms(essential_synth)} alarms, within the free {free['alarm metric']} alarm metrics;",
        f"its {reconciler_metrics} `Sms...` custom metrics on every run",
        f"${CUSTOM_METRIC_USD:.2f} per metric-month each beyond the account's free 10:"
        f" ${reconciler_metrics * CUSTOM_METRIC_USD:.2f} a month",
        f"as recorded on {PRICES_RECORDED}",
        "[`infra/prices.py`](../infra/prices.py)",
    ]
    assert [phrase for phrase in expected if phrase not in text] == []
    # Each priced resource is there at all (a count of 0 would mean the figure misses a cost), but
    # a SnapStart snapshot, which only the `snapstart` setting makes (and which the page prices).
    (snapshot,) = [price for price in PRICES if price.optional]
    assert all(count for price, count in cost.lines)
    assert cost.units[snapshot.resource_type] == 0
    assert (
        f"(${snapshot.usd:.4f} per MB: the webhook ${512 * snapshot.usd:.2f}, a 256 MB consumer"
        f" ${256 * snapshot.usd:.2f};"
    ) in text
    # What docs/deploy.md says of them holds: every dashboard free-tier eligible, essential's alarm
    # metrics all within the free ones.
    assert cost.free_eligible["AWS::CloudWatch::Dashboard"] == cost.units["AWS::CloudWatch::Dashboard"]
    assert essential.units["AWS::CloudWatch::Alarm"] <= free["alarm metric"]


def _alarm_patterns(text: str) -> set[str]:
    """The alarm names a docs passage lists (`Errors-<function>`, `Api5xx`)."""
    return set(re.findall(r"`([A-Z][A-Za-z0-9]+(?:-[a-z<>-]+)?)`", text))


def _matches(pattern: str, name: str) -> bool:
    regex = re.escape(pattern).replace(re.escape("<consumer>"), "[a-z0-9_]+")
    regex = re.sub(r"<[a-z]+>", "[a-z0-9_-]+", regex.replace("\\<", "<").replace("\\>", ">"))
    return re.fullmatch(regex, name) is not None


@pytest.mark.parametrize(
    ("profile", "synths"),
    [("full", ("default_synth", "full_synth")), ("essential", ("essential_synth",))],
)
def test_the_alarms_operate_lists_per_profile_are_the_templates(
    profile: str, synths: tuple[str, ...], request: pytest.FixtureRequest
) -> None:
    operate = flowing(section("docs/operate.md", "Operate"))
    full, essential = operate.split("With `alarms=full`", 1)[1].split("With `alarms=essential`", 1)
    listed = _alarm_patterns(full if profile == "full" else essential.split(" only.", 1)[0])
    used = set()
    for name in synths:
        synthesized: Synthesized = request.getfixturevalue(name)
        assert synthesized.stack.settings.alarms == profile
        for watched in synthesized.stack.monitoring.alarms:
            alarm_id = watched.alarm.node.id
            matching = {pattern for pattern in listed if _matches(pattern, alarm_id)}
            assert matching, f"{alarm_id}: not in docs/operate.md's {profile} alarms"
            used |= matching
    # Nothing listed that no template makes (the fullest template for `full`).
    assert listed == used


def teardown_rows() -> dict[str, list[str]]:
    rows = re.findall(r"^\| (.+?) \| (.+?) \| (.+?) \| (.*?) \|$", DEPLOY, flags=re.M)
    return {name.split(" (")[0]: [retain, destroy] for name, retain, destroy, _ in rows if name != "resource"}


def _left_behind(resources: dict[str, dict[str, Any]], kind: str, dead_letter: bool | None) -> bool:
    policies = {
        r.get("DeletionPolicy", "Delete")
        for logical_id, r in resources.items()
        if r["Type"] == kind and dead_letter in (None, "Dlq" in logical_id)
    }
    assert len(policies) == 1, f"{kind}: mixed deletion policies {policies}"
    return policies == {"Retain"}


def test_the_teardown_table_lists_every_resource_kind_it_covers() -> None:
    assert set(teardown_rows()) == set(TEARDOWN_ROWS)


# What the Teardown table calls each table and secret, by its construct's name in the template
# (`Tables<Name>`, `WebhookSecrets<Name>`, `ConsumerSecrets<Name>`, then CDK's hash).
TEARDOWN_NAMES = {
    "Journal": "journal",
    "Conversations": "conversations",
    "BotState": "bot_state",
    "TelegramSecretToken": "Telegram secret token",
    "CrmSigningKey": "CRM signing key",
    "CrmToken": "CRM token",
    "Bitrix24ApplicationToken": "Bitrix24 application token",
    "TelegramBotToken": "bot token",
    "CrmApi": "CRM API",
    "Bitrix24Api": "Bitrix24 API",
    "AmocrmApi": "amoCRM API",
    "SmsGateway": "SMS gateway",
    "SmsInboundToken": "SMS inbound token",
}


@pytest.mark.parametrize(
    ("row", "kind", "prefixes"),
    [
        ("DynamoDB tables", "AWS::DynamoDB::Table", ("Tables",)),
        ("Secrets Manager secrets", "AWS::SecretsManager::Secret", ("WebhookSecrets", "ConsumerSecrets")),
    ],
)
def test_the_teardown_table_names_every_table_and_secret_of_the_fullest_template(
    full_synth: Synthesized, custom_synth: Synthesized, row: str, kind: str, prefixes: tuple[str, ...]
) -> None:
    """The fullest template, and the HTTP SMS gateway's (`custom`: its token's secret exists only
    with `sms_gateway=http`)."""
    [listed] = re.findall(rf"^\| {row} \((.+?)\) \|", DEPLOY, flags=re.M)
    made = set()
    resources = [*full_synth.resources.items(), *custom_synth.resources.items()]
    for logical_id, resource in resources:
        if resource["Type"] != kind:
            continue
        name = re.sub(r"[0-9A-F]{8}$", "", logical_id)
        for prefix in prefixes:
            name = name.removeprefix(prefix)
        assert name in TEARDOWN_NAMES, f"{logical_id}: give it a name in docs/deploy.md's Teardown table"
        made.add(TEARDOWN_NAMES[name])
    assert sorted(part.strip() for part in listed.split(",")) == sorted(made)


@pytest.mark.parametrize(("column", "synth"), [(0, "default_synth"), (1, "custom_synth")])
def test_the_teardown_table_says_what_cdk_destroy_leaves_under_each_removal_policy(
    column: int, synth: str, request: pytest.FixtureRequest
) -> None:
    synthesized: Synthesized = request.getfixturevalue(synth)
    assert synthesized.stack.settings.removal_policy == ("retain", "destroy")[column]
    resources = synthesized.resources
    # Nothing retained that the table does not cover.
    retained = {r["Type"] for r in resources.values() if r.get("DeletionPolicy") == "Retain"}
    assert retained <= {kind for kind, _ in TEARDOWN_ROWS.values()}
    for row, cells in teardown_rows().items():
        kind, dead_letter = TEARDOWN_ROWS[row]
        cell = cells[column]
        if _left_behind(resources, kind, dead_letter):
            assert cell.startswith("kept"), (row, cell)
        else:
            assert cell.startswith(("deleted", "scheduled for deletion")), (row, cell)


def test_the_readme_checks_the_powertools_parameter_the_stack_reads() -> None:
    settings = PipelineSettings()
    name = powertools_parameter_name(settings.powertools_version)
    assert f"aws ssm get-parameter --name {name} \\" in DEPLOY
    assert f"--path {name.rsplit('/', 1)[0]} \\" in DEPLOY
    pins = (PROJECT_ROOT / "requirements.txt").read_text()
    assert f"aws-lambda-powertools[tracer]=={settings.powertools_version}" in pins
