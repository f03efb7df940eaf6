"""Counts the figures issue 34 tracks: string-key reads in the answer and quote application modules,
`dict[str, Any]` in the product layers, and `type: ignore` comments in the product layers.

A string-key read is `x["key"]` (a subscript by a string literal, outside an assignment target) or
`x.get("key", ...)`, found with `ast`; the other two are counted as text. Run from the repository root:
`python scripts/type_counts.py`.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

KEY_READ_MODULES = ("jobs/answers.py", "jobs/quotes.py")
KEY_PATTERN = re.compile(r'\[\"[a-z_]*\"\]|\.get\("')
PRODUCT_LAYERS = ("checks", "clients", "config", "models", "migrations", "jobs", "workers", "web", "cli")


def string_key_reads(source: str) -> int:
    tree = ast.parse(source)
    stores = {
        id(node)
        for node in ast.walk(tree)
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store | ast.Del)
    }
    count = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and id(node) not in stores:
            if isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
                count += 1
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            count += 1
    return count


def product_files(root: Path) -> list[Path]:
    return sorted(p for layer in PRODUCT_LAYERS for p in (root / layer).rglob("*.py"))


def main(root: Path) -> None:
    for module in KEY_READ_MODULES:
        print(f"string-key reads  {module}: {string_key_reads((root / module).read_text())}")
    reads = sum(string_key_reads((root / m).read_text()) for m in KEY_READ_MODULES)
    print(f"string-key reads  total: {reads}")
    # The issue's own figure was a text count, which also finds `x["key"] = ...` writes.
    text = sum(len(KEY_PATTERN.findall((root / m).read_text())) for m in KEY_READ_MODULES)
    print(f"string-key uses   total (text, reads and writes): {text}")
    texts = [p.read_text() for p in product_files(root)]
    print(f"dict[str, Any]    product layers: {sum(t.count('dict[str, Any]') for t in texts)}")
    print(f"type: ignore      product layers: {sum(t.count('type: ignore') for t in texts)}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path.cwd())
