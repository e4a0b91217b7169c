"""`python -m bench` (bench/__main__.py): a benchmark that fails makes the whole run fail.

CI runs every benchmark in its quick mode (`make bench-smoke`) and relies on the exit status; no
timing is asserted here, and the benchmarks are stand-ins that return at once.
"""

from __future__ import annotations

import runpy
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

import bench
import bench.__main__ as runner
from bench.common import BenchError


def benchmark(name: str, outcome: Exception | None = None) -> ModuleType:
    """A stand-in benchmark module: `run` returns a figure, or raises `outcome`."""
    module = ModuleType(f"bench.{name}")

    def run(quick: bool = False) -> dict[str, Any]:
        if outcome is not None:
            raise outcome
        return {"figure": 42, "quick": quick}

    def report(results: dict[str, Any]) -> list[str]:
        return [f"{name}: figure {results['figure']}"]

    module.run = run  # type: ignore[attr-defined]
    module.report = report  # type: ignore[attr-defined]
    return module


@pytest.fixture
def only(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """Replace the runner's benchmarks with these stand-ins, in this order."""

    def replace(*modules: ModuleType) -> None:
        monkeypatch.setattr(runner, "BENCHMARKS", {m.__name__.split(".")[-1]: m for m in modules})

    return replace


def test_a_benchmark_reporting_failed_makes_the_run_exit_non_zero(
    only: Callable[..., None], capsys: pytest.CaptureFixture[str]
) -> None:
    only(benchmark("before"), benchmark("broken", BenchError("side effects missing")), benchmark("after"))

    status = runner.main(["--quick"])

    out, err = capsys.readouterr()
    assert status != 0
    assert "broken: FAILED: side effects missing" in err
    assert "bench: FAILED: broken (of 3 benchmarks)" in err
    # The others still ran and reported their figures.
    assert "before: figure 42" in out
    assert "after: figure 42" in out


def test_a_benchmark_that_crashes_fails_the_run_too_and_the_others_still_run(
    only: Callable[..., None], capsys: pytest.CaptureFixture[str]
) -> None:
    only(benchmark("crashing", KeyError("latency")), benchmark("after"))

    status = runner.main(["--quick"])

    out, err = capsys.readouterr()
    assert status != 0
    assert "crashing: FAILED: crashed: KeyError: 'latency'" in err
    assert "after: figure 42" in out


def test_a_run_where_every_benchmark_passes_exits_zero(
    only: Callable[..., None], capsys: pytest.CaptureFixture[str]
) -> None:
    only(benchmark("one"), benchmark("two"))

    assert runner.main(["--quick"]) == 0

    out, err = capsys.readouterr()
    assert "FAILED" not in out + err
    assert "bench: all 2 benchmarks passed their checks" in out


def test_only_the_named_benchmarks_run_and_their_failure_counts(
    only: Callable[..., None], capsys: pytest.CaptureFixture[str]
) -> None:
    only(benchmark("fine"), benchmark("broken", BenchError("no figures")))

    assert runner.main(["--quick", "fine"]) == 0
    assert runner.main(["--quick", "broken"]) != 0
    assert "broken: FAILED: no figures" in capsys.readouterr().err


@pytest.mark.filterwarnings("ignore:'bench.__main__' found in sys.modules:RuntimeWarning")
def test_python_m_bench_exits_non_zero_when_a_benchmark_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """What CI runs, `python -m bench --quick NAME`, with NAME's module a stand-in that fails."""
    failing = benchmark("webhook", BenchError("every request must be accepted"))
    monkeypatch.setattr(bench, "webhook", failing)
    monkeypatch.setitem(sys.modules, "bench.webhook", failing)
    monkeypatch.setattr(sys, "argv", ["python -m bench", "--quick", "webhook"])

    with pytest.raises(SystemExit) as exited:
        runpy.run_module("bench", run_name="__main__")

    assert exited.value.code not in (0, None)
