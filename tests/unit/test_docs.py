"""The docs work as written: every shell command README.md and docs/*.md show runs here (itself, or
its `--help` / `make -n` form), and every internal link and `#anchor` of the project's markdown
resolves, so a page that moves or a heading renamed leaves nothing pointing at nothing.

Commands come from fenced `bash`/`sh` blocks (every line), unlabelled fences whose first word is a
known program, and inline code spans in prose that start with one. A command whose program is in
neither RUNNERS nor NOT_RUNNABLE fails the test: a new kind of command gets a decision, not a pass.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
# The pages whose commands run: the README and the docs pages.
COMMAND_PAGES = ["README.md", *sorted(p.relative_to(ROOT).as_posix() for p in DOCS.glob("*.md"))]
# The pages whose links and anchors are checked: those and the other markdown a user reads.
LINK_PAGES = sorted({*COMMAND_PAGES, "CHANGELOG.md", "local/README.md", "bench/README.md", "team/README.md"})

# Programs shown in the docs that cannot run on a machine without AWS, network or a running stack,
# and why; what they would do is covered elsewhere, as said.
NOT_RUNNABLE = {
    "npx": "the CDK CLI, fetched from npm, against an AWS account (tests/infra synthesizes the app)",
    "cdk": "the CDK CLI against an AWS account (tests/infra synthesizes the app)",
    "aws": "the AWS CLI against a real account; none here",
    "curl": "requests to a running `make local` or to a vendor; tests/e2e send the same requests",
    "jq": "reads .local/stack.json, written by a running `make local`",
    "apt-get": "installs system packages (root and network)",
    ".ci/run": "CI itself: installs chromium and Python, runs the whole suite and the benchmarks",
    "bin/find-python": "exits 1 by design on a machine without python3.13 (`make python-version` runs here)",
    ".venv/bin/cfn-lint": "lints cdk.out, which only a synth writes (tests/infra runs cfn-lint)",
    "app.py": "`python app.py` is a full synth with pip bundling (tests/infra synthesizes the app)",
}
# Programs run here, each in the form named by `_argv`.
RUNNERS = {"bin/ops", "make", "python", "python3", "python3.13", ".venv/bin/python", "pytest", "export"}
PROGRAMS = RUNNERS | set(NOT_RUNNABLE)
PYTHON_MODULES = {"ops", "local", "bench", "pytest"}

# Placeholders a page writes for a value of the reader's: a value of the right shape instead.
PLACEHOLDERS = {"<key>": "0123abcd", "<consumer>": "sms", "<name>": "loyalty", "<token>": "123:abc"}


@dataclass(frozen=True)
class Shown:
    page: str
    text: str


def _fences(text: str) -> Iterator[tuple[str, str]]:
    """(info string, body) of each fenced code block."""
    for match in re.finditer(r"^```([^\n]*)\n(.*?)^```", text, flags=re.M | re.S):
        yield match[1].strip(), match[2]


def _prose(text: str) -> str:
    """The text outside fenced code blocks."""
    return re.sub(r"^```[^\n]*\n.*?^```", "", text, flags=re.M | re.S)


def _statements(body: str) -> Iterator[str]:
    """The shell statements of a block: continuation lines joined, multi-line quotes kept whole."""
    pending = ""
    for line in body.replace("\\\n", " ").splitlines():
        pending = f"{pending}\n{line}" if pending else line
        try:
            words = shlex.split(pending, comments=True)
        except ValueError:  # a quote still open: the statement goes on
            continue
        if words:
            yield pending.strip()
        pending = ""
    assert not pending, f"unclosed quote in a shell block: {pending[:80]!r}"


def _words(text: str) -> list[str]:
    """The statement's words, placeholders filled in, a synopsis' `[...]` and `...` dropped."""
    for placeholder, value in PLACEHOLDERS.items():
        text = text.replace(placeholder, value)
    text = re.sub(r"<[^<>\s]+>", "x", text)
    text = re.sub(r"\s\[[^\]]*\]", "", text)  # optional parts of a synopsis
    words = []
    for word in shlex.split(text, comments=True):
        if word == "...":
            break
        if "|" in word and word.startswith("-"):  # `--accepted|--not-sent`: one of them
            word = word.split("|")[0]
        words.append("1" if re.fullmatch(r"[A-Z]", word) else word)  # `--seed N`
    return words


def _program(words: list[str]) -> tuple[dict[str, str], list[str]]:
    """The environment a statement sets before its program, and the program's words."""
    env: dict[str, str] = {}
    while words and re.fullmatch(r"[A-Za-z_]\w*=.*", words[0]) and not words[0].startswith("$"):
        name, _, value = words[0].partition("=")
        if value.startswith("$("):  # `B24=$(jq ...)`: what runs is the substituted command
            return env, [value[2:], *words[1:]]
        env[name] = value
        words = words[1:]
    return env, words


