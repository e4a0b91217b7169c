"""A consumer is a folder: one added as a new folder only, with a requirement of its own, gets its
own layer (pip-bundled for python3.13/arm64 at synth, cached by its pins' hash), is routed its
events by the local runtime and runs its own tests; removing the folder removes it everywhere.

The bundling runs pip for real, offline: the requirement is a wheel built here (no index has it)
and the pipeline's own layer comes from a pre-filled cache, so no test needs the network.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from shipped_bytecode import runtime_python, unshipped
from synthesized import Synthesized

from infra.constructs.layers import (
    LAYER_CACHE_ENV,
    PipLocalBundling,
    consumer_requirements,
    phonenumbers_pin,
    requirements_key,
)
from pipeline.registry import discover
from tests.support.repository import changed, offline_pip, tiny_wheel, tracked_copy

NAME = "loyalty"
PIN = "tinydep==1.0"


@pytest.fixture
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """pip installs only from a folder holding the tinydep wheel; the layer cache is empty."""
    for key, value in {**offline_pip(tiny_wheel(tmp_path / "wheels").parent)}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv(LAYER_CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path


@runtime_python
def test_pins_are_installed_and_compiled_for_lambda_once_then_come_from_the_cache(offline: Path) -> None:
    bundling = PipLocalBundling((PIN,), NAME)
    assert bundling.try_bundle(str(offline / "first"), image=None) is True  # type: ignore[arg-type]
    assert (offline / "first" / "python" / "tinydep" / "__init__.py").read_text() == "VALUE = '1.0'\n"
    # Lambda's /opt is read-only: the layer carries its bytecode, for the runtime (infra.bytecode).
    assert unshipped(offline / "first") == []

    shutil.rmtree(offline / "wheels")  # pip could not install it now: a second bundle is the cache's
    bundling.try_bundle(str(offline / "second"), image=None)  # type: ignore[arg-type]
    assert (offline / "second" / "python" / "tinydep" / "__init__.py").is_file()

    # Other pins are another entry: pip runs (and fails here, naming the layer), nothing is cached.
    with pytest.raises(RuntimeError, match=f"bundling the {NAME} layer failed"):
        PipLocalBundling(("tinydep==2.0",), NAME).try_bundle(str(offline / "third"), image=None)  # type: ignore[arg-type]
    assert [entry.name for entry in (offline / "cache").iterdir()] == [requirements_key((PIN,))]


@pytest.mark.parametrize("line", ["tinydep", "tinydep>=1", "-e .", "git+https://example.org/tinydep.git"])
def test_a_requirement_that_is_not_a_pin_is_refused_naming_its_line(tmp_path: Path, line: str) -> None:
    (tmp_path / "requirements.txt").write_text(f"# mine\nattrs==25.1.0  # why\n\n{line}\n")
    with pytest.raises(ValueError, match=r"requirements.txt:4: .* is not a pin \(`package==version`\)"):
        consumer_requirements(tmp_path)


# The new consumer's own tests, beside the one `make consumer` writes: its requirement is there,
# and an update published on the local runtime's topic reaches its queue.
OWN_TESTS = '''"""loyalty's own tests."""

import boto3
import tinydep

from local.settings import LocalSettings
from tests.support.local_stack import local_resources_in_moto

FAKES = {name: "http://127.0.0.1:1" for name in ("crm", "sms", "end_user_messaging", "bitrix24", "amocrm")}


def test_its_own_requirement_is_installed() -> None:
    assert tinydep.VALUE == "1.0"


def test_a_telegram_update_published_locally_reaches_its_queue() -> None:
    with local_resources_in_moto(LocalSettings(), FAKES) as resources:
        attributes = {"source": "telegram", "type": "message", "chat_type": "private"}
        boto3.client("sns", region_name="eu-central-1").publish(
            TopicArn=resources.topic_arn,
            Message='{"event_id":"x"}',
            MessageAttributes={k: {"DataType": "String", "StringValue": v} for k, v in attributes.items()},
            MessageGroupId="telegram:bot:chat:1",
            MessageDeduplicationId="x",
        )
        sqs = boto3.client("sqs", region_name="eu-central-1")
        [message] = sqs.receive_message(QueueUrl=resources.queues["loyalty"].url)["Messages"]
        assert message["Body"] == '{"event_id":"x"}'
