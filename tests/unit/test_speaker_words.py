"""The speakers' words (modules/speaker_words.py): the estimate against the equation computed by hand, the
re-ranking window, and the saved record."""

import copy
import math
import random

import numpy as np
import pytest
import torch

from fairseq_speaker.errors import UserError
from fairseq_speaker.modules import speaker_words, word_kinds, words_estimate, words_fusion
from fairseq_speaker.modules.speaker_words import SpeakerWords, from_state
from fairseq_speaker.modules.words_options import MAX_WEIGHT, WordOptions


def _idf_unit(said, vocab):
    """The idf-weighted unit vector of a set of words, the idf of ``said`` (sets of word ids per speaker)."""
    S = len([s for s in said if s])
    idf = [math.log(S / max(sum(1 for s in said if w in s), 1)) for w in range(vocab)]

    def unit(s):
        v = [idf[w] if w in s else 0.0 for w in range(vocab)]
        norm = math.sqrt(sum(x * x for x in v)) or 1.0
        return [x / norm for x in v]

    return unit


def _by_hand(said, row, vocab, o: WordOptions, kinds=()):
    """The module docstring's equation in plain Python: ``said`` a list of sets of word ids per speaker; ``kinds``
    the traits' kinds (choices: lists of word ids, prior, tables: lists of rows per kind)."""
    S = len([s for s in said if s])
    df = [sum(1 for s in said if w in s) for w in range(vocab)]
    unit = _idf_unit(said, vocab)
    mine = unit(said[row])
    sims = []
    for t, s in enumerate(said):
        if t == row:
            continue
        sims.append((max(sum(a * b for a, b in zip(mine, unit(s))), 0.0), t))
    sims.sort(key=lambda st: -st[0])
    top = sims[:o.k]
    weights = [sim ** o.power if sim > 0 else 0.0 for sim, _ in top]
    neighbour = []
    for w in range(vocab):
        p = max(df[w], 1) / S
        neighbour.append(sum(wt * (w in said[t]) for wt, (_, t) in zip(weights, top)) / sum(weights)
                         if sum(weights) else p)
    predicted = {}  # each choice's alternatives -> the speaker's posterior predictive over them
    for choices, prior, tables in kinds:  # p(kind | the alternatives said) by Bayes' rule, one product per kind
        joint = [prior[k] * math.prod(tables[c][k][j] for c, ws in enumerate(choices) for j, w in enumerate(ws)
                                      if w in said[row]) for k in range(len(prior))]
        posterior = [x / sum(joint) for x in joint]
        before = list(neighbour)
        for c, ws in enumerate(choices):
            predicted[tuple(ws)] = [sum(posterior[k] * tables[c][k][j] for k in range(len(prior)))
                                    for j in range(len(ws))]
            for j, w in enumerate(ws):
                neighbour[w] = predicted[tuple(ws)][j] * sum(before[v] for v in ws)
    out = []
    for w in range(vocab):
        p = max(df[w], 1) / S
        rate = o.own * (w in said[row]) + o.neighbours * neighbour[w] + (1 - o.own - o.neighbours) * p
        shrink = len(said[row]) / (len(said[row]) + o.evidence)
        out.append(o.weight * shrink * math.log(max(rate, 1e-12) / p))
    if o.rank_choices == "posterior" and predicted:  # other words only raised; each choice at the level of its
        out = [max(b, 0.0) for b in out]                # likeliest, lowered by the posterior's odds against each
        for ws, q in predicted.items():
            r = [(w in said[row]) + o.kinds_prior * qj for w, qj in zip(ws, q)]
            level = max(out[w] for w in ws)
            for w, rj in zip(ws, r):
                out[w] = level + o.weight * math.log(rj / max(r))
    return [0.0 if df[w] == 0 else out[w] for w in range(vocab)]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_bias_is_the_equation_computed_by_hand(seed):
    rng = random.Random(seed)
    vocab, speakers = 14, 9
    said = [set(rng.sample(range(2, vocab - 1), rng.randint(2, 7))) for _ in range(speakers)]
    said[4] = set()  # a speaker of no known words
    options = WordOptions(weight=2.5, window=3.0, own=0.35, neighbours=0.5, k=3, power=2.0, evidence=4.0)
    words = SpeakerWords(vocab, options)
    for row, s in enumerate(said):
        words.set_words(row, [torch.tensor(sorted(s))])
    for row in range(speakers):
        got = words.bias_row(row)
        if not said[row]:
            assert torch.equal(got, torch.zeros(vocab))
        else:
            assert got.tolist() == pytest.approx(_by_hand(said, row, vocab, options), abs=1e-4), row


