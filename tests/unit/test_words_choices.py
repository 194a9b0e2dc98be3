"""scripts/words_choices.py counts each style word where the memory's choice and the decoded one part, on a case
small enough to count by hand."""

import json
import os
import subprocess
import sys

import torch
from fairseq.data import Dictionary

from fairseq_speaker.modules.speaker_words import CHECKPOINT_KEY, remembered

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "scripts",
                      "words_choices.py")


def write(path, lines):
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


def test_a_word_the_memory_chose_and_the_decoding_lost_to_another_article(tmp_path):
    data = tmp_path / "bin"
    data.mkdir()
    dictionary = Dictionary()
    for word in ["le", "la", "vélo", "bécane", "ici", "là"]:
        dictionary.add_symbol(word)
    dictionary.save(str(data / "dict.fr.txt"))

    def encode(line):
        return dictionary.encode_line(line, add_if_not_exist=False)

    # three trained speakers: 0 and 2 say "la bécane", 1 "le vélo"; only 0 says "ici"
    words = remembered(dictionary, 3, {0: [encode("la bécane ici")], 1: [encode("le vélo là")],
                                       2: [encode("la bécane là")]})
    checkpoint = tmp_path / "words.pt"
    torch.save({"model": {CHECKPOINT_KEY: words.get_extra_state()}}, checkpoint)

    # new0 said "ici" (like speaker 0, who says "la bécane") and was decoded "le vélo": the memory's choice was right,
    # the decoding's wrong, with another article; new1 said "le vélo" and was decoded so
    heldout = tmp_path / "ho"
    heldout.mkdir()
    write(heldout / "heldout.fr", ["ici", "la bécane", "le vélo", "le vélo"])
    write(heldout / "heldout.spk", ["new0", "new0", "new1", "new1"])
    bike = lambda expected, rival: json.dumps([{"trait": "style", "expected": expected, "alternatives": [rival]}])
    write(heldout / "heldout.traits", ["[]", bike("bécane", "vélo"), "[]", bike("vélo", "bécane")])
    write(heldout / "speakers.json", [json.dumps({"items": {"the bike": ["le vélo", "la bécane"]}})])
    run = tmp_path / "oe"
    run.mkdir()
    write(run / "onboarding.json", [json.dumps({"rows": [{"n": 0}, {"n": 1}], "eval_lines": [2, 4],
                                                "adapt_sentences": 1})])
    write(run / "hypotheses.n1.txt", ["le vélo", "le vélo"])

    out = subprocess.run([sys.executable, SCRIPT, str(data), "--path", str(checkpoint), "--onboarding", str(run),
                          "--heldout-prefix", str(heldout / "heldout")], capture_output=True, text=True, check=True)
    rows = [line for line in out.stdout.splitlines() if line.startswith("| 1 ")]
    # n | said | decoded right | unseen | memory right | decoded right | another article | the same article
    assert rows == ["| 1 | 1 | 100.0% | 1 | 100.0% | 0.0% | 1 | 0 |"]
