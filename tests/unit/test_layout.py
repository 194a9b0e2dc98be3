"""The layout stays as documented: test modules share helpers only through the helper modules
(tests/helpers.py, tests/cli.py, tests/checkpoint_compat.py), and docs/ARCHITECTURE.md names files that exist."""

import ast
import os
import re
import textwrap
from typing import Iterator, List, Optional, Tuple

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TESTS = os.path.join(ROOT, "tests")
ARCHITECTURE = os.path.join(ROOT, "docs", "ARCHITECTURE.md")


def is_test_module(path: str) -> bool:
    """A module pytest collects or configures from (``test_*.py``, ``conftest.py``): not a place for helpers."""
    name = os.path.basename(path)
    return name == "conftest.py" or (name.startswith("test_") and name.endswith(".py"))


def module_path(module: str) -> Optional[str]:
    """The file of a module named ``tests.…`` (a module or a package's ``__init__.py``), if it exists."""
    base = os.path.join(ROOT, *module.split("."))
    for path in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(path):
            return path
    return None


def _package_of(path: str) -> List[str]:
    return os.path.relpath(os.path.dirname(path), ROOT).split(os.sep)


def imported_modules(tree: ast.AST, path: str) -> Iterator[Tuple[int, str]]:
    """(line, module) for every module an import in ``tree`` (the code of ``path``) may load: for
    ``from a import b`` both ``a`` and ``a.b``, relative imports resolved against ``path``'s package."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package = _package_of(path)
                package = package[:len(package) - node.level + 1]
                base = ".".join(package + ([node.module] if node.module else []))
            else:
                base = node.module
            yield node.lineno, base
            for alias in node.names:
                yield node.lineno, f"{base}.{alias.name}"


def code_in_strings(tree: ast.AST) -> Iterator[Tuple[int, ast.AST]]:
    """(line, tree) of every string constant that is Python code with an import: what a test hands to
    ``python -c`` imports as much as the test itself."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "import " in node.value:
            try:
                yield node.lineno, ast.parse(textwrap.dedent(node.value))
            except SyntaxError:
                continue


def imports_of_test_modules(source: str, path: str) -> List[str]:
    """``path:line: imports <module>`` for each test module that the code ``source`` (of file ``path``) imports."""
    tree = ast.parse(source)
    found = []
    trees = [(0, tree), *code_in_strings(tree)]
    for offset, subtree in trees:
        for line, module in imported_modules(subtree, path):
            target = module_path(module) if module.split(".")[0] == "tests" else None
            if target and is_test_module(target) and os.path.abspath(target) != os.path.abspath(path):
                where = line if not offset else offset + line - 1
                found.append(f"{os.path.relpath(path, ROOT)}:{where}: imports {module}")
    return sorted(set(found))


def python_files() -> List[str]:
    """The Python files under tests/, but this one: its examples of forbidden imports are strings."""
    here = os.path.abspath(__file__)
    return sorted(path for folder, _, names in os.walk(TESTS) for name in names
                  for path in [os.path.join(folder, name)] if name.endswith(".py") and path != here)


def test_no_test_module_imports_from_another_test_module():
    """Helpers shared by tests live in tests/helpers.py (unit level) or tests/cli.py (command lines)."""
    found = [hit for path in python_files() for hit in imports_of_test_modules(open(path, encoding="utf-8").read(), path)]
    assert found == [], "move what is shared to tests/helpers.py or tests/cli.py:\n" + "\n".join(found)


@pytest.mark.parametrize("source", [
    "from tests.integration.test_cli import assert_user_error\n",
    "import tests.unit.test_speaker_bias\n",
    "from tests.unit import test_speaker_bias\n",
    "from tests.integration.conftest import shared\n",
    "from .test_speaker_bias import expected_parameters\n",
    'CHECK = """\n    from tests.unit.test_speaker_bias import expected_parameters\n"""\n',
])
def test_the_check_sees_every_way_of_importing_a_test_module(source):
    path = os.path.join(TESTS, "unit", "test_example.py")
    assert len(imports_of_test_modules(source, path)) >= 1


@pytest.mark.parametrize("source", [
    "from tests.helpers import make_task\n",
    "from tests.cli import run\nimport tests.checkpoint_compat\n",
    "from . import helpers\n",
    'TEXT = "how to import tests.unit.test_docs, in prose"\n',
])
def test_helpers_may_be_imported_from_anywhere(source):
    assert imports_of_test_modules(source, os.path.join(TESTS, "unit", "test_example.py")) == []


# -- docs/ARCHITECTURE.md ------------------------------------------------------------------------------------

#: a path of the repository in backticks: `fairseq_speaker/...`, `tests/...`, `examples/...`, `docs/...`, `scripts/...`
DOCUMENTED_PATH = re.compile(r"`((?:fairseq_speaker|tests|examples|docs|scripts)/[^`\s]*)`")


#: a file named in backticks by its name alone, or by the end of its path (`fit.py`, `speaker_bias/base.py`)
DOCUMENTED_FILE = re.compile(r"`([\w./]+\.(?:py|md|toml|yaml|json))`")


def architecture_page() -> str:
    return open(ARCHITECTURE, encoding="utf-8").read()


def repository_files() -> List[str]:
    """Every file of the working tree, as a path from the root with "/" (virtual environments and caches left out)."""
    skipped = {".git", ".venv", "__pycache__", ".pytest_cache", ".hypothesis", "build"}
    files = []
    for folder, folders, names in os.walk(ROOT):
        folders[:] = [f for f in folders if f not in skipped]
        files += [os.path.relpath(os.path.join(folder, name), ROOT).replace(os.sep, "/") for name in names]
    return files


def test_the_architecture_page_names_only_paths_that_exist():
    paths = sorted(set(DOCUMENTED_PATH.findall(architecture_page())))
    assert len(paths) >= 20, "docs/ARCHITECTURE.md should name the files it describes, in backticks"
    missing = [p for p in paths if not os.path.exists(os.path.join(ROOT, p.rstrip("/")))]
    assert missing == [], "docs/ARCHITECTURE.md names paths that do not exist: " + ", ".join(missing)


def test_the_files_the_architecture_page_names_by_their_name_exist():
    """``fit.py`` beside ``fairseq_speaker/onboarding/`` must still be a file of the repository."""
    files = repository_files()
    names = sorted(set(DOCUMENTED_FILE.findall(architecture_page())))
    missing = [n for n in names if not any(f == n or f.endswith("/" + n) for f in files)]
    assert missing == [], "docs/ARCHITECTURE.md names files that do not exist: " + ", ".join(missing)


def test_the_readme_links_the_architecture_page():
    assert "(docs/ARCHITECTURE.md)" in open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()


def _package_imports(path: str) -> Iterator[str]:
    """Every module of the package ``path`` imports, at its top or inside a function."""
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module


@pytest.mark.parametrize("lower,upper", [("toy", "onboarding")])
def test_a_floor_does_not_import_the_floor_above_it(lower, upper):
    """toy/ sits under onboarding/ (fairseq-speaker-onboarding-eval reads its corpus and oracle): the demo runs the
    onboarding commands as processes, as a user would, and imports none of their modules."""
    folder = os.path.join(ROOT, "fairseq_speaker", lower)
    found = [(name, module) for name in sorted(os.listdir(folder)) if name.endswith(".py")
             for module in _package_imports(os.path.join(folder, name))
             if module == f"fairseq_speaker.{upper}" or module.startswith(f"fairseq_speaker.{upper}.")]
    assert not found, f"fairseq_speaker/{lower}/ imports fairseq_speaker/{upper}/: {found}"
