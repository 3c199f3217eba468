"""The layout the codebase keeps: small modules, short functions, layers that import only the
layers before them."""

from __future__ import annotations

import ast
from pathlib import Path

ANALYZER = Path(__file__).resolve().parents[1] / "analyzer"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 80


def _modules() -> list[Path]:
    return sorted(ANALYZER.rglob("*.py"))


def test_no_module_over_400_lines() -> None:
    long = {
        str(p.relative_to(ANALYZER)): n
        for p in _modules()
        if (n := p.read_text(encoding="utf-8").count("\n")) > MAX_MODULE_LINES
    }
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


def test_no_function_over_80_lines() -> None:
    long = []
    for p in _modules():
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long.append(f"{p.relative_to(ANALYZER)}:{node.lineno} {node.name} ({n} lines)")
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"


def test_analysis_layers_never_import_the_renderers() -> None:
    """Rendering takes an Analysis and never recomputes: nothing below the renderers imports them
    at module level (the Analysis' figure methods import them lazily, inside the method)."""
    below = [
        p for p in _modules() if "render" not in p.parts and p.name not in ("cli.py", "cliruns.py")
    ]
    offenders = []
    for p in below:
        tree = ast.parse(p.read_text(encoding="utf-8"))
        for node in tree.body:  # module level only
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            offenders += [
                f"{p.relative_to(ANALYZER)}: {n}" for n in names if n.startswith("analyzer.render")
            ]
    assert not offenders, offenders
