"""CPU time per hop of the local pipeline (issue 26): what each function's processes spent.

Each function of `local.Runtime` runs in processes of its own (a queue consumer in up to
`max_concurrency` workers, `local.worker_pool`), so the CPU time the kernel counts for them
(`/proc/<pid>/stat`: user + system) is that hop's. `snapshot` reads it for every process;
`per_hop` turns two snapshots and the units each hop handled in between (requests for the
webhook, records for a consumer) into CPU milliseconds per unit, and one worker process's
throughput if CPU were its only bound (1000 / ms). The moto server's CPU (AWS's stand-in: SNS,
SQS, DynamoDB, Secrets Manager) is reported per accepted update apart: AWS bills it by request,
not by CPU, and it costs far more here than the services would.

`measure` is the load run: `updates` posted by `senders` threads as fast as the API answers, after
the ingress phase has scaled the workers up (a process started during the run would count its
start-up; the figures name how many did), then drained; the CPU of every process in between.

Linux only (`/proc`): elsewhere `snapshot` is empty and the figures say so.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from bench.common import require
from local.runtime import Runtime

CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a live process, or None (gone, or no /proc)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces: the fields after its closing parenthesis.
    fields = stat.rsplit(")", 1)[1].split()
    utime, stime = int(fields[11]), int(fields[12])
    return (utime + stime) / CLOCK_TICKS


def snapshot(runtime: Runtime) -> dict[str, tuple[str, float]]:
    """{process name: (function, CPU seconds)} for every live child process of the runtime."""
    taken: dict[str, tuple[str, float]] = {}
    for name, child in list(runtime.children.items()):
        process = child.process
        if process is None or process.poll() is not None:
            continue
        seconds = process_cpu_seconds(process.pid)
        if seconds is not None:
            taken[name] = (child.function, seconds)
    return taken


def per_hop(
    before: Mapping[str, tuple[str, float]],
    after: Mapping[str, tuple[str, float]],
    units: Mapping[str, int],
) -> dict[str, dict[str, Any]]:
    """Per function with units handled: CPU ms per unit over its processes, their count, and the
    busiest process's share. A process started between the snapshots counts from zero; one that
    ended is missing from `after` and its CPU is lost (the figure says `processes`)."""
    spent: dict[str, float] = {}
    processes: dict[str, int] = {}
    for name, (function, seconds) in after.items():
        earlier = before.get(name, (function, 0.0))[1]
        spent[function] = spent.get(function, 0.0) + max(seconds - earlier, 0.0)
        processes[function] = processes.get(function, 0) + 1
    hops: dict[str, dict[str, Any]] = {}
    for function, seconds in sorted(spent.items()):
        handled = units.get(function, 0)
        if not handled:
            continue
        ms = 1000 * seconds / handled
        hops[function] = {
            "units": handled,
            "cpu_seconds": round(seconds, 3),
            "cpu_ms_per_unit": round(ms, 2),
            "processes": processes[function],
            # One process busy all the time, bound by CPU only: units a second.
            "cpu_bound_units_per_second": round(1000 / ms, 1) if ms else None,
        }
    return hops


def handled_units(status: Mapping[str, Mapping[str, Any]]) -> dict[str, int]:
    """Requests (the webhook) or records handled (a consumer), from `Runtime.status()`."""
    return {
        name: int(function.get("requests") or (function.get("processed", 0) + function.get("duplicates", 0)))
        for name, function in status.items()
    }


def measure(
    runtime: Runtime, send: Callable[[], int], updates: int, senders: int, warmup: int = 0
) -> dict[str, Any]:
    """Post `updates` (each `send()` returns the HTTP status) from `senders` threads, wait until
    drained, and return CPU per hop over the whole run. `warmup` requests go first, drained
    before the count starts (every kind of request has reached its consumers' processes)."""
    began = time.monotonic()
    warm = [send() for _ in range(warmup)]
    require(all(status == 200 for status in warm), f"load run warm-up refused: {warm}")
    require(runtime.wait_until_drained(timeout=60), "load run warm-up not drained within 60 s")
    units_before, cpu_before = handled_units(runtime.status()), snapshot(runtime)
    statuses: list[int] = []
    lock = threading.Lock()
    remaining = [updates]

    def keep_sending() -> None:
        while True:
            with lock:
                if remaining[0] <= 0:
                    return
                remaining[0] -= 1
            statuses.append(send())  # list.append is atomic

    started = time.monotonic()
    threads = [threading.Thread(target=keep_sending, name=f"bench-load-{i}") for i in range(senders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    posted = time.monotonic() - started
    require(runtime.wait_until_drained(timeout=120, settle_seconds=0.5), "load run not drained within 120 s")
    seconds = time.monotonic() - started
    status = runtime.status()
    cpu_after = snapshot(runtime)
    counted = Counter(str(code) for code in statuses)
    require(counted["200"] == updates, f"load run: statuses {dict(counted)}")
    units = {name: n - units_before.get(name, 0) for name, n in handled_units(status).items()}
    units["moto"] = updates
    return {
        "updates": updates,
        "senders": senders,
        "post_seconds": round(posted, 2),
        "drained_seconds": round(seconds, 2),
        "with_warmup_seconds": round(time.monotonic() - began, 2),
        "started_during_run": sorted(set(cpu_after) - set(cpu_before)),
        "hops": per_hop(cpu_before, cpu_after, units),
    }


def report(load: Mapping[str, Any]) -> list[str]:
    started = load["started_during_run"]
    lines = [
        f"  load run: {load['updates']} updates from {load['senders']} senders, posted in"
        f" {load['post_seconds']:.1f} s, drained after {load['drained_seconds']:.1f} s"
        f" ({load.get('with_warmup_seconds', 0):.1f} s with the warm-up);"
        f" CPU per request/record (moto: per update), and one process's CPU-bound ceiling"
        + (f" (started during the run, start-up included: {', '.join(started)})" if started else "")
        + ":"
    ]
    if not load["hops"]:
        lines.append("    no CPU figures: /proc is not available here")
    lines += [
        f"    {name:<10} {hop['cpu_ms_per_unit']:>7.2f} ms x {hop['units']:<5}"
        f" ({hop['processes']} process{'es' if hop['processes'] != 1 else ''})"
        f"  {hop['cpu_bound_units_per_second'] or 0:>7.1f}/s per process"
        for name, hop in load["hops"].items()
    ]
    return lines
