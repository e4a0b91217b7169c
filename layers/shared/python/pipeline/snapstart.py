"""Lambda SnapStart (the `snapstart` setting): what environments restored from one snapshot must
not share.

With SnapStart, Lambda runs a function's init once, when it publishes a version, and resumes each
new execution environment from a snapshot of it. Whatever the init made unique is then the same in
every environment. Of ours, nothing is: ids are drawn per call from `os.urandom` (`uuid4`,
`secrets`); the init calls no AWS service, so it caches no secret and keeps no connection; and a
SnapStart function's SDK reads its credentials from Lambda's container credentials endpoint
rather than from variables frozen in the snapshot ("Using SnapStart with AWS SDKs" in Lambda's
guide), which botocore's credential chain reads and refreshes when they expire.

One thing is shared: the `random` module's generator, seeded once at import. botocore's retry
jitter draws from it, so every restored environment would back off in step with the others. It is
reseeded from `os.urandom` after each restore.

The hook is registered through `snapshot_restore_py`, which Lambda's Python runtimes include; the
module is imported only where Lambda says the init is for a snapshot, so no other init pays for it.
"""

from __future__ import annotations

import os
import random
from collections.abc import Mapping

# Set by Lambda: "on-demand", "provisioned-concurrency" or, for a SnapStart version, "snap-start".
INIT_TYPE_ENV = "AWS_LAMBDA_INITIALIZATION_TYPE"
SNAPSHOT_INIT = "snap-start"
ON_DEMAND_INIT = "on-demand"

_registered: list[bool] = []


def register(environ: Mapping[str, str] = os.environ) -> bool:
    """Register the after-restore hook, once, where the init is the one Lambda snapshots."""
    if _registered or environ.get(INIT_TYPE_ENV) != SNAPSHOT_INIT:
        return False
    from snapshot_restore_py import register_after_restore

    register_after_restore(after_restore)
    _registered.append(True)
    return True


def after_restore() -> None:
    """Give this environment a generator of its own (`random.seed()` reads `os.urandom`)."""
    random.seed()
