"""No function in lockdown/ is longer than 80 lines (issue 32): a longer one is split into named
steps, as harness/profile.py's capture is into its phases. A function's length is from its
`def` line to its last line, docstring, comments and blank lines included (decorators not);
a nested function counts toward the function around it as well as on its own. The modules are
parsed, not imported."""
from __future__ import annotations

import ast
from pathlib import Path

import lockdown

ROOT = Path(lockdown.__file__).parent
MAX_LINES = 80


def function_lengths(source: str) -> list[tuple[str, int, int]]:
    """(qualified name, first line, length in lines) of every function in `source`."""
    out = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + child.name
                out.append((name, child.lineno, child.end_lineno - child.lineno + 1))
                visit(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)
    visit(ast.parse(source), "")
    return out


def test_the_measure():
    source = "def f():\n" + "    x = 1\n" * 79 + "\n\nclass C:\n    async def g(self):\n" \
             "        def h():\n            pass\n        return h\n"
    assert function_lengths(source) == [("f", 1, 80), ("C.g", 84, 4), ("C.g.h", 85, 2)]


def test_no_function_over_80_lines():
    long = []
    for path in sorted(ROOT.rglob("*.py")):
        for name, line, length in function_lengths(path.read_text(encoding="utf-8")):
            if length > MAX_LINES:
                long.append(f"  {path.relative_to(ROOT.parent)}:{line} {name}: {length} lines")
    assert not long, (f"functions over {MAX_LINES} lines (split them into named steps):\n"
                      + "\n".join(long))