'''


def run(command: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def synth(copy: Path, outdir: Path, env: dict[str, str], context: dict[str, Any]) -> dict[str, Any]:
    """`python app.py` of the copy; its one stack's template."""
    run(
        [sys.executable, str(copy / "app.py")],
        copy,
        {**env, "CDK_OUTDIR": str(outdir), "CDK_CONTEXT_JSON": json.dumps(context)},
    )
    [template] = outdir.glob("*.template.json")
    loaded: dict[str, Any] = json.loads(template.read_text())
    return loaded


@pytest.mark.slow
def test_a_consumer_added_as_a_folder_only_gets_its_layer_its_events_and_its_tests(
    tmp_path: Path, default_synth: Synthesized
) -> None:
    copy = tracked_copy(tmp_path / "copy")
    wheels = tiny_wheel(tmp_path / "wheels").parent
    # The pipeline's own phonenumbers layer, as an earlier synth left it in the cache.
    seeded = tmp_path / "cache" / requirements_key((phonenumbers_pin(),)) / "phonenumbers"
    seeded.mkdir(parents=True)
    (seeded / "__init__.py").write_text("")
    env = {k: v for k, v in offline_pip(wheels).items() if not k.startswith(("PYTEST_", "COV_"))}
    env[LAYER_CACHE_ENV] = str(tmp_path / "cache")

    run([sys.executable, "-m", "ops", "new-consumer", NAME], copy, env)
    folder = copy / "functions" / NAME
    with (folder / "requirements.txt").open("a") as requirements:
        requirements.write(f"{PIN}\n")
    (folder / "tests" / "test_own.py").write_text(OWN_TESTS)
    assert [line for line in changed(copy) if not line.startswith(f"?? functions/{NAME}/")] == []

    # Its tests, with its requirement installed as `make install` installs it (here beside the venv).
    deps = tmp_path / "deps"
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--target",
            str(deps),
            "-r",
            str(folder / "requirements.txt"),
        ],
        copy,
        env,
    )
    tested = run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"functions/{NAME}"],
        copy,
        {**env, "PYTHONPATH": str(deps)},
    )
    assert "6 passed" in tested.stdout

    # Synthesized with bundling: its own layer, on its function only, holding its requirement.
    template = synth(copy, tmp_path / "out", env, {})
    resources = template["Resources"]
    [(layer_id, layer)] = [
        (rid, r) for rid, r in resources.items()
        if r["Type"] == "AWS::Lambda::LayerVersion" and r["Properties"]["Description"].startswith(PIN)
    ]  # fmt: skip
    assert layer["Properties"]["CompatibleRuntimes"] == ["python3.13"]
    assert layer["Properties"]["CompatibleArchitectures"] == ["arm64"]
    with_layer = [
        r["Properties"]["Environment"]["Variables"]["POWERTOOLS_SERVICE_NAME"]
        for r in resources.values()
        if r["Type"] == "AWS::Lambda::Function" and {"Ref": layer_id} in r["Properties"]["Layers"]
    ]
    assert with_layer == [NAME]
    asset = tmp_path / "out" / f"asset.{layer['Properties']['Content']['S3Key'].removesuffix('.zip')}"
    assert (asset / "python" / "tinydep" / "__init__.py").read_text() == "VALUE = '1.0'\n"
    assert unshipped(asset / "python" / "tinydep") == []

    # Its resources are all the template has beyond the pipeline's own (the default synth,
    # which has no such folder); removed, the copy is the pipeline as it was.
    own = {rid for rid in resources if NAME in rid.lower()}
    assert own and set(resources) - own == set(default_synth.resources)
    shutil.rmtree(folder)
    assert changed(copy) == []
    assert NAME not in {c.name for c in discover(copy / "functions")}
