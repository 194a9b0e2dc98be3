"""The user's documents as the tests read them: README.md and the pages of docs/, their code (command
lines and Python blocks), their headings and their links. Every command a page shows is found here, so
that moving a command from one page to another keeps it parsed or run by the tests."""

import os
import re
from typing import Dict, Iterator, List, Optional, Sequence, Set, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = "README.md"


def documents() -> List[str]:
    """README.md and every page of docs/, as paths from the repository root with "/"."""
    pages = sorted(name for name in os.listdir(os.path.join(ROOT, "docs")) if name.endswith(".md"))
    return [README] + [f"docs/{name}" for name in pages]


def read(path: str) -> str:
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return f.read()


def shell_variables(text: str) -> Dict[str, str]:
    """A page's shell variables: ``NAME="..."`` (over several lines too) and a loop's first value
    (``for NAME in A B; do``), as a shell would set them."""
    found = {name: " ".join(value.split()) for name, value in re.findall(r'^\s*([A-Z_]+)="([^"]*)"', text, re.M)}
    found.update(re.findall(r"^\s*for (\w+) in (\S+)", text, re.M))
    return found


def code_lines(text: str) -> List[str]:
    """The lines of a page's code outside Python: indented blocks (four spaces, after a blank line, as
    Markdown has them) and fenced blocks other than ```python, with a shell's continuation lines
    (``\\`` at the end) joined."""
    lines, fence, in_block, previous_blank = [], None, False, True
    for line in text.replace("\\\n", " ").split("\n"):
        stripped = line.strip()
        if fence is not None:
            if stripped.startswith("```"):
                fence = None
            elif fence != "python":
                lines.append(stripped)
        elif stripped.startswith("```"):
            fence = stripped[3:].strip().lower()
        elif line.startswith("    ") and (previous_blank or in_block):
            in_block = True
            lines.append(stripped)
        elif stripped:
            in_block = False
        previous_blank = not stripped
    return [line for line in lines if line]


def _program_part(line: str, programs: Set[str]) -> Optional[str]:
    """The part of a shell line that runs one of ``programs``: the line itself or what follows its last
    pipe, without a trailing ``&`` or ``# comment``, redirections (``> out``, ``2> log``) or the options
    a synopsis marks as optional (``[--shared keep]``)."""
    part = line.split("|")[-1].strip() if "|" in line else line
    part = re.sub(r"\s+#\s.*$", "", part).strip()
    part = part[:-1].strip() if part.endswith("&") else part
    part = re.sub(r"\s+(?:\d?>>?|<)\s*\S+", "", part)
    part = re.sub(r"\s+\[[^\]]*\]", "", part).strip()
    return part if part.split(" ")[0] in programs else None


def command_lines(programs: Sequence[str], paths: Optional[Sequence[str]] = None) -> List[Tuple[str, str]]:
    """(page, command line) for every line of code on the pages (all of them by default) that runs one
    of ``programs`` (``fairseq-train``, ``fairseq-speaker-adapt``), the page's shell variables set
    (``$USER_DIR`` is left for the caller)."""
    found = []
    for path in paths or documents():
        text = read(path)
        variables = shell_variables(text.replace("\\\n", " "))
        variables.pop("USER_DIR", None)
        for line in code_lines(text):
            line = re.sub(r"\$(\w+)", lambda m: variables.get(m.group(1), m.group(0)), line)
            command = _program_part(line, set(programs))
            if command:
                found.append((path, command))
    return found


def programs_shown(prefix: str, paths: Optional[Sequence[str]] = None) -> Set[str]:
    """Every program whose name starts with ``prefix`` that a line of code on the pages runs."""
    names = set()
    for path in paths or documents():
        for line in code_lines(read(path)):
            for part in line.split("|"):
                word = part.strip().split(" ")[0]
                if word.startswith(prefix):
                    names.add(word)
    return names


def python_blocks(path: str) -> List[str]:
    return re.findall(r"```python\n(.*?)```", read(path), re.DOTALL)


# -- headings and links ------------------------------------------------------------------------------------

def anchors(text: str) -> Set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation but ``-`` and ``_`` dropped,
    spaces as ``-``, a repeated heading numbered (``-1``, ``-2``). Headings inside code are not headings."""
    found: Set[str] = set()
    counts: Dict[str, int] = {}
    fence = False
    for line in text.split("\n"):
        if line.strip().startswith("```"):
            fence = not fence
            continue
        heading = re.match(r"#{1,6} +(.*?) *#* *$", line)
        if fence or not heading:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(1).lower().replace("`", "")).replace(" ", "-")
        n = counts.get(slug, 0)
        counts[slug] = n + 1
        found.add(slug if n == 0 else f"{slug}-{n}")
    return found


def links(text: str) -> Iterator[str]:
    """The targets of a page's Markdown links and images (``[text](target)``), code left out."""
    prose = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    prose = re.sub(r"`[^`\n]*`", "", prose)
    for target in re.findall(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", prose):
        yield target


def broken_links(path: str) -> List[str]:
    """``page: target (why)`` for each relative link of a page whose file or anchor does not exist."""
    broken = []
    for target in links(read(path)):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        resolved = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
        if not os.path.exists(os.path.join(ROOT, resolved)):
            broken.append(f"{path}: {target} (no file {resolved})")
        elif anchor and resolved.endswith(".md") and anchor not in anchors(read(resolved)):
            broken.append(f"{path}: {target} (no heading #{anchor} in {resolved})")
    return broken
