"""Seeded random fault campaigns through the whole local pipeline (`python -m local chaos`).

- `local.chaos.workload`: the seeded plan, events and faults (pure: the same seed, the same plan);
- `local.chaos.checks`: the invariants, checked on what the campaign saw (pure);
- `local.chaos.observe`: what the pipeline did, read from moto and the stand-ins;
- `local.chaos.campaign`: runs a plan on a `local.runtime.Runtime` and reports figures.
"""
