"""Lambda runs the bytecode we ship, never compiles ours: /var/task and /opt are read-only, so a
module without a usable `.pyc` is compiled from source at every cold start (issue 44).

The functions' asset and the shared layer as the synth leaves them in cdk.out carry an unchecked
hash-based `.pyc` of the runtime's Python beside every module, and nothing else beyond what they
shipped before (the functions' asset: and the consumers' declarations, parsed, and the dataclass
methods its functions define, precompiled); a handler imports from those `.pyc` alone, and
compiles no dataclass's methods.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_s3_assets as s3_assets
from shipped_bytecode import RUNTIME_TAG, pyc_of, runtime_python, unshipped
from synthesized import Synthesized
from template_queries import function_env, of_type, props, ref_name

from infra.bytecode import bytecode_python, compile_tree, staged
from infra.constructs.layers import LAYER_ROOT, PIP_PYTHON_VERSION, functions_generated
from infra.naming import pascal_case
from infra.paths import ASSET_EXCLUDES, FUNCTIONS_DIR, SHARED_LAYER_DIR
from pipeline.dataclass_code import CODE_FILE
from pipeline.declarations import SNAPSHOT, snapshot

pytestmark = runtime_python
# What a first invocation imports of ours beyond the handler (a secret's reader; `bench.imports`).
SECRETS_MODULE = "pipeline.secrets"


def _asset(synth: Synthesized, code: dict[str, object]) -> Path:
    folder = synth.outdir / f"asset.{str(code['S3Key']).removesuffix('.zip')}"
    assert folder.is_dir(), folder
    return folder


@pytest.fixture(scope="module")
def assets(default_synth: Synthesized) -> dict[Path, Path]:
    """Source folder -> its asset in cdk.out: the functions' code and the shared layer."""
    functions = of_type(default_synth.resources, "AWS::Lambda::Function")
    codes = {json.dumps(props(default_synth.resources, fid)["Code"], sort_keys=True) for fid in functions}
    assert len(codes) == 1, "every function runs the one functions' asset"
    shared = default_synth.stack.node.find_child("Layers").node.find_child("Shared")
    layer = props(default_synth.resources, default_synth.logical_id(shared))
    return {
        FUNCTIONS_DIR: _asset(default_synth, json.loads(codes.pop())),
        SHARED_LAYER_DIR: _asset(default_synth, layer["Content"]),
    }


def _files(folder: Path) -> set[str]:
    return {path.relative_to(folder).as_posix() for path in folder.rglob("*") if path.is_file()}


def test_every_module_of_our_assets_ships_unchecked_hash_bytecode_of_the_runtime(
    assets: dict[Path, Path],
) -> None:
    for asset in assets.values():
        assert len(list(asset.rglob("*.py"))) > 10
        assert unshipped(asset) == []


def test_our_assets_hold_what_they_did_before_plus_that_bytecode_only(
    assets: dict[Path, Path], tmp_path: Path
) -> None:
    # What the CDK itself ships of the source with ASSET_EXCLUDES (the assets before bytecode).
    app = App(outdir=str(tmp_path))
    stack = Stack(app, "Reference")
    hashes = {
        source: s3_assets.Asset(stack, source.name, path=str(source), exclude=ASSET_EXCLUDES).asset_hash
        for source in assets
    }
    app.synth()
    for source, asset in assets.items():
        before = _files(tmp_path / f"asset.{hashes[source]}")
        assert not any("__pycache__" in name or name.endswith(".pyc") for name in before)
        bytecode = {pyc_of(Path(name)).as_posix() for name in before if name.endswith(".py")}
        # And the functions' asset, the consumers' declarations parsed (`pipeline.declarations`)
        # and the dataclasses' methods precompiled (`pipeline.dataclass_code`).
        generated = set(functions_generated(source)) | {CODE_FILE} if source == FUNCTIONS_DIR else set()
        assert _files(asset) == before | bytecode | generated
    assert (assets[FUNCTIONS_DIR] / SNAPSHOT).read_bytes() == snapshot(FUNCTIONS_DIR)