def test_a_huge_power_gives_the_nearest_speaker_all_the_weight_as_k_1_does():
    """sim^power of every neighbour underflowed to 0 at a power of 1e300 (0 / 0: every bias NaN, and decoding ended
    in an assertion); weighed relative to the nearest, the nearest takes all the weight, as with k = 1."""
    rng = random.Random(3)
    vocab, speakers = 14, 9
    said = [set(rng.sample(range(2, vocab - 1), rng.randint(2, 7))) for _ in range(speakers)]
    rows = {}
    for power, k in ((1e300, 30), (1000.0, 30), (1.0, 1)):
        words = SpeakerWords(vocab, WordOptions(weight=2.5, own=0.35, neighbours=0.5, k=k, power=power, evidence=4.0))
        for row, s in enumerate(said):
            words.set_words(row, [torch.tensor(sorted(s))])
        rows[(power, k)] = torch.stack([words.bias_row(row) for row in range(speakers)])
        assert torch.isfinite(rows[(power, k)]).all(), power
    assert torch.allclose(rows[(1e300, 30)], rows[(1.0, 1)], atol=1e-5)  # (no two rows tie as the nearest here)


@pytest.mark.parametrize("rank", ["posterior", "rates"])
@pytest.mark.parametrize("seed", [0, 1])
def test_with_kinds_a_speakers_rivals_follow_their_posterior_over_the_kinds_computed_by_hand(seed, rank):
    rng = random.Random(seed)
    vocab, speakers = 16, 10
    said = [set(rng.sample(range(2, vocab), rng.randint(3, 8))) for _ in range(speakers)]
    choices = [[2, 3, 4], [5, 6], [7, 8]]

    def dist(n):
        v = [rng.uniform(0.1, 1.0) for _ in range(n)]
        return [x / sum(v) for x in v]

    prior = dist(2)
    tables = [[dist(len(ws)) for _ in range(2)] for ws in choices]
    options = WordOptions(weight=2.0, own=0.3, neighbours=0.6, k=4, power=2.0, evidence=5.0, rank_choices=rank,
                          kinds_prior=0.4)
    words = SpeakerWords(vocab, options)
    for row, s in enumerate(said):
        words.set_words(row, [torch.tensor(sorted(s))])
    words.kinds = [word_kinds.TraitKinds([np.array(ws) for ws in choices], np.array(prior),
                                            [np.array(t) for t in tables])]
    words.set_words(0, [torch.tensor(sorted(said[0]))])  # a change: the rows are made again with the kinds
    for row in range(speakers):
        assert words.bias_row(row).tolist() == pytest.approx(
            _by_hand(said, row, vocab, options, [(choices, prior, tables)]), abs=1e-4), row
    # the record keeps them
    back = from_state(words.get_extra_state(), vocab, "x.pt")
    assert [w.tolist() for w in back.kinds[0].choices] == choices and torch.equal(back.bias_row(3), words.bias_row(3))


def test_a_speaker_like_no_other_takes_everyones_rate_from_the_neighbours_and_common_words_get_nothing():
    words = SpeakerWords(8, WordOptions(evidence=0.0))
    words.set_words(0, [[2, 3, 4]])
    words.set_words(1, [[2, 5]])
    words.set_words(2, [[2, 6]])
    row = words.bias_row(0)  # speaker 0 shares only word 2, which everyone says (idf 0): no neighbour at all
    assert abs(float(row[2])) < 1e-6
    assert row[3] > 0 and row[5] < 0 and row[6] < 0 and row[7] == 0
    alone = SpeakerWords(8, WordOptions(evidence=0.0))
    alone.set_words(0, [[2, 3]])
    assert alone.bias_row(0).abs().max() < 1e-6  # one speaker: their rate is everyone's


