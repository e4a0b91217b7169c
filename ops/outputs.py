"""`outputs`: what the stack exports (URLs, ARNs, queue URLs, table names, secret ids), or one of them.

Secret *ids* only: no secret value is read here.
"""

from __future__ import annotations

from infra.outputs import OutputKey
from ops.context import Context


def show(ctx: Context) -> None:
    """One `Key  value` line per output, in `OutputKey.every()` order; with a key, its bare value."""
    stack = ctx.stack()
    wanted = ctx.option("key")
    if wanted:
        value = stack.require(wanted)
        if ctx.wants_json():
            ctx.json({wanted: value})
        else:
            ctx.line(value)
        return
    known = OutputKey.every()
    present = [key for key in known if stack.get(key)]
    unknown = sorted(key for key in stack.values if key not in known and stack.get(key))
    if ctx.wants_json():
        ctx.json({key: stack.values[key] for key in [*present, *unknown]})
        return
    width = max((len(key) for key in [*present, *unknown]), default=0)
    for key in present:
        ctx.line(f"{key.ljust(width)}  {stack.values[key]}")
    if unknown:
        ctx.line()
        ctx.line("Outputs this version of ops does not know (a newer stack?):")
        for key in unknown:
            ctx.line(f"{key.ljust(width)}  {stack.values[key]}")
