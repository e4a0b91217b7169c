"""Fixtures of the CRM source tests: the loopback HTTP fake the consumer tests use, and the vendor fixtures.

`http_fake` (tests/unit/consumers/conftest.py) plays Bitrix24's REST API and amoCRM's API v4.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.unit.consumers.conftest import http_fake  # noqa: F401 - the fixture, re-exported

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "crm"


def fixture_bytes(vendor: str, name: str) -> bytes:
    return (FIXTURES / vendor / name).read_bytes()


def fixture_json(vendor: str, name: str) -> Any:
    return json.loads(fixture_bytes(vendor, name))
