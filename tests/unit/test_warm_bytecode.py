"""scripts/warm_bytecode.py writes rewritten test bytecode that pytest itself accepts."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from _pytest.assertion.rewrite import PYC_TAIL, _read_pyc

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "warm_bytecode.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("warm_bytecode", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_rewritten_file_is_one_pytest_would_load(tmp_path: Path) -> None:
    warm = _script()
    assert warm.REWRITER_MISSING is None  # with this pytest, the rewriter is where the script looks
    source = tmp_path / "test_sample.py"
    source.write_text("def test_sample():\n    x = 1\n    assert x == 2\n")
    assert warm.rewrite(source)
    pyc = tmp_path / "__pycache__" / f"test_sample{PYC_TAIL}"
    code = _read_pyc(source, pyc)
    assert code is not None  # pytest's own check: magic number, flags and the source's hash
    namespace: dict[str, object] = {}
    exec(code, namespace)  # the asserts were rewritten: the failure explains itself
    test = namespace["test_sample"]
    assert callable(test)
    try:
        test()
    except AssertionError as exc:
        assert "assert 1 == 2" in str(exc)
    else:
        raise AssertionError("the rewritten test should fail")


def test_a_changed_source_is_not_served_from_the_old_file(tmp_path: Path) -> None:
    warm = _script()
    source = tmp_path / "test_sample.py"
    source.write_text("def test_sample():\n    assert True\n")
    warm.rewrite(source)
    source.write_text("def test_sample():\n    assert False\n")
    assert _read_pyc(source, tmp_path / "__pycache__" / f"test_sample{PYC_TAIL}") is None


def test_the_packages_are_the_ones_the_build_lists() -> None:
    assert _script().packages() == sorted(
        [
            "checks",
            "cli",
            "clients",
            "config",
            "factgate",
            "jobs",
            "migrations",
            "models",
            "simulator",
            "web",
            "workers",
        ]
    )
