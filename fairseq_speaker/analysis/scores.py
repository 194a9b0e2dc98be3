"""System outputs, BLEU and chrF with sacrebleu, and paired bootstrap resampling against a baseline."""

import logging
import os
import re
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.significance import PairedTest, Result

from fairseq_speaker.data.text_files import read_lines
from fairseq_speaker.generate_output import generate_targets, other_sentences, read_generate_output

logger = logging.getLogger(__name__)

GENERATE_LINE = re.compile(r"^[HD]-\d+\t")
#: the paper marks differences with p < 0.05 as significant
SIGNIFICANCE = 0.05


def read_hypotheses(path: str, kind: str = "H", references: Optional[Sequence[str]] = None) -> List[str]:
    """A system's output: ``fairseq-generate`` output (its ``H-`` lines, or ``D-`` lines with
    ``kind="D"``, put back in input order) or a plain file with one hypothesis a line, read as the references are
    (:func:`~fairseq_speaker.data.text_files.read_lines`: lines end at ``\n`` alone, a byte-order mark is no text;
    it was part of the first hypothesis' first word, and lowered its BLEU). ``references``: the sentences it is scored
    against; a ``fairseq-generate`` output whose own references are other sentences is refused
    (:func:`~fairseq_speaker.generate_output.other_sentences`)."""
    lines = read_lines(path)
    # fairseq-generate's lines are H-<id><TAB>...: a plain hypothesis that starts with "D-" is not one
    if any(GENERATE_LINE.match(line) for line in lines):
        text = "\n".join(lines)
        hypotheses = read_generate_output(text, source=path, kind=kind)
        targets = generate_targets(text)
        problem = other_sentences(targets, references) if references is not None else None
        if problem:
            raise ValueError(f"{path}: {problem}")
        if references is not None and not targets:  # grep ^H-: another split's output was scored without a word
            logger.warning(f"{path}: a fairseq-generate output with no T- lines (the references it translated): "
                           f"whether it translated the sentences of --references is not checked; give the whole "
                           f"output to have it checked")
        return hypotheses
    return lines


def detokenize(lines: Sequence[str], lang: str) -> List[str]:
    """Moses detokenization (sacremoses), unescaping ``&apos;`` and the like."""
    from sacremoses import MosesDetokenizer

    detok = MosesDetokenizer(lang=lang)
    return [detok.detokenize(line.split(), unescape=True) for line in lines]


@dataclass
class SystemScore:
    name: str
    bleu: float
    chrf: float
    bleu_p: Optional[float] = None  # paired bootstrap p-value against the baseline (None: the baseline)
    chrf_p: Optional[float] = None
    bleu_ci: Optional[float] = None  # half-width of the 95% confidence interval of the bootstrap mean
    chrf_ci: Optional[float] = None

    @property
    def significant(self) -> bool:
        return self.bleu_p is not None and self.bleu_p < SIGNIFICANCE


@contextmanager
def _sacrebleu_seed(seed: int):
    # sacrebleu's paired test takes its seed from the environment only
    previous = os.environ.get("SACREBLEU_SEED")
    os.environ["SACREBLEU_SEED"] = str(seed)
    try:
        yield
    finally:
        if previous is None:
            del os.environ["SACREBLEU_SEED"]
        else:
            os.environ["SACREBLEU_SEED"] = previous


def score_systems(systems: Mapping[str, Sequence[str]], references: Sequence[str], baseline: str,
                  tokenize: str = "13a", samples: int = 1000,
                  seed: int = 12345) -> Tuple[List[SystemScore], Dict[str, str]]:
    """BLEU and chrF of every system, and sacrebleu's paired bootstrap test of each against ``baseline``.

    Returns the scores (the baseline first) and sacrebleu's signature of each metric.
    """
    if baseline not in systems:
        raise ValueError(f"the baseline {baseline!r} is not among the systems ({', '.join(systems)})")
    for name, hyps in systems.items():
        if len(hyps) != len(references):
            raise ValueError(f"system {name!r} has {len(hyps)} hypotheses for {len(references)} references")
    named: List[Tuple[str, Sequence[str]]] = [(baseline, list(systems[baseline])), *(
        (n, list(h)) for n, h in systems.items() if n != baseline)]
    # --tokenize none says the text is tokenized on purpose: no "forgot to detokenize" warning
    metrics = {"BLEU": BLEU(tokenize=tokenize, force=tokenize == "none"), "chrF2": CHRF()}
    if len(named) == 1:
        scores = [SystemScore(baseline, metrics["BLEU"].corpus_score(named[0][1], [list(references)]).score,
                              metrics["chrF2"].corpus_score(named[0][1], [list(references)]).score)]
        return scores, {m: str(metric.get_signature()) for m, metric in metrics.items()}
    with _sacrebleu_seed(seed):
        test = PairedTest(named, metrics, [list(references)], test_type="bs", n_samples=samples)
        signatures, results = test()
    bleus, chrfs = _results(results["BLEU"]), _results(results["chrF2"])
    base_bleu, base_chrf = bleus[0].score, chrfs[0].score
    scores = []
    for i, system in enumerate(results["System"]):
        bleu, chrf = bleus[i], chrfs[i]
        scores.append(SystemScore(
            str(system) if i == 0 else named[i][0], float(bleu.score), float(chrf.score),
            _p_value(bleu, base_bleu, i), _p_value(chrf, base_chrf, i),
            None if bleu.ci is None else float(bleu.ci), None if chrf.ci is None else float(chrf.ci),
        ))
    return scores, {m: str(sig.format()) for m, sig in signatures.items()}


def _results(column: Sequence[Union[str, Result]]) -> List[Result]:
    """A metric's column of sacrebleu's paired test: its results (the "System" column holds the names)."""
    return [result for result in column if isinstance(result, Result)]


def _p_value(result, baseline_score: float, index: int) -> Optional[float]:
    if index == 0:
        return None
    # sacrebleu counts resampled differences strictly larger than the observed one, so a
    # system scoring exactly like the baseline would get p = 1/(samples+1): no difference is p = 1
    return 1.0 if result.score == baseline_score else float(result.p_value)
