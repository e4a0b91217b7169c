"""Every stored and queued format knows its version, and this code reads each version up to it.

`pipeline.formats.FORMATS` names each format, the `schema_version` its writer writes and its
reader (the function the code reads it with); `tests/fixtures/formats/<name>/v<N>.json` holds a
sample of every version since the format's first. Bumping a format's version fails here until a
sample of the new version exists and the format's reader still reads every previous one; a
version newer than the code's is refused by the reader itself. Writers take their version from
the registry (no constant of their own: a source scan fails on one). Items a release left behind
(`tests/fixtures/upgrade/<release>/`) must each be claimed by exactly one format, so a new kind of
item cannot be stored without being registered with its version.
"""

from __future__ import annotations

import base64
import importlib
import json
import math
import re
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from boto3.dynamodb.types import TypeDeserializer
from hypothesis import given
from hypothesis import strategies as st

from pipeline import formats
from pipeline.formats import FORMATS, Format, FormatTooNew, FormatUnreadable, format_of

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
SAMPLES = FIXTURES / "formats"
RELEASES = sorted(p for p in (FIXTURES / "upgrade").iterdir() if (p / "capture.json").exists())
# Where writers live: none may hold a schema_version of its own.
WRITER_SOURCES = ("layers/shared/python", "functions", "bot")
_OWN_VERSION = re.compile(
    r"SCHEMA_VERSION\s*=\s*\d|[\"']schema_version[\"']\s*:\s*(\{\s*[\"']N[\"']\s*:\s*)?[\"']?\d"
    r"|schema_version\s*=\s*:?\d"
)


def sample(fmt: Format, version: int) -> dict[str, Any]:
    path = SAMPLES / fmt.name / f"v{version}.json"
    assert path.exists(), (
        f"{fmt.name} is at schema_version {fmt.version}: add {path.relative_to(ROOT)} "
        "(an item its writer writes) and keep reading the versions before it"
    )
    document: dict[str, Any] = json.loads(path.read_text())
    return document


def binaries_decoded(value: Any) -> Any:
    """DynamoDB JSON as saved (binary values base64 text) as boto3's client returns it (bytes)."""
    if isinstance(value, dict):
        return {
            kind: base64.b64decode(inner) if kind == "B" else binaries_decoded(inner)
            for kind, inner in value.items()
        }
    return value


def reader_of(fmt: Format) -> Callable[[dict[str, Any]], Any]:
    """The format's reader, taking a sample (DynamoDB JSON or a body) in the form it reads."""
    if fmt.reader is None:  # nothing of ours reads it back: what it has is its version
        return fmt.version_of
    module, _, path = fmt.reader.partition(":")
    function: Any = importlib.import_module(module)
    for name in path.split("."):
        function = getattr(function, name)
    if fmt.reads_from == "body":
        return lambda item: function(json.dumps(item))
    if fmt.reads_from == "resource":
        return lambda item: function(TypeDeserializer().deserialize({"M": binaries_decoded(item)}))
    return lambda item: function(binaries_decoded(item))


def released_items() -> list[tuple[str, str, dict[str, Any]]]:
    """(release, where, item) for every item and queued body each captured release left."""
    found = []
    for release in RELEASES:
        for table, items in json.loads((release / "tables.json").read_text()).items():
            found += [(release.name, table, item) for item in items]
        for name in ("messages.json", "queues.json"):
            path = release / name
            document = json.loads(path.read_text()) if path.exists() else []
            messages = document if isinstance(document, list) else [m for q in document.values() for m in q]
            found += [(release.name, "queue", json.loads(message["body"])) for message in messages]
    return found


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda fmt: fmt.name)
def test_each_version_of_each_format_has_a_sample_its_reader_reads(fmt: Format) -> None:
    read = reader_of(fmt)
    for version in fmt.readable:
        item = sample(fmt, version)
        assert format_of(fmt.where, item) == fmt, f"{fmt.name} v{version}: its key is not {fmt.key.pattern}"
        assert fmt.version_of(item) == version
        read(item)  # raises on a version its reader no longer reads


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda fmt: fmt.name)
def test_the_current_version_is_written_and_the_previous_one_still_read(fmt: Format) -> None:
    """The registry's promise: what is written is the newest version read, none skipped since
    the format's first (a bump keeps a reader for the version before it)."""
    assert fmt.written() == {"schema_version": {"N": str(fmt.version)}}
    assert fmt.readable[-1] == fmt.version
    assert fmt.version == fmt.first or fmt.version - 1 in fmt.readable


def test_no_sample_is_of_a_version_the_registry_does_not_know() -> None:
    known = {fmt.name: fmt.readable for fmt in FORMATS}
    for path in SAMPLES.glob("*/v*.json"):
        assert path.parent.name in known, f"{path}: no format {path.parent.name!r} in pipeline.formats"
        assert int(path.stem[1:]) in known[path.parent.name], f"{path}: not a version of its format"


