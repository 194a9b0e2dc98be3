"""Reading the output of ``fairseq-generate``."""

import re
from typing import Dict, List


def read_generate_output(text: str, source: str = "<fairseq-generate output>", kind: str = "H") -> List[str]:
    """The best hypothesis of every sentence, in the order of the input (by sentence id).

    ``fairseq-generate`` prints sentences in batch order; each ``H-<id>`` line
    holds the id, the score and the tokenized hypothesis, each ``D-<id>`` line
    the same hypothesis detokenized (by ``--tokenizer``/``--bpe``); ``kind``
    chooses between them. With ``--nbest`` > 1 the first hypothesis of an id is
    the best one.

    Raises:
        ValueError: ids are missing (a sentence was not translated).
    """
    if kind not in ("H", "D"):
        raise ValueError(f"kind must be 'H' or 'D', got {kind!r}")
    pattern = re.compile(rf"^{kind}-(\d+)\t[^\t]*\t?(.*)$")
    best: Dict[int, str] = {}
    for line in re.split(r"\r?\n", text):  # not splitlines: a hypothesis may hold U+2028 or U+0085, no line end
        match = pattern.match(line)
        if match:
            best.setdefault(int(match.group(1)), match.group(2))
    missing = sorted(set(range(max(best) + 1)) - set(best)) if best else []
    if missing:
        raise ValueError(f"{source}: no hypothesis for sentence ids {missing[:10]}{'...' if len(missing) > 10 else ''}")
    return [best[i] for i in range(len(best))]
