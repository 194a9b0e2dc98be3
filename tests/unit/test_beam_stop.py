"""``--beam-stop unbeaten`` (:class:`UnbeatenStopGenerator`): a sentence's search ends only when no live hypothesis can
beat its ended ones.

The search runs on a scripted model whose every sentence probability is known, so the right answer is computed here
by hand, not recorded from the code: fairseq's rule returns the short sentence, the unbeaten rule the better long one.
On random models the unbeaten rule never returns a worse best score than fairseq's (its search is fairseq's, kept
going: the ended hypotheses it keeps are a superset), and where fairseq's best is also unbeaten both return it.
"""

import math
from typing import Dict, List

import pytest
import torch
from fairseq.data import Dictionary
from fairseq.search import BeamSearch
from fairseq.sequence_generator import EnsembleModel, SequenceGenerator
from torch import nn

from fairseq_speaker.sequence_generator import UnbeatenStopGenerator


def _dictionary(words: List[str]) -> Dictionary:
    d = Dictionary()
    for w in words:
        d.add_symbol(w)
    return d


class ScriptedEnsemble(EnsembleModel):
    """An ensemble whose next-word log-probabilities are a function of the prefix (``step_fn(prefix) -> [V]``)."""

    def __init__(self, step_fn, vocab_size: int):
        super().__init__([nn.Linear(1, 1)])
        self.step_fn, self.vocab_size = step_fn, vocab_size

    def has_encoder(self):
        return True

    def forward_encoder(self, net_input: Dict[str, torch.Tensor]):
        return [{"src": [net_input["src_tokens"]]}]

    def reorder_encoder_out(self, encoder_outs, new_order):
        return [{"src": [out["src"][0].index_select(0, new_order)]} for out in encoder_outs]

    def reorder_incremental_state(self, incremental_states, new_order):
        pass

    def forward_decoder(self, tokens, encoder_outs, incremental_states, temperature: float = 1.0):
        sources = encoder_outs[0]["src"][0]
        rows = [self.step_fn(tuple(t[1:].tolist()), tuple(s.tolist())) for t, s in zip(tokens, sources)]
        return torch.stack(rows), None


def _generate(generator_cls, ensemble, d: Dictionary, sources: List[List[int]], beam: int, **kwargs):
    generator = generator_cls(ensemble, d, beam_size=beam, max_len_b=12, search_strategy=BeamSearch(d), **kwargs)
    width = max(len(s) for s in sources) + 1
    src = torch.full((len(sources), width), d.pad())
    for i, s in enumerate(sources):
        src[i, :len(s) + 1] = torch.tensor(s + [d.eos()])
    lengths = torch.tensor([len(s) + 1 for s in sources])
    sample = {"id": torch.arange(len(sources)), "net_input": {"src_tokens": src, "src_lengths": lengths}}
    return generator.generate([ensemble], sample)


def test_the_right_long_sentence_outlives_the_short_ones_that_end_first():
    # step 0: "a" has half the probability, x1..x6 most of the rest (x1 0.078, x2 0.076, ...); after an x the
    # sentence ends; after "a", "b c" and the end are all but certain. "a b c </s>" scores log(.5) + 3 log(.99) over
    # 4 words (-0.18 normalized), "x1 </s>" log(.078) + log(.99) over 2 (-1.28). Beam 5 keeps a, x1..x4; at step 1
    # four x's end, at step 2 junk ends and fills the fifth place: fairseq's rule stops there with "x1", the
    # unbeaten one goes on to "a b c".
    xs = [f"x{i}" for i in range(1, 7)]
    d = _dictionary(["a", "b", "c", "z", *xs])
    V = len(d)
    a, b, c = d.index("a"), d.index("b"), d.index("c")
    x_ids = [d.index(x) for x in xs]

    def dist(probs: Dict[int, float]) -> torch.Tensor:
        rest = 1.0 - sum(probs.values())
        others = [i for i in range(d.nspecial, V) if i not in probs] + ([d.eos()] if d.eos() not in probs else [])
        p = torch.zeros(V)
        for i in others:
            p[i] = rest / len(others)
        for i, q in probs.items():
            p[i] = q
        return torch.log(p.clamp_min(1e-30))

    def step_fn(prefix, source):
        if prefix == ():
            return dist({a: 0.5, **{x: 0.08 - 0.002 * i for i, x in enumerate(x_ids, 1)}})
        if prefix == (a,):
            return dist({b: 0.99})
        if prefix == (a, b):
            return dist({c: 0.99})
        if prefix == (a, b, c):
            return dist({d.eos(): 0.99})
        return dist({d.eos(): 0.99})

    ensemble = ScriptedEnsemble(step_fn, V)
    fairseq_best = _generate(SequenceGenerator, ensemble, d, [[a]], beam=5)[0][0]
    unbeaten = _generate(UnbeatenStopGenerator, ensemble, d, [[a]], beam=5)[0]
    assert fairseq_best["tokens"].tolist() == [x_ids[0], d.eos()]
    assert unbeaten[0]["tokens"].tolist() == [a, b, c, d.eos()]
    expected = (math.log(0.5) + 3 * math.log(0.99)) / 4
    assert float(unbeaten[0]["score"]) == pytest.approx(expected, abs=1e-3)
    assert float(fairseq_best["score"]) == pytest.approx((math.log(0.078) + math.log(0.99)) / 2, abs=1e-3)
    # the n-best list is the best `beam` of all that ended, best first
    scores = [float(h["score"]) for h in unbeaten]
    assert len(unbeaten) == 5 and scores == sorted(scores, reverse=True)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("normalize", [True, False])
