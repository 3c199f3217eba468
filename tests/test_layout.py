"""The layout the codebase keeps: the pipeline as packages in one declared order, small
modules, short functions, package APIs at the package boundary.

The order is data (:data:`LAYERS`): a module may import, at module level, only modules of its
own layer or of an earlier one; a module of one package imports another package only through
that package's ``__init__``, and never a private name of it; a plain module re-exports nothing.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ANALYZER = Path(__file__).resolve().parents[1] / "analyzer"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 80
MAX_FLAT_MODULES = 12

#: The layers, first to last. Each entry: the layer's name and the modules or packages in it.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "base",
        (
            "analyzer",
            "analyzer.config",
            "analyzer.context_file",
            "analyzer.errors",
            "analyzer.escape",
            "analyzer.kinds",
            "analyzer.runtime",
            "analyzer.schema",
            "analyzer.terms",
            "analyzer.unpickler",
        ),
    ),
    ("kernels", ("analyzer.kernels",)),
    ("load", ("analyzer.load",)),
    ("normalize", ("analyzer.normalize",)),
    ("match", ("analyzer.match",)),
    ("waits", ("analyzer.waits",)),
    ("diagnosis", ("analyzer.diagnosis",)),
    ("store", ("analyzer.store",)),
    ("analysis", ("analyzer.analysis",)),
    ("render", ("analyzer.render",)),
    ("cli", ("analyzer.cli", "analyzer.__main__")),
)
#: Runs inside training jobs: it may import only itself and the base layer.
CAPTURE = "analyzer.capture"


@dataclass(frozen=True)
class Import:
    module: str  # the importing module
    target: str  # the imported module (``from X import n``: X, or X.n when n is a module)
    names: tuple[str, ...]
    line: int
    lazy: bool  # inside a function, or under ``if TYPE_CHECKING``


def _module_name(p: Path) -> str:
    parts = p.relative_to(ANALYZER.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> list[Path]:
    return sorted(ANALYZER.rglob("*.py"))


def _imports(p: Path) -> list[Import]:
    name = _module_name(p)
    out: list[Import] = []

    def visit(node: ast.AST, lazy: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ImportFrom) and child.level == 0:
                mod = child.module or ""
                if mod.startswith("analyzer"):
                    out.append(
                        Import(name, mod, tuple(a.name for a in child.names), child.lineno, lazy)
                    )
            elif isinstance(child, ast.Import):
                for a in child.names:
                    if a.name.startswith("analyzer"):
                        out.append(Import(name, a.name, (), child.lineno, lazy))
            else:
                inner = lazy or isinstance(
                    child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
                )
                if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                    inner = True
                visit(child, inner)

    visit(ast.parse(p.read_text(encoding="utf-8")), False)
    return out


def _unit(module: str) -> str:
    """The package (``analyzer.load``) or base module a module belongs to."""
    parts = module.split(".")
    if len(parts) > 1 and (ANALYZER / parts[1] / "__init__.py").exists():
        return ".".join(parts[:2])
    return module


def _layer(module: str) -> int:
    unit = _unit(module)
    if unit == CAPTURE:
        return 0
    for i, (_, members) in enumerate(LAYERS):
        if unit in members:
            return i
    raise AssertionError(f"{module} is in no layer of LAYERS: place it there")


def test_every_module_has_a_layer() -> None:
    for p in _modules():
        _layer(_module_name(p))


def test_module_level_imports_follow_the_layer_order() -> None:
    wrong = []
    for p in _modules():
        for imp in _imports(p):
            if imp.lazy or _unit(imp.target) == _unit(imp.module):
                continue
            if _unit(imp.module) == CAPTURE:
                if _layer(imp.target) != 0 or _unit(imp.target) == "analyzer":
                    wrong.append(f"{imp.module}:{imp.line} capture imports {imp.target}")
            elif _layer(imp.target) > _layer(imp.module):
                wrong.append(f"{imp.module}:{imp.line} imports the later {imp.target}")
            elif _unit(imp.target) == CAPTURE:
                wrong.append(f"{imp.module}:{imp.line} imports {imp.target}: capture is for jobs")
    assert not wrong, wrong


def test_packages_are_imported_through_their_init_and_no_private_name_crosses() -> None:
    wrong = []
    for p in _modules():
        for imp in _imports(p):
            unit = _unit(imp.target)
            if unit == _unit(imp.module) or (unit == imp.target and not imp.names):
                if unit != _unit(imp.module) and any(n.startswith("_") for n in imp.names):
                    wrong.append(f"{imp.module}:{imp.line} private {imp.names} of {unit}")
                continue
            is_package = (ANALYZER / unit.split(".")[-1] / "__init__.py").exists()
            if is_package and imp.target != unit:
                wrong.append(f"{imp.module}:{imp.line} imports {imp.target}, not {unit}")
            privates = [n for n in imp.names if n.startswith("_") and n != "__version__"]
            if privates:
                wrong.append(f"{imp.module}:{imp.line} private {privates} of {unit}")
    assert not wrong, wrong


def test_render_imports_the_analysis_for_typing_only() -> None:
    wrong = [
        f"{imp.module}:{imp.line}"
        for p in _modules()
        for imp in _imports(p)
        if _unit(imp.module) == "analyzer.render" and imp.target == "analyzer.analysis"
        if not imp.lazy or "TYPE_CHECKING" not in p.read_text(encoding="utf-8")
    ]
    assert not wrong, wrong


def test_plain_modules_re_export_nothing() -> None:
    wrong = []
    for p in _modules():
        if p.name == "__init__.py":
            continue
        tree = ast.parse(p.read_text(encoding="utf-8"))
        defined = {
            n.id
            for node in ast.walk(tree)
            if isinstance(node, (ast.Assign, ast.AnnAssign))
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
            for n in ast.walk(t)
            if isinstance(n, ast.Name)
        } | {
            node.name
            for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        }
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
            ):
                names = [e.value for e in node.value.elts]  # type: ignore[attr-defined]
                wrong += [f"{p.relative_to(ANALYZER)}: {n}" for n in names if n not in defined]
    assert not wrong, f"names listed in __all__ but defined elsewhere: {wrong}"


def test_every_package_says_what_its_layer_does() -> None:
    for init in ANALYZER.glob("*/__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))
        assert doc and len(doc) > 60, init


def test_few_modules_stay_flat() -> None:
    flat = [p.name for p in ANALYZER.glob("*.py") if p.name not in ("__init__.py", "__main__.py")]
    assert len(flat) <= MAX_FLAT_MODULES, flat


def test_capture_loads_neither_pandas_nor_the_analysis() -> None:
    code = (
        "import sys, analyzer.capture; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('pandas', 'numpy', 'networkx') "
        "or m.startswith(('analyzer.diagnosis', 'analyzer.load', 'analyzer.match'))]; "
        "print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


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


def test_the_stubs_of_the_compiled_modules_name_what_they_export() -> None:
    import importlib

    import pytest

    stubs = sorted(ANALYZER.rglob("*.pyi"))
    assert {p.stem for p in stubs} == {"_fastpickle", "_groupkeys"}
    for stub in stubs:
        declared = {
            n.name
            for n in ast.parse(stub.read_text(encoding="utf-8")).body
            if isinstance(n, ast.FunctionDef)
        }
        try:
            module = importlib.import_module(_module_name(stub))
        except ImportError:  # pragma: no cover - not built here
            pytest.skip(f"{stub.name}: the compiled module is not built")
        built = {n for n in dir(module) if not n.startswith("_")}
        assert declared == built, stub.name