def test_bias_gives_each_sentence_its_speakers_row_and_zero_for_unknown_speakers():
    words = SpeakerWords(8, WordOptions(own=1.0, neighbours=0.0))
    words.set_words(0, [[2, 3]])
    words.set_words(1, [[4]])
    rows = words.bias(torch.tensor([1, -1, 0, 7]))
    assert torch.equal(rows[0], words.bias_row(1)) and torch.equal(rows[2], words.bias_row(0))
    assert torch.equal(rows[1], torch.zeros(8)) and torch.equal(rows[3], torch.zeros(8))
    assert rows[2, 2] > 0 and rows[2, 4] < 0 and rows[0, 4] > 0 and rows[0, 2] < 0
    assert rows[0, 6] == 0  # a word no speaker said: no bias either way


def test_changes_are_seen_at_once_and_ignored_ids_are_never_remembered():
    words = SpeakerWords(10, WordOptions(own=1.0, neighbours=0.0), ignored=(0, 1))
    words.set_words(0, [torch.tensor([0, 1, 5, 5, 2]), [7]])
    assert words.words_of(0).tolist() == [2, 5, 7]
    words.set_words(1, [[5]])
    before = words.bias_row(0).clone()
    words.add_words(1, [[2, 42, -1]])  # ids outside the vocabulary are not words
    assert words.words_of(1).tolist() == [2, 5]
    assert not torch.equal(words.bias_row(0), before)  # p(2) changed: the cached row was dropped
    words.forget([0])
    assert words.words_of(0).tolist() == [] and torch.equal(words.bias_row(0), torch.zeros(10))
    words.resize(1)
    assert words.num_speakers == 1 and words.words_of(1).tolist() == []


def test_rerank_adds_the_bias_to_the_words_within_the_window_only():
    words = SpeakerWords(4, WordOptions(window=1.0))
    logits = torch.tensor([[[3.0, 2.5, 0.0, -5.0]]])
    rows = torch.tensor([[1.0, 10.0, 10.0, 10.0]])
    out = words.rerank(logits, rows)
    # log-probabilities: word 1 is 0.5 nats under word 0, words 2 and 3 are 3 and 8 under: outside
    assert out.tolist() == [[[4.0, 12.5, 0.0, -5.0]]]


def test_a_steps_log_probabilities_get_the_bias_as_they_are_or_renormalized_as_the_options_say():
    logits = torch.tensor([[3.0, 2.5, 0.0, -5.0]])
    rows = torch.tensor([[1.0, 10.0, 10.0, 10.0]])
    lp = torch.log_softmax(logits, -1)
    scores = SpeakerWords(4, WordOptions(window=1.0)).step_log_probs(lp, rows)
    assert torch.allclose(scores, lp + torch.tensor([1.0, 10.0, 0.0, 0.0]), atol=1e-6)
    assert torch.equal(lp, torch.log_softmax(logits, -1))  # the network's own are left as they were
    half = SpeakerWords(4, WordOptions(window=1.0)).step_log_probs(lp.half(), rows)
    assert half.dtype == torch.float32  # summed by the beam as fairseq's own log-probabilities are, in float32
    # added to the logits and renormalized at the step (0.6.0): the same as renormalizing the biased log-probabilities
    scores = SpeakerWords(4, WordOptions(window=1.0, add_to="logits")).step_log_probs(lp, rows)
    assert torch.allclose(scores, torch.log_softmax(torch.tensor([[4.0, 12.5, 0.0, -5.0]]), -1), atol=1e-6)


