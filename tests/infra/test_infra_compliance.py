"""cdk-nag (AWS Solutions) and cfn-lint on the synthesized templates.

cdk-nag 3 is a CDK validation plugin: `app.synth()` runs it, raises on any unacknowledged
error and writes every finding into `validation-report.json` in the cloud assembly.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aws_cdk
import pytest
import yaml
from cfnlint.api import lint
from synthesized import Synthesized, full_context

from infra.application import build_app
from infra.paths import PROJECT_ROOT

# The project's cfn-lint settings (`.cfnlintrc.yaml`, each ignored check explained there): the
# tests lint with exactly what a person running `cfn-lint` at the project root gets.
CFN_LINT_CONFIG = yaml.safe_load((PROJECT_ROOT / ".cfnlintrc.yaml").read_text(encoding="utf-8"))
TOLERATED_LINT_WARNINGS = set(CFN_LINT_CONFIG["ignore_checks"])
LINT_REGIONS = CFN_LINT_CONFIG["regions"]


def _report(outdir: Path) -> dict[str, Any]:
    report: dict[str, Any] = json.loads((outdir / "validation-report.json").read_text())
    return report


@pytest.mark.parametrize("synth_name", ["default_synth", "full_synth"])
def test_synth_leaves_no_unacknowledged_cdk_nag_or_cdk_findings(
    synth_name: str, request: pytest.FixtureRequest
) -> None:
    synth: Synthesized = request.getfixturevalue(synth_name)
    report = _report(synth.outdir)
    # Any finding, error or warning, of cdk-nag or CDK's own annotations appears here.
    assert report["pluginReports"] == []


@dataclass(frozen=True)
class Acknowledged:
    path: str
    rule: str
    reason: str


@pytest.fixture(scope="module")
def unacknowledged(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Acknowledged], dict[str, Any]]:
    """Synthesize with every acknowledgement recorded instead of applied, and the report that gives."""
    recorded: list[Acknowledged] = []
    original_of = aws_cdk.Validations.of

    class Recorder:
        def __init__(self, scope: Any) -> None:
            self.scope = scope

        def acknowledge(self, *rules: aws_cdk.Acknowledgment) -> None:
            recorded.extend(Acknowledged(self.scope.node.path, r.id, r.reason) for r in rules)

        def add_plugins(self, *plugins: Any) -> None:
            original_of(self.scope).add_plugins(*plugins)

    outdir = tmp_path_factory.mktemp("cdk-unacknowledged")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(aws_cdk.Validations, "of", staticmethod(Recorder))
        app, _ = build_app(full_context(), outdir=str(outdir))
        with pytest.raises(RuntimeError, match="ValidationFailed"):
            app.synth()
    return recorded, _report(outdir)


def test_every_nag_finding_is_acknowledged_where_it_occurs_and_every_acknowledgement_is_used(
    unacknowledged: tuple[list[Acknowledged], dict[str, Any]],
) -> None:
    acknowledged, report = unacknowledged
    (nag,) = [r for r in report["pluginReports"] if r["pluginName"] == "AwsSolutions"]
    findings = [
        (construct["constructPath"], violation["ruleName"])
        for violation in nag["violations"]
        for construct in violation["violatingConstructs"]
    ]
    assert findings, "with acknowledgements withheld, cdk-nag must report findings"

    def covers(ack: Acknowledged, path: str, rule: str) -> bool:
        return ack.rule == rule and (path == ack.path or path.startswith(ack.path + "/"))

    uncovered = [f for f in findings if not any(covers(a, *f) for a in acknowledged)]
    unused = [a for a in acknowledged if not any(covers(a, *f) for f in findings)]
    assert uncovered == []
    assert unused == []


def test_every_acknowledgement_gives_a_specific_reason(
    unacknowledged: tuple[list[Acknowledged], dict[str, Any]],
) -> None:
    acknowledged, _ = unacknowledged
    assert acknowledged
    for ack in acknowledged:
        assert len(ack.reason) >= 60, f"{ack.rule} at {ack.path}: reason too vague"


@pytest.mark.parametrize("synth_name", ["default_synth", "full_synth"])
def test_cfn_lint_finds_no_errors(synth_name: str, request: pytest.FixtureRequest) -> None:
    synth: Synthesized = request.getfixturevalue(synth_name)
    matches = lint(json.dumps(synth.template.to_json()), regions=LINT_REGIONS)
    findings = [(m.rule.id, m.message) for m in matches]
    assert [f for f in findings if f[0].startswith("E")] == []
    assert [f for f in findings if f[0] not in TOLERATED_LINT_WARNINGS and not f[0].startswith("I")] == []


@pytest.mark.slow
def test_cfn_lint_run_as_a_person_would_exits_0(full_synth: Synthesized) -> None:
    """`cfn-lint` at the project root reads `.cfnlintrc.yaml`; on the fullest template it finds nothing."""
    [template] = full_synth.outdir.glob("*.template.json")
    cfn_lint = Path(sys.executable).parent / "cfn-lint"

    result = subprocess.run(
        [str(cfn_lint), str(template)], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300
    )

    assert result.returncode == 0, result.stdout + result.stderr
    assert {"W3005"} == TOLERATED_LINT_WARNINGS  # widening what is ignored is a decision, not a drift
