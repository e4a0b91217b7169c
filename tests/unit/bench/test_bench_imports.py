"""`bench.imports` samples a cold path with what Lambda has, not with what this machine has."""

from __future__ import annotations

import pytest

from bench import assets, imports
from bench.common import BenchError
from infra.constructs.layers import consumer_requirements, phonenumbers_pin
from infra.paths import FUNCTIONS_DIR
from pipeline.registry import CONSUMERS


def _top_level_names(pins: tuple[str, ...]) -> set[str]:
    names = set()
    for distribution in assets._distributions(pins):
        for file in distribution.files or ():
            if file.parts[0] != ".." and not file.parts[0].endswith(".dist-info"):
                names.add(file.parts[0].removesuffix(".py").lower())
    return names


@pytest.mark.parametrize(
    "pins",
    [
        (phonenumbers_pin(),),
        *(
            consumer_requirements(FUNCTIONS_DIR / consumer.name)
            for consumer in CONSUMERS
            if consumer_requirements(FUNCTIONS_DIR / consumer.name)
        ),
    ],
)
def test_no_layer_of_ours_ships_what_the_samples_hide(pins: tuple[str, ...]) -> None:
    assert not _top_level_names(pins) & set(imports.ABSENT_IN_LAMBDA)


def test_a_sample_cannot_import_what_lambda_has_not() -> None:
    with pytest.raises(BenchError, match="No module named 'click'"):
        imports._sample("click")


def test_httpx_imports_in_a_sample_without_its_command_line() -> None:
    """httpx's `_main` is optional: the bot's engine still imports, as in Lambda."""
    sample = imports._sample("httpx")
    assert sample["seconds"] > 0


def test_a_sample_of_the_built_assets_registers_every_consumer_as_lambda_does() -> None:
    """Lambda names its code's folder (LAMBDA_TASK_ROOT), where the registry reads every consumer's
    declaration: a sample that found none would leave their reading out of every cold path."""
    code = assets.build(["store"])
    sample = imports._sample("store.app", (), code.python_path("store"))
    assert sample["consumers"] == len(CONSUMERS) > 0