def test_the_record_reads_back_and_a_damaged_one_is_refused():
    words = SpeakerWords(12, WordOptions(weight=3.0, k=5), ignored=(1,))
    words.set_words(0, [[3, 4]])
    words.set_words(2, [[5, 9, 11]])
    state = words.get_extra_state()
    back = from_state(state, 12, "x.pt")
    assert back.options == words.options and back.ignored == [1]
    assert [w.tolist() for w in back.words] == [[3, 4], [], [5, 9, 11]]
    assert torch.equal(back.bias_row(2), words.bias_row(2))

    def refused(change, vocab=12):
        bad = dict(state)
        change(bad)
        with pytest.raises(UserError) as e:
            from_state(bad, vocab, "x.pt")
        assert str(e.value).startswith("x.pt: its speakers' words") and "fairseq-speaker-words" in str(e.value)
        return str(e.value)

    assert "are over 12 target words, and the model has 13" in refused(lambda s: None, vocab=13)
    assert "damaged" in refused(lambda s: s.update(words=s["words"][:-1]))
    assert "damaged" in refused(lambda s: s.update(words=torch.tensor([3, 4, 5, 9, 12], dtype=torch.int32)))
    assert "format 2" in refused(lambda s: s.update(version=2))
    assert "not a record" in refused(lambda s: s.pop("lengths"))
    assert "bad options" in refused(lambda s: s.update(options=dict(s["options"], own=0.9, neighbours=0.9)))
    assert "have options" in refused(lambda s: s.update(options={"temperature": 1.0}))
    assert "damaged" in refused(lambda s: s.update(lengths=s["lengths"].float()))
    assert "damaged" in refused(lambda s: s.update(words=s["words"].float()))
    assert "damaged" in refused(lambda s: s.update(lengths=s["lengths"] > 0))
    assert "damaged" in refused(lambda s: s.update(ignored="1"))
    assert "damaged" in refused(lambda s: s.update(ignored=[10 ** 9]))
    trait = {"choices": [torch.tensor([3, 4])], "prior": torch.tensor([0.5, 0.5], dtype=torch.float64),
             "tables": [torch.tensor([[0.9, 0.1], [0.2, 0.8]], dtype=torch.float64)]}
    assert from_state(dict(state, kinds=[trait]), 12, "x.pt").kinds[0].prior.tolist() == [0.5, 0.5]
    for broken in (dict(trait, choices=[torch.tensor([3, 12])]), dict(trait, prior=torch.tensor([0.7, 0.7])),
                   dict(trait, tables=[torch.tensor([[0.9, 0.1]])]), dict(trait, tables=[]), {"prior": 1}):
        assert "their kinds of speaker" in refused(lambda s: s.update(kinds=[broken]))
    assert "bad options" in refused(lambda s: s.update(options=dict(s["options"], k="5")))
    with pytest.raises(UserError, match="are of 3 speakers, and the checkpoint's speaker table has 4"):
        from_state(state, 12, "x.pt", speakers=4)


@pytest.mark.parametrize("options,message", [
    (WordOptions(weight=-1.0), "weight must be a number >= 0"),
    (WordOptions(window=float("nan")), "window must be a number >= 0"),
    (WordOptions(own=0.7, neighbours=0.7), "own + neighbours must be at most 1"),
    (WordOptions(k=0), "k must be a whole number >= 1"),
    (WordOptions(evidence=-2.0), "evidence must be a number >= 0"),
    (WordOptions(add_to="probs"), "add_to must be one of log_probs, logits, got 'probs'"),
    (WordOptions(rank_choices="votes"), "rank_choices must be one of posterior, rates, got 'votes'"),
    (WordOptions(kinds_prior=0.0), "kinds_prior must be above 0"),
    (WordOptions(kinds_prior=-1.0), "kinds_prior must be a number >= 0"),
])
def test_bad_options_are_refused(options, message):
    with pytest.raises(UserError) as e:
        SpeakerWords(5, options)
    assert message in str(e.value)


def test_a_speakers_own_words_win_over_their_rivals_and_neighbours_fill_the_words_they_never_said():
    """The behaviour the estimator is for, on a made-up corpus of two styles: phrase i is said as word 10 + i in
    style 0 and 20 + i in style 1; every speaker says half the phrases, in their style, except speaker 0, who says
    word 25 (style 1) for phrase 5 though their style is 0."""
    rng = np.random.default_rng(0)
    words = SpeakerWords(40)
    style = [s % 2 for s in range(40)]
    for s in range(40):
        phrases = rng.choice(10, size=5, replace=False).tolist()
        said = [(10 if style[s] == 0 else 20) + i for i in phrases]
        if s == 0:
            said = [w for w in said if w != 15] + [25]
        words.set_words(s, [[1, 2, 3] + said])  # 1-3: words everyone says
    row = words.bias_row(0)
    assert row[25] > row[15]  # their own choice, against their style
    never = [i for i in range(10) if i != 5 and 10 + i not in words.words_of(0)]
    assert never and all(row[10 + i] > row[20 + i] for i in never)  # their style, from speakers like them
    assert row[1:4].abs().max() < 1e-6  # words everyone says get nothing


