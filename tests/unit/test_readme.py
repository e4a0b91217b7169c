"""README.md and the docs/ pages are the users' contract: these tests fail when they drift from the code."""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
from pathlib import Path

import pytest
from pydantic import ValidationError

from infra.config import STAGES_KEY, PipelineSettings, settings_error_lines
from ops.cli import build_parser
from pipeline.crm.forms import MAX_BODY_BYTES
from pipeline.registry import CONSUMERS
from pipeline.retention import (
    CRM_RESEND_WINDOW,
    IDEMPOTENCY_TTL_SECONDS,
    REDELIVERY_BOUND,
    SMS_RETENTION_DAYS,
    SMS_RETENTION_MIN_DAYS,
    describe_bound,
)
from pipeline.sms.orders import CLOCK_SKEW_TOLERANCE, RULES

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
MAKEFILE = (ROOT / "Makefile").read_text()
# README.md and every docs/ page: the facts a user reads, wherever a task's page put them.
PAGES = ["README.md", *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))]
DOCS = "\n\n".join((ROOT / page).read_text() for page in PAGES)


def headings(text: str) -> list[tuple[int, int, str]]:
    """(line index, level, title) of each markdown heading outside fenced code blocks."""
    found, fenced = [], False
    for index, line in enumerate(text.splitlines()):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (match := re.match(r"(#{1,6}) (.+)", line)):
            found.append((index, len(match[1]), match[2].strip()))
    return found


def section(page: str, title: str) -> str:
    """The text of `page` under the heading `title` (any level), up to the next heading of its
    level or above: with its subsections."""
    lines = (ROOT / page).read_text().splitlines(keepends=True)
    marks = headings("".join(lines))
    for position, (index, level, name) in enumerate(marks):
        if name == title:
            end = next((i for i, lv, _ in marks[position + 1 :] if lv <= level), len(lines))
            return "".join(lines[index + 1 : end])
    raise AssertionError(f"{page} has no '{title}' heading")


def table_keys(text: str) -> set[str]:
    """The backticked names in the first column of the markdown tables in `text`."""
    return {
        name
        for cell in re.findall(r"^\| ([^|]+) \|", text, flags=re.M)
        for name in re.findall(r"`([^`]+)`", cell)
    }


# The consumers the pipeline ships (their registry before they became folders): the table documents
# these; a team's own consumer folders are documented in their folders, not in our README.
SHIPPED = set(json.loads((ROOT / "tests/fixtures/registry/builtins_before_folders.json").read_text()))


@pytest.mark.parametrize("consumer", sorted(SHIPPED))
def test_every_shipped_consumer_has_a_row_in_the_consumer_table(consumer: str) -> None:
    assert consumer in table_keys(section("docs/consumers.md", "Consumers"))


def test_the_consumer_table_lists_no_consumer_that_is_not_shipped_as_a_folder() -> None:
    assert table_keys(section("docs/consumers.md", "Consumers")) == SHIPPED
    assert {consumer.name for consumer in CONSUMERS} >= SHIPPED


def test_every_deployment_setting_is_documented_in_the_configuration_table() -> None:
    documented = table_keys(section("docs/configuration.md", "Configuration"))
    # `consumer_settings` is not a context key: it collects the keys of future consumers.
    settings = set(PipelineSettings.model_fields) - {"consumer_settings"}
    assert settings - documented == set()


def test_the_configuration_table_documents_no_setting_the_stack_does_not_read() -> None:
    context_rows = re.search(
        r"\| context key \|.*?\n\n", section("docs/configuration.md", "Configuration"), flags=re.S
    )
    assert context_rows
    documented = table_keys(context_rows.group(0))
    # `stages` is read before the model: each stage's block of settings (infra.config.stage_context).
    assert documented - set(PipelineSettings.model_fields) - {STAGES_KEY} == set()


def test_every_make_target_the_docs_name_exists() -> None:
    in_readme = set(re.findall(r"^make ([a-z-]+)", README, flags=re.M))
    assert {"local", "test"} <= in_readme, "README no longer shows the two commands"
    named = set(re.findall(r"`make ([a-z-]+)", DOCS)) | set(re.findall(r"^make ([a-z-]+)", DOCS, flags=re.M))
    targets = set(re.findall(r"^([a-z-]+):", MAKEFILE, flags=re.M))
    assert named - targets == set()


def ops_command_lines() -> list[str]:
    lines = re.findall(r"bin/ops ([^`\n#]+)", DOCS)
    return sorted({line.strip() for line in lines})


def test_the_docs_show_the_ops_commands_of_the_runbook() -> None:
    shown = {shlex.split(line)[0] for line in ops_command_lines()}
    assert {"set-webhook", "webhook-info", "rotate-secret", "dlq", "journal"} <= shown


@pytest.mark.parametrize("line", ops_command_lines())
def test_every_ops_command_in_the_docs_parses(line: str) -> None:
    words = shlex.split(line.replace("<key>", "0123abcd").replace("--accepted|--not-sent", "--accepted"))
    parsed = build_parser().parse_args(words)
    assert parsed is not None


def flowing(text: str) -> str:
    """Markdown text with its line breaks and indentation as single spaces."""
    return " ".join(text.split())