def _name(words: list[str]) -> str:
    """The program a statement runs: for `python app.py`, the script."""
    is_python = words[0].startswith("python") or words[0] == ".venv/bin/python"
    if is_python and words[1:2] != ["-m"] and len(words) > 1:
        return words[1]
    return words[0]


def shown_commands() -> list[Shown]:
    found = []
    for page in COMMAND_PAGES:
        text = (ROOT / page).read_text()
        for info, body in _fences(text):
            statements = list(_statements(body)) if info in {"bash", "sh", "shell", ""} else []
            if info == "" and statements:
                _, words = _program(_words(statements[0]))
                if not words or _name(words) not in PROGRAMS:
                    continue  # output, a tree or a message shown as text, not commands
            found += [Shown(page, statement) for statement in statements]
        for span in re.findall(r"`([^`\n]+)`", _prose(text)):
            _, words = _program(_words(span)) if _parses(span) else ({}, [])
            if len(words) > 1 and words[0] in PROGRAMS:
                found.append(Shown(page, span))
    return found


def _parses(text: str) -> bool:
    try:
        shlex.split(text)
    except ValueError:
        return False
    return True


SHOWN = shown_commands()


def _ops() -> list[str]:
    """bin/ops execs .venv/bin/python -m ops; a checkout whose .venv is elsewhere (a worktree) runs
    the same module with the interpreter running the tests."""
    if (ROOT / ".venv/bin/python").is_file():
        return ["bin/ops"]
    return [sys.executable, "-m", "ops"]


def _argv(words: list[str]) -> list[str] | None:
    """What runs here for a shown statement (`python -m <module> ...` for the project's CLIs, in
    their `--help` form): None when its program is not runnable here."""
    program = _name(words)
    if program in NOT_RUNNABLE:
        return None
    if program == "bin/ops":
        return ["python", "-m", "ops", *words[1:], "--help"]
    if program == "make":
        return ["make", "-n", *words[1:]]
    if program == "pytest":
        return ["python", "-m", "pytest", *words[1:], "--help"]
    if program == "export":
        return ["sh", "-c", shlex.join(words)]
    if words[1:2] == ["-m"] and words[2] in PYTHON_MODULES:
        return ["python", *words[1:], "--help"]
    raise AssertionError(f"no way to run {shlex.join(words)!r} here: add it to RUNNERS or NOT_RUNNABLE")


def test_the_docs_show_commands_of_every_kind_this_test_runs() -> None:
    """The extraction finds what the pages show (an empty list would pass everything)."""
    kinds = {_name(_program(_words(shown.text))[1]) for shown in SHOWN}
    assert {"bin/ops", "make", "npx", "aws", "curl"} <= kinds
    readme = {shown.text for shown in SHOWN if shown.page == "README.md"}
    assert {"make local", "make test"} <= {_shlex_head(text, 2) for text in readme}


def _shlex_head(text: str, count: int) -> str:
    return " ".join(shlex.split(text, comments=True)[:count])