@pytest.mark.parametrize("rebuild_rows", [1024, 2])
def test_after_changes_the_estimate_is_the_equation_on_the_words_as_they_are_now(monkeypatch, rebuild_rows):
    """The index keeps the words of its last full build and the rows changed since apart: after rows are set again,
    forgotten, added and grown, every bias row is still the equation on the words as they are now, whether the
    changes stay apart (no new full build) or pass the limit (built in full again); a copy changes alone."""
    import copy

    monkeypatch.setattr(speaker_words, "REBUILD_ROWS", rebuild_rows)
    rng = random.Random(rebuild_rows)
    vocab, speakers = 15, 8
    said = [set(rng.sample(range(2, vocab - 1), rng.randint(2, 7))) for _ in range(speakers)]
    options = WordOptions(weight=2.5, own=0.35, neighbours=0.5, k=3, power=2.0, evidence=4.0)
    words = SpeakerWords(vocab, options)
    for row, s in enumerate(said):
        words.set_words(row, [torch.tensor(sorted(s))])
    words.bias_row(0)  # the full build
    base = words._base

    def check():
        for row in range(len(said)):
            expected = _by_hand(said, row, vocab, options) if said[row] else [0.0] * vocab
            assert words.bias_row(row).tolist() == pytest.approx(expected, abs=1e-4), row

    changes = [("set", 1, {3, 4, 5}), ("forget", 2, set()), ("set", 9, {2, 3, 13}), ("add", 0, {14}),
               ("set", 5, {6, 7}), ("forget", 9, set())]
    for kind, row, new in changes:
        if kind == "forget":
            words.forget([row])
        elif kind == "add":
            words.add_words(row, [torch.tensor(sorted(new))])
            new = said[row] | new
        else:
            words.set_words(row, [torch.tensor(sorted(new))])
        said.extend(set() for _ in range(row + 1 - len(said)))
        said[row] = set(new)
        check()
    assert (words._base is base) == (rebuild_rows > len(changes))  # apart below the limit, built again past it

    original = [words.bias_row(row).clone() for row in range(len(said))]
    other = copy.deepcopy(words)
    other.set_words(3, [torch.tensor([2, 3])])
    assert other.bias_row(3).tolist() != original[3].tolist()
    assert all(torch.equal(words.bias_row(row), original[row]) for row in range(len(said)))


@pytest.mark.parametrize("seed", [0, 1])
def test_the_speakers_most_like_a_new_ones_words_are_the_equations_neighbours_computed_by_hand(seed):
    """most_like (where onboarding through the decoder starts a new speaker's fit): the k rows among the first
    ``among`` of largest idf-weighted cosine with the new words, weighted sim^power, summing to 1."""
    rng = random.Random(seed)
    vocab, speakers = 16, 10
    said = [set(rng.sample(range(2, vocab - 1), rng.randint(2, 7))) for _ in range(speakers)]
    new = set(rng.sample(range(2, vocab), 4)) | {vocab - 1}  # the last word: said by no one before
    options = WordOptions(k=3, power=2.0)
    words = SpeakerWords(vocab, options)
    for row, s in enumerate(said):
        words.set_words(row, [torch.tensor(sorted(s))])
    among = 8  # the last two rows came later
    unit = _idf_unit(said, vocab)
    sims = sorted(((max(sum(a * b for a, b in zip(unit(new), unit(s))), 0.0), t) for t, s in enumerate(said[:among])),
                  reverse=True)
    top = [(sim, t) for sim, t in sims[:options.k] if sim > 0]
    total = sum(sim ** options.power for sim, _ in top)
    expected = {t: sim ** options.power / total for sim, t in top}
    rows, weights = words.most_like([torch.tensor(sorted(new))], among=among)
    assert dict(zip(rows.tolist(), weights.tolist())) == pytest.approx(expected, abs=1e-5)
    assert all(row < among for row in rows.tolist())
    assert words.most_like([torch.tensor([vocab - 1])], among=among)[0].size == 0  # no known speaker said it