def test_the_readme_states_the_redelivery_bound_and_what_derives_from_it_as_computed() -> None:
    bound_days = REDELIVERY_BOUND.days
    expected = {
        ("docs/consumers.md", "Consumers"): [
            f"the redelivery bound is {describe_bound()};",
            f"Powertools records are kept {IDEMPOTENCY_TTL_SECONDS} s ({bound_days} days)",
            f"SMS journal records {SMS_RETENTION_DAYS} days",
        ],
        ("docs/configuration.md", "Configuration"): [
            f"| `idempotency_ttl_seconds` | `{IDEMPOTENCY_TTL_SECONDS}` ({bound_days} days) |"
        ],
        ("docs/sms.md", "Order-status SMS: exactly one SMS per business event"): [
            f"records live {SMS_RETENTION_DAYS} days: the redelivery bound of {bound_days} days",
            f"plus {CRM_RESEND_WINDOW.days} days of CRM resends (`SMS_RETENTION_DAYS`, at least"
            f" {SMS_RETENTION_MIN_DAYS})",
        ],
    }
    for (page, title), phrases in expected.items():
        text = flowing(section(page, title))
        assert [phrase for phrase in phrases if phrase not in text] == [], title


def test_every_cdk_cli_call_in_the_docs_runs_non_interactively() -> None:
    assert re.findall(r"npx [^`\n]*", README), "README shows no CDK CLI call"
    calls = re.findall(r"npx [^`\n]*", DOCS)
    assert [call for call in calls if not call.startswith("npx --yes aws-cdk@2 ")] == []


def test_the_configuration_section_shows_refusals_as_the_synth_prints_them() -> None:
    shown = re.search(
        r"^invalid deployment settings:\n(.*?)^```",
        section("docs/configuration.md", "Configuration"),
        flags=re.M | re.S,
    )
    assert shown, "Configuration shows no refused settings"
    lines = shown.group(1).splitlines()
    given = {}
    for line in lines:
        key, value = re.fullmatch(r"(\w+): .* \(given '(.*)'\)", line).groups()  # type: ignore[union-attr]
        given[key] = value
    with pytest.raises(ValidationError) as raised:
        PipelineSettings.from_context(given)
    assert sorted(settings_error_lines(raised.value)) == sorted(lines)


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule[:40])
def test_the_crm_contract_states_each_sms_rule_in_the_models_words(rule: str) -> None:
    """The contract's exactly-once rules are `pipeline.sms.orders.RULES`, word for word (line
    breaks aside)."""
    assert " ".join(rule.split()) in flowing(section("docs/crm.md", "The CRM contract"))


def test_the_docs_state_the_clock_skew_tolerance_the_model_applies() -> None:
    stated = f"`CLOCK_SKEW_TOLERANCE`, {int(CLOCK_SKEW_TOLERANCE.total_seconds())} seconds"
    assert stated in (ROOT / "docs/crm.md").read_text()


def test_the_docs_state_the_form_body_bound_the_webhook_applies() -> None:
    """The CRM webhook table states API Gateway's 10 MB: the bound `pipeline.crm.forms` applies."""
    stated = re.search(r"a body over (\d+) MB, API Gateway's limit", (ROOT / "docs/crm.md").read_text())
    assert stated, "docs/crm.md no longer states the body bound of the form routes"
    assert int(stated[1]) * 1024 * 1024 == MAX_BODY_BYTES


SKIPPED = {"node_modules", "cdk.out", "__pycache__"}


def _readmes() -> list[str]:
    """The project's READMEs, not those of what is installed or generated beside it."""
    found = []
    for directory, subdirectories, files in os.walk(ROOT):
        subdirectories[:] = [d for d in subdirectories if not d.startswith(".") and d not in SKIPPED]
        if "README.md" in files:
            found.append((Path(directory) / "README.md").relative_to(ROOT).as_posix())
    return sorted(found)


# The changelog and the docs pages name paths and modules too.
MARKDOWN = sorted({*_readmes(), "CHANGELOG.md", *PAGES})
LAYER = ROOT / "layers/shared/python"


def _layer_names(module: str) -> set[str] | None:
    """The top-level names the layer's `module` defines, or None when there is no such module."""
    path = LAYER / Path(*module.split("."))
    for file in (path.with_suffix(".py"), path / "__init__.py"):
        if file.is_file():
            tree = ast.parse(file.read_text())
            names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)}
            names |= {
                t.id
                for n in tree.body
                if isinstance(n, ast.Assign)
                for t in n.targets
                if isinstance(t, ast.Name)
            }
            names |= {
                n.target.id
                for n in tree.body
                if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
            }
            return names
    return None


@pytest.mark.parametrize("markdown", MARKDOWN)
def test_every_path_and_module_a_readme_names_exists(markdown: str) -> None:
    """Its links, its `pipeline/...` paths (in the shared layer) and its `pipeline.x.y` names: a
    module moved or renamed leaves none pointing at the old place."""
    text = (ROOT / markdown).read_text()
    here = (ROOT / markdown).parent
    links = [t.split("#")[0] for t in re.findall(r"\]\(([^)\s]+)\)", text) if not re.match(r"[a-z]+:|#", t)]
    missing = [link for link in links if not (here / link).exists()]
    for path in re.findall(r"`(?:layers/shared/python/)?(pipeline/[\w./]*)`", text):
        if not (LAYER / path).exists():
            missing.append(path)
    for name in re.findall(r"`(pipeline(?:\.\w+)+)", text):
        if _layer_names(name) is None:
            module, _, attribute = name.rpartition(".")
            if attribute not in (_layer_names(module) or set()):
                missing.append(name)
    assert missing == []