@pytest.mark.parametrize("shown", SHOWN, ids=lambda shown: f"{shown.page}: {shown.text[:60]}")
def test_every_command_shown_is_run_here_or_said_not_runnable(shown: Shown) -> None:
    _, words = _program(_words(shown.text))
    assert words, f"{shown.page}: {shown.text!r} runs no program"
    assert _name(words) in PROGRAMS, (
        f"{shown.page}: `{shown.text}` runs {_name(words)!r}: add it to RUNNERS (with how it runs "
        "here) or to NOT_RUNNABLE (with why not)"
    )
    _argv(words)  # every runnable one has a form to run


def _environment(env: dict[str, str]) -> dict[str, str]:
    environment = {**os.environ, "AWS_DEFAULT_REGION": "eu-central-1", **env}
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), environment.get("PYTHONPATH")]))
    environment.pop("MAKEFLAGS", None)
    return environment


def _run(argv: list[str], env: dict[str, str]) -> tuple[int, str]:
    try:
        done = subprocess.run(
            argv, cwd=ROOT, env=_environment(env), capture_output=True, text=True, timeout=60, check=False
        )
    except subprocess.TimeoutExpired:
        return -1, "timed out after 60 s"
    return done.returncode, (done.stderr or done.stdout)[-600:]


# Runs `python -m <module> <args>` for each command of one module in one interpreter (runpy, as
# `-m` does), so the module's imports are paid once: a fresh interpreter per `--help` took minutes.
DRIVER = """
import contextlib, io, json, os, runpy, sys
results = []
for env, argv in json.load(sys.stdin):
    os.environ.update(env)
    sys.argv = [argv[0], *argv[1:]]
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            runpy.run_module(argv[0], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exit:
        code = exit.code if isinstance(exit.code, int) else (0 if exit.code is None else 1)
    except BaseException as error:
        code, out = 1, io.StringIO(repr(error))
    for name in env:
        os.environ.pop(name, None)
    results.append([code, out.getvalue()[-600:]])
print(json.dumps(results))
"""


