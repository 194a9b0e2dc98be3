"""The speakers' words' settings chosen on held-out tokens (fairseq_speaker/onboarding/calibrate.py): the network
alone is chosen where the memory cannot help (a network already right, speakers who choose at random), a setting of
the memory where it recovers what the network cannot know, and every figure is the one counted by hand."""

import pytest
import torch

from fairseq_speaker.onboarding import calibrate
from fairseq_speaker.onboarding.calibrate import Candidate, choose, cross_fit_split

V = 6
A, B = 4, 5  # the two alternatives of one choice; words 0-3 are everyone's


def _tokens(n: int, network_right: bool, speakers: int, rng: torch.Generator):
    """``n`` held-out tokens, each the choice A/B of speaker ``row`` (even rows say A, odd ones B), and the network's
    log-probabilities: sure of the reference by 1 nat where ``network_right``, else even between A and B."""
    rows = torch.randint(0, speakers, (n,), generator=rng)
    target = torch.where(rows % 2 == 0, torch.tensor(A), torch.tensor(B))
    logits = torch.full((n, V), -6.0)
    logits[:, A] = logits[:, B] = 0.0
    if network_right:
        logits[torch.arange(n), target] = 1.0
    return torch.log_softmax(logits, -1), target, rows


def _bias_towards(word_of_row):
    """A unit bias of +1 on the word ``word_of_row(row)`` and -1 on its rival."""
    def bias(row: int) -> torch.Tensor:
        out = torch.zeros(V)
        word = word_of_row(row)
        out[word], out[A + B - word] = 1.0, -1.0
        return out
    return bias


def test_the_network_alone_is_chosen_when_it_is_already_right():
    rng = torch.Generator().manual_seed(0)
    wrong = _bias_towards(lambda row: B if row % 2 == 0 else A)  # a memory whose kinds merged the traits wrongly
    result = choose([_tokens(2000, True, 20, rng)], {True: wrong, False: wrong})
    assert result.chosen.weight == 0
    assert result.network.accuracy == 1.0
    # the bias moves the rival 2 x weight nats against the reference: weight 1 overturns the network's nat on every
    # token, weight 0.5 makes up exactly for it (a tie: half of each token)
    assert result.figures_of(Candidate(True, 1.0, 2.0)).accuracy == 0.0
    assert result.figures_of(Candidate(True, 0.5, 2.0)).accuracy == 0.5
    # and a window below the network's margin leaves the rival outside: lowered, the network's word stays at the
    # window's edge, above the rival (without the floor, as 0.8.0, it would fall below it)
    assert result.figures_of(Candidate(True, 8.0, 0.5)).accuracy == 1.0
    unfloored = choose([_tokens(200, True, 20, rng)], {True: wrong}, weights=[8.0], windows=[0.5], floor=False)
    assert unfloored.figures_of(Candidate(True, 8.0, 0.5)).accuracy == 0.0


def test_the_network_alone_is_chosen_for_speakers_who_choose_at_random():
    rng = torch.Generator().manual_seed(1)
    lp, _, rows = _tokens(3000, False, 40, rng)
    target = torch.where(torch.rand(rows.shape, generator=rng) < 0.5, torch.tensor(A), torch.tensor(B))
    memory = _bias_towards(lambda row: A if row % 2 == 0 else B)  # what each speaker "said" once: no evidence
    result = choose([(lp, target, rows)], {False: memory})
    assert result.chosen.weight == 0
    # the network splits every token between A and B: half a token right each
    assert result.network.accuracy == pytest.approx(0.5)
    assert all(abs(f.gain) < 0.05 for f in result.figures)


def test_a_memory_that_knows_what_the_network_cannot_is_chosen():
    rng = torch.Generator().manual_seed(2)
    right = _bias_towards(lambda row: A if row % 2 == 0 else B)
    result = choose([_tokens(500, False, 20, rng)], {False: right})
    assert result.chosen.weight > 0
    assert result.network.accuracy == pytest.approx(0.5)
    chosen = result.figures_of(result.chosen)
    assert chosen.accuracy == 1.0 and chosen.gain == pytest.approx(0.5) and chosen.z > calibrate.Z
    assert result.chosen.weight == min(calibrate.WEIGHTS)  # of equally accurate candidates, the smallest weight


def test_the_figures_are_counted_as_by_hand():
    # two tokens of one speaker: the network has the first right by 1 nat, the second wrong by 0.5 nats
    logits = torch.tensor([[0.0, 0, 0, 0, 1.0, 0.0], [0.0, 0, 0, 0, 0.5, 0.0]])
    lp = torch.log_softmax(logits, -1)
    target = torch.tensor([A, B])
    bias = {False: lambda row: torch.tensor([0.0, 0, 0, 0, 0, 1.0])}  # raises B
    result = choose([(lp, target, torch.tensor([0, 0]))], bias, weights=[0.75], windows=[0.6, 2.0])
    # network: token 1 right; token 2: A is best
    assert result.network.accuracy == 0.5
    expected_nll = float(-(lp[0, A] + lp[1, B]) / 2)
    assert result.network.nll == pytest.approx(expected_nll)
    # window 2, weight 0.75: B gets +0.75 wherever it is near: token 1 A (1) > B (0.75), token 2 B (0.75) > A (0.5)
    wide = result.figures_of(Candidate(False, 0.75, 2.0))
    assert wide.accuracy == 1.0 and wide.gain == 0.5
    fused = lp + torch.tensor([0.0, 0, 0, 0, 0, 0.75])
    assert wide.nll == pytest.approx(float((torch.logsumexp(fused, 1) - fused[[0, 1], [A, B]]).mean()))
    # window 0.6: on token 1 B is 1 nat below A, outside the window; on token 2 0.5 below, inside
    narrow = result.figures_of(Candidate(False, 0.75, 0.6))
    assert narrow.accuracy == 1.0
    # one token gained, none lost: z = 1 / sqrt(1), too little to be significant, and the network stays
    assert wide.z == pytest.approx(1.0) and result.chosen.weight == 0


