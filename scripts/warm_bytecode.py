"""Write the bytecode a fresh clone lacks, once, before `make test` starts its workers.

A fresh clone has no `__pycache__`: the four xdist workers would each compile every module of this project
and rewrite every test module's asserts at the same moment (pytest caches the rewritten code in
`__pycache__/*.<tag>-pytest-<version>.pyc`), which cost 13 s of the suite's wall time on the 2-core CI
machine. `pytest --collect-only` would write the same files but imports every library the tests use first
(8-11 s here); this writes them directly on every core, in about 2 s:

- the project's packages and the tests' helper modules: ordinary bytecode (`compileall`);
- test modules and conftest files: pytest's rewritten bytecode, made by pytest's own rewriter.

pytest has no public command for the second, so this uses its rewriter module (`_pytest.assertion.rewrite`).
If that module changes, the script says so and stops without failing: pytest then finds no usable file,
rewrites the modules itself and nothing is lost but the time. pytest checks each cached file against its
source's hash and its own tag before using it, so a file written here is never trusted blindly.
"""

from __future__ import annotations

import ast
import compileall
import importlib.util
import os
import sys
import tomllib
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

try:
    from _pytest.assertion.rewrite import PYC_TAIL, _write_pyc_fp, get_cache_dir, rewrite_asserts
except ImportError as exc:  # pytest moved or renamed them: warm the ordinary bytecode only
    REWRITER_MISSING: ImportError | None = exc
else:
    REWRITER_MISSING = None

ROOT = Path(__file__).resolve().parents[1]


def packages() -> list[str]:
    """The project's top-level packages, as pyproject.toml lists them for the build."""
    with (ROOT / "pyproject.toml").open("rb") as fh:
        listed = tomllib.load(fh)["tool"]["setuptools"]["packages"]
    return sorted({name.split(".", 1)[0] for name in listed})


def rewrite(path: Path) -> bool:
    """Write pytest's rewritten bytecode for one test module or conftest file."""
    source = path.read_bytes()
    tree = ast.parse(source, filename=str(path))
    rewrite_asserts(tree, source, str(path), None)
    code = compile(tree, str(path), "exec", dont_inherit=True)
    cache = get_cache_dir(path)
    cache.mkdir(exist_ok=True)
    target = cache / (path.stem + PYC_TAIL)
    partial = target.with_name(f"{target.name}.{os.getpid()}")
    with partial.open("wb") as fh:
        _write_pyc_fp(fh, importlib.util.source_hash(source), code)
    partial.replace(target)  # atomic: a reader sees the old file or the whole new one
    return True


def main() -> int:
    workers = os.cpu_count() or 1
    folders = [*packages(), "tests"]
    for folder in folders:
        compileall.compile_dir(ROOT / folder, quiet=1, workers=workers)
    tests = sorted({*ROOT.glob("tests/**/test_*.py"), *ROOT.glob("tests/**/conftest.py")})
    try:
        if REWRITER_MISSING is not None:
            raise REWRITER_MISSING
        with ProcessPoolExecutor(workers) as pool:
            done = sum(pool.map(rewrite, tests))
    except (ImportError, AttributeError, TypeError) as exc:
        print(f"warm_bytecode: pytest's rewriter changed ({exc}); pytest will rewrite the tests itself")
        return 0
    print(f"warm_bytecode: {', '.join(folders)} compiled; {done} test modules rewritten for pytest")
    return 0


if __name__ == "__main__":
    sys.exit(main())
