"""The README's command lines parse with the flags the code defines (the docs cannot drift)."""

import os
import re
import shlex

import pytest
from fairseq import options

from fairseq_speaker import USER_DIR

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PARSERS = {
    "fairseq-train": options.get_training_parser,
    "fairseq-generate": options.get_generation_parser,
    "fairseq-interactive": lambda: options.get_interactive_generation_parser(),
}


def readme_commands():
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read().replace("\\\n", " ")
    commands = []
    for line in text.splitlines():
        line = line.strip()
        line = line.split("|")[-1].strip() if line.startswith(("echo", "paste")) else line
        if line.split(" ")[0] in PARSERS:
            commands.append(line)
    return commands


COMMANDS = readme_commands()


def test_the_readme_shows_each_command_line():
    assert {c.split()[0] for c in COMMANDS} == set(PARSERS)


@pytest.mark.parametrize("command", COMMANDS, ids=[c.split()[0] + str(i) for i, c in enumerate(COMMANDS)])
def test_readme_command_parses(command):
    argv = shlex.split(re.sub(r"\$USER_DIR", USER_DIR, command))
    parser = PARSERS[argv[0]]()
    args = options.parse_args_and_arch(parser, argv[1:])
    assert args.task == "speaker_translation"
    if argv[0] == "fairseq-train":
        assert args.arch == "lstm_fact_bias" and args.speaker_bias == "fact" and args.speaker_rank == 10