# What a body or an item may hold: JSON's values (Python's json reads Infinity and NaN too), the
# Decimals boto3's resource gives, and versions near the readable ones in every form.
near_versions = st.integers(min_value=-1, max_value=3)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.decimals()
    | st.text()
    | near_versions
    | near_versions.map(float)
    | near_versions.map(str)
    | st.sampled_from([0.5, 1.5, "1.0", " 1", "1_0", "+1", "\u0661"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=6,
)


@given(fmt=st.sampled_from(FORMATS), raw=json_values, dynamodb=st.booleans())
def test_any_schema_version_is_read_or_refused_as_one_this_code_does_not_read(
    fmt: Format, raw: Any, dynamodb: bool
) -> None:
    """Whatever an item or a body holds as its version (in DynamoDB JSON, `{"N": ...}`), the
    version check returns one this code reads or raises FormatTooNew, which every reader refuses
    with its reason: never another exception (a list once raised a TypeError out of it, infinity
    an OverflowError). A version read is exactly the number held: no bool read as 1, no fraction
    cut to its whole part, no text but ASCII digits."""
    item = {"schema_version": {"N": raw} if dynamodb else raw}
    try:
        version = fmt.version_of(item)
    except FormatTooNew:
        return
    assert version in fmt.readable
    held = raw.get("N") if isinstance(raw, dict) and not dynamodb else raw  # DynamoDB JSON, unasked
    if held is not None:
        assert not isinstance(held, bool)
        assert Decimal(held) == version if not isinstance(held, str) else held == str(version)


@pytest.mark.parametrize("raw", [math.inf, -math.inf, math.nan, Decimal("Infinity"), Decimal("NaN")])
def test_infinity_or_nan_as_a_version_is_refused_as_unreadable(raw: Any) -> None:
    """Found by the generator above: `int(inf)` raised OverflowError out of the version check,
    which no reader expects (a queued body with `"schema_version": Infinity`, as Python's json
    reads it)."""
    with pytest.raises(FormatUnreadable, match="no whole number"):
        formats.by_name("envelope").version_of({"schema_version": raw})


@pytest.mark.parametrize("raw", [True, 1.5, Decimal("0.5"), "1.0", " 1", "1_0", "+1", "\u0661"])
def test_a_version_that_only_looks_whole_is_refused_not_rounded(raw: Any) -> None:
    """The siblings of infinity: what `int()` turned into a readable version (True and 1.5 into 1,
    " 1" and other scripts' digits into 1) is no version any writer wrote."""
    with pytest.raises(FormatUnreadable, match="no whole number"):
        formats.by_name("envelope").version_of({"schema_version": raw})


def test_a_version_that_is_no_number_is_refused_without_quoting_it() -> None:
    """A body may carry anything there, a phone number too: the reason names its type only."""
    fmt = formats.by_name("envelope")
    with pytest.raises(
        FormatUnreadable, match="envelope has a schema_version that is no whole number"
    ) as refused:
        fmt.version_of({"schema_version": "+375 29 123 45 67"})
    assert "375" not in str(refused.value)
    with pytest.raises(FormatUnreadable, match=r"\(a list\)"):
        fmt.version_of({"schema_version": []})


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda fmt: fmt.name)
def test_a_version_newer_than_this_code_is_refused_by_its_reader_not_guessed(fmt: Format) -> None:
    item = sample(fmt, fmt.version)
    newer = fmt.version + 1
    item = {**item, "schema_version": newer if fmt.where == "queue" else {"N": str(newer)}}
    with pytest.raises(FormatTooNew, match=fmt.name):
        fmt.version_of(item)
    # The reader's own refusal (wrapped as its caller expects: a PermanentError, an Invalid)
    # names the version, never reads the item as if it were the current one.
    with pytest.raises(Exception, match=rf"schema_version {newer}"):
        reader_of(fmt)(item)


def test_every_item_and_message_a_release_left_is_claimed_by_one_format() -> None:
    items = released_items()
    assert items
    unclaimed = [
        (release, where, formats.key_of(where, item))
        for release, where, item in items
        if format_of(where, item) is None
    ]
    assert unclaimed == []
    for _release, where, item in items:  # each is of a version this code reads
        fmt = format_of(where, item)
        assert fmt is not None
        fmt.version_of(item)


def test_no_writer_holds_a_schema_version_of_its_own() -> None:
    """A writer takes its version from `pipeline.formats` (`by_name(...).version` or `.written()`):
    a constant of its own could be bumped without the registry, its samples and its reader."""
    found = []
    for top in WRITER_SOURCES:
        for path in sorted((ROOT / top).rglob("*.py")):
            if path.name == "formats.py" or "/tests/" in str(path):
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if _OWN_VERSION.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert found == []


def test_the_registry_is_consistent() -> None:
    names = [fmt.name for fmt in FORMATS]
    assert len(names) == len(set(names))
    for fmt in FORMATS:
        assert fmt.first <= fmt.version
        assert fmt.reads_from in ("client", "resource", "body")
        if fmt.reader is not None:
            reader_of(fmt)  # importable