def _run_module(module: str, commands: list[tuple[dict[str, str], list[str]]]) -> list[tuple[int, str]]:
    """Each command's (exit code, output tail); commands are `[module, args...]`."""
    done = subprocess.run(
        [sys.executable, "-c", DRIVER],
        cwd=ROOT,
        env=_environment({}),
        input=json.dumps(commands),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"python -m {module}: the driver failed: {done.stderr[-600:]}"
    return [(code, output) for code, output in json.loads(done.stdout.splitlines()[-1])]


Argv = tuple[str, ...]
Result = tuple[int, str]


def _jobs(runs: dict[Argv, dict[str, str]]) -> list[Callable[[], dict[Argv, Result]]]:
    """The runs as jobs: one interpreter per Python module, one `make -n` per set of variables
    (with all its targets), a subprocess for anything else."""
    by_module: dict[str, list[Argv]] = {}
    by_make_options: dict[Argv, list[Argv]] = {}
    jobs: list[Callable[[], dict[Argv, Result]]] = []
    for argv in runs:
        if argv[:2] == ("python", "-m"):
            by_module.setdefault(argv[2], []).append(argv)
        elif argv[:2] == ("make", "-n"):
            options = tuple(word for word in argv[2:] if "=" in word or word.startswith("-"))
            by_make_options.setdefault(options, []).append(argv)
        else:
            jobs.append(partial(_single, argv, runs[argv]))
    for options, argvs in by_make_options.items():
        targets = dict.fromkeys(word for argv in argvs for word in argv[2:] if word not in options)
        jobs.append(partial(_shared, argvs, ["make", "-n", *options, *targets]))
    for module, argvs in by_module.items():
        jobs.append(partial(_in_one_interpreter, module, argvs, [runs[argv] for argv in argvs]))
    if _ops() == ["bin/ops"]:  # the wrapper itself, once
        jobs.append(partial(_single, ("bin/ops", "--help"), {}))
    return jobs


def _single(argv: Argv, env: dict[str, str]) -> dict[Argv, Result]:
    return {argv: _run(list(argv), env)}


def _shared(argvs: list[Argv], command: list[str]) -> dict[Argv, Result]:
    """One run for all; when it fails, each again on its own, so the failure names its command."""
    result = _run(command, {})
    if result[0] == 0:
        return dict.fromkeys(argvs, result)
    return {argv: _run(list(argv), {}) for argv in argvs}


def _in_one_interpreter(module: str, argvs: list[Argv], envs: list[dict[str, str]]) -> dict[Argv, Result]:
    commands = [(env, list(argv[2:])) for argv, env in zip(argvs, envs, strict=True)]
    return dict(zip(argvs, _run_module(module, commands), strict=True))


def test_every_runnable_command_the_docs_show_exits_zero() -> None:
    """Each distinct command once, two jobs at a time (the suite's CPU budget); every failure listed."""
    runs: dict[Argv, dict[str, str]] = {}
    where: dict[Argv, Shown] = {}
    for shown in SHOWN:
        env, words = _program(_words(shown.text))
        argv = _argv(words)
        if argv is not None:
            runs.setdefault(tuple(argv), env)
            where.setdefault(tuple(argv), shown)
    assert len(runs) > 20, "the pages show fewer runnable commands than they did"
    results: dict[Argv, Result] = {}
    with ThreadPoolExecutor(max_workers=2) as pool:
        for result in pool.map(lambda job: job(), _jobs(runs)):
            results.update(result)
    failed = [
        f"{where[argv].page if argv in where else 'bin/ops'}: {shlex.join(argv)} exited {code}: {output}"
        for argv, (code, output) in results.items()
        if code != 0
    ]
    assert failed == [], "\n".join(failed)


def github_slug(title: str) -> str:
    """The anchor GitHub gives a heading: markup gone, lowercase, punctuation dropped, blanks to `-`."""
    title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title)
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading's anchor in a markdown file (a repeated heading gets -1, -2, ...)."""
    seen: dict[str, int] = {}
    for line in _prose(path.read_text()).splitlines():
        if match := re.match(r"#{1,6} (.+)", line):
            slug = github_slug(match[1])
            seen[slug] = seen.get(slug, -1) + 1
            if seen[slug]:
                seen[f"{slug}-{seen[slug]}"] = 0
    return set(seen)


def links(page: str) -> list[str]:
    """The targets of a page's markdown links, outside code."""
    prose = re.sub(r"`[^`\n]*`", "", _prose((ROOT / page).read_text()))
    return re.findall(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", prose)


@pytest.mark.parametrize("page", LINK_PAGES)
def test_every_internal_link_and_anchor_resolves(page: str) -> None:
    source = ROOT / page
    broken = []
    for target in links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:: not ours to check
            continue
        path, _, anchor = target.partition("#")
        file = (source.parent / path).resolve() if path else source
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix != ".md":
            broken.append(f"{target}: an anchor into a file that is not markdown")
        elif anchor and anchor not in anchors(file):
            broken.append(f"{target}: {file.relative_to(ROOT)} has no heading with that anchor")
    assert broken == [], f"{page}: " + "; ".join(broken)


def test_the_docs_index_names_every_page() -> None:
    """A page is one line in docs/README.md: a page it does not link is a page nobody finds."""
    linked = {target.partition("#")[0] for target in links("docs/README.md")}
    pages = {p.name for p in DOCS.glob("*.md")} - {"README.md"}
    assert pages - linked == set(), "add a line for each of these to docs/README.md"


def test_the_readme_reads_in_ten_minutes() -> None:
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250


def test_the_slug_is_githubs() -> None:
    assert github_slug("Try it locally (`make local`)") == "try-it-locally-make-local"
    assert github_slug("Order-status SMS: exactly one SMS per business event") == (
        "order-status-sms-exactly-one-sms-per-business-event"
    )
    assert github_slug("`crm_sweep`: a 7-day outage") == "crm_sweep-a-7-day-outage"
