"""The linters CI runs (make lint, from .ci/run before the tests) are the versions pyproject's test extra installs."""

import os
import re
import shlex
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def read(name: str) -> str:
    with open(os.path.join(ROOT, name), encoding="utf-8") as f:
        return f.read()


def test_make_lint_installs_the_linters_of_the_test_extra():
    extra = tomllib.loads(read("pyproject.toml"))["project"]["optional-dependencies"]["test"]
    linters = sorted(r for r in extra if re.match(r"(ruff|mypy)\b", r))
    assert [r.split(">")[0] for r in linters] == ["mypy", "ruff"]
    tools = re.search(r"^LINT_TOOLS := (.+)$", read("Makefile"), re.MULTILINE)
    assert tools and sorted(shlex.split(tools.group(1))) == linters


def test_ci_lints_before_it_tests():
    steps = [line.strip() for line in read(".ci/run").splitlines() if line.strip().startswith("make ")]
    assert "make lint" in steps and steps.index("make lint") < steps.index("make test")
