"""The command lines of the README and of every page of docs/ parse with the flags the code defines (the
docs cannot drift), the README stays a short tour, and every relative link of the pages leads to a file
and a heading that exist."""

import argparse
import importlib
import re
import shlex

import pytest
from fairseq import options

from fairseq_speaker import USER_DIR
from fairseq_speaker.command_registry import COMMANDS, Command
from fairseq_speaker.models import preset_variant
from tests.documents import README, anchors, broken_links, command_lines, documents, programs_shown, read

PARSERS = {
    "fairseq-train": options.get_training_parser,
    "fairseq-generate": options.get_generation_parser,
    "fairseq-interactive": lambda: options.get_interactive_generation_parser(),
}

#: a command line that ends in "..." shows only the flags a paragraph is about (bias_variants.md's
#: `--speaker-bias scaled --scaled-init 0.1 ...`, whose variant tests/unit/test_docs.py registers and parses)
FAIRSEQ = [(page, command) for page, command in command_lines(PARSERS) if not command.endswith("...")]


PREPROCESS = command_lines(["fairseq-preprocess"])


@pytest.mark.parametrize("page,command", PREPROCESS, ids=[f"{p}:{i}" for i, (p, _) in enumerate(PREPROCESS)])
def test_documented_preprocess_command_parses(page, command):
    args = options.get_preprocessing_parser().parse_args(shlex.split(command)[1:])
    assert args.destdir and args.trainpref


def test_the_readme_shows_each_fairseq_command_line():
    assert {command.split()[0] for _, command in command_lines(PARSERS, [README])} == set(PARSERS)


@pytest.mark.parametrize("page,command", FAIRSEQ, ids=[f"{p}:{c.split()[0]}{i}" for i, (p, c) in enumerate(FAIRSEQ)])
def test_documented_fairseq_command_parses(page, command):
    argv = shlex.split(command.replace("$USER_DIR", USER_DIR))
    parser = PARSERS[argv[0]]()
    args = options.parse_args_and_arch(parser, argv[1:])
    assert args.task == "speaker_translation"
    if argv[0] == "fairseq-train":
        # the variant is the preset's unless --speaker-bias says otherwise
        expected = argv[argv.index("--speaker-bias") + 1] if "--speaker-bias" in argv else preset_variant(args.arch)
        assert args.speaker_bias == expected


# -- the package's own commands ------------------------------------------------------------------------------

class _Parsed(Exception):
    """Raised once a command's parser has read its command line, before the command does anything."""


def _stop_after_parsing(main, argv, monkeypatch):
    """Run ``main(argv)`` until its first parser has read the command line (a parser error ends it in
    SystemExit as it would for the user): for the commands whose parser is built inside ``main``.
    Returns the options and what the parser left (``parse_known_args``: the model flags of
    ``fairseq-speaker-params``)."""
    original = argparse.ArgumentParser.parse_known_args
    depth = {"n": 0}

    def parse_known_args(self, args=None, namespace=None):
        depth["n"] += 1
        try:
            result = original(self, args, namespace)
        finally:
            depth["n"] -= 1
        if depth["n"] == 0 and self.add_help:  # not a pre-parser reading one option (--user-dir)
            raise _Parsed(result)
        return result

    def parse_args(self, args=None, namespace=None):
        depth["n"] += 1
        try:
            namespace, extras = original(self, args, namespace)
        finally:
            depth["n"] -= 1
        if extras:
            self.error("unrecognized arguments: " + " ".join(extras))
        if not self.add_help:
            return namespace
        raise _Parsed((namespace, []))

    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", parse_known_args)
    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_args)
    with pytest.raises(_Parsed) as parsed:
        main(argv)
    return parsed.value.args[0]


def _adapt(argv, monkeypatch):
    from fairseq_speaker.onboarding.adapt import build_parser
    return options.parse_args_and_arch(build_parser(), input_args=argv), []


def _speakers(argv, monkeypatch):
    from fairseq_speaker.onboarding.speakers import build_parser
    args, rest = build_parser().parse_known_args(argv)
    return args, [a for a in rest if a.startswith("-")]


def _parser(module_name):
    def parse(argv, monkeypatch):
        return importlib.import_module(module_name).build_parser().parse_args(argv), []
    return parse


def _main(module_name):
    def parse(argv, monkeypatch):
        return _stop_after_parsing(importlib.import_module(module_name).main, argv, monkeypatch)
    return parse


def _serve(argv, monkeypatch):
    from fairseq_speaker.service.app import parse_args
    return parse_args(argv)[0], []


