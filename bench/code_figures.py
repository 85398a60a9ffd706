"""The shape of the code: module and function sizes, and classes with many methods (issue 21).

``python bench/code_figures.py [ROOT]`` prints, for ``dsh_host`` and ``dsh_plugins_builtin``
under *ROOT* (default: this checkout), the median module length, the largest module, the modules
over 300 and 400 lines, the functions over 60 lines and the classes with over 15 methods. Lines are
physical lines of the file; a function's length runs from its ``def`` (decorators excluded) to its
last line.
"""

from __future__ import annotations

import ast
import statistics
import sys
from pathlib import Path

PACKAGES = ("dsh_host", "dsh_plugins_builtin")


def figures(root: Path, package: str) -> dict[str, object]:
    modules = sorted((root / package).rglob("*.py"))
    sizes = {str(m.relative_to(root)): len(m.read_text().splitlines()) for m in modules}
    long_functions: list[tuple[str, int]] = []
    big_classes: list[tuple[str, int]] = []
    for module in modules:
        tree = ast.parse(module.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > 60:
                    long_functions.append((f"{module.relative_to(root)}:{node.name}", length))
            elif isinstance(node, ast.ClassDef):
                methods = [
                    n for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
                ]
                if len(methods) > 15:
                    big_classes.append((f"{module.relative_to(root)}:{node.name}", len(methods)))
    largest = max(sizes, key=lambda name: sizes[name])
    return {
        "modules": len(sizes),
        "median module": statistics.median(sizes.values()),
        "largest module": f"{sizes[largest]} ({largest})",
        "over 300": sorted(n for n, s in sizes.items() if s > 300),
        "over 400": sorted(n for n, s in sizes.items() if s > 400),
        "functions over 60": sorted(long_functions, key=lambda item: -item[1]),
        "classes over 15 methods": big_classes,
    }


def main() -> None:
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent
    for package in PACKAGES:
        found = figures(root, package)
        print(f"{package}:")
        for key, value in found.items():
            if isinstance(value, list):
                print(f"  {key}: {len(value)}")
                for item in value:
                    print(f"    {item}")
            else:
                print(f"  {key}: {value}")


if __name__ == "__main__":
    main()
