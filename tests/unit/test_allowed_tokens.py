"""The hub's ``prefix_allowed_tokens_fn`` (fairseq_speaker/allowed_tokens.py) on the frozen 0.8.0 models: each
translation is made of the words its function allows for its sentence, a ``--speaker-token`` model's included, whose
speaker token the function never sees. The refusals are rows of tests/integration/test_probes.py (``API_PROBES``)."""

import os

import pytest
import torch

from fairseq_speaker.allowed_tokens import AllowedTokensSearch
from fairseq_speaker.errors import UserError

FROZEN = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "checkpoints", "0.8.0")
SENTENCES = open(os.path.join(FROZEN, "test.en"), encoding="utf-8").read().splitlines()[:6]
SPEAKERS = open(os.path.join(FROZEN, "test.spk"), encoding="utf-8").read().splitlines()[:6]
#: the words each sentence may use, by its index (batch_id) modulo 3
WORDS = [["je", "suis", "."], ["vous", "avez", "."], ["j'", "ai", "vu", "."]]


@pytest.fixture(scope="module", params=["lstm_fact_bias", "lstm_spk_token"])
def translator(request):
    from fairseq_speaker.serving import SpeakerTranslator

    return SpeakerTranslator.from_pretrained(os.path.join(FROZEN, f"{request.param}.pt"), data=FROZEN,
                                             source_lang="en", target_lang="fr", max_len_b=5)


def test_each_translation_is_made_of_the_words_its_function_allows(translator):
    target = translator.task.target_dictionary
    speaker_tokens = set(translator.task.speaker_token_ids().tolist()) if translator.task.uses_speaker_token else set()
    seen = []

    def allowed(batch_id, tokens):
        seen.append((batch_id, tokens.tolist()))
        return [target.index(w) for w in WORDS[batch_id % 3]] + [target.eos()]

    for beam in (1, 3):
        translations = translator.translate(SENTENCES, SPEAKERS, beam=beam, prefix_allowed_tokens_fn=allowed)
        assert len(translations) == len(SENTENCES)
        for i, translation in enumerate(translations):
            assert set(translation.split()) <= set(WORDS[i % 3]), (i, translation)
    assert {batch_id for batch_id, _ in seen} == set(range(len(SENTENCES)))
    assert all(tokens[0] == target.eos() and not speaker_tokens & set(tokens) for _, tokens in seen)


def test_the_best_of_translate_nbest_is_what_translate_gives_under_the_same_function(translator):
    target = translator.task.target_dictionary

    def allowed(batch_id, tokens):
        return [target.index(w) for w in WORDS[batch_id % 3]] + [target.eos()]

    best = translator.translate_nbest(SENTENCES, SPEAKERS, beam=3, nbest=2, prefix_allowed_tokens_fn=allowed)
    assert [found[0][0] for found in best] == translator.translate(SENTENCES, SPEAKERS, beam=3,
                                                                   prefix_allowed_tokens_fn=allowed)


@pytest.mark.parametrize("answer", [[1, 2], (4,), range(3), torch.tensor([4, 2]), torch.tensor([4], dtype=torch.int32)])
def test_an_answer_of_ids_in_any_sequence_is_taken(answer):
    ids = AllowedTokensSearch.checked(answer, 0, torch.tensor([2]), vocab_size=10)
    assert ids.dtype == torch.long and ids.tolist() == list(torch.as_tensor(answer).tolist())


@pytest.mark.parametrize("answer,message", [
    (None, "returned None: it must return the ids"),
    ([1.0], "returned [1.0]: it must return the ids"),
    ([True], "returned [True]: it must return the ids"),
    (torch.tensor([[1, 2]]), "it must return the ids"),
    (torch.tensor([0.5]), "it must return the ids"),
    ([-1], "returned the id -1, outside the target dictionary (ids 0 to 9)"),
    ([3, 10], "returned the id 10, outside the target dictionary (ids 0 to 9)"),
])
def test_an_answer_that_is_not_ids_of_the_dictionary_is_refused_naming_the_call(answer, message):
    with pytest.raises(UserError) as refused:
        AllowedTokensSearch.checked(answer, 3, torch.tensor([2, 5]), vocab_size=10)
    assert str(refused.value).startswith("prefix_allowed_tokens_fn(3, [2, 5]) returned ") and message in str(
        refused.value), str(refused.value)
