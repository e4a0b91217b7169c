"""The functions' asset carries the consumers' declarations parsed (`pipeline.declarations`): an
init in Lambda registers the same consumers from it as the repository's TOML files give, without
importing tomllib."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import assets
from infra.paths import FUNCTIONS_DIR
from pipeline.declarations import SNAPSHOT, SNAPSHOT_VERSION, DeclarationError, snapshot
from pipeline.registry import CONSUMERS, discover
from pipeline.team import TEAM_DIR_ENV
from tests.support.imports import run_fresh


@pytest.fixture
def asset_root(tmp_path: Path) -> Path:
    """A folder holding the snapshot alone, as a built asset would beside its consumer folders."""
    (tmp_path / SNAPSHOT).write_bytes(snapshot(FUNCTIONS_DIR))
    return tmp_path


def test_the_snapshot_registers_the_consumers_the_toml_files_declare(asset_root: Path) -> None:
    assert discover(asset_root) == discover(FUNCTIONS_DIR) == CONSUMERS


def test_the_built_functions_asset_carries_the_snapshot_of_its_declarations() -> None:
    code = assets.build(["store"])
    assert (code.task / SNAPSHOT).read_bytes() == snapshot(FUNCTIONS_DIR)
    assert discover(code.task) == CONSUMERS


def test_an_init_reading_the_snapshot_never_imports_tomllib(asset_root: Path) -> None:
    script = (
        "import json, sys\n"
        "from pipeline.registry import CONSUMERS\n"
        "print(json.dumps([len(CONSUMERS), 'tomllib' in sys.modules]))\n"
    )
    # As in Lambda: the asset, and no team folder (the stack passes a team's tuning as JSON).
    environment = {"LAMBDA_TASK_ROOT": str(asset_root), TEAM_DIR_ENV: str(asset_root / "no-team")}
    assert json.loads(run_fresh(script, **environment)) == [len(CONSUMERS), False]


def test_a_snapshot_of_another_version_is_refused_naming_the_file(asset_root: Path) -> None:
    document = json.loads((asset_root / SNAPSHOT).read_text())
    (asset_root / SNAPSHOT).write_text(json.dumps({**document, "schema_version": SNAPSHOT_VERSION + 1}))
    with pytest.raises(DeclarationError, match=f"{SNAPSHOT}: not a version {SNAPSHOT_VERSION} snapshot"):
        discover(asset_root)


def test_a_declaration_the_registry_refuses_is_refused_from_the_snapshot_too(asset_root: Path) -> None:
    """Checked the same way whichever it came from: here a declaration naming another folder."""
    document = json.loads((asset_root / SNAPSHOT).read_text())
    document["declarations"]["store"]["name"] = "elsewhere"
    (asset_root / SNAPSHOT).write_text(json.dumps(document))
    with pytest.raises(DeclarationError, match=r"store/consumer\.toml: name 'elsewhere' must be"):
        discover(asset_root)
