"""Python's cyclic garbage collector paused while a handler module's init imports (issue 44).

An init creates some hundred thousand objects (modules, functions, classes, pydantic's schemas)
that live as long as the environment. While they are created the collector runs over and over
(each 2,000 allocations, with full passes over everything made so far) and finds next to nothing:
about a tenth of a consumer's init (`python -m bench imports`, docs/perf.md). So every handler
module calls `begin()` before its imports and `end()` after them. `end()` moves what the init
made into the permanent generation (`gc.freeze`: never scanned again, so resuming starts no
catch-up pass over it; the little garbage the imports left stays) and resumes the collector: the
invocations collect as usual, over their own objects. Only a pause `begin()` made is resumed.

What every first invocation needs (the SDK, Powertools idempotency, the secrets' reader, the bot's
python-telegram-bot engine, the clients: `pipeline.aws`) the init imports and builds itself: Lambda
runs the init at a full vCPU, an invocation at the memory's share of one. An import only some first
invocations make (the webhook's CRM event model, with its first CRM request) runs under `paused()`,
the same pause: what is frozen then also holds that invocation's live objects, a few kilobytes
kept for the environment's life.

The init's last `end()` registers, where Lambda snapshots the init (SnapStart), what each restored
environment must run (`pipeline.snapstart`).

The first `begin()` also puts the functions' asset's precompiled `@dataclass` methods to use
(`pipeline.dataclass_code`): the classes the init's imports define are then built without
compiling their methods.
"""

from __future__ import annotations

import contextlib
import gc
import sys
from collections.abc import Iterator

from pipeline import dataclass_code, snapstart

_paused: list[bool] = []  # one entry per `begin()` not yet ended: whether it paused the collector


def begin() -> None:
    """Pause the collector for the imports that follow (a no-op if it is already off); the
    shipped dataclass methods used from now on (once per process)."""
    dataclass_code.install()
    _paused.append(gc.isenabled())
    gc.disable()


def end() -> None:
    """Freeze what the init made and resume the collector, if the matching `begin()` paused it.
    The init's end also registers what SnapStart must run after a restore (`pipeline.snapstart`),
    where Lambda snapshots this init."""
    if _paused and _paused.pop():
        gc.freeze()
        gc.enable()
    if not _paused:
        snapstart.register()


@contextlib.contextmanager
def paused(module: str) -> Iterator[None]:
    """`begin()` ... `end()` around the imports a first invocation makes, the first time only:
    while `module` (what the block imports) is not loaded yet. A later call does nothing (a
    freeze per request would keep each request's garbage for good)."""
    if module in sys.modules:
        yield
        return
    begin()
    try:
        yield
    finally:
        end()
