"""Where the registry reads each consumer's declaration: its `consumer.toml`, or the asset's snapshot.

Every function's init registers every consumer (`pipeline.registry.CONSUMERS`). tomllib is pure
Python: importing it and parsing the declarations cost each cold start about 3 ms (docs/perf.md).
So the synth writes them, parsed, into the functions' asset as one JSON file (`SNAPSHOT`, with its
schema version), from the same files in the same build (`infra.bytecode.staged`), and an init in
Lambda reads that instead. The repository has no snapshot: the stack, `make local` and the tests
read the TOML files, and every declaration is checked the same way whichever it came from.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DECLARATION = "consumer.toml"
SNAPSHOT = "consumer-declarations.json"
SNAPSHOT_VERSION = 1


class DeclarationError(ValueError):
    """A consumer folder whose declaration the registry refuses; the message names the file."""


def parse_toml(text: str, where: str) -> dict[str, Any]:
    """A TOML document, or a DeclarationError naming `where`."""
    import tomllib  # only where there is no snapshot: the repository, the synth, `make local`

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise DeclarationError(f"{where}: not TOML ({error})") from error


def read_declarations(root: Path) -> list[tuple[str, str, dict[str, Any]]]:
    """(folder, where, declaration) of every consumer folder under `root`, by folder name: from
    `root`'s SNAPSHOT when it has one, else from each `<folder>/consumer.toml`."""
    snapshot = root / SNAPSHOT
    if snapshot.is_file():
        document = json.loads(snapshot.read_text(encoding="utf-8"))
        if not isinstance(document, dict) or document.get("schema_version") != SNAPSHOT_VERSION:
            raise DeclarationError(
                f"{snapshot}: not a version {SNAPSHOT_VERSION} snapshot of the declarations; rebuild it"
            )
        declarations: dict[str, dict[str, Any]] = document["declarations"]
        return [(folder, f"{folder}/{DECLARATION}", declarations[folder]) for folder in sorted(declarations)]
    found = []
    for path in sorted(root.glob(f"*/{DECLARATION}")):
        where = f"{path.parent.name}/{DECLARATION}"
        found.append((path.parent.name, where, parse_toml(path.read_text(encoding="utf-8"), where)))
    return found


def snapshot(root: Path) -> bytes:
    """SNAPSHOT's content for `root`'s consumer folders (what the synth writes into the asset)."""
    declarations = {folder: declaration for folder, _, declaration in read_declarations(root)}
    document = {"schema_version": SNAPSHOT_VERSION, "declarations": declarations}
    return json.dumps(document, sort_keys=True, indent=1).encode()
