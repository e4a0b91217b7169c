"""One release version: `pyproject.toml` holds it, CHANGELOG.md names it, the stack exports it and
`bin/ops doctor` compares the deployed release with this checkout's."""

from __future__ import annotations

import argparse
import re

from infra.outputs import OutputKey
from infra.version import CHANGELOG, PYPROJECT, SEMVER, release_version, version_key
from ops import doctor_checks
from ops.context import Context
from ops.findings import Finding, Target
from ops.stack import StackOutputs


def version_findings(outputs: dict[str, str]) -> list[Finding]:
    stack = StackOutputs(origin="test", values=outputs)
    where = Target(stack, None, "not read", False, "aws", "bin/ops")
    return list(doctor_checks.check_version(Context(argparse.Namespace(local=False), _stack=stack), where))


def test_the_version_is_semantic_and_the_changelog_names_it_with_its_upgrade_notes() -> None:
    version = release_version()
    assert SEMVER.fullmatch(version)
    assert f'version = "{version}"' in PYPROJECT.read_text()
    changelog = CHANGELOG.read_text()
    section = changelog.split(f"## [{version}]", 1)[1].split("\n## ", 1)[0]
    assert [h for h in re.findall(r"^### (.+)$", section, re.M)] == [
        "Added",
        "Changed",
        "Fixed",
        "Upgrade notes",
    ]


def test_a_stack_without_a_version_output_is_the_release_before_versions() -> None:
    [finding] = version_findings({})
    assert finding.status == "WARN"
    assert finding.detail.startswith(
        f"deployed 0.4.0 or earlier, this checkout {release_version()}: read the"
    )
    assert "CHANGELOG.md" in finding.detail


def test_an_older_deployed_release_points_at_the_upgrade_notes_and_the_same_one_is_ok() -> None:
    [older] = version_findings({OutputKey.VERSION: "0.4.0"})
    assert (older.status, older.detail.split(":")[0]) == (
        "WARN",
        f"deployed 0.4.0, this checkout {release_version()}",
    )
    assert "read the upgrade notes" in older.detail
    [same] = version_findings({OutputKey.VERSION: release_version()})
    assert same.status == "OK"


def test_a_checkout_older_than_the_deployed_release_fails() -> None:
    major, minor, _patch = version_key(release_version())
    [finding] = version_findings({OutputKey.VERSION: f"{major}.{minor + 1}.0"})
    assert finding.status == "FAIL" and "is older" in finding.detail
