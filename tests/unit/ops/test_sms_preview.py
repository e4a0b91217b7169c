"""`bin/ops sms preview` as typed: each rule's encoding and parts per language, against the limit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ops.cli import main

LONG_RUSSIAN = "{customer_name}, ваш заказ {order_id} готов к выдаче. " + "Ждём вас в магазине. " * 6


def write_rules(tmp_path: Path, template: object, **extra: object) -> Path:
    path = tmp_path / "sms_rules.json"
    rules = {"name": "ready", "status": "ready_for_pickup", "template": template}
    path.write_text(json.dumps({"schema_version": 2, **extra, "rules": [rules]}, ensure_ascii=False))
    return path


def test_preview_shows_each_rule_and_language_with_its_encoding_parts_and_an_example(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_rules(
        tmp_path,
        {"en": "Order {order_id} is ready.", "ru": "Заказ {order_id} готов."},
        languages=["en", "ru"],
    )

    assert main(["sms", "preview", "--rules", str(path)]) == 0

    out = capsys.readouterr().out
    # order_id is GSM-only, 20 long: the English text stays GSM-7; Cyrillic makes the other UCS-2.
    assert "ready [en]: GSM-7, 1 part(s), 36 units, 36 characters: ok" in out
    assert "ready [ru]: UCS-2, 1 part(s), 33 units, 33 characters: ok" in out
    assert "Order XXXXXXXXXXXXXXXXXXXX is ready." in out


def test_preview_names_a_template_over_the_part_limit_with_its_count_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_rules(tmp_path, LONG_RUSSIAN, fallback_language="ru")

    assert main(["sms", "preview", "--rules", str(path), "--max-parts", "2", "--json"]) == 1

    [template] = json.loads(capsys.readouterr().out)["templates"]
    assert (template["rule"], template["language"], template["encoding"]) == ("ready", "ru", "UCS-2")
    assert template["parts"] == 4 and template["within_limit"] is False
    assert (
        template["units"]
        == len(template["example"])
        == 40 + 20 + len(LONG_RUSSIAN) - len("{customer_name}{order_id}")
    )


def test_preview_of_a_rule_missing_a_language_says_which(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_rules(tmp_path, {"en": "Order {order_id} is ready."}, languages=["en", "de"])

    assert main(["sms", "preview", "--rules", str(path)]) != 0

    assert "rule 'ready' has no text in de" in capsys.readouterr().err
