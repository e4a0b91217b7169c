#!/usr/bin/env python3
"""CDK entry point: `python app.py` (writes cdk.out/) or `npx --yes aws-cdk@2 synth|deploy` via cdk.json."""

from __future__ import annotations

import os
import sys
from pathlib import Path

# The stack reads the consumer registry from the shared layer's `pipeline` package.
sys.path.insert(0, str(Path(__file__).resolve().parent / "layers" / "shared" / "python"))
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

from pydantic import ValidationError

try:
    from pipeline.registry import CONSUMERS  # noqa: F401 - read here: a refusal is one clear line
except ValueError as refused:  # pipeline.registry.DeclarationError: it names the file
    sys.exit(f"invalid consumer declarations or tuning:\n{refused}")

from infra.application import build_app, context_arguments, settings_error_message, synth_summary
from infra.config import SettingsError


def main(argv: list[str] | None = None) -> None:
    # Run directly, `-c KEY=VALUE` works as under the CDK CLI (which passes it in CDK_CONTEXT_JSON).
    try:
        context = context_arguments(sys.argv[1:] if argv is None else argv)
    except ValueError as error:
        print(f"python app.py: {error}", file=sys.stderr)
        sys.exit(2)
    # Under the CDK CLI, CDK_OUTDIR says where to write; run directly, write ./cdk.out like the CLI.
    outdir = None if os.getenv("CDK_OUTDIR") else str(Path(__file__).resolve().parent / "cdk.out")
    try:
        app, stack = build_app(context, outdir=outdir)
    except (ValidationError, SettingsError) as error:
        # A refused setting names its context key; a traceback would only bury that line.
        sys.exit(f"invalid deployment settings:\n{settings_error_message(error)}")
    app.synth()
    print("\n".join(synth_summary(stack)), file=sys.stderr)


if __name__ == "__main__":
    main()
