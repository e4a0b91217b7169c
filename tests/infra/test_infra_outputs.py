"""The ops CLI knows every output the stack exports (`infra.outputs.OutputKey`), in every configuration."""

from __future__ import annotations

import pytest
from synthesized import Synthesized

from infra.outputs import OutputKey
from infra.version import release_version


@pytest.mark.parametrize("synth_name", ["default_synth", "full_synth", "custom_synth"])
def test_every_stack_output_is_known_to_the_ops_cli(synth_name: str, request: pytest.FixtureRequest) -> None:
    synth: Synthesized = request.getfixturevalue(synth_name)
    outputs = set(synth.template.to_json()["Outputs"])

    assert outputs - set(OutputKey.every()) == set()


def test_the_operator_outputs_exist_where_their_feature_does(
    default_synth: Synthesized, custom_synth: Synthesized
) -> None:
    with_events = set(default_synth.template.to_json()["Outputs"])  # End User Messaging
    http_gateway = set(custom_synth.template.to_json()["Outputs"])
    sms_events = {
        OutputKey.SMS_EVENTS_TOPIC_ARN,
        OutputKey.SMS_CONFIGURATION_SET,
        *(OutputKey.sms_events_dlq_url(role) for role in OutputKey.SMS_EVENTS_DLQ_ROLES),
    }
    always = {OutputKey.ALARM_TOPIC_ARN, OutputKey.DASHBOARD_NAME, OutputKey.SMS_RECONCILER_NAME}
    assert always | sms_events <= with_events
    assert always <= http_gateway and not sms_events & http_gateway


def test_the_stack_exports_the_release_version_of_pyproject(default_synth: Synthesized) -> None:
    """One source: the `Version` output is `pyproject.toml`'s version (`bin/ops doctor` reads it)."""
    outputs = default_synth.template.to_json()["Outputs"]
    assert outputs[OutputKey.VERSION]["Value"] == release_version()
