"""Every Lambda function: runtime, architecture, layers, logging, tracing and code asset."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any, get_args

import pytest
from aws_cdk import App, Stack
from aws_cdk.assertions import Template
from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from shipped_bytecode import foreign_bytecode
from synthesized import Synthesized
from template_queries import function_env, of_type, props, ref_name, role_permissions

from infra.config import LogLevel, PipelineSettings
from infra.constructs.lambda_function import FunctionDefaults, PipelineFunction
from infra.constructs.layers import consumer_requirements, phonenumbers_pin, pip_install_command
from infra.environment import CRM_SWEEP, RECONCILER, SMS_EVENTS, WEBHOOK, FunctionEnvironments
from infra.paths import FUNCTIONS_DIR, PROJECT_ROOT
from pipeline.observability import service_logger
from pipeline.registry import enabled

# Lambda's application log levels, most verbose first.
LAMBDA_LEVELS = ["TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL"]


@pytest.fixture(scope="module")
def synth(full_synth: Synthesized) -> Synthesized:
    return full_synth


def _functions(synth: Synthesized) -> dict[str, dict]:
    return of_type(synth.resources, "AWS::Lambda::Function")


def test_there_is_one_function_per_enabled_consumer_plus_the_webhook_and_the_sms_helpers(
    synth: Synthesized,
) -> None:
    handlers = sorted(props(synth.resources, fid)["Handler"] for fid in _functions(synth))
    sms_helpers = [RECONCILER.handler, SMS_EVENTS.handler]
    # The CRM history sweep exists where a CRM is connected (this synth connects both).
    sweep = (
        [CRM_SWEEP.handler]
        if synth.stack.settings.bitrix24_stages or synth.stack.settings.amocrm_statuses
        else []
    )
    expected = sorted([WEBHOOK.handler, *(c.handler for c in synth.stack.consumers), *sms_helpers, *sweep])
    assert handlers == expected
    assert len(synth.stack.consumers) == len(enabled(synth.stack.settings.registry_settings()))


def _layer_id(synth: Synthesized, name: str) -> str:
    return synth.logical_id(synth.stack.node.find_child("Layers").node.find_child(name))


def test_every_function_is_python313_on_arm64_with_powertools_and_shared_layers(synth: Synthesized) -> None:
    parameters = synth.template.to_json()["Parameters"]
    shared_layer_id = _layer_id(synth, "Shared")
    own_layers = {_layer_id(synth, "Phonenumbers"), _layer_id(synth, "BotRequirements")}
    for function_id in _functions(synth):
        function = props(synth.resources, function_id)
        assert function["Runtime"] == "python3.13"
        assert function["Architectures"] == ["arm64"]
        layer_refs = [ref_name(layer) for layer in function["Layers"] if ref_name(layer) not in own_layers]
        assert len(layer_refs) == 2 and shared_layer_id in layer_refs
        (powertools_param,) = (ref for ref in layer_refs if ref != shared_layer_id)
        # The Powertools layer ARN is resolved by CloudFormation from AWS's public parameter.
        assert parameters[powertools_param]["Type"] == "AWS::SSM::Parameter::Value<String>"
        assert (
            parameters[powertools_param]["Default"]
            == "/aws/service/powertools/python/arm64/python3.13/3.37.0"
        )


def test_our_layers_target_the_same_runtime_and_architecture(synth: Synthesized) -> None:
    layers = of_type(synth.resources, "AWS::Lambda::LayerVersion")
    assert set(layers) == {_layer_id(synth, name) for name in ("Shared", "Phonenumbers", "BotRequirements")}
    for layer in layers.values():
        assert layer["Properties"]["CompatibleRuntimes"] == ["python3.13"]
        assert layer["Properties"]["CompatibleArchitectures"] == ["arm64"]


@pytest.mark.parametrize("synth_name", ["default_synth", "full_synth"])
def test_the_phonenumbers_layer_is_attached_to_exactly_the_functions_validating_crm_events(
    request: pytest.FixtureRequest, synth_name: str
) -> None:
    synth: Synthesized = request.getfixturevalue(synth_name)
    layer_id = _layer_id(synth, "Phonenumbers")
    with_layer = {
        function_env(synth.resources, fid)["POWERTOOLS_SERVICE_NAME"]
        for fid, function in _functions(synth).items()
        if layer_id in [ref_name(layer) for layer in function["Properties"]["Layers"]]
    }
    # The webhook validates every CRM event; `sms` consumes them; the consumers of Bitrix24's and
    # amoCRM's webhooks build them.
    sources = {"webhook", "sms"} | ({"bitrix24", "amocrm"} if synth_name == "full_synth" else set())
    assert with_layer == sources


def test_the_layer_and_requirements_txt_pin_the_same_phonenumbers() -> None:
    pin = phonenumbers_pin()
    assert re.fullmatch(r"phonenumbers==\d+\.\d+\.\d+", pin)
    requirements = (PROJECT_ROOT / "requirements.txt").read_text().splitlines()
    assert [line for line in requirements if line.startswith("phonenumbers")] == [pin]


def test_the_bot_folder_pins_the_python_telegram_bot_the_tests_run() -> None:
    import telegram

    assert consumer_requirements(FUNCTIONS_DIR / "bot") == ("python-telegram-bot==22.8",)
    # What the tests and the local runtime run (`make install` installs it) is what Lambda gets.
    assert telegram.__version__ == "22.8"


@pytest.mark.parametrize("synth_name", ["default_synth", "full_synth"])
def test_only_the_bot_consumer_gets_its_requirements_layer(
    request: pytest.FixtureRequest, synth_name: str
) -> None:
    synth: Synthesized = request.getfixturevalue(synth_name)
    layers = synth.stack.node.find_child("Layers").node
    if synth_name == "default_synth":
        # No bot configured: no such layer to bundle at all.
        assert layers.try_find_child("BotRequirements") is None
        return
    layer_id = _layer_id(synth, "BotRequirements")
    with_layer = {
        function_env(synth.resources, fid)["POWERTOOLS_SERVICE_NAME"]
        for fid, function in _functions(synth).items()
        if layer_id in [ref_name(layer) for layer in function["Properties"]["Layers"]]
    }
    assert with_layer == {"bot"}
    description = props(synth.resources, layer_id)["Description"]
    assert description == "python-telegram-bot==22.8 (functions/bot/requirements.txt)"


def test_the_layer_is_pip_installed_for_python313_arm64_from_binary_wheels_without_pyc() -> None:
    command = pip_install_command("/out/python", phonenumbers_pin(), "tinydep==1.0")
    flags = " ".join(command)
    assert command[:4] == [sys.executable, "-m", "pip", "install"]
    for expected in (
        "--platform manylinux2014_aarch64",
        "--only-binary=:all:",
        "--python-version 3.13",
        "--no-compile",
        "--target /out/python",
    ):
        assert expected in flags
    assert command[-2:] == [phonenumbers_pin(), "tinydep==1.0"]


def test_with_bundling_skipped_synth_never_installs_the_layer(synth: Synthesized) -> None:
    # `aws:cdk:bundling-stacks=[]` (tests/infra/synthesized.py): no pip, so no network at synth.
    layer = props(synth.resources, _layer_id(synth, "Phonenumbers"))
    asset_hash = ref_name(layer["Content"]["S3Key"]).removesuffix(".zip")
    assert not (synth.outdir / f"asset.{asset_hash}").exists()


def test_every_function_logs_json_to_its_own_log_group_with_retention(synth: Synthesized) -> None:
    log_groups = of_type(synth.resources, "AWS::Logs::LogGroup")
    used: list[str] = []
    for function_id in _functions(synth):
        logging = props(synth.resources, function_id)["LoggingConfig"]
        assert logging["LogFormat"] == "JSON"
        assert logging["ApplicationLogLevel"] == "INFO"
        group_id = ref_name(logging["LogGroup"])
        assert log_groups[group_id]["Properties"]["RetentionInDays"] == 30
        used.append(group_id)
    assert len(set(used)) == len(used), "functions must not share a log group"


def test_every_function_names_its_powertools_service(synth: Synthesized) -> None:
    services = set()
    for function_id in _functions(synth):
        env = function_env(synth.resources, function_id)
        assert env["POWERTOOLS_METRICS_NAMESPACE"] == "TelegramCrmPipeline"
        assert env["POWERTOOLS_LOG_LEVEL"] == "INFO"
        services.add(env["POWERTOOLS_SERVICE_NAME"])
    sweep = {"crm_sweep"} if synth.stack.crm_sweep else set()
    assert services == {
        "webhook",
        *(c.name for c in synth.stack.consumers),
        "reconciler",
        "sms_events",
        *sweep,
    }


@pytest.mark.parametrize(("synth_name", "tracing"), [("default_synth", False), ("full_synth", True)])
def test_functions_and_the_events_topic_trace_only_with_the_tracing_setting(
    synth_name: str, tracing: bool, request: pytest.FixtureRequest
) -> None:
    synth: Synthesized = request.getfixturevalue(synth_name)
    assert synth.stack.settings.tracing is tracing
    for function_id in _functions(synth):
        function = props(synth.resources, function_id)
        env = function_env(synth.resources, function_id)
        if tracing:
            assert function["TracingConfig"] == {"Mode": "Active"}
            assert "POWERTOOLS_TRACE_DISABLED" not in env
        else:
            # No tracing config: Lambda's PassThrough, and the CDK grants no X-Ray action.
            assert "TracingConfig" not in function
            assert env["POWERTOOLS_TRACE_DISABLED"] == "true"
    xray_grants = sorted(
        role_id
        for role_id in of_type(synth.resources, "AWS::IAM::Role")
        if any(
            action.startswith("xray:")
            for actions in role_permissions(synth.resources, role_id).values()
            for action in actions
        )
    )
    functions_roles = sorted(ref_name(props(synth.resources, f)["Role"]) for f in _functions(synth))
    assert xray_grants == (functions_roles if tracing else [])
    topic = props(synth.resources, synth.logical_id(synth.stack.events.topic))
    assert topic.get("TracingConfig") == ("Active" if tracing else None)


def _asset_dir(synth: Synthesized, s3_key: dict | str) -> Path:
    asset_hash = ref_name(s3_key).removesuffix(".zip")
    path = synth.outdir / f"asset.{asset_hash}"
    assert path.is_dir(), f"asset {asset_hash} was not staged"
    return path


def test_code_asset_is_the_functions_directory_with_no_bytecode_but_the_runtime_s(synth: Synthesized) -> None:
    keys = {ref_name(props(synth.resources, fid)["Code"]["S3Key"]) for fid in _functions(synth)}
    assert len(keys) == 1, "all functions share one code asset"
    asset = _asset_dir(synth, keys.pop())
    packages = {p.name for p in FUNCTIONS_DIR.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert {p.name for p in asset.iterdir() if p.is_dir()} == packages
    assert (asset / "webhook" / "__init__.py").is_file()
    assert foreign_bytecode(asset) == []


def test_shared_layer_asset_holds_the_pipeline_package_under_python(synth: Synthesized) -> None:
    layer = of_type(synth.resources, "AWS::Lambda::LayerVersion")[_layer_id(synth, "Shared")]
    asset = _asset_dir(synth, layer["Properties"]["Content"]["S3Key"])
    assert (asset / "python" / "pipeline" / "registry.py").is_file()
    assert foreign_bytecode(asset) == []


def _lambda_keeps(line: dict[str, Any], application_log_level: str) -> bool:
    """Lambda's JSON-log filter as AWS documents it: a line whose "level" is missing or invalid
    counts as INFO (docs.aws.amazon.com/lambda/latest/dg/monitoring-cloudwatchlogs-log-level.html)."""
    level = str(line.get("level", "")).upper().replace("WARNING", "WARN").replace("CRITICAL", "FATAL")
    level = level if level in LAMBDA_LEVELS else "INFO"
    return LAMBDA_LEVELS.index(level) >= LAMBDA_LEVELS.index(application_log_level)


@pytest.mark.parametrize("log_level", get_args(LogLevel))
def test_metrics_reach_cloudwatch_and_logs_are_filtered_at_log_level_at_every_log_level(
    log_level: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = PipelineSettings(log_level=log_level)
    service = f"levels_{log_level.lower()}"
    stack = Stack(App(), "Levels")
    PipelineFunction(
        stack,
        "Function",
        defaults=FunctionDefaults.create(settings, []),
        handler="webhook.app.lambda_handler",
        service_name=service,
        description="log levels",
        environment=FunctionEnvironments(settings, stack_name="Levels").powertools(service),
        timeout_seconds=3,
        memory_mb=128,
    )
    [function] = of_type(Template.from_stack(stack).to_json()["Resources"], "AWS::Lambda::Function").values()
    deployed = function["Properties"]
    lambda_level = deployed["LoggingConfig"]["ApplicationLogLevel"]
    # The function's runtime as Lambda starts it: its environment plus Lambda's own level.
    for name, value in {**deployed["Environment"]["Variables"], "AWS_LAMBDA_LOG_LEVEL": lambda_level}.items():
        monkeypatch.setenv(name, value)
    assert deployed["Environment"]["Variables"]["POWERTOOLS_LOG_LEVEL"] == log_level

    logger = service_logger()
    child = Logger(child=True)
    for emit in (logger.debug, logger.info, logger.warning, child.info, child.error):
        emit(f"{emit.__name__} line")
    metrics = Metrics(namespace=PipelineSettings().metrics_namespace)
    metrics.add_metric(name="Probe", unit=MetricUnit.Count, value=1)
    metrics.flush_metrics()

    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    kept = [line for line in lines if _lambda_keeps(line, lambda_level)]
    assert [line for line in kept if "_aws" in line], "Lambda dropped the metric (EMF) line"
    logged = [line["level"] for line in kept if "_aws" not in line]
    order = list(get_args(LogLevel))
    written = ["DEBUG", "INFO", "WARNING", "INFO", "ERROR"]
    assert logged == [level for level in written if order.index(level) >= order.index(log_level)]


def test_an_environment_above_lambdas_4_kb_is_refused_at_synth_naming_the_largest_variable() -> None:
    """A team's SMS texts travel in SMS_RULES_JSON: Lambda refuses more than 4 KB of environment at
    deploy, so the synth refuses it first."""
    settings = PipelineSettings()
    environment = FunctionEnvironments(settings, stack_name="Big").powertools("big")

    def build(extra: int) -> None:
        PipelineFunction(
            Stack(App(), "Big"),
            "Function",
            defaults=FunctionDefaults.create(settings, []),
            handler="webhook.app.lambda_handler",
            service_name="big",
            description="a big environment",
            environment={**environment, "SMS_RULES_JSON": "x" * extra},
            timeout_seconds=3,
            memory_mb=128,
        )

    used = sum(len(k) + len(v) for k, v in environment.items()) + len("SMS_RULES_JSON")
    build(4096 - used)  # exactly the limit
    with pytest.raises(
        ValueError,
        match=r"Function: its environment would be 4097 bytes, above Lambda's 4096 \(the largest: "
        r"SMS_RULES_JSON",
    ):
        build(4097 - used)
