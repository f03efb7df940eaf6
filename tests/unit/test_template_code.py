"""Compiled templates shared by every app a process builds (web/template_code.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from jinja2 import DictLoader, Environment

from web.app import create_app
from web.template_code import TEMPLATE_CODE, ProcessTemplateCode


def test_a_second_app_loads_the_first_apps_compiled_pages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'factgate.db'}"
    compiled: list[str] = []
    real = Environment.compile

    def counting(self: Environment, source: Any, name: str | None = None, *args: Any, **kwargs: Any) -> Any:
        compiled.append(str(name))
        return real(self, source, name, *args, **kwargs)

    monkeypatch.setattr(Environment, "compile", counting)
    TEMPLATE_CODE.clear()
    first = create_app({"database_url": url, "secret_key": "k" * 32})
    first.jinja_env.get_template("report_file.html")
    compiled_by_first = list(compiled)
    second = create_app({"database_url": url, "secret_key": "k" * 32})
    second.jinja_env.get_template("report_file.html")
    assert second.jinja_env is not first.jinja_env
    assert "report_file.html" in compiled_by_first
    assert compiled[len(compiled_by_first) :] == []  # the second app compiled nothing


def test_an_edited_template_is_compiled_again() -> None:
    cache = ProcessTemplateCode()
    before = Environment(loader=DictLoader({"t.html": "one {{ x }}"}), bytecode_cache=cache, autoescape=True)
    assert before.get_template("t.html").render(x="<b>") == "one &lt;b&gt;"
    after = Environment(loader=DictLoader({"t.html": "two {{ x }}"}), bytecode_cache=cache, autoescape=True)
    assert after.get_template("t.html").render(x=1) == "two 1"
    again = Environment(loader=DictLoader({"t.html": "two {{ x }}"}), bytecode_cache=cache, autoescape=True)
    assert again.get_template("t.html").render(x=2) == "two 2"
    cache.clear()
    assert cache._code == {}