def _reads_its_command_line(command: Command):
    """How a command reads its command line, without running it: its module's ``build_parser()``, or its ``main`` up
    to its first parser (a command whose parser is built inside ``main``), unless :data:`READ_OTHERWISE` says."""
    if command.name in READ_OTHERWISE:
        return READ_OTHERWISE[command.name]
    has_parser = callable(getattr(importlib.import_module(command.module), "build_parser", None))
    return (_parser if has_parser else _main)(command.module)


#: the commands read otherwise: the model flags of adapt (fairseq's parser), the flags speakers passes on, serve's
#: parsing with its checks
READ_OTHERWISE = {"fairseq-speaker-adapt": _adapt, "fairseq-speaker-speakers": _speakers,
                  "fairseq-speaker-serve": _serve}
#: how each fairseq-speaker-* command reads its command line, without running it
SPEAKER_PARSERS = {name: _reads_its_command_line(command) for name, command in COMMANDS.items()}

#: the package's commands run as modules (``python -m fairseq_speaker.toy.corpus ...``), by the command they are
MODULES = {command.module: name for name, command in COMMANDS.items()}

SPEAKER_COMMANDS = command_lines(SPEAKER_PARSERS) + [
    (page, MODULES[command.split()[2]] + " " + command.split(" ", 3)[3])
    for page, command in command_lines(["python"]) if command.split()[1:2] == ["-m"] and command.split()[2] in MODULES]


def test_every_command_the_pages_show_has_a_parser_here():
    assert programs_shown("fairseq-speaker-") <= set(SPEAKER_PARSERS)


def test_the_readme_shows_the_demo_and_onboarding():
    shown = {command.split()[0] for _, command in command_lines(SPEAKER_PARSERS, [README])}
    assert {"fairseq-speaker-adapt", "fairseq-speaker-serve", "fairseq-speaker-report"} <= shown


@pytest.mark.parametrize("page,command", SPEAKER_COMMANDS,
                         ids=[f"{p}:{c.split()[0]}{i}" for i, (p, c) in enumerate(SPEAKER_COMMANDS)])
def test_documented_package_command_parses(page, command, monkeypatch):
    argv = shlex.split(command.replace("$USER_DIR", USER_DIR))
    args, unknown = SPEAKER_PARSERS[argv[0]](argv[1:], monkeypatch)
    assert unknown == [], f"{page}: {command}: unknown options {unknown}"
    if argv[0] == "fairseq-speaker-demo":
        assert args.archs


@pytest.mark.parametrize("program", sorted(SPEAKER_PARSERS))
def test_a_wrong_flag_on_a_page_would_be_caught(program, monkeypatch):
    """Each parser above refuses, or reports as unknown, a flag its command does not take."""
    try:
        _, unknown = SPEAKER_PARSERS[program](["--no-such-flag-anywhere"], monkeypatch)
    except SystemExit as e:
        assert e.code == 2
    else:
        assert unknown == ["--no-such-flag-anywhere"]


# -- the README is a short tour; every page's links lead somewhere ------------------------------------------

def test_the_readme_is_a_short_tour_with_a_table_of_contents():
    text = read(README)
    assert len(text.splitlines()) <= 260, "the README is a tour: move the rest to a page of docs/"
    contents, after = text[text.index("## Contents\n"):].split("\n## ", 1)
    listed = re.findall(r"\]\(#([^)]+)\)", contents)
    sections = anchors("## " + after)
    assert listed and sorted(listed) == sorted(sections), "the table of contents lists the README's sections"


def test_the_readme_links_every_page_of_docs():
    text = read(README)
    for page in documents()[1:]:
        assert f"({page}" in text, f"the README does not link {page}"


@pytest.mark.parametrize("page", documents())
def test_every_relative_link_leads_to_a_file_and_heading_that_exist(page):
    assert broken_links(page) == []


def test_the_link_check_sees_a_missing_file_and_a_missing_heading(tmp_path, monkeypatch):
    import tests.documents as documents_module
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A page\n\n## Some `code` here\n", encoding="utf-8")
    (tmp_path / "README.md").write_text("[a](docs/a.md#some-code-here) [b](docs/b.md) [c](docs/a.md#nowhere) "
                                        "[d](https://example.org/x) `[e](not/a/link.md)`\n", encoding="utf-8")
    monkeypatch.setattr(documents_module, "ROOT", str(tmp_path))
    broken = documents_module.broken_links("README.md")
    assert [b.split(" (")[0] for b in broken] == ["README.md: docs/b.md", "README.md: docs/a.md#nowhere"]
