"""Reading the output of ``fairseq-generate``."""

import re
from typing import Dict, List

#: a source sentence's line: S-<id><TAB>the sentence
_SOURCE = re.compile(r"^S-(\d+)\t")


def read_generate_output(text: str, source: str = "<fairseq-generate output>", kind: str = "H") -> List[str]:
    """The best hypothesis of every sentence, in the order of the input (by sentence id).

    ``fairseq-generate`` prints sentences in batch order; each ``H-<id>`` line
    holds the id, the score and the tokenized hypothesis, each ``D-<id>`` line
    the same hypothesis detokenized (by ``--tokenizer``/``--bpe``); ``kind``
    chooses between them. With ``--nbest`` > 1 the first hypothesis of an id is
    the best one.

    Raises:
        ValueError: ids are missing (a sentence was not translated), or an id comes back after other sentences' (two
            outputs appended: which run was scored depended on their order).
    """
    if kind not in ("H", "D"):
        raise ValueError(f"kind must be 'H' or 'D', got {kind!r}")
    pattern = re.compile(rf"^{kind}-(\d+)\t[^\t]*\t?(.*)$")
    best: Dict[int, str] = {}
    first_line: Dict[int, int] = {}  # of each id's hypothesis, and of its source sentence
    source_line: Dict[int, int] = {}
    previous = None
    # not splitlines: a hypothesis may hold U+2028 or U+0085, no line end
    for lineno, line in enumerate(re.split(r"\r?\n", text), start=1):
        sentence_line = _SOURCE.match(line)
        if sentence_line:  # one a sentence, above its --nbest hypotheses
            sentence = int(sentence_line.group(1))
            if sentence in source_line:
                raise _again(source, lineno, sentence, source_line[sentence])
            source_line[sentence] = lineno
            continue
        match = pattern.match(line)
        if not match:
            continue
        sentence = int(match.group(1))
        if sentence in best and sentence != previous:  # --nbest's hypotheses of an id come one after the other
            raise _again(source, lineno, sentence, first_line[sentence])
        best.setdefault(sentence, match.group(2))
        first_line.setdefault(sentence, lineno)
        previous = sentence
    missing = sorted(set(range(max(best) + 1)) - set(best)) if best else []
    if missing:
        raise ValueError(f"{source}: no hypothesis for sentence ids {missing[:10]}{'...' if len(missing) > 10 else ''}")
    return [best[i] for i in range(len(best))]


def _again(source: str, lineno: int, sentence: int, first: int) -> ValueError:
    return ValueError(f"{source}: line {lineno}: sentence id {sentence} again (first at line {first}): two outputs "
                      f"appended (>>)? give the output of one run")
