"""The README's command lines parse with the flags the code defines (the docs cannot drift)."""

import os
import re
import shlex

import pytest
from fairseq import options

from fairseq_speaker import USER_DIR
from fairseq_speaker.models import preset_variant
from fairseq_speaker.toy import demo

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PARSERS = {
    "fairseq-train": options.get_training_parser,
    "fairseq-generate": options.get_generation_parser,
    "fairseq-interactive": lambda: options.get_interactive_generation_parser(),
}


def shell_variables(text: str):
    """The README's shell variables: ``NAME="..."`` (over several lines too) and a loop's first value
    (``for NAME in A B; do``), as a shell would set them."""
    found = {name: " ".join(value.split()) for name, value in re.findall(r'^\s*([A-Z_]+)="([^"]*)"', text, re.M)}
    found.update(re.findall(r"^\s*for (\w+) in (\S+)", text, re.M))
    return found


def readme_commands():
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read().replace("\\\n", " ")
    variables = shell_variables(text)
    commands = []
    for line in text.splitlines():
        line = re.sub(r"\$(\w+)", lambda m: variables.get(m.group(1), m.group(0)), line.strip())
        line = line.split("|")[-1].strip() if line.startswith(("echo", "paste")) else line
        line = line[:-1].strip() if line.endswith("&") else line  # started in the background
        if line.split(" ")[0] in PARSERS or line.startswith("fairseq-speaker-demo "):
            commands.append(line)
    return commands


COMMANDS = readme_commands()
FAIRSEQ = [c for c in COMMANDS if c.split()[0] in PARSERS]


def test_the_readme_shows_each_command_line():
    assert {c.split()[0] for c in FAIRSEQ} == set(PARSERS)
    assert any(c.split()[0] == "fairseq-speaker-demo" for c in COMMANDS)


@pytest.mark.parametrize("command", FAIRSEQ, ids=[c.split()[0] + str(i) for i, c in enumerate(FAIRSEQ)])
def test_readme_fairseq_command_parses(command):
    argv = shlex.split(re.sub(r"\$USER_DIR", USER_DIR, command))
    parser = PARSERS[argv[0]]()
    args = options.parse_args_and_arch(parser, argv[1:])
    assert args.task == "speaker_translation"
    if argv[0] == "fairseq-train":
        # the variant is the preset's unless --speaker-bias says otherwise
        expected = argv[argv.index("--speaker-bias") + 1] if "--speaker-bias" in argv else preset_variant(args.arch)
        assert args.speaker_bias == expected


def test_readme_demo_commands_parse():
    for command in COMMANDS:
        if command.startswith("fairseq-speaker-demo "):
            args = demo.parse_args(shlex.split(command)[1:])
            assert args.archs
