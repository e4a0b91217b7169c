"""Generated `bin/ops configure` inputs (issue 40): whatever key or value is typed, the command
either writes what the synth reads, as typed, or refuses in one line and leaves cdk.json as it was."""

from __future__ import annotations

import json
import math
import shutil
import string
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from infra.config import PipelineSettings, assignment
from infra.paths import CDK_JSON

GENERATED = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
KNOWN_KEYS = PipelineSettings.context_keys()
# Keys near the known ones: a dot, a blank, a dash or a capital where it does not belong.
near_keys = st.builds(
    lambda key, extra, at: key[:at] + extra + key[at:],
    st.sampled_from(KNOWN_KEYS),
    st.sampled_from([".", ".x", " ", "\t", "-", "_", "X", "\n", ":", "@", ""]),
    st.integers(0, 30),
)
any_keys = st.text(alphabet=string.ascii_letters + string.digits + "._-@: \t/", min_size=1, max_size=20)
numbers = st.one_of(
    st.sampled_from(
        ["inf", "-inf", "Infinity", "nan", "NaN", "1e309", "-1", "0", "-0.0", "1e-320", " 5", "5 "]
    ),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-(10**6), 10**6).map(str),
)


@pytest.fixture
def cdk_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    copy = tmp_path / "cdk.json"
    shutil.copy(CDK_JSON, copy)
    monkeypatch.setattr("ops.cli.CDK_JSON", copy)
    return copy


def configure(run, path: Path, word: str) -> tuple[int, str, bytes, bytes]:
    path.write_bytes(CDK_JSON.read_bytes())
    before = path.read_bytes()
    result = run("configure", "--yes", "--", word)  # a word may start with "-"
    return result.code, result.err, before, path.read_bytes()


@GENERATED
@given(word=st.text(max_size=30))
@example(word=" tracing=true")
@example(word="=x")
def test_an_assignment_is_the_word_split_at_its_first_equals_sign_or_refused(word: str) -> None:
    try:
        key, value = assignment(word)
    except ValueError:
        return
    assert f"{key}={value}" == word
    assert key and key == key.strip() and key.isprintable()


@GENERATED
@given(key=st.one_of(near_keys, any_keys, st.sampled_from(KNOWN_KEYS)))
@example(key="alarm_email.x")
@example(key=" tracing")
@example(key="stack-name")
def test_a_key_is_written_as_typed_only_when_the_synth_reads_it(cdk_json: Path, run, key: str) -> None:
    code, err, before, after = configure(run, cdk_json, f"{key}=true")

    if code != 0:
        assert after == before
        assert len(err.strip().splitlines()) == 1 and err.startswith("error: ")
        return
    written = json.loads(after)["context"]
    assert written[key] == "true"  # the key as typed, not a cleaned-up one
    assert key in KNOWN_KEYS
    PipelineSettings.from_context(written)  # what every synth reads from the file


@GENERATED
@given(
    key=st.sampled_from(["api_rate_limit", "sms_reconcile_deadline_hours", "api_burst_limit"]), value=numbers
)
@example(key="api_rate_limit", value="inf")
@example(key="api_rate_limit", value="1e309")
def test_a_number_is_written_only_when_finite_and_in_its_range(
    cdk_json: Path, run, key: str, value: str
) -> None:
    code, err, before, after = configure(run, cdk_json, f"{key}={value}")

    if code != 0:
        assert after == before and f"error: {key}: " in err
        return
    written = json.loads(after)["context"]
    assert written[key] == value
    number = float(value)
    assert math.isfinite(number) and number >= 0
    assert getattr(PipelineSettings.from_context(written), key) == number