@pytest.mark.parametrize("floor", [True, False])
@pytest.mark.parametrize("case", ["peaked", "a flat hypothesis", "flat"])
def test_rerank_in_place_by_indices_is_the_dense_sum_over_the_window_of_the_log_probabilities(case, floor):
    """The fast rerank (the window on the logits, the bias added at the words' indices, rows shared by a speaker's
    hypotheses) gives the plain form: log-softmax, the window's mask, the rows added densely; on each of its paths:
    a trained model's peaked steps (the near words among the best few), one hypothesis with many near words (by
    indices over the vocabulary), a random network's flat steps (a dense sum). With ``floor`` a near word lowered is
    kept at the window's edge."""
    generator = torch.Generator().manual_seed(0)
    words = SpeakerWords(300, WordOptions(window=2.0, floor=floor))
    logits = torch.randn(12, 1, 300, generator=generator) * (0.01 if case == "flat" else 20.0)
    if case == "a flat hypothesis":
        logits[3, 0, :40] = logits[3].max() + torch.rand(40, generator=generator)
    rows = torch.randn(3, 300, generator=generator)
    index = torch.randint(0, 3, (12,), generator=generator)
    scores = torch.log_softmax(logits, dim=-1)
    near = scores >= scores.max(dim=-1, keepdim=True).values - 2.0
    plain = logits + rows.index_select(0, index).unsqueeze(1) * 8.0 * near
    if floor:
        edge = logits.max(dim=-1, keepdim=True).values - 2.0
        plain = torch.where(near, torch.maximum(plain, edge), plain)
        assert bool((plain[near] == edge.expand_as(plain)[near]).any())  # the floor was there to be met
    rows = rows * 8.0
    assert torch.allclose(words.rerank(logits.clone(), rows, index), plain, atol=1e-6)
    assert torch.allclose(words.rerank(logits.clone(), rows.index_select(0, index)), plain, atol=1e-6)
    few = int(near.sum(-1).max()) < words_fusion.FEW_NEAR
    by_indices = int(near.sum()) * words_fusion.DENSE_SHARE <= near.numel()
    assert (few, by_indices) == {"peaked": (True, True), "a flat hypothesis": (False, True),
                                 "flat": (False, False)}[case]


def _five_speakers() -> SpeakerWords:
    words = SpeakerWords(20, WordOptions(weight=2.0, k=3, own=0.3, neighbours=0.6, evidence=1.0))
    for row, said in enumerate([[4, 5, 6], [4, 5, 7], [6, 7, 8], [8, 9, 10], [4, 9, 11]]):
        words.set_words(row, [said])
    words.rebuild()
    return words


def test_onboarding_and_updating_a_speaker_leave_the_known_speakers_rows_as_they_were_built():
    words = _five_speakers()
    built = [words.bias_row(r).clone() for r in range(5)]
    words.set_words(5, [[4, 5, 12]])  # a new speaker, whose words would move everyone's idf and neighbours
    words.add_words(1, [[13]])  # and a known speaker's update
    assert all(torch.equal(words.bias_row(r), built[r]) for r in (0, 2, 3, 4))
    assert not torch.equal(words.bias_row(1), built[1])  # the updated speaker's own row moves
    assert words.bias_row(5).abs().sum() > 0
    # without the build, the new speaker moves the others: what the build is there to prevent
    unbuilt = copy.deepcopy(words)
    unbuilt.rebuild()
    assert any(not torch.equal(unbuilt.bias_row(r), built[r]) for r in (0, 2, 3, 4))
    # the record keeps the build: read back, the rows are the same, the new speaker's too
    back = from_state(words.get_extra_state(), 20, "x.pt")
    assert all(torch.equal(back.bias_row(r), words.bias_row(r)) for r in range(6))


def test_a_forgotten_speaker_leaves_the_build_too():
    words = _five_speakers()
    neighbours_before = words.bias_row(0).clone()
    words.forget([1])  # speaker 1 shares words 4 and 5 with speaker 0: no longer one of their neighbours
    assert not torch.equal(words.bias_row(0), neighbours_before)
    alone = _five_speakers()
    alone.forget([1])
    alone.rebuild()
    assert torch.equal(words.bias_row(0), alone.bias_row(0))
    assert words.bias_row(1).abs().sum() == 0


