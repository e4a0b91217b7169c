"""The `snapstart` setting: SnapStart on the functions it names, each called through its alias.

`custom` switches it on for the webhook and autoreply (CUSTOM_CONTEXT); `default` and `full` leave
it off everywhere.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError
from synthesized import CUSTOM_CONTEXT, Synthesized
from template_queries import of_type, props, ref_name

from infra.config import PipelineSettings, SettingsError, settings_problems
from infra.constructs.lambda_function import SNAPSTART_ALIAS, PipelineFunction
from infra.environment import WEBHOOK
from infra.prices import PRICES, TRAFFIC, idle_cost
from pipeline.registry import by_name

ON = tuple(CUSTOM_CONTEXT["snapstart"].split(","))


def functions_of(synth: Synthesized) -> dict[str, PipelineFunction]:
    """Every function the setting may name, by name: the webhook and each consumer's worker."""
    stack = synth.stack
    return {
        WEBHOOK.service_name: stack.ingress.webhook,
        **{name: pipeline.worker for name, pipeline in stack.pipelines.items()},
    }


def snapstart_of(synth: Synthesized, function: PipelineFunction) -> Any:
    return props(synth.resources, synth.logical_id(function.function)).get("SnapStart")


def test_the_setting_names_the_webhook_and_autoreply_in_the_custom_stack() -> None:
    assert set(ON) == {WEBHOOK.service_name, "autoreply"}


@pytest.mark.parametrize("name", ["default_synth", "full_synth"])
def test_no_function_has_snapstart_a_version_or_an_alias_by_default(
    name: str, request: pytest.FixtureRequest
) -> None:
    synth: Synthesized = request.getfixturevalue(name)
    assert not of_type(synth.resources, "AWS::Lambda::Version")
    assert not of_type(synth.resources, "AWS::Lambda::Alias")
    for function in functions_of(synth).values():
        assert snapstart_of(synth, function) is None
        assert function.invoked is function.function


def test_snapstart_is_on_for_published_versions_of_the_named_functions_only(
    custom_synth: Synthesized,
) -> None:
    functions = functions_of(custom_synth)
    on = {name for name, function in functions.items() if snapstart_of(custom_synth, function)}
    assert on == set(ON)
    for name in ON:
        assert snapstart_of(custom_synth, functions[name]) == {"ApplyOn": "PublishedVersions"}


def test_each_is_called_through_the_alias_of_its_current_version_which_a_deploy_replaces(
    custom_synth: Synthesized,
) -> None:
    resources = custom_synth.resources
    versions = of_type(resources, "AWS::Lambda::Version")
    aliases = of_type(resources, "AWS::Lambda::Alias")
    functions = functions_of(custom_synth)
    assert len(versions) == len(aliases) == len(ON)
    for name in ON:
        function_id = custom_synth.logical_id(functions[name].function)
        (alias_id,) = [
            a for a, alias in aliases.items() if ref_name(alias["Properties"]["FunctionName"]) == function_id
        ]
        alias = props(resources, alias_id)
        assert alias["Name"] == SNAPSTART_ALIAS
        version_id = ref_name(alias["FunctionVersion"])
        assert ref_name(props(resources, version_id)["FunctionName"]) == function_id
        # The version a deploy replaces is deleted with its snapshot, not kept (and billed).
        assert versions[version_id]["DeletionPolicy"] == "Delete"
        assert versions[version_id]["UpdateReplacePolicy"] == "Delete"
        assert custom_synth.logical_id(functions[name].invoked) == alias_id


def test_the_api_calls_the_webhooks_alias(custom_synth: Synthesized) -> None:
    resources = custom_synth.resources
    webhook = functions_of(custom_synth)[WEBHOOK.service_name]
    alias_id = custom_synth.logical_id(webhook.invoked)
    integrations = of_type(resources, "AWS::ApiGatewayV2::Integration")
    assert integrations
    assert {ref_name(i["Properties"]["IntegrationUri"]) for i in integrations.values()} == {alias_id}
    permissions = [
        p["Properties"]
        for p in of_type(resources, "AWS::Lambda::Permission").values()
        if p["Properties"]["Principal"] == "apigateway.amazonaws.com"
    ]
    assert permissions
    assert {ref_name(p["FunctionName"]) for p in permissions} == {alias_id}


def test_autoreplys_queue_invokes_its_alias_and_every_other_queue_its_function(
    custom_synth: Synthesized,
) -> None:
    resources = custom_synth.resources
    stack = custom_synth.stack
    mappings = {
        ref_name(m["Properties"]["EventSourceArn"]): m["Properties"]
        for m in of_type(resources, "AWS::Lambda::EventSourceMapping").values()
    }
    for name, pipeline in stack.pipelines.items():
        target = mappings[custom_synth.logical_id(pipeline.queue)]["FunctionName"]
        if name in ON:
            # The function's name cut from the alias's ARN, qualified with the alias.
            separator, (function_name, qualifier) = target["Fn::Join"]
            assert separator == ""
            assert qualifier == f":{SNAPSTART_ALIAS}"
            assert function_name["Fn::Select"][1]["Fn::Split"][1] == {
                "Ref": custom_synth.logical_id(pipeline.worker.invoked)
            }
        else:
            assert ref_name(target) == custom_synth.logical_id(pipeline.worker.function), name


@pytest.mark.parametrize(
    ("value", "refused"),
    [
        ("reconciler", "reconciler cannot have SnapStart here"),
        ("webhook,autoreply,webhook", "names webhook more than once"),
        ("bot", "names bot, which this deployment does not have"),
        ("webhook;autoreply", "webhook;autoreply cannot have SnapStart here"),
    ],
)
def test_the_synth_refuses_a_function_snapstart_cannot_serve(value: str, refused: str) -> None:
    with pytest.raises(ValidationError) as error:
        PipelineSettings.from_context({"snapstart": value})
    assert refused in str(SettingsError(settings_problems(error.value)))


def test_the_setting_reads_back_as_the_cli_writes_it() -> None:
    settings = PipelineSettings.from_context({"snapstart": " webhook , autoreply "})
    assert settings.snapstart == ("webhook", "autoreply")
    assert settings.to_context()["snapstart"] == "webhook,autoreply"
    assert PipelineSettings.from_context(settings.to_context()) == settings
    assert PipelineSettings.from_context({"snapstart": ["store"]}).snapstart == ("store",)
    assert PipelineSettings().snapstart == ()


def test_the_fixed_bill_prices_each_snapshot_by_its_functions_memory(
    custom_synth: Synthesized, default_synth: Synthesized
) -> None:
    (snapshot,) = [price for price in PRICES if price.resource_type == "AWS::Lambda::Function"]
    functions = functions_of(custom_synth)
    memory = sum(
        props(custom_synth.resources, custom_synth.logical_id(functions[n].function))["MemorySize"]
        for n in ON
    )
    with_it, without = idle_cost(custom_synth.resources), idle_cost(default_synth.resources)

    assert memory == WEBHOOK.memory_mb + by_name("autoreply").memory_mb
    assert (snapshot, memory) in with_it.lines
    assert f"{memory} MB of SnapStart snapshot x ${snapshot.usd:.4f}" in with_it.breakdown()
    # A month of a 1 GB snapshot at Lambda's price per GB-second, cut to the MB.
    assert snapshot.usd * 1024 == pytest.approx(
        TRAFFIC.lambda_snapstart_cache_gb_second.usd * 30 * 86400, rel=1e-9
    )
    assert all(price is not snapshot for price, _ in without.lines)
    assert "SnapStart" not in without.breakdown()