def test_never_worse_than_fairseqs_rule_on_random_models(seed, normalize):
    torch.manual_seed(seed)
    d = _dictionary([f"w{i}" for i in range(8)])
    V = len(d)
    table = torch.randn(4, 13, V) * 3  # a random model: the step's distribution from the source and the position
    table[:, :, d.pad()] = table[:, :, d.bos()] = table[:, :, d.unk()] = -math.inf
    table[:, :, d.eos()] -= 1.5

    def step_fn(prefix, source):
        row = table[source[0] % 4, len(prefix)] + 0.5 * (sum(prefix) % 3)
        return torch.log_softmax(row, dim=-1)

    ensemble = ScriptedEnsemble(step_fn, V)
    sources = [[d.nspecial + i] for i in range(7)]  # a batch of 7: sentences end at different steps
    kwargs = {"normalize_scores": normalize}
    plain = _generate(SequenceGenerator, ensemble, d, sources, beam=3, **kwargs)
    unbeaten = _generate(UnbeatenStopGenerator, ensemble, d, sources, beam=3, **kwargs)
    for fair, ours in zip(plain, unbeaten):
        assert len(ours) == 3
        assert float(ours[0]["score"]) >= float(fair[0]["score"]) - 1e-6
        if float(ours[0]["score"]) <= float(fair[0]["score"]) + 1e-6:
            assert ours[0]["tokens"].tolist() == fair[0]["tokens"].tolist()


@pytest.mark.parametrize("generator_cls", [SequenceGenerator, UnbeatenStopGenerator])
def test_an_empty_source_gets_one_empty_translation_and_the_others_are_untouched(generator_cls, caplog):
    """A source of the end-of-sentence token alone (an empty line) would be given the model's invented sentence
    (here always "a b"); it gets one empty translation of score 0, whatever the search, and a warning naming it."""
    from fairseq.sequence_scorer import SequenceScorer

    from fairseq_speaker.sequence_generator import empty_sources_left_empty

    d = _dictionary(["a", "b"])
    a, b = d.index("a"), d.index("b")
    favourite = {(): a, (a,): b, (a, b): d.eos()}

    def step_fn(prefix, source):
        p = torch.full((len(d),), 0.01)
        p[favourite.get(prefix, d.eos())] = 1.0
        return torch.log(p / p.sum())

    ensemble = ScriptedEnsemble(step_fn, len(d))
    generator = generator_cls(ensemble, d, beam_size=2, max_len_b=5, search_strategy=BeamSearch(d))
    src = torch.tensor([[d.pad(), a, d.eos()], [d.pad(), d.pad(), d.eos()], [b, a, d.eos()]])
    sample = {"id": torch.tensor([7, 8, 9]), "net_input": {"src_tokens": src, "src_lengths": torch.tensor([2, 1, 3])}}
    plain = generator.generate([ensemble], sample)
    assert plain[1][0]["tokens"].tolist() == [a, b, d.eos()]  # what the model invents for nothing
    with caplog.at_level("WARNING"):
        answered = empty_sources_left_empty(generator, sample, [list(h) for h in plain], d, d)
    assert [h["tokens"].tolist() for h in answered[1]] == [[d.eos()]]
    assert float(answered[1][0]["score"]) == 0.0 and answered[1][0]["positional_scores"].tolist() == [0.0]
    assert all(mine is theirs for i in (0, 2) for mine, theirs in zip(answered[i], plain[i]))
    assert "an empty source (sentence id 8) translated as an empty sentence" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING"):  # fairseq-interactive's batches carry no ids: no position is named as one
        empty_sources_left_empty(generator, {"net_input": sample["net_input"]}, [list(h) for h in plain], d, d)
    assert "an empty input line translated as an empty sentence" in caplog.text and "id" not in caplog.text
    assert len(answered) == 3
    # a scorer of references scores what it is given
    scorer = SequenceScorer(d)
    assert empty_sources_left_empty(scorer, sample, plain, d, d) is plain