def test_a_tie_counts_as_a_share_of_a_token():
    lp = torch.log_softmax(torch.tensor([[0.0, 0, 0, 0, 1.0, 1.0]]), -1)
    result = choose([(lp, torch.tensor([A]), torch.tensor([0]))], {False: lambda row: torch.zeros(V)}, weights=[1.0],
                    windows=[1.0])
    assert result.network.accuracy == 0.5


def test_a_weight_the_user_fixed_is_kept_even_where_it_loses():
    rng = torch.Generator().manual_seed(3)
    wrong = _bias_towards(lambda row: B if row % 2 == 0 else A)
    result = choose([_tokens(400, True, 20, rng)], {False: wrong}, weights=[4.0], windows=[2.0], network=False)
    assert result.chosen.weight == 4.0
    assert result.figures_of(result.chosen).accuracy < result.network.accuracy


def test_cross_fitting_holds_out_every_fifth_sentence_and_keeps_the_rest():
    sentences = {"a": list(range(12)), "b": [0], "c": [0, 1, 2]}
    kept, held = cross_fit_split(sentences)
    assert held == {"a": [4, 9], "c": [2]}
    assert kept == {"a": [0, 1, 2, 3, 5, 6, 7, 8, 10, 11], "b": [0], "c": [0, 1]}
    for name in sentences:  # nothing lost, nothing in both
        assert sorted(kept[name] + held.get(name, [])) == sentences[name]


def test_the_table_shows_every_candidate_and_stars_the_choice():
    rng = torch.Generator().manual_seed(2)
    right = _bias_towards(lambda row: A if row % 2 == 0 else B)
    result = choose([_tokens(300, False, 20, rng)], {True: right, False: right})
    table = result.table()
    assert table.count(" *") == 1
    assert len([line for line in table.splitlines() if line.startswith("| on") or line.startswith("| off")]) \
        == 2 * len(calibrate.WINDOWS)


def _decoding_of(gains):
    """A ``decode`` of 200 held-out references of 4 words each: the network gets 3 of each; a candidate of weight w
    gets, on sentence i, 3 + 1 where i is among the first ``gains[w]`` sentences (its gain over the network)."""
    references = [[0, 1, 2, 3]] * 200

    def decode(candidate):
        gained = gains.get(candidate.weight, 0) if candidate.weight else 0
        return [[0, 1, 2, 3] if i < gained else [0, 1, 2, 5] for i in range(len(references))]
    return decode, references


def test_decoding_chooses_a_candidate_the_tokens_rejected():
    # on the tokens every candidate loses significantly (a memory against a network that is right), as a noun's bias
    # does on teacher-forced tokens where an article commits to it a step early; the beam shows the gain the tokens
    # cannot see, and the decoding chooses it
    rng = torch.Generator().manual_seed(3)
    wrong = _bias_towards(lambda row: B if row % 2 == 0 else A)
    result = choose([_tokens(400, True, 20, rng)], {True: wrong}, weights=[2.0, 4.0], windows=[1.0, 2.0])
    assert all(f.z < -calibrate.Z for f in result.figures[1:])
    decode, references = _decoding_of({4.0: 30})
    result = calibrate.choose_by_decoding(result, decode, references)
    assert {d.candidate for d in result.decoded[1:]} == {Candidate(True, w, n) for w in (2.0, 4.0) for n in (1.0, 2.0)}
    assert result.chosen.weight == 4.0 and result.chosen.kinds


def test_decoding_keeps_the_network_when_no_candidate_gains_significantly():
    rng = torch.Generator().manual_seed(3)
    right = _bias_towards(lambda row: A if row % 2 == 0 else B)
    result = choose([_tokens(400, False, 20, rng)], {True: right}, weights=[2.0], windows=[1.0])
    decode, references = _decoding_of({2.0: 2})  # 2 sentences of 200 better: z = 2 / sqrt(2) < 1.645
    result = calibrate.choose_by_decoding(result, decode, references)
    assert result.chosen.weight == 0
    assert result.decoded[1].z == pytest.approx(2 ** 0.5)


def test_every_window_the_calibration_tries_is_one_a_record_may_hold():
    """A window the calibration chooses is written in the record, which is refused beyond MAX_WINDOW on load."""
    from fairseq_speaker.modules.words_options import MAX_WINDOW, WordOptions
    windows = set(calibrate.WINDOWS) | set(calibrate.DECODE_WINDOWS) | {WordOptions().window}
    assert max(windows) <= MAX_WINDOW
    assert WordOptions(window=MAX_WINDOW).problems() == []
    assert WordOptions(window=MAX_WINDOW + 0.5).problems() == [f"window must be at most {MAX_WINDOW:g}, got 4.5"]