def test_a_handler_imports_from_the_shipped_bytecode_alone(
    assets: dict[Path, Path], default_synth: Synthesized, tmp_path: Path
) -> None:
    """As Lambda loads it: the asset and the layer on the path, no bytecode written; every
    source replaced by a module that fails, so any module compiled from source fails the import;
    and every dataclass they define built from the asset's precompiled methods."""
    task, layer = tmp_path / "task", tmp_path / "opt"
    shutil.copytree(assets[FUNCTIONS_DIR], task)
    shutil.copytree(assets[SHARED_LAYER_DIR], layer)
    for source in [*task.rglob("*.py"), *layer.rglob("*.py")]:
        source.write_text("raise ImportError(f'compiled from source: {__file__}')\n")
    handlers = sorted(
        {
            props(default_synth.resources, fid)["Handler"].rsplit(".", 1)[0]
            for fid in of_type(default_synth.resources, "AWS::Lambda::Function")
        }
    )
    modules = [*handlers, SECRETS_MODULE]
    code = (
        "import importlib, json, os, sys\n"
        f"for name in {modules!r}:\n"
        "    module = importlib.import_module(name)\n"
        f"    assert module.__cached__.endswith('.{RUNTIME_TAG}.pyc'), module.__cached__\n"
        "    assert os.path.isfile(module.__cached__), module.__cached__\n"
        f"    assert module.__file__.startswith(({str(task)!r}, {str(layer)!r})), module.__file__\n"
        "from pipeline import dataclass_code\n"
        "print(json.dumps(dataclass_code.counts()))\n"
    )
    env = {name: value for name, value in os.environ.items() if not name.startswith(("PYTHON", "PYTEST"))}
    env.update(
        PYTHONPATH=f"{task}{os.pathsep}{layer / 'python'}",
        PYTHONDONTWRITEBYTECODE="1",
        LAMBDA_TASK_ROOT=str(task),
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(handlers) >= 5
    dataclasses = json.loads(done.stdout.splitlines()[-1])
    assert dataclasses["compiled"] == 0 and dataclasses["shipped"] > 20, dataclasses


# What a fresh interpreter prints of every dataclass our handlers define: built from the
# asset's precompiled methods when LAMBDA_TASK_ROOT names the asset, else compiled as usual.
_DATACLASSES_SEEN = """\
import dataclasses, importlib, inspect, json, re, sys
for name in sys.argv[1:]:
    importlib.import_module(name)

def shown(value):  # an object's default repr names its address, another in each process
    return re.sub(r" at 0x[0-9a-f]+", " at 0x-", str(value))

seen = {}
for module in list(sys.modules.values()):
    for value in list(vars(module).values()):
        if not (isinstance(value, type) and dataclasses.is_dataclass(value)):
            continue
        if value.__module__ == module.__name__:
            fields = dataclasses.fields(value)
            seen[f"{module.__name__}.{value.__qualname__}"] = {
                "signature": shown(inspect.signature(value)),
                "fields": [shown((f.name, f.type, f.init, f.repr, f.compare, f.kw_only)) for f in fields],
                "methods": sorted(n for n in vars(value) if n.startswith("__") and callable(vars(value)[n])),
                "hash": repr(value.__hash__ is None),
                "match_args": list(getattr(value, "__match_args__", ())),
            }
from pipeline import dataclass_code
print(json.dumps({"classes": seen, "counts": dataclass_code.counts()}))
"""


def test_every_dataclass_built_from_the_shipped_methods_is_the_one_compiled(
    assets: dict[Path, Path], default_synth: Synthesized
) -> None:
    """Every handler's dataclasses, ours and Powertools', as a cold start in Lambda builds them
    (the asset's file) and as `dataclasses` alone does: the same signatures (annotations
    included), fields and methods."""
    handlers = sorted(
        {
            props(default_synth.resources, fid)["Handler"].rsplit(".", 1)[0]
            for fid in of_type(default_synth.resources, "AWS::Lambda::Function")
        }
    )
    env = {name: value for name, value in os.environ.items() if not name.startswith(("PYTHON", "PYTEST"))}
    env["PYTHONPATH"] = f"{assets[FUNCTIONS_DIR]}{os.pathsep}{assets[SHARED_LAYER_DIR] / 'python'}"
    seen = []
    for task_root in (str(assets[FUNCTIONS_DIR]), None):
        run_env = {**env, "LAMBDA_TASK_ROOT": task_root} if task_root else env
        done = subprocess.run(
            [sys.executable, "-c", _DATACLASSES_SEEN, *handlers, SECRETS_MODULE],
            cwd=assets[FUNCTIONS_DIR],
            env=run_env,
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        seen.append(json.loads(done.stdout.splitlines()[-1]))
    shipped, compiled = seen
    assert shipped["counts"]["compiled"] == 0 and shipped["counts"]["shipped"] > 20
    assert compiled["counts"] == {"shipped": 0, "compiled": 0}  # not installed: `dataclasses` alone
    assert len(shipped["classes"]) > 20
    assert shipped["classes"] == compiled["classes"]


def test_the_same_source_is_the_same_asset_and_a_changed_one_another(tmp_path: Path) -> None:
    source = tmp_path / "shared"
    shutil.copytree(SHARED_LAYER_DIR, source, ignore=shutil.ignore_patterns("__pycache__"))
    options = {"version": PIP_PYTHON_VERSION, "runtime_path": LAYER_ROOT}
    first, key = staged(source, ASSET_EXCLUDES, cache_dir=tmp_path / "one", **options)
    again, same_key = staged(source, ASSET_EXCLUDES, cache_dir=tmp_path / "two", **options)
    assert same_key == key
    assert {name: (first / name).read_bytes() for name in _files(first)} == {
        name: (again / name).read_bytes() for name in _files(again)
    }
    with (source / "python" / "pipeline" / "__init__.py").open("a") as module:
        module.write("# changed\n")
    changed, other_key = staged(source, ASSET_EXCLUDES, cache_dir=tmp_path / "one", **options)
    assert other_key != key and unshipped(changed) == []


def test_without_a_python_of_the_runtime_version_the_asset_ships_no_bytecode_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "src"
    (source / "pkg").mkdir(parents=True)
    (source / "pkg" / "__init__.py").write_text("VALUE = 1\n")
    cache = tmp_path / "cache"
    bytecode_python.cache_clear()
    folder, key = staged(source, ASSET_EXCLUDES, cache_dir=cache, version="3.99", runtime_path="/opt")
    assert "note: no Python 3.99 (Lambda's runtime) here to compile bytecode with" in capsys.readouterr().err
    assert _files(folder) == {"pkg/__init__.py"}
    options = {"version": PIP_PYTHON_VERSION, "runtime_path": "/opt"}
    assert staged(source, ASSET_EXCLUDES, cache_dir=cache, **options)[1] != key


def test_the_bench_loads_each_function_with_the_layers_the_stack_attaches(
    full_synth: Synthesized,
) -> None:
    """`bench imports` measures the cold path of every function the stack deploys (it had left
    out the CRM sweep) from the code that function gets (`bench.assets`); Lambda merges a
    function's layers into /opt/python, so their order matters not."""
    from bench.assets import PHONENUMBERS, SHARED, function_layers
    from bench.imports import handler_modules

    layers = full_synth.stack.node.find_child("Layers").node
    ours = {full_synth.logical_id(layers.find_child("Shared")): SHARED}
    ours[full_synth.logical_id(layers.find_child("Phonenumbers"))] = PHONENUMBERS
    for consumer in full_synth.stack.consumers:
        own = layers.try_find_child(f"{pascal_case(consumer.name)}Requirements")
        if own is not None:
            ours[full_synth.logical_id(own)] = consumer.name
    checked, services = 0, set()
    for function_id in of_type(full_synth.resources, "AWS::Lambda::Function"):
        function = props(full_synth.resources, function_id)
        attached = [ours[ref_name(layer)] for layer in function["Layers"] if ref_name(layer) in ours]
        service = function_env(full_synth.resources, function_id)["POWERTOOLS_SERVICE_NAME"]
        assert sorted(function_layers(service)) == sorted(attached), service
        assert handler_modules()[service] == function["Handler"].rsplit(".", 1)[0], service
        checked += "bot" in attached or PHONENUMBERS in attached
        services.add(service)
    assert checked >= 2
    assert "crm_sweep" in services  # the full stack connects a CRM


def test_phonenumbers_data_it_never_imports_stays_source_the_rest_is_compiled(tmp_path: Path) -> None:
    """The geocoder, carrier and time-zone data (19 MB of bytecode) would triple the layer every
    CRM function downloads at a cold start; `pipeline.phones` imports only `phonenumbers/data`."""
    modules = ["phonenumbers/__init__.py", "phonenumbers/data/region_BY.py", "phonenumbers/geodata/data0.py"]
    modules += ["phonenumbers/carrierdata/data0.py", "phonenumbers/tzdata/data0.py"]
    for module in modules:
        (tmp_path / module).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / module).write_text("VALUE = 1\n")
    python = bytecode_python(PIP_PYTHON_VERSION)
    assert python is not None
    compile_tree(tmp_path, python, runtime_path="/opt/python", strict=True)

    compiled = {module for module in modules if pyc_of(tmp_path / module).is_file()}
    assert compiled == {"phonenumbers/__init__.py", "phonenumbers/data/region_BY.py"}


class _Derived:
    """A file built from the staged copy (`infra.bytecode.Derived`), counting its builds."""

    def __init__(self, key: str) -> None:
        self.derived_key, self.builds = key, 0

    def key(self) -> str:
        return self.derived_key

    def files(self, staged_copy: Path, python: str) -> dict[str, bytes]:
        self.builds += 1
        names = sorted(p.name for p in staged_copy.iterdir())
        return {"derived.txt": f"{python}\n{','.join(names)}".encode()}


def test_derived_files_are_built_from_the_staged_copy_once_and_their_inputs_key_it(tmp_path: Path) -> None:
    source = tmp_path / "src"
    (source / "pkg").mkdir(parents=True)
    (source / "pkg" / "__init__.py").write_text("VALUE = 1\n")
    options = {"version": PIP_PYTHON_VERSION, "runtime_path": "/var/task", "cache_dir": tmp_path / "cache"}
    derived = _Derived("one")
    folder, key = staged(source, ASSET_EXCLUDES, derived=derived, **options)
    python = bytecode_python(PIP_PYTHON_VERSION)
    assert (folder / "derived.txt").read_text() == f"{python}\npkg"
    again, same_key = staged(source, ASSET_EXCLUDES, derived=derived, **options)
    assert (again, same_key, derived.builds) == (folder, key, 1)  # the cached copy, not rebuilt
    other, other_key = staged(source, ASSET_EXCLUDES, derived=_Derived("two"), **options)
    assert other_key != key and (other / "derived.txt").is_file()