def test_a_record_of_0_8_0_is_its_own_build_and_a_damaged_build_is_refused():
    words = _five_speakers()
    state = words.get_extra_state()
    assert state["built"]["speakers"] == 5 and state["built"]["rows"].numel() == 0
    old = {k: v for k, v in state.items() if k != "built"}
    back = from_state(old, 20, "old.pt")
    assert all(torch.equal(back.bias_row(r), words.bias_row(r)) for r in range(5))
    nothing = torch.zeros(0, dtype=torch.long)
    for damaged in ({"speakers": 9, "rows": nothing, "lengths": nothing, "words": torch.zeros(0, dtype=torch.int32)},
                    {"speakers": 5, "rows": torch.tensor([7]), "lengths": torch.tensor([1]),
                     "words": torch.tensor([3], dtype=torch.int32)},
                    "not a build"):
        with pytest.raises(UserError, match="build"):
            from_state(dict(state, built=damaged), 20, "x.pt")


def test_weights_beyond_the_bound_are_refused():
    with pytest.raises(UserError, match="weight must be at most"):
        SpeakerWords(4, WordOptions(weight=1e30))
    SpeakerWords(4, WordOptions(weight=MAX_WEIGHT))


def test_the_kinds_posteriors_of_many_speakers_at_once_are_those_decoding_uses():
    """kind_posteriors (the service's traits, all speakers in one product) against words_estimate.choices (one
    speaker, as decoding computes it): the same prediction of every choice, from a dense or a sparse matrix of who
    said what."""
    import scipy.sparse

    rng = np.random.default_rng(0)
    vocab, choices = 30, [[3, 4], [5, 6, 7], [8, 9], [20, 21, 22, 23]]
    trait = word_kinds.TraitKinds([np.array(c) for c in choices], rng.dirichlet(np.ones(3)),
                                     [rng.dirichlet(np.ones(len(c)), size=3) for c in choices])
    words = SpeakerWords(vocab)
    words.kinds = [trait]
    said = rng.random((7, vocab)) < 0.3
    said[0] = False  # said none of them: the prior
    posterior = word_kinds.kind_posteriors(trait, said)
    np.testing.assert_allclose(posterior[0], trait.prior)
    for n in range(len(said)):
        for (ids, predicted), table in zip(words_estimate.choices(words.kinds, said[n]), trait.tables):
            np.testing.assert_allclose(posterior[n] @ table, predicted, rtol=1e-10)
    np.testing.assert_allclose(word_kinds.kind_posteriors(trait, scipy.sparse.csr_matrix(said)), posterior)


def test_the_words_of_a_kind_are_the_alternatives_it_prefers_to_everyone_most_telling_first():
    trait = word_kinds.TraitKinds(
        [np.array([3, 4]), np.array([5, 6]), np.array([7, 8])], np.array([0.5, 0.5]),
        [np.array([[0.6, 0.4], [0.4, 0.6]]), np.array([[0.5, 0.5], [0.5, 0.5]]), np.array([[0.05, 0.95], [0.95, 0.05]])])
    assert word_kinds.kind_words(trait, 0).tolist() == [8, 3]  # 0.95 / 0.5 first; the even choice tells nothing
    assert word_kinds.kind_words(trait, 1).tolist() == [7, 4]
    assert word_kinds.kind_words(trait, 1, most=1).tolist() == [7]


def test_a_speaker_whose_rows_are_replaced_leaves_the_known_speakers_rows_as_they_were_built():
    """A speaker's rows replaced (a vectors file, a speaker added again with replace) lose their words, and change their
    own bias only: the others translate as before, as after an update (forget takes the words from everyone)."""
    words = _five_speakers()
    built = [words.bias_row(r).clone() for r in range(5)]
    words.drop([1])  # speaker 1 shares words 4 and 5 with speaker 0
    assert len(words.words_of(1)) == 0 and words.bias_row(1).abs().sum() == 0
    assert all(torch.equal(words.bias_row(r), built[r]) for r in (0, 2, 3, 4))
    back = from_state(words.get_extra_state(), 20, "x.pt")  # and so when the checkpoint is read back
    assert all(torch.equal(back.bias_row(r), built[r]) for r in (0, 2, 3, 4))
