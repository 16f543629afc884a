"""The layout a newcomer reads is the layout that ships (device=cpu: nothing runs here).

The import contracts themselves are checked by `lint-imports` in .ci/run; these tests
keep the packaging, the tree in docs/contributing.md and the docs' links true to the tree on disk.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parent.parent
PERFLAB = ROOT / "perflab"


def _packages_on_disk() -> list[str]:
    found = []
    for init in PERFLAB.rglob("__init__.py"):
        if "__pycache__" in init.parts:
            continue
        found.append(".".join(init.parent.relative_to(ROOT).parts))
    return sorted(found)


def test_every_package_is_in_the_wheel():
    """A sub-package missing from [tool.setuptools] packages imports from a source tree
    and an editable install but is absent from a built wheel."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    listed = set(config["tool"]["setuptools"]["packages"])
    missing = [p for p in _packages_on_disk() if p not in listed]
    assert not missing, f"add to pyproject.toml [tool.setuptools] packages: {missing}"


def _readme_tree() -> str:
    text = (ROOT / "docs" / "contributing.md").read_text()
    section = text[text.index("## The tree") :]
    return section[: section.index("```", section.index("```") + 3)]


def test_the_tree_names_every_sub_package_and_top_level_module():
    tree = _readme_tree()
    names = [p.name + "/" for p in PERFLAB.iterdir() if (p / "__init__.py").is_file()]
    names += [p.name for p in PERFLAB.glob("*.py") if p.name != "__init__.py"]
    missing = [n for n in sorted(names) if not re.search(rf"(?<![\w/]){re.escape(n)}", tree)]
    assert not missing, f"docs/contributing.md's tree does not name {missing}"


def test_the_tree_names_nothing_that_is_gone():
    tree = _readme_tree()
    lines = [line for line in tree.splitlines() if line.startswith("  ")]
    named = {n for line in lines for n in re.findall(r"\b([a-z_]+(?:\.py|/))", line)}
    gone = [n for n in sorted(named) if not (PERFLAB / n.rstrip("/")).exists()]
    assert not gone, f"docs/contributing.md's tree names {gone}, which perflab/ does not have"


@pytest.mark.parametrize(
    "path", sorted(p.relative_to(ROOT) for p in [*ROOT.glob("*.md"), *(ROOT / "docs").glob("*.md")])
)
def test_relative_links_point_at_files_that_exist(path):
    text = (ROOT / path).read_text()
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [t for t in targets if "://" not in t and not t.startswith("mailto:")]
    broken = [t for t in local if not ((ROOT / path).parent / t).exists()]
    assert not broken, f"{path}: links to missing files {broken}"


def test_no_source_cites_a_file_outside_the_repository():
    """perflab's own design doc is docs/design.md; the design notes it grew from are not
    shipped, so a comment citing them points nowhere."""
    cited = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in [*PERFLAB.rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py")]
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if re.search(r"(?<![\w/])DESIGN\.md|/work/shared|\.\./shared/", line)
    ]
    assert not cited, f"cite docs/design.md instead: {cited}"


def test_the_layer_table_is_the_import_contract():
    """docs/contributing.md's table of layers, top to bottom, is the layers contract that
    lint-imports enforces: the one table of layers the docs keep."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    [contract] = [c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers"]
    enforced = [{n.strip() for n in layer.split("|")} for layer in contract["layers"]]
    text = (ROOT / "docs" / "contributing.md").read_text()
    section = text[text.index("## Layers") :].split("\n## ")[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    documented = [set(re.findall(r"`(\w+)`", row.split(" | ")[0])) for row in rows]
    assert documented == enforced


_IMPORT = re.compile(
    r"^\s*(?:from perflab\.(\w+)(?:\.(\w+))? import ([\w, ()]+)|import perflab\.(\w+)\.(\w+))", re.M
)


def _declared(package: str) -> set[str]:
    """The names in a package's __all__, read without importing it (some import torch)."""
    tree = ast.parse((PERFLAB / package / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return set(ast.literal_eval(node.value))
    return set()


def test_every_package_declares_its_public_face():
    packages = [p.name for p in PERFLAB.iterdir() if (p / "__init__.py").is_file()]
    undeclared = [p for p in packages if p not in ("conf", "experiments") and not _declared(p)]
    assert not undeclared, f"no __all__ in {undeclared}"


def test_packages_import_only_each_others_public_face():
    """A module of another package that its __all__ does not list is that package's own."""
    found = []
    for path in PERFLAB.rglob("*.py"):
        own = path.relative_to(PERFLAB).parts[0]
        for m in _IMPORT.finditer(path.read_text()):
            package = m.group(1) or m.group(4)
            if package == own or not (PERFLAB / package / "__init__.py").is_file():
                continue
            if m.group(4):
                names = [m.group(5)]
            elif m.group(2):
                names = [m.group(2)]
            else:
                names = [n.strip(" ()").split(" as ")[0] for n in m.group(3).split(",")]
            found += [
                f"{path.relative_to(ROOT)}: perflab.{package}.{n}"
                for n in names
                if n and n not in _declared(package)
            ]
    assert not found, "not in the package's __all__: " + "; ".join(found)


def test_every_heavy_test_is_slow_too():
    """The quick loop is `pytest -m "not slow"`, which replaces the default `-m 'not
    heavy'`: a heavy test not marked slow would run in it."""
    found = []
    for path in (ROOT / "tests").glob("test_*.py"):
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            if line.strip() == "@pytest.mark.heavy":
                marks = {m.strip() for m in lines[max(i - 3, 0) : i + 3]}
                if "@pytest.mark.slow" not in marks:
                    found.append(f"{path.name}:{i + 1}")
    assert not found, f"heavy but not slow: {found}"
