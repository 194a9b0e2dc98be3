"""Reading the output of ``fairseq-generate``."""

import html
import re
import unicodedata
from typing import Dict, List, Optional, Sequence

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


#: a reference's line: T-<id><TAB>the reference translation fairseq-generate read
_TARGET = re.compile(r"^T-(\d+)\t(.*)$")


def generate_targets(text: str) -> Dict[int, str]:
    """The reference translations a ``fairseq-generate`` output holds (its ``T-`` lines), by sentence id."""
    return {int(m.group(1)): m.group(2) for line in re.split(r"\r?\n", text) if (m := _TARGET.match(line))}


def _comparable(sentence: str) -> str:
    """``sentence`` as two writings of one sentence agree: no spaces (tokenized or not), no BPE marks (``@@``,
    ``▁``), no HTML escapes (Moses' ``&apos;``), no case, in NFC."""
    return re.sub(r"\s+|@@|\u2581", "", unicodedata.normalize("NFC", html.unescape(sentence))).casefold()


#: an output whose references agree with the given ones on fewer than this share of its sentences is refused
MIN_AGREEING = 0.2


def other_sentences(targets: Dict[int, str], references: Sequence[str]) -> Optional[str]:
    """Why a ``fairseq-generate`` output whose ``T-`` lines are ``targets`` is not a translation of the sentences of
    ``references`` (another split or corpus of as many sentences was scored without a word), or None. Its references
    agree with the given ones (:func:`_comparable`: the same sentence tokenized or not, BPE-encoded or not, cased or
    not) on at least :data:`MIN_AGREEING` of the sentences, or the output holds no ``T-`` lines (fairseq-interactive's,
    or ``--quiet``), or the ids do not fit (another check says so)."""
    if not targets or len(targets) != len(references) or set(targets) != set(range(len(references))):
        return None
    differ = [i for i in range(len(references)) if "<unk>" not in targets[i]
              and _comparable(targets[i]) != _comparable(references[i])]
    if len(differ) <= (1 - MIN_AGREEING) * len(references):
        return None
    first = differ[0]
    return (f"its references (T- lines, the sentences fairseq-generate translated) are not those of --references on "
            f"{len(differ)} of {len(references)} sentences (sentence {first}: {targets[first][:60]!r} against "
            f"{references[first][:60]!r}): an output of another split or corpus? give the output of the references' "
            f"sentences")

