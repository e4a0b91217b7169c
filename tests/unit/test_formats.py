"""Every stored and queued format knows its version, and this code reads each version up to it.

`pipeline.formats.FORMATS` names each format and the `schema_version` its writer writes today;
`tests/fixtures/formats/<name>/v<N>.json` holds a sample of every version since the format's
first. Changing a format means bumping its version there, which fails here until a sample of the
new version exists and the format's reader still accepts the previous one. Items a release left
behind (`tests/fixtures/upgrade/<release>/`) must each be claimed by exactly one format, so a new
kind of item cannot be stored without being registered with its version.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from crm.contacts import CONTACT_SCHEMA_VERSION

from pipeline import formats
from pipeline.crm.sweep import CURSOR_SCHEMA_VERSION
from pipeline.envelope import Envelope
from pipeline.formats import FORMATS, Format, FormatTooNew, format_of
from pipeline.pause import PAUSED_SCHEMA_VERSION

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SAMPLES = FIXTURES / "formats"
RELEASES = sorted(p for p in (FIXTURES / "upgrade").iterdir() if (p / "capture.json").exists())


def sample(fmt: Format, version: int) -> dict[str, Any]:
    path = SAMPLES / fmt.name / f"v{version}.json"
    assert path.exists(), (
        f"{fmt.name} is at schema_version {fmt.version}: add {path.relative_to(FIXTURES.parent)} "
        "(an item its writer writes) and keep reading the versions before it"
    )
    document: dict[str, Any] = json.loads(path.read_text())
    return document


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
def test_each_version_of_each_format_has_a_sample_this_code_reads(fmt: Format) -> None:
    for version in range(fmt.first, fmt.version + 1):
        item = sample(fmt, version)
        assert format_of(fmt.where, item) == fmt, f"{fmt.name} v{version}: its key is not {fmt.key.pattern}"
        assert fmt.version_of(item) == version
        if fmt.where == "queue":  # the worker's reader of every queued body
            assert Envelope.from_json(json.dumps(item)).event_id == item["event_id"]


def test_no_sample_is_of_a_version_the_registry_does_not_know() -> None:
    known = {fmt.name: range(fmt.first, fmt.version + 1) for fmt in FORMATS}
    for path in SAMPLES.glob("*/v*.json"):
        assert path.parent.name in known, f"{path}: no format {path.parent.name!r} in pipeline.formats"
        assert int(path.stem[1:]) in known[path.parent.name], f"{path}: not a version of its format"


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda fmt: fmt.name)
def test_a_version_newer_than_this_code_is_refused_not_guessed(fmt: Format) -> None:
    item = {**sample(fmt, fmt.version), "schema_version": {"N": str(fmt.version + 1)}}
    with pytest.raises(FormatTooNew, match=fmt.name):
        fmt.version_of(item)


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


def test_the_writers_versions_are_the_registered_ones() -> None:
    """A writer bumping its own constant without the registry (and a sample) fails here."""
    assert formats.by_name("crm_sweep_cursor").version == CURSOR_SCHEMA_VERSION
    assert formats.by_name("consumer_paused").version == PAUSED_SCHEMA_VERSION
    assert formats.by_name("crm_lead_contact").version == CONTACT_SCHEMA_VERSION
