"""The item-kind list of `pipeline.personal` covers every table and stored format, and
docs/forget.md prints it as it is; its matcher finds a phone however a writer wrote it."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from infra.tables import TABLE_KEYS
from pipeline.personal import KINDS, TABLES, Person, holds, markdown_table, unlisted_formats

DOC = Path(__file__).resolve().parents[2] / "docs" / "forget.md"
PHONE = "+4915770000001"


def test_every_table_and_stored_format_has_its_kinds() -> None:
    assert set(TABLES) == set(TABLE_KEYS)
    assert unlisted_formats() == []
    names = [kind.name for kind in KINDS]
    assert len(names) == len(set(names))


def test_every_personal_kind_has_a_ttl_or_an_owner() -> None:
    for kind in KINDS:
        assert kind.retention.ttl is not None or kind.retention.owner, kind.name


def test_docs_list_every_store_as_the_code_does() -> None:
    assert markdown_table() in DOC.read_text(encoding="utf-8")


@given(separators=st.lists(st.sampled_from(["", " ", "-", "(", ")", "."]), min_size=13, max_size=13))
def test_the_phone_is_found_however_it_is_written(separators: list[str]) -> None:
    digits = PHONE[1:]
    written = "".join(d + s for d, s in zip(digits, separators, strict=False)).rstrip(" -().")
    nested = json.dumps({"message": {"contact": {"phone_number": written}}})
    assert holds({"payload": nested}, Person(phone=PHONE))


def test_a_longer_number_or_id_is_not_the_person() -> None:
    person = Person(phone=PHONE, chat=4242)
    assert not holds({"text": "+491577000000123", "id": 424242, "chat": "-4242"}, person)
    assert holds({"chat": 4242}, person) and holds({"pk": "chat#4242"}, person)
