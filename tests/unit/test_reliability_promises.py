"""Every promise of docs/reliability.md names the tests that check it: each of its sections ends with a "Checked by"
line whose tests exist (a test function of that name in that file), so that a promise written without a test, or
whose test was renamed or removed, fails here."""

import ast
import os
import re
from typing import List, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PAGE = os.path.join(ROOT, "docs", "reliability.md")


def _sections(text: str) -> List[Tuple[str, str]]:
    """Each ``## `` section of the page: its title and its text."""
    parts = re.split(r"^## (.+)$", text, flags=re.MULTILINE)
    return list(zip(parts[1::2], parts[2::2]))


def _tests_of(path: str) -> set:
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    return {node.name for node in tree.body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_")}


def _problems(text: str) -> List[str]:
    problems = []
    for title, body in _sections(text):
        checked = [line for line in body.splitlines() if line.startswith("Checked by: ")]
        named = re.findall(r"`([^`]+)::([A-Za-z_0-9]+)`", checked[0]) if len(checked) == 1 else []
        if not named:
            problems.append(f"section {title!r}: no 'Checked by: `tests/...py::test_name`, ...' line")
        for path, name in named:
            if not os.path.isfile(os.path.join(ROOT, path)) or name not in _tests_of(path):
                problems.append(f"section {title!r}: {path} has no test {name}")
    return problems


def _page() -> str:
    with open(PAGE, encoding="utf-8") as f:
        return f.read()


def test_every_section_of_the_reliability_page_names_tests_that_exist():
    text = _page()
    assert len(_sections(text)) >= 10
    assert _problems(text) == []


def test_a_section_without_its_tests_or_naming_a_missing_one_is_found():
    text = _page()
    line = next(line for line in text.splitlines() if line.startswith("Checked by: "))
    path, name = re.findall(r"`([^`]+)::([A-Za-z_0-9]+)`", line)[0]
    assert len(_problems(text.replace(line, "", 1))) == 1
    assert _problems(text.replace(f"::{name}`", f"::{name}_gone`", 1)) == [
        f"section {_sections(text)[0][0]!r}: {path} has no test {name}_gone"]
