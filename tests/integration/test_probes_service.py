"""Bad input to the Python API and the HTTP service, as a careless client or an unlucky operator would give it:
empty sentences, names that look like others, typos, loose JSON types, malformed and slow clients, a store that
cannot be read. Each case ends in one message naming what is wrong and what to do (a :class:`UserError` from the
API, ``{"error": {"code", "message"}}`` with a fitting status from the service, one line and exit status 2 from the
command), never a traceback, and changes nothing. The command lines' rows are in test_probes.py.
"""

import asyncio
import contextlib
import gc
import gzip
import io
import json
import logging
import os
import pathlib
import re
import shutil
import socket
import sqlite3
import statistics
import sys
import threading
import time
import urllib.request

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient

from fairseq_speaker.errors import UserError
from fairseq_speaker.onboarding.vectors_file import FORMAT, PARAM_PREFIX, SpeakerVectors, vectors_bytes
from fairseq_speaker.service import app as serve
from fairseq_speaker.service import store_cli
from fairseq_speaker.service.app import create_app
from fairseq_speaker.service.batcher import BatchOptions
from fairseq_speaker.service.connections import bounded_http_protocol
from fairseq_speaker.service.speaker_service import Limits
from fairseq_speaker.service.store import SpeakerStore, StoreError, hide_password
from fairseq_speaker.service.stores import open_store
from fairseq_speaker.serving import SpeakerTranslator
from tests.helpers import refused
from tests.postgres import PASSWORD

TOKEN = "test-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
PAIRS = {"sources": ["i am tired .", "you want the drugs ."],
         "targets": ["je suis fatiguée .", "vous voulez les médicaments ."]}
MORE = {"sources": ["i went to the station ."], "targets": ["je suis allée à la gare ."]}
S, T = PAIRS["sources"][:1], PAIRS["targets"][:1]


@pytest.fixture(scope="module")
def translator(toy, trained):
    return SpeakerTranslator.from_pretrained(trained("lstm_fact_bias"), data=toy["bin"], max_len_b=4)


def _renamed(t, name):
    """The rows of spk000 under another name (a vectors file someone edited)."""
    vectors = t.speaker_vectors(["spk000"])
    return SpeakerVectors([name], vectors.rows, vectors.meta, vectors.path, vectors.words)


# -- the Python API ---------------------------------------------------------------------------------------

#: (the promise of docs/reliability.md the row checks, what, the call on translator ``t``, text of the refusal)
API_PROBES = [
    ("empty-sentences-refused",
     "translate an empty sentence", lambda t: t.translate([""], "spk000"),
     "sentences[0] is empty: give a sentence (or leave it out)"),
    ("empty-sentences-refused",
     "translate a blank sentence", lambda t: t.translate(["   "], "spk000"), "sentences[0] is only whitespace"),
    ("empty-sentences-refused",
     "translate one string, empty", lambda t: t.translate("", "spk000"), "sentences[0] is empty"),
    ("empty-sentences-refused",
     "translate a zero-width space", lambda t: t.translate(["\u200b"], "spk000"),
     "sentences[0] is only characters that show nothing (U+200B): give a sentence"),
    ("empty-sentences-refused",
     "add_speaker a target of a byte-order mark and a NUL", lambda t: t.add_speaker("e", S, ["\ufeff\x00"]),
     "targets[0] is only characters that show nothing (U+FEFF, U+0000)"),
    ("empty-sentences-refused",
     "translate fairseq's padding symbol", lambda t: t.translate(["i am <pad> tired ."], "spk000"),
     "sentences[0] is holding '<pad>' (word 3), a symbol of fairseq's dictionaries that the model reads as a control "
     "code, not a word"),
    ("empty-sentences-refused",
     "add_speaker a target of end-of-sentence symbols", lambda t: t.add_speaker("e", S, ["</s> </s>"]),
     "targets[0] is holding '</s>' (word 1)"),
    # the sixth probe: placeholders and a NUL were words (a speaker onboarded on them, a word read as unknown)
    ("empty-sentences-refused",
     "add_speaker a target of fairseq's unknown word", lambda t: t.add_speaker("e", S, ["je suis <unk> ."]),
     "targets[0] is holding '<unk>' (word 3), a placeholder of fairseq's dictionaries"),
    ("empty-sentences-refused",
     "translate a dictionary filler", lambda t: t.translate(["madeupword0000"], "spk000"),
     "sentences[0] is holding 'madeupword0000' (word 1), a placeholder of fairseq's dictionaries"),
    ("empty-sentences-refused",
     "translate a NUL inside a sentence", lambda t: t.translate(["i am\x00 tired ."], "spk000"),
     "sentences[0] is holding the control character U+0000 at character 5"),
    ("empty-sentences-refused",
     "translate an empty list", lambda t: t.translate([], "spk000"),
     "sentences is an empty list: give at least one sentence"),
    ("refused-call-changes-nothing",
     "source_lengths None", lambda t: t.source_lengths(None),
     "sentences: give a string or a list of strings, got NoneType None"),
    ("refused-call-changes-nothing",
     "save to None", lambda t: t.save(None), "save: the file must be a path (str or os.PathLike), got NoneType None"),
    ("lookalike-speaker-refused",
     "translate as a full-width known name", lambda t: t.translate(["i am tired ."], "\uff53\uff50\uff4b\uff10\uff10\uff10"),
     "looks like 'spk000', a speaker of the model"),
    ("label-policy",
     "add_speaker a subscript twin of a known name", lambda t: t.add_speaker("spk\u2080\u2080\u2080", S, T),
     "looks like 'spk000'"),
    ("empty-sentences-refused",
     "translate the second sentence blank", lambda t: t.translate(["i am tired .", "\t "], "spk000"),
     "sentences[1] is only whitespace"),
    ("lookalike-speaker-refused",
     "translate as a known name with a zero-width space", lambda t: t.translate("i am tired .", "spk000\u200b"),
     "speakers[0]: 'spk000\\u200b' looks like 'spk000', a speaker of the model, but is not it"),
    ("lookalike-speaker-refused",
     "translate_nbest as a known name with a word joiner",
     lambda t: t.translate_nbest(["i ."], ["\u2060spk001"], beam=2), "write 'spk001'"),
    ("empty-sentences-refused",
     "translate_nbest blank", lambda t: t.translate_nbest([" "], "spk000", beam=2, nbest=2),
     "sentences[0] is only whitespace"),
    ("lookalike-speaker-refused",
     "translate_nbest_known as a known name with a zero-width space",
     lambda t: t.translate_nbest_known(["i ."], ["spk000\u200b"]), "write 'spk000'"),
    ("empty-sentences-refused",
     "translate_nbest_known blank", lambda t: t.translate_nbest_known(["i .", ""], "spk000"), "sentences[1] is empty"),
    ("refused-call-changes-nothing",
     "translate_nbest_known a speaker short", lambda t: t.translate_nbest_known(["i .", "you ."], ["a", "b", "c"]),
     "3 speakers for 2 sentences"),
    ("refused-call-changes-nothing",
     "translate_nbest_known sentences not a list", lambda t: t.translate_nbest_known(7, "spk000"),
     "sentences: give a string or a list of strings, got int 7"),
    ("refused-call-changes-nothing",
     "speaker_traits a string", lambda t: t.speaker_traits("spk000"),
     "speaker_traits: give a list of speaker names, got str 'spk000' (speaker_traits(['spk000']) for one)"),
    ("refused-call-changes-nothing",
     "speaker_traits not names", lambda t: t.speaker_traits([3]), "speaker_traits: give a list of speaker names"),
    ("refused-call-changes-nothing",  # each trait was listed twice: twice the evidence
     "speaker_traits a name twice", lambda t: t.speaker_traits(["spk001", "spk001"]),
     "speaker_traits: speaker(s) 'spk001' named twice: name each once"),
    ("refused-call-changes-nothing",
     "speaker_traits known_only='no'", lambda t: t.speaker_traits(["spk001"], known_only="no"),
     "speaker_traits: known_only must be True or False, got 'no'"),
    ("forget-words-checked",  # a typo read as "no traits"
     "speaker_traits an unknown name", lambda t: t.speaker_traits(["nosuch", "spk001"]),
     "speaker_traits: no speaker(s) 'nosuch' in the model (translator.speakers lists them): nothing was described"),
    ("empty-sentences-refused",
     "add_speaker empty pair", lambda t: t.add_speaker("e", [""], [""]), "sources[0] is empty"),
    ("refused-call-changes-nothing",  # the fit stopped early on its own sentences (fairseq-speaker-adapt refuses it)
     "add_speaker held out on its own pairs", lambda t: t.add_speaker("e", S, T, heldout_sources=S, heldout_targets=T),
     "heldout_sources and heldout_targets are pairs the speaker is fitted on"),
    ("empty-sentences-refused",
     "add_speaker blank target", lambda t: t.add_speaker("e", S, [" "]), "targets[0] is only whitespace"),
    ("empty-sentences-refused",
     "add_speaker blank held-out", lambda t: t.add_speaker("e", S, T, [" "], T), "sources[0] is only whitespace"),
    ("empty-sentences-refused",
     "fit_speaker empty pair", lambda t: t.fit_speaker("e", [""], [""]), "sources[0] is empty"),
    ("empty-sentences-refused",
     "update_speaker empty pair", lambda t: t.update_speaker("spk000", [""], [""]), "sources[0] is empty"),
    ("update-needs-a-known-name",
     "update_speaker an unknown name", lambda t: t.update_speaker("ghost", S, T),
     "update_speaker: no speaker 'ghost' in the model (8 speakers: translator.speakers lists them); "
     "add_speaker(name, sources, targets) adds a new one"),
    ("update-needs-a-known-name",
     "update_speaker a name that is not a string", lambda t: t.update_speaker(None, S, T),
     "update_speaker: no speaker None in the model"),
    ("forget-words-checked",
     "forget_words an unknown name", lambda t: t.forget_words(["zzz"]),
     "forget_words: no speaker(s) 'zzz' in the model (translator.speakers lists them): nothing was forgotten"),
    ("refused-call-changes-nothing",
     "export_speakers a string", lambda t: t.export_speakers("never-written.npz", names="spk000"),
     "export_speakers: give a list of speaker names, got str 'spk000' (export_speakers(['spk000']) for one)"),
    ("refused-call-changes-nothing",
     "speaker_vectors a string", lambda t: t.speaker_vectors(names="zz"),
     "speaker_vectors: give a list of speaker names, got str 'zz' (speaker_vectors(['zz']) for one)"),
    ("generation-keywords-checked",
     "translate prefix_size", lambda t: t.translate("i am tired .", "spk000", prefix_size=1),
     "'prefix_size' is refused here: the hub does not read it"),
    ("generation-keywords-checked",
     "translate replace_unk", lambda t: t.translate("i am tired .", "spk000", replace_unk="x"),
     "'replace_unk' is refused here: the hub does not read it"),
    ("generation-keywords-checked",
     "translate nbest", lambda t: t.translate("i am tired .", "spk000", nbest=3),
     "'nbest' is refused here: translate gives each sentence's best translation; translate_nbest(nbest=N) gives N"),
    ("generation-keywords-checked",
     "translate_nbest score_reference", lambda t: t.translate_nbest(["i ."], "spk000", score_reference=True),
     "'score_reference' is refused here"),
    ("generation-keywords-checked",
     "translate skip_invalid_size_inputs",
     lambda t: t.translate(["i ."], "spk000", skip_invalid_size_inputs=True),
     "'skip_invalid_size_inputs' is refused here: a sentence longer than the model takes is refused, naming it"),
    ("generation-keywords-checked",
     "translate max_len_b as text", lambda t: t.translate("i .", "spk000", max_len_b="20"),
     "max_len_b must be a whole number, got str '20'"),
    ("generation-keywords-checked",
     "translate sampling as text", lambda t: t.translate("i .", "spk000", sampling="yes"),
     "sampling must be True or False, got str 'yes'"),
    ("generation-keywords-checked",
     "translate lenpen as text", lambda t: t.translate("i .", "spk000", lenpen="1"),
     "lenpen must be a finite number, got str '1'"),
    ("search-options-checked",
     "translate a lenpen whose power of the length overflows", lambda t: t.translate("i .", "spk000", lenpen=1e308),
     "--lenpen must be from -10 to 10 (1: the score per token, 0: the sentence's score), got 1e+308"),
    ("search-options-checked",
     "translate a whole-number lenpen past what a length's power holds", lambda t: t.translate("i .", "spk000", lenpen=50),
     "--lenpen must be from -10 to 10 (1: the score per token, 0: the sentence's score), got 50"),
    ("search-options-checked",
     "translate sampling at a temperature that overflows the logits",
     lambda t: t.translate("i .", "spk000", sampling=True, beam=1, temperature=1e-300),
     "--temperature must be at least 0.001"),
    ("generation-keywords-checked",
     "translate retain_dropout", lambda t: t.translate("i .", "spk000", retain_dropout=True),
     "'retain_dropout' is refused here: this model's search does not read it"),
    ("generation-keywords-checked",
     "translate lenpen_mt", lambda t: t.translate("i .", "spk000", lenpen_mt=2.0), "'lenpen_mt' is refused here"),
    ("search-options-checked",
     "translate diverse_beam_strength nan", lambda t: t.translate("i .", "spk000", diverse_beam_strength=float("nan")),
     "diverse_beam_strength must be a finite number, got float nan"),
    ("search-options-checked",
     "translate_nbest sampling_topp 2",
     lambda t: t.translate_nbest(["i ."], "spk000", beam=1, sampling=True, sampling_topp=2.0),
     "--sampling-topp must be in (0, 1] (the probability mass sampled from; -1: off), got 2"),
    ("search-options-checked",
     "translate_nbest sampling_topk beyond the dictionary",
     lambda t: t.translate_nbest(["i ."], "spk000", beam=1, sampling=True, sampling_topk=10 ** 9),
     "--sampling-topk must be from 1 to the target dictionary's 88 words (-1: off), got 1000000000"),
    ("search-options-checked",
     "translate min_len -5", lambda t: t.translate("i .", "spk000", min_len=-5), "--min-len must be at least 0, got -5"),
    ("search-options-checked",
     "translate no_repeat_ngram_size -1", lambda t: t.translate("i .", "spk000", no_repeat_ngram_size=-1),
     "--no-repeat-ngram-size must be at least 0, got -1"),
    ("generation-keywords-checked",
     "translate inference_step_args of another key",
     lambda t: t.translate("i .", "spk000", inference_step_args={"foo": 1}),
     "inference_step_args: give a dict whose only key is 'prefix_tokens', got {'foo': 1}"),
    ("generation-keywords-checked",
     "translate a prefix for two sentences",
     lambda t: t.translate(["i .", "you ."], "spk000", inference_step_args={"prefix_tokens": torch.tensor([[5]])}),
     "prefix_tokens forces the start of one sentence, and 2 are given: translate them one at a time"),
    ("generation-keywords-checked",
     "translate a prefix of ids outside the dictionary",
     lambda t: t.translate("i .", "spk000", inference_step_args={"prefix_tokens": torch.tensor([[10 ** 6]])}),
     "prefix_tokens holds ids outside the target dictionary"),
    ("refused-call-changes-nothing",
     "import_speakers replace as text", lambda t: t.import_speakers(t.speaker_vectors(["spk000"]), replace="no"),
     "import_speakers: replace must be True or False, got 'no'"),
    ("refused-call-changes-nothing",
     "import_speakers None", lambda t: t.import_speakers(None),
     "import_speakers: give the path of a speaker vectors file (or the SpeakerVectors of speaker_vectors()), got "
     "NoneType None"),
    ("refused-call-changes-nothing",
     "import_speakers a Path", lambda t: t.import_speakers(pathlib.Path("no/such/vectors.npz")),
     "speaker vectors not found: no/such/vectors.npz"),
    ("refused-call-changes-nothing",
     "export_speakers no names", lambda t: t.export_speakers("never-written.npz", names=[]),
     "export_speakers: names is an empty list: give at least one speaker (or leave names out: every speaker)"),
    ("refused-before-writing", "save to no path", lambda t: t.save(""), "cannot write '': give the path of a file"),
    ("refused-before-writing",
     "save over a device", lambda t: t.save("/dev/null"),
     "cannot write /dev/null: it is not a regular file (a device, a pipe or a socket)"),
    ("sentence-length-checked",
     "translate a sentence longer than a batch", lambda t: t.translate(["i .", "i " * 30000], "spk000"),
     "sentences[1]: 30001 tokens (with the end of sentence), more than the"),
    ("sentence-length-checked",
     "translate_nbest a sentence longer than a batch", lambda t: t.translate_nbest(["i " * 30000], "spk000"),
     "sentences[0]: 30001 tokens"),
    ("forget-words-checked",
     "forget_words a string", lambda t: t.forget_words("spk000"),
     "forget_words: give a list of speaker names, got str 'spk000' (forget_words(['spk000']) for one)"),
    ("retire-speakers-checked",
     "retire_speakers a string", lambda t: t.retire_speakers("spk000"),
     "retire_speakers: give a list of speaker names, got str 'spk000' (retire_speakers(['spk000']) for one)"),
    ("retire-speakers-checked",
     "retire_speakers an unknown name", lambda t: t.retire_speakers(["spk000", "zzz"]),
     "retire_speakers: no speaker(s) 'zzz' in the model (translator.speakers lists them): nothing was retired"),
    ("retire-speakers-checked",
     "retire_speakers an empty list", lambda t: t.retire_speakers([]),
     "retire_speakers: names is an empty list: give at least one speaker: nothing would be done"),
    ("retire-speakers-checked",
     "restore_speakers a string", lambda t: t.restore_speakers("spk000"),
     "restore_speakers: give a list of speaker names, got str 'spk000'"),
    ("forget-words-checked",
     "forget_words an empty list", lambda t: t.forget_words([]),
     "forget_words: names is an empty list: give at least one speaker: nothing would be done"),
    ("label-policy",
     "add_speaker zero-width space", lambda t: t.add_speaker("lee\u200b", S, T),
     "cannot add a speaker: speaker label 'lee\\u200b' contains '\\u200b' (U+200B ZERO WIDTH SPACE)"),
    ("label-policy",
     "add_speaker right-to-left override of a known name", lambda t: t.add_speaker("\u202espk000", S, T),
     "U+202E RIGHT-TO-LEFT OVERRIDE"),
    ("numbers-checked", "translate max_len_b=np.int64(3)",  # numpy's numbers were refused as no whole number
     lambda t: t.translate("i am tired .", "spk000", max_len_b=np.int64(-3)), "must be at least 0, got -3"),
    ("numbers-checked", "translate lenpen=np.float32(50)",  # refused as "not a finite number"
     lambda t: t.translate("i am tired .", "spk000", lenpen=np.float32(50)), "lenpen must be from -10 to 10"),
    ("one-line-user-errors", "sentence_words of a triple", lambda t: t.sentence_words([("a", "b", "c")]),
     "sentence_words: pairs[0] must be a (source, target) pair of sentences"),
    ("one-line-user-errors", "export_speakers(None)", lambda t: t.export_speakers(None),
     "export_speakers: path must be a path (str or os.PathLike), got NoneType None"),
    ("new-name-not-lookalike",
     "add_speaker a known name with a zero-width joiner", lambda t: t.add_speaker("spk\u200d000", S, T),
     "it looks like 'spk000', a known speaker: use that name, or one that looks different"),
    ("label-policy",
     "add_speaker a known name with a no-break space", lambda t: t.add_speaker("spk\u00a0000", S, T),
     "U+00A0 NO-BREAK SPACE"),
    ("label-policy", "add_speaker Hangul filler", lambda t: t.add_speaker("\u3164", S, T), "U+3164 HANGUL FILLER"),
    ("label-policy",
     "add_speaker Braille blank", lambda t: t.add_speaker("lee\u2800", S, T), "U+2800 BRAILLE PATTERN BLANK"),
    ("new-name-one-script",
     "add_speaker Cyrillic a among Latin letters", lambda t: t.add_speaker("spk\u0430", S, T),
     "mixes the scripts Latin and Cyrillic in the word"),
    ("new-name-nfc",
     "add_speaker decomposed", lambda t: t.add_speaker("Zoe\u0308", S, T),
     "is not in Unicode's NFC form: write it as 'Zoë'"),
    ("label-policy",
     "add_speaker 201 characters", lambda t: t.add_speaker("x" * 201, S, T), "is longer than 200 characters"),
    ("label-policy",
     "import_speakers a name with a zero-width space", lambda t: t.import_speakers(_renamed(t, "spk\u200b000")),
     "cannot add a speaker: speaker label 'spk\\u200b000' contains '\\u200b'"),
    ("label-policy",
     "import_speakers a name with a byte-order mark", lambda t: t.import_speakers(_renamed(t, "\ufeffnew")),
     "U+FEFF ZERO WIDTH NO-BREAK SPACE"),
]


@pytest.mark.parametrize("name,call,message", [row[1:] for row in API_PROBES],
                         ids=[row[1] for row in API_PROBES])
def test_a_bad_api_call_is_refused_with_one_message(translator, name, call, message):
    before = translator.speakers
    with pytest.raises(UserError) as refused_call:
        call(translator)
    assert message in str(refused_call.value)
    assert translator.speakers == before  # nothing half-added, no typo onboarded


def test_a_largest_beam_above_the_models_vocabulary_is_refused_at_start(translator):
    """/limits advertised --max-beam 1000, and a request of beam 200 was refused naming the command line's --beam."""
    with pytest.raises(UserError) as refused:
        create_app(translator, limits=Limits(max_beam=1000))
    assert "--max-beam 1000 is more hypotheses than the target dictionary's" in str(refused.value)


def test_a_string_is_one_sentence_and_a_numpy_integer_a_beam(translator):
    """source_lengths read a string as its characters (12 sentences of one character); np.int64(2) was refused as
    no whole number."""
    assert len(translator.source_lengths("i am tired .")) == 1
    assert translator.translate(["i am tired ."], "spk000", beam=np.int64(2)) == \
        translator.translate(["i am tired ."], "spk000", beam=2)


# -- HTTP: one service with small limits, which has onboarded dr-lee ---------------------------------------

LIMITS = Limits(max_sentences=3, max_chars=40, max_pairs=2, max_speaker_pairs=3)
DEEP = b"[" * 60_000  # under the body limit of LIMITS (66,496 bytes); json.loads would recurse 60,000 deep

#: (the promise of docs/reliability.md the row checks, method, path, body (JSON, or bytes sent as application/json),
#: status, error code, text of the message)
HTTP_PROBES = [
    ("one-json-error",
     "post", "/translate", {"sentences": [""], "speaker": "spk000"}, 422, "invalid_request",
     "sentences[0] is empty: give a sentence"),
    ("one-json-error",
     "post", "/translate", {"sentences": ["   "], "speaker": "spk000"}, 422, "invalid_request",
     "sentences[0] is only whitespace"),
    ("one-json-error",
     "post", "/v1/translate", {"sentences": ["i .", "\n"], "speaker": "spk000"}, 422, "invalid_request",
     "sentences[1] is only whitespace"),
    ("one-json-error",
     "put", "/speakers/e", {"sources": [""], "targets": [""]}, 422, "invalid_request", "sources[0] is empty"),
    ("one-json-error",
     "put", "/speakers/e", {"sources": ["i ."], "targets": ["  "]}, 422, "invalid_request",
     "targets[0] is only whitespace"),
    ("one-json-error",
     "post", "/speakers/dr-lee/sentences", {"sources": [" "], "targets": ["je ."]}, 422, "invalid_request",
     "sources[0] is only whitespace"),
    ("one-json-error",
     "post", "/translate", b'{"sentences": ["i \\ud800 ."], "speaker": "spk000"}', 422, "invalid_request",
     "sentences[0] holds a lone surrogate ('\\ud800' at character 2), which is not text"),
    ("one-json-error",
     "put", "/speakers/e", b'{"sources": ["i ."], "targets": ["je \\udfff ."]}', 422, "invalid_request",
     "targets[0] holds a lone surrogate"),
    # names
    ("label-policy", "put", "/speakers/lee%E2%80%8B", PAIRS, 422, "invalid_speaker", "U+200B ZERO WIDTH SPACE"),
    # a line feed: Starlette's route pattern served /speakers/a%0A as speaker 'a', and /speakers/a%0Ab as no endpoint
    ("label-policy", "put", "/speakers/a%0Ab", PAIRS, 422, "invalid_speaker", "'a\\nb' contains '\\n'"),
    ("label-policy", "put", "/speakers/spk000%0A", PAIRS, 422, "invalid_speaker", "'spk000\\n' contains '\\n'"),
    ("label-policy", "put", "/speakers/%0A", PAIRS, 422, "invalid_speaker", "'\\n' contains '\\n'"),
    ("label-policy", "get", "/speakers/spk000%0A", None, 422, "invalid_speaker", "'spk000\\n' contains '\\n'"),
    ("label-policy", "delete", "/speakers/dr-lee%0A", None, 422, "invalid_speaker", "'dr-lee\\n' contains '\\n'"),
    ("label-policy", "post", "/speakers/dr-lee%0A/sentences", PAIRS, 422, "invalid_speaker", "'dr-lee\\n' contains"),
    ("one-json-error", "get", "/health%0A", None, 404, "not_found", "no endpoint '/health\\n': see /docs"),
    # the endpoint is there: "no endpoint" misled
    ("one-json-error", "get", "/models/default%0A", None, 404, "unknown_model", "no model 'default\\n'"),
    ("one-json-error", "post", "/v1/models/default%0A/reload", None, 404, "unknown_model", "no model 'default\\n'"),
    # a body of a request that reads none was taken and ignored (200)
    ("one-json-error", "delete", "/models/default", {"x": 1}, 422, "invalid_request",
     "DELETE /models/{model_id} takes no body: send the request without one"),
    ("one-json-error", "delete", "/speakers/dr-kim", {"replace": True}, 422, "invalid_request",
     "DELETE /speakers/{name} takes no body"),
    # a name no speaker can have, on the endpoints that look a speaker up: a 404 told to PUT it, which is refused
    ("label-policy", "delete", "/v1/speakers/b%0D", None, 422, "invalid_speaker", "'b\\r' contains '\\r'"),
    ("label-policy", "post", "/v1/speakers/dr-lee%00/sentences", PAIRS, 422, "invalid_speaker",
     "'dr-lee\\x00' contains '\\x00'"),
    ("label-policy", "get", "/speakers/dr-lee%00", None, 422, "invalid_speaker", "'dr-lee\\x00' contains"),
    ("label-policy", "delete", "/speakers/%20dr-lee", None, 422, "invalid_speaker", "with surrounding whitespace"),
    ("new-name-not-lookalike",
     "put", "/speakers/%E2%80%AEdr-lee", PAIRS, 422, "invalid_speaker", "it looks like 'dr-lee', a known speaker"),
    ("new-name-not-lookalike",
     "put", "/speakers/spk000%EF%BB%BF", PAIRS, 422, "invalid_speaker", "it looks like 'spk000'"),
    ("label-policy", "put", "/speakers/dr%C2%A0lee", PAIRS, 422, "invalid_speaker", "U+00A0 NO-BREAK SPACE"),
    ("label-policy", "put", "/speakers/%E3%85%A4", PAIRS, 422, "invalid_speaker", "U+3164 HANGUL FILLER"),
    ("new-name-one-script",
     "put", "/speakers/dr-l%D0%B5e", PAIRS, 422, "invalid_speaker", "mixes the scripts Latin and Cyrillic"),
    ("new-name-nfc", "put", "/speakers/Zoe%CC%88", PAIRS, 422, "invalid_speaker", "is not in Unicode's NFC form"),
    ("label-policy", "put", "/speakers/" + "x" * 201, PAIRS, 422, "invalid_speaker", "is longer than 200 characters"),
    ("label-policy", "put", "/speakers/a%FFb", PAIRS, 422, "invalid_speaker", "U+FFFD REPLACEMENT CHARACTER"),
    ("lookalike-speaker-refused",
     "post", "/translate", {"sentences": ["i ."], "speaker": "spk000\u200b"}, 422, "invalid_speaker",
     "it looks like 'spk000'"),
    ("label-policy",
     "post", "/translate", {"sentences": ["i ."], "speakers": ["dr-lee\u2060"]}, 422, "invalid_speaker",
     "U+2060 WORD JOINER"),
    # types
    ("strict-json-types",
     "post", "/translate", {"sentences": ["i ."], "speaker": "spk000", "beam": True}, 422, "invalid_request",
     "beam: Input should be a valid integer"),
    ("strict-json-types",
     "post", "/translate", {"sentences": ["i ."], "speaker": "spk000", "beam": 2.0}, 422, "invalid_request",
     "beam: Input should be a valid integer"),
    ("strict-json-types",
     "post", "/translate", {"sentences": ["i ."], "speaker": "spk000", "nbest": "1"}, 422, "invalid_request",
     "nbest: Input should be a valid integer"),
    ("strict-json-types",
     "post", "/translate", {"sentences": ["i ."], "speaker": 0}, 422, "invalid_request",
     "speaker: Input should be a valid string"),
    ("strict-json-types",
     "put", "/speakers/dr-lee", {**MORE, "replace": "yes"}, 422, "invalid_request",
     "replace: Input should be a valid boolean"),
    ("strict-json-types",
     "put", "/speakers/dr-lee", {**MORE, "replace": 1}, 422, "invalid_request",
     "replace: Input should be a valid boolean"),
    ("strict-json-types",
     "put", "/speakers/dr-lee", {**MORE, "replace": "true"}, 422, "invalid_request",
     "replace: Input should be a valid boolean"),
    # bytes
    ("body-judged-before-parsing",
     "post", "/translate", b'{"sentences": ["\xff"], "speaker": "spk000"}', 400, "not_utf8",
     "the body is not UTF-8 text (byte 0xff at position 16)"),
    ("body-judged-before-parsing",
     "put", "/speakers/zoe", b'{"sources": ["\xc3("], "targets": ["a"]}', 400, "not_utf8", "byte 0xc3"),
    ("body-judged-before-parsing",
     "post", "/translate", DEEP, 422, "invalid_json", "nests arrays and objects more than 32 deep"),
    ("body-judged-before-parsing",
     "post", "/translate", b'{"sentences": ["i ."], "speaker": "spk000", "speaker": "spk003"}', 422, "invalid_json",
     "the key 'speaker' is given twice in one object of the body: give each key once"),
    ("body-judged-before-parsing",
     "put", "/speakers/zoe", b'{"sources": ["i ."], "targets": ["je ."], "replace": false, "replace": true}', 422,
     "invalid_json", "the key 'replace' is given twice"),
    ("empty-sentences-refused",
     "post", "/translate", {"sentences": ["\u200b"], "speaker": "spk000"}, 422, "invalid_request",
     "sentences[0] is only characters that show nothing (U+200B)"),
    ("empty-sentences-refused",
     "put", "/speakers/zoe", {"sources": ["i am tired ."], "targets": ["<pad> <pad>"]}, 422, "invalid_request",
     "targets[0] is holding '<pad>' (word 1), a symbol of fairseq's dictionaries"),
    ("body-judged-before-parsing",
     "post", "/translate", b'{"sentences": ' + DEEP, 422, "invalid_json", "more than 32 deep"),
    ("body-judged-before-parsing",
     "put", "/speakers/zoe", b'{"sources": ' + b"{" * 50_000, 422, "invalid_json", "more than 32 deep"),
    ("body-judged-before-parsing",
     "post", "/speakers/dr-lee/sentences", b"[" * 33 + b"]" * 33, 422, "invalid_json", "more than 32 deep"),
    ("new-name-not-lookalike",  # named "speaker:", a field the request does not have, without the index
     "post", "/translate", {"sentences": ["i ."] * 3, "speakers": ["spk000", "spk001", "\uff53pk000"]}, 422,
     "invalid_speaker", "speakers[2]: speaker label"),
    ("body-judged-before-parsing",  # Python's JSON parser refused the integer with a ValueError: an HTTP 500
     "post", "/translate", b'{"sentences": ["i ."], "speaker": "spk000", "beam": ' + b"9" * 5000 + b"}", 422,
     "invalid_json", "the body holds a number of more than 4300 digits"),
    ("body-judged-before-parsing",
     "put", "/speakers/zoe", b'{"sources": ["i ."], "targets": ["je ."], "replace": ' + b"1" * 4301 + b"}", 422,
     "invalid_json", "a number of more than 4300 digits"),
    # the pages and their files
    ("head-and-static-files",
     "get", "/docs/static/missing.js", None, 404, "not_found", "no endpoint /docs/static/missing.js: see /docs"),
    ("head-and-static-files", "get", "/docs/static/%2e%2e/%2e%2e/app.py", None, 404, "not_found", "no endpoint"),
    ("head-and-static-files", "get", "/docs/static/", None, 404, "not_found", "no endpoint"),
    ("head-and-static-files",
     "post", "/docs/static/swagger-ui.css", None, 405, "method_not_allowed", "Method Not Allowed"),
    ("one-json-error", "post", "/docs", {}, 405, "method_not_allowed", "Method Not Allowed"),
    ("one-json-error", "delete", "/favicon.ico", None, 405, "method_not_allowed", "Method Not Allowed"),
    ("one-json-error", "put", "/", None, 405, "method_not_allowed", "Method Not Allowed"),
    ("one-json-error", "post", "/limits", {}, 405, "method_not_allowed", "Method Not Allowed"),
    ("one-json-error", "get", "/v1/limits/max_chars", None, 404, "not_found", "no endpoint /v1/limits/max_chars"),
    # models
    ("one-json-error",
     "post", "/translate", {"sentences": ["i ."], "speaker": "spk000", "model": "nosuch"}, 404, "unknown_model",
     "no model 'nosuch': this service serves 'default' (GET /models lists them)"),
    ("strict-json-types",
     "post", "/translate", {"sentences": ["i ."], "speaker": "spk000", "model": 3}, 422, "invalid_request",
     "model: Input should be a valid string"),
    ("strict-json-types",
     "post", "/translate", {"sentences": ["i ."], "speaker": "spk000", "model": ["default"]}, 422, "invalid_request",
     "model: Input should be a valid string"),
    ("one-json-error",
     "post", "/translate", {"sentences": ["i ."], "speaker": "spk000", "model": ""}, 404, "unknown_model",
     "no model '': this service serves 'default'"),
    ("one-json-error", "get", "/speakers?model=nosuch", None, 404, "unknown_model", "no model 'nosuch'"),
    ("one-json-error", "get", "/speakers/dr-lee?model=Default", None, 404, "unknown_model", "no model 'Default'"),
    ("one-json-error", "put", "/speakers/zoe?model=nosuch", PAIRS, 404, "unknown_model", "no model 'nosuch'"),
    ("one-json-error", "delete", "/v1/speakers/dr-lee?model=nosuch", None, 404, "unknown_model", "no model 'nosuch'"),
    ("one-json-error", "get", "/models/nosuch", None, 404, "unknown_model", "no model 'nosuch'"),
    ("one-json-error",
     "post", "/models/default/reload", {"checkpoint": "no/such/model.pt"}, 422, "load_failed",
     "checkpoint not found: no/such/model.pt; model 'default' goes on serving"),
    ("strict-json-types",
     "post", "/models/default/reload", {"checkpoint": 3}, 422, "invalid_request",
     "checkpoint: Input should be a valid string"),
    ("one-json-error",
     "post", "/models/default/reload", {"data": "no/such/data"}, 422, "load_failed",
     "data directory not found: no/such/data"),
    ("one-json-error", "post", "/models/nosuch/reload", {}, 404, "unknown_model", "no model 'nosuch'"),
    ("one-json-error",
     "post", "/models", {"id": "two words", "checkpoint": "m.pt"}, 422, "invalid_request",
     "id: 'two words' is not a model id: use letters, digits"),
    ("one-json-error",
     "post", "/models", {"id": "x", "checkpoint": "no/such/model.pt"}, 422, "load_failed",
     "checkpoint not found: no/such/model.pt; nothing was loaded"),
    ("one-json-error",
     "post", "/models", {"id": "default", "checkpoint": "m.pt"}, 409, "model_exists", "POST /models/default/reload"),
    ("model-ids-differ-beyond-case",
     "post", "/models", {"id": "Default", "checkpoint": "m.pt"}, 409, "model_exists",
     "model 'default' is served, whose id differs from 'Default' only by case"),
    ("one-json-error", "post", "/models", {"id": "x"}, 422, "invalid_request", "checkpoint: Field required"),
    ("one-json-error", "delete", "/models/default", None, 409, "default_model", "it can be reloaded, not removed"),
    ("one-json-error", "delete", "/models/nosuch", None, 404, "unknown_model", "no model 'nosuch'"),
    # query parameters: a misspelt or repeated ?model= went to the default model (or the last one), ignored
    ("one-json-error",
     "put", "/speakers/zoe?modle=default", PAIRS, 422, "invalid_request",
     "unknown query parameter 'modle': /speakers/{name} takes model"),
    ("one-json-error",
     "post", "/speakers/dr-lee/sentences?mdoel=default", MORE, 422, "invalid_request",
     "unknown query parameter 'mdoel': /speakers/{name}/sentences takes model"),
    ("one-json-error",
     "delete", "/v1/speakers/dr-lee?modle=default", None, 422, "invalid_request",
     "unknown query parameter 'modle': /speakers/{name} takes model"),
    ("one-json-error",
     "post", "/translate?model=default", {"sentences": ["i ."], "speaker": "spk000"}, 422, "invalid_request",
     "unknown query parameter 'model': /translate takes no query parameters: give \"model\" in the body"),
    ("one-json-error",
     "post", "/v1/translate?beam=2&nbest=1", {"sentences": ["i ."], "speaker": "spk000"}, 422, "invalid_request",
     "unknown query parameters 'beam', 'nbest': "),
    ("one-json-error",
     "get", "/speakers/dr-lee?model=default&model=nosuch", None, 422, "invalid_request",
     "the query parameter 'model' is given 2 times ('default', 'nosuch'): give it once"),
    ("one-json-error",
     "put", "/speakers/zoe?model=default&model=default", PAIRS, 422, "invalid_request",
     "the query parameter 'model' is given 2 times"),
    ("one-json-error",
     "get", "/models?model=default", None, 422, "invalid_request",
     "unknown query parameter 'model': /models takes no query parameters"),
]


@pytest.fixture(scope="module")
def service(toy, trained):
    translator = SpeakerTranslator.from_pretrained(trained("lstm_fact_bias"), data=toy["bin"], max_len_b=6)
    with TestClient(create_app(translator, token=TOKEN, limits=LIMITS), raise_server_exceptions=False) as client:
        assert client.put("/speakers/dr-lee", json=PAIRS, headers=AUTH).status_code == 201
        yield client


@pytest.mark.parametrize("method,path,body,status,code,message", [row[1:] for row in HTTP_PROBES],
                         ids=[f"{r[1]} {r[2][:40]} {r[4]} {r[5]} {r[6][:40]}" for r in HTTP_PROBES])
@pytest.mark.parametrize("directly", [True, False], ids=["as served", "through FastAPI's route"])
def test_a_bad_request_gets_one_json_error(service, method, path, body, status, code, message, directly):
    service.app.state.translate_directly = directly
    try:
        if isinstance(body, bytes):
            response = service.request(method, path, content=body,
                                       headers={"Content-Type": "application/json", **AUTH})
        else:
            response = service.request(method, path, json=body, headers=AUTH)
    finally:
        service.app.state.translate_directly = True
    assert response.status_code == status, response.text
    assert set(response.json()) == {"error"} and response.json()["error"]["code"] == code, response.text
    assert message in response.json()["error"]["message"], response.text


def test_a_sentence_longer_than_the_model_takes_gets_413_by_its_place_in_the_request(toy, trained):
    """A service whose --max-chars lets through more tokens than the model takes: fairseq's batching ended in an
    assertion (a 500); the refusal names the sentence's place in its request, not in the shared batch."""
    translator = SpeakerTranslator.from_pretrained(trained("lstm_fact_bias"), data=toy["bin"], max_len_b=4)
    with TestClient(create_app(translator, limits=Limits(max_chars=100_000)), raise_server_exceptions=False) as client:
        long = "i " * 30000
        for sentences, at in (([long], 0), (["i am tired .", long], 1)):
            response = client.post("/translate", json={"sentences": sentences, "speaker": "spk000", "nbest": 2})
            assert response.status_code == 413, response.text
            assert response.json()["error"]["code"] == "sentence_too_long"
            assert response.json()["error"]["message"].startswith(f"sentences[{at}]: 30001 tokens"), response.text
        fine = client.post("/translate", json={"sentences": ["i am tired ."], "speaker": "spk000"})
        assert fine.status_code == 200 and 'status="500"' not in client.get("/metrics").text


def test_a_speaker_name_holding_a_slash_is_one_name_on_every_endpoint(service):
    """docs/serving.md: the rest of the path is the name, but a POST ending in /sentences is the sentences of the name
    before it. A speaker 'a/sentences' is onboarded, shown, given sentences and deleted under that name."""
    try:
        assert service.put("/speakers/a%2Fsentences", json=PAIRS, headers=AUTH).status_code == 201
        shown = service.get("/speakers/a/sentences")
        assert shown.status_code == 200 and shown.json()["name"] == "a/sentences", shown.text
        posted = service.post("/speakers/a/sentences/sentences", json=MORE, headers=AUTH)
        assert posted.status_code == 200 and posted.json()["speaker"]["name"] == "a/sentences", posted.text
        assert posted.json()["speaker"]["sentences"] == 3
        wrong = service.post("/speakers/a/sentences", json=MORE, headers=AUTH)  # the sentences of 'a', unknown
        assert wrong.status_code == 404 and "no onboarded speaker 'a'" in wrong.json()["error"]["message"]
    finally:
        deleted = service.delete("/speakers/a/sentences", headers=AUTH)
    assert deleted.status_code == 200 and deleted.json()["deleted"] == "a/sentences", deleted.text


#: POST /models and its reload with a data folder the speaker task cannot read: (the promise of docs/reliability.md,
#: path, the body's data folder ("{empty}": an empty folder, "{ckptdir}": the checkpoint's folder), text of the 422)
MODEL_DATA_PROBES = [
    ("data-folder-has-dictionaries", "/models", "{empty}",
     "{empty}: no binarized split (SPLIT.SRC-TGT.SRC.bin) to read the languages from, and no dict.SRC.txt and "
     "dict.TGT.txt: give the data folder the model was trained on"),
    ("data-folder-has-dictionaries", "/models", "{ckptdir}", "{ckptdir}: no binarized split"),
    ("data-folder-has-dictionaries", "/models/default/reload", "{empty}", "{empty}: no binarized split"),
]


@pytest.mark.parametrize("path,data,message", [row[1:] for row in MODEL_DATA_PROBES])
def test_a_model_with_a_data_folder_without_dictionaries_is_refused_in_one_message(service, trained, tmp_path, path,
                                                                                  data, message):
    """fairseq's own text ("Could not infer language pair, please provide it explicitly") said nothing of the
    dictionaries; nothing is loaded and the default model goes on serving."""
    checkpoint = trained("lstm_fact_bias")
    (tmp_path / "empty").mkdir()
    places = {"{empty}": str(tmp_path / "empty"), "{ckptdir}": os.path.dirname(checkpoint)}
    body = {"checkpoint": checkpoint, "data": places[data], **({"id": "other"} if path == "/models" else {})}
    response = service.post(path, json=body, headers=AUTH)
    assert response.status_code == 422 and response.json()["error"]["code"] == "load_failed", response.text
    expected = message
    for name, value in places.items():
        expected = expected.replace(name, value)
    assert expected in response.json()["error"]["message"], response.text
    assert [m["id"] for m in service.get("/models").json()["models"]] == ["default"]


#: HEAD requests: (the promise of docs/reliability.md, path, status, error code)
HEAD_PROBES = [
    ("head-and-static-files", "/translate", 405, "method_not_allowed"),
    ("head-and-static-files", "/speakers/nobody", 404, "unknown_speaker"),
    ("head-and-static-files", "/docs/static/missing.js", 404, "not_found"),
    ("head-and-static-files", "/nothing", 404, "not_found"),
    ("head-and-static-files", "/speakers/dr-lee?modle=default", 422, "invalid_request"),
]


@pytest.mark.parametrize("path,status,code", [row[1:] for row in HEAD_PROBES])
def test_a_head_request_is_refused_as_its_get_without_a_body(service, path, status, code):
    head, got = service.head(path), service.get(path)
    assert head.status_code == got.status_code == status and got.json()["error"]["code"] == code
    assert head.content == b"" and head.headers["content-length"] == got.headers["content-length"]


def test_the_refused_requests_changed_nothing(service):
    """No speaker onboarded under a refused name, dr-lee still fitted on its two pairs (not replaced by a loose
    "replace"), and the metrics count the refusals as such (no 500)."""
    speakers = service.get("/speakers").json()["speakers"]
    assert [(s["name"], s["sentences"]) for s in speakers if s["kind"] == "onboarded"] == [("dr-lee", 2)]
    assert [(m["id"], m["loaded_at"]) for m in service.get("/models").json()["models"]] == [
        ("default", service.app.state.models.describe().loaded_at)]  # no model added, removed or reloaded
    for body in (b"\xff", b"{"):  # refused here too: the rows that send them may run on another test worker
        service.post("/translate", content=body, headers={"Content-Type": "application/json"})
    metrics = service.get("/metrics").text
    assert 'status="500"' not in metrics
    assert 'code="not_utf8"' in metrics and 'code="invalid_json"' in metrics


def test_the_query_parameters_a_route_takes_are_accepted_and_the_pages_take_any(service):
    """The refusal of unknown query parameters is the API routes': the page, /docs and their files take any (a
    browser's cache-busting ?v=, Swagger UI's own)."""
    assert service.get("/speakers/dr-lee?model=default").json()["name"] == "dr-lee"
    assert service.get("/v1/speakers?model=default").status_code == 200
    for path in ("/?model=default", "/docs?x=1", "/redoc?x=1", "/favicon.ico?v=2", "/openapi.json?v=2",
                 "/docs/static/swagger-ui.css?v=1"):
        assert service.get(path).status_code == 200, path
        assert service.head(path).status_code == 200, path


# -- a real server: slow and malformed clients ---------------------------------------------------------------


class _Server:
    """The service under uvicorn on 127.0.0.1, as fairseq-speaker-serve runs it, in a thread of this process."""

    def __init__(self, app, header_timeout: float):
        import uvicorn

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning",
                                http=bounded_http_protocol(header_timeout))
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self):
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, "the server did not start"
            time.sleep(0.05)
        return self

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(timeout=30)

    def post(self, path: str, body: dict):
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())


def _answer_of(sock: socket.socket, limit: float):
    """What the server sends on ``sock`` until it closes it: (seconds waited, status, JSON body), or (limit, None,
    None) if it is still open after ``limit`` seconds."""
    start, data = time.monotonic(), b""
    sock.settimeout(0.2)
    while time.monotonic() - start < limit:
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            continue
        except ConnectionError:
            break
        if not chunk:
            break
        data += chunk
    else:
        return limit, None, None
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split()[1]) if head else None
    return time.monotonic() - start, status, json.loads(body) if body else None


def _slow_client(port: int, kind: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    if kind == "headers":  # a request line and half the headers, then nothing
        sock.sendall(b"POST /translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: appl")
    elif kind == "body":  # whole headers announcing 100 bytes, then 10
        sock.sendall(b"POST /translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100\r\n\r\n" + b'{"sentenc')
    elif kind == "answered before its body":  # a write refused before its body is read, the body trickling in
        sock.sendall(b"PUT /speakers/zoe HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 1000\r\n\r\n" + b'{"sources"')
    elif kind in MALFORMED_REQUESTS or kind in TRANSFER_CODED:
        sock.sendall({**MALFORMED_REQUESTS, **TRANSFER_CODED}[kind])
    elif kind == "huge headers":
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"X-Filler: " + b"a" * 70_000)
    return sock  # "silent": connects and sends nothing


#: bytes HTTP/1.1's parser refuses before the service sees a request
MALFORMED_REQUESTS = {
    "two content lengths": b"POST /translate HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
    "length and chunked": b"POST /translate HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n"
                          b"Transfer-Encoding: chunked\r\n\r\n{}",
    "negative length": b"POST /translate HTTP/1.1\r\nHost: h\r\nContent-Length: -5\r\n\r\n",
    "lower-case method": b"post /translate HTTP/1.1\r\nHost: h\r\n\r\n",
    "http/2 preface": b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    "tls hello": bytes.fromhex("16030100a5010000a10303") + bytes(32) + b"\x00\x00\x02\x13\x01\x01\x00",
}

_CHUNKED_JSON = b'2b\r\n{"sentences": ["i ."], "speaker": "spk000"}\r\n0\r\n\r\n'
#: bodies with a transfer coding other than chunked, which HTTP/1.1's parser leaves as it was sent
TRANSFER_CODED = {
    f"transfer-encoding {coding}": b"POST /translate HTTP/1.1\r\nHost: h\r\nConnection: close\r\n"
                                   b"Content-Type: application/json\r\n"
                                   b"Transfer-Encoding: " + coding.encode() + b"\r\n\r\n" + _CHUNKED_JSON
    for coding in ("br, chunked", "gzip, chunked")
}

#: slow and oversized clients (_slow_client's kinds): (the promise of docs/reliability.md, kind, status, error code,
#: seconds within which the answer comes)
SLOW_CLIENT_PROBES = [
    ("one-json-error", "two content lengths", 400, "malformed_request", 0.0),
    ("one-json-error", "length and chunked", 400, "malformed_request", 0.0),
    ("one-json-error", "negative length", 400, "malformed_request", 0.0),
    ("one-json-error", "lower-case method", 400, "malformed_request", 0.0),
    ("one-json-error", "http/2 preface", 400, "malformed_request", 0.0),
    ("one-json-error", "tls hello", 400, "malformed_request", 0.0),
    ("body-judged-before-parsing", "transfer-encoding br, chunked", 415, "unsupported_encoding", 0.0),
    ("body-judged-before-parsing", "transfer-encoding gzip, chunked", 415, "unsupported_encoding", 0.0),
    ("slow-clients-let-go", "headers", 408, "request_timeout", 1.0),
    ("slow-clients-let-go", "silent", 408, "request_timeout", 1.0),
    ("slow-clients-let-go", "body", 408, "request_timeout", 2.0),
    ("slow-clients-let-go", "huge headers", 431, "headers_too_large", 0.0),
    ("slow-clients-let-go", "answered before its body", 403, "writes_disabled", 0.0),
]


@pytest.mark.parametrize("kind,status,code,within", [row[1:] for row in SLOW_CLIENT_PROBES])
def test_a_slow_or_oversized_client_gets_its_answer_and_its_connection_closed_in_time(toy, trained, kind, status,
                                                                                        code, within):
    """A client that never finishes its headers, one that sends nothing, one whose Content-Length promises more than
    it sends, one whose headers have no end, one answered before its body is read (a write without the token): each
    is answered and let go within its bound (--header-timeout 1, --request-timeout 2 here), not held for ever."""
    translator = SpeakerTranslator.from_pretrained(trained("lstm_fact_bias"), data=toy["bin"], max_len_b=6)
    app = create_app(translator, batching=BatchOptions(request_timeout=2.0))
    with _Server(app, header_timeout=1.0) as server:
        with _slow_client(server.port, kind) as sock:
            waited, got, body = _answer_of(sock, limit=within + 5.0)
    assert got == status, (kind, waited, body)
    assert body["error"]["code"] == code and waited < within + 2.0, (waited, body)


def test_normal_clients_are_answered_at_their_usual_speed_beside_slow_clients(toy, trained):
    """A bounded load test on 127.0.0.1: one client sending one-sentence requests in turn, alone and then beside
    six slow clients (half that never finish their headers, half whose bodies stop short, each reconnecting once
    let go), and alone again; its median latency beside them stays within a factor of 3 (and 100 ms) of its median
    alone, and every slow client is let go in time."""
    translator = SpeakerTranslator.from_pretrained(trained("lstm_fact_bias"), data=toy["bin"], max_len_b=6)
    app = create_app(translator, batching=BatchOptions(request_timeout=1.5, max_wait_ms=0))
    request = {"sentences": ["i am tired ."], "speaker": "spk000"}
    with _Server(app, header_timeout=1.0) as server:
        def latencies(n):
            times = []
            for _ in range(n):
                start = time.perf_counter()
                assert server.post("/translate", request)[0] == 200
                times.append(time.perf_counter() - start)
            return times

        latencies(3)  # warm
        alone = latencies(20)
        stop, let_go, held = threading.Event(), [], []

        def slow(kind):
            while not stop.is_set() and len(let_go) < 60:
                with _slow_client(server.port, kind) as sock:
                    waited, got, _ = _answer_of(sock, limit=6.0)
                (let_go if got == 408 else held).append(waited)

        slow_threads = [threading.Thread(target=slow, args=(kind,), daemon=True) for kind in ["headers", "body"] * 3]
        for thread in slow_threads:
            thread.start()
        time.sleep(0.3)
        beside = latencies(20)
        deadline = time.monotonic() + 10  # long enough for each slow client to be let go at least once
        while len(let_go) < 6 and time.monotonic() < deadline:
            beside += latencies(1)
        stop.set()
        for thread in slow_threads:
            thread.join(timeout=10)
        alone += latencies(20)  # alone again: the machine's other work weighs on both sides alike
    median_alone, median_beside = statistics.median(alone), statistics.median(beside)
    print(f"median latency alone {1000 * median_alone:.1f} ms, beside 6 slow clients {1000 * median_beside:.1f} ms "
          f"({len(beside)} requests); slow clients let go {len(let_go)} times, after at most "
          f"{max(let_go, default=0):.2f} s; held past 6 s: {len(held)}")
    assert not held and len(let_go) >= 6
    assert max(let_go) < 1.5 + 2.0
    assert median_beside < 3 * median_alone + 0.1


# -- a store that cannot be read -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def stored(toy, trained, tmp_path_factory):
    """A store holding dr-lee and dr-kim, onboarded through the service; dr-lee's sentences are long, so that its
    record runs over several pages of the file."""
    folder = tmp_path_factory.mktemp("stores")
    path = str(folder / "speakers.db")
    translator = SpeakerTranslator.from_pretrained(trained("lstm_fact_bias"), data=toy["bin"], max_len_b=6)
    with TestClient(create_app(translator, SpeakerStore(path), token=TOKEN)) as client:
        assert client.put("/speakers/dr-kim", json=MORE, headers=AUTH).status_code == 201
        long = {"sources": ["i am tired . " * 70] * 16, "targets": ["je suis fatiguée . " * 50] * 16}
        assert client.put("/speakers/dr-lee", json=long, headers=AUTH).status_code == 201, "fit"
        expected = client.post("/translate", json={"sentences": MORE["sources"], "speaker": "dr-kim"}).json()
    return {"path": path, "folder": folder, "dr-kim": expected}


def _damaged(stored, name, damage):
    path = str(stored["folder"] / name)
    shutil.copy(stored["path"], path)
    damage(path)
    return path


def _sql(statement, *parameters):
    def damage(path):
        with sqlite3.connect(path) as db:
            db.execute(statement, parameters)
        db.close()
    return damage


def _beyond_float32(name):
    """The speaker's rows written again in float64, at 1e300: finite as stored, infinite in the model (every request
    naming the speaker was a 500, the other sentences of the request too; a copy carried them)."""
    def damage(path):
        with sqlite3.connect(path) as db:
            (blob,) = db.execute("SELECT rows FROM speakers WHERE name = ?", (name,)).fetchone()
            arrays = dict(np.load(io.BytesIO(blob), allow_pickle=False))
            for key in arrays:
                if key.startswith(PARAM_PREFIX):
                    arrays[key] = np.full(arrays[key].shape, 1e300)
            out = io.BytesIO()
            np.savez(out, **arrays)
            db.execute("UPDATE speakers SET rows = ? WHERE name = ?", (out.getvalue(), name))
        db.close()
    return damage


def _broken_page(path):
    """A page in the middle of dr-lee's sentences (an overflow page of its record: 4,096 bytes, the first 4 the number
    of the next) gets an impossible next page."""
    with open(path, "r+b") as f:
        data = f.read()
        pages = sorted({m.start() // 4096 for m in re.finditer("fatiguée . je suis".encode("utf-8"), data)})
        assert len(pages) >= 3, pages
        f.seek(pages[len(pages) // 2] * 4096)
        f.write(b"\xff\xff\xff\xf0")


#: a store damaged each way: (the promise of docs/reliability.md, the damage, text of the refusal, whether the service
#: can start without the speakers it damaged)
DAMAGE_PROBES = {
    "pairs that are not JSON": ("unreadable-store-refused",
                                _sql("UPDATE speakers SET pairs = 'not json [' WHERE name = 'dr-lee'"),
                                "the record of speaker 'dr-lee' is damaged: its sentence pairs are not a JSON list",
                                True),
    "pairs of another shape": ("unreadable-store-refused",
                               _sql("UPDATE speakers SET pairs = '[1, 2]' WHERE name = 'dr-lee'"),
                               "the record of speaker 'dr-lee' is damaged", True),
    "rows that are no speaker vectors": ("unreadable-store-refused",
                                         _sql("UPDATE speakers SET rows = x'00ff' WHERE name = 'dr-lee'"),
                                         "speaker 'dr-lee'", True),
    "rows beyond float32's range": ("unreadable-store-refused", _beyond_float32("dr-lee"),
                                    "speaker(s) 'dr-lee' holds NaN or infinite values, or values beyond float32's "
                                    "range", True),
    "a damaged page": ("unreadable-store-refused", _broken_page, "database disk image is malformed", True),
    # columns served as stored: a text count failed the listing of every speaker (500), a negative one and an
    # impossible date were answered as they were
    "a count of sentences that is no number": ("unreadable-store-refused",
                                               _sql("UPDATE speakers SET sentences = 'abc' WHERE name = 'dr-lee'"),
                                               "the record of speaker 'dr-lee' is damaged: its count of sentences is "
                                               "'abc', not a whole number from 0", True),
    "a negative count of sentences": ("unreadable-store-refused",
                                      _sql("UPDATE speakers SET sentences = -5 WHERE name = 'dr-lee'"),
                                      "its count of sentences is -5", True),
    "a time that is no time": ("unreadable-store-refused",
                               _sql("UPDATE speakers SET updated = '2026-13-45T99:99:99Z' WHERE name = 'dr-lee'"),
                               "its time of its last change is '2026-13-45T99:99:99Z', not an ISO 8601 time", True),
    "a fingerprint that is not JSON": ("unreadable-store-refused",
                                       _sql("UPDATE models SET fingerprint = '{\"variant' WHERE id = 'default'"),
                                       "the record of the model it was made for (its fingerprint) is not readable",
                                       False),
    "a schema that is no number": ("unreadable-store-refused",
                                   _sql("UPDATE meta SET value = '2.0' WHERE key = 'schema'"),
                                   "its record of its schema (meta 'schema') is '2.0', not a schema's number", False),
    "a count of writes that is no number": ("unreadable-store-refused",
                                            _sql("UPDATE meta SET value = 'x' WHERE key = 'generation'"),
                                            "its count of writes (meta 'generation') is missing or not a whole number",
                                            False),
    "a count of writes below 0": ("unreadable-store-refused",
                                  _sql("UPDATE meta SET value = '-3' WHERE key = 'generation'"),
                                  "its count of writes (meta 'generation') is missing or not a whole number", False),
}


@pytest.mark.parametrize("damage", list(DAMAGE_PROBES))
def test_a_store_that_cannot_be_read_is_refused_with_how_to_recover_and_can_be_served_without_its_broken_speakers(
        toy, trained, stored, damage, caplog):
    _, make, what, skippable = DAMAGE_PROBES[damage]
    path = _damaged(stored, damage.replace(" ", "-") + ".db", make)
    translator = SpeakerTranslator.from_pretrained(trained("lstm_fact_bias"), data=toy["bin"], max_len_b=6)
    with pytest.raises(StoreError) as refusal:
        create_app(translator, SpeakerStore(path))
    message = str(refusal.value)
    assert message.startswith(f"--store {path}: ") and what in message, message
    assert f"sqlite3 {path} 'PRAGMA integrity_check'" in message and "backup" in message
    assert ("--skip-broken-speakers" in message) == skippable
    if not skippable:
        return
    with caplog.at_level(logging.ERROR, logger="fairseq_speaker.service.speaker_service"):
        app = create_app(translator, SpeakerStore(path), skip_broken_speakers=True)
    assert "skipped speaker 'dr-lee'" in caplog.text
    with TestClient(app) as client:
        names = [s["name"] for s in client.get("/speakers").json()["speakers"] if s["kind"] == "onboarded"]
        kim = client.post("/translate", json={"sentences": MORE["sources"], "speaker": "dr-kim"}).json()
        lee = client.post("/translate", json={"sentences": MORE["sources"], "speaker": "dr-lee"}).json()
    assert names == ["dr-kim"] and kim == stored["dr-kim"]
    assert lee["translations"][0]["unknown_speaker_policy_applied"] is True


def test_the_command_refuses_a_damaged_store_in_one_line_and_starts_with_skip_broken_speakers(toy, trained, stored,
                                                                                               capsys, monkeypatch):
    path = _damaged(stored, "command.db", DAMAGE_PROBES["pairs that are not JSON"][1])
    argv = [trained("lstm_fact_bias"), "--data", toy["bin"], "--store", path, "--threads", "1"]
    line = refused(serve.main, argv, capsys)
    assert line.startswith(f"fairseq-speaker-serve: error: --store {path}: the record of speaker 'dr-lee' is "
                           f"damaged"), line
    assert "--skip-broken-speakers" in line
    served = []

    class Started(Exception):
        pass

    def run(self):  # the port would open here: what the service holds is what matters
        served.append(self.config.app.state.service.onboarded)
        raise Started

    import uvicorn
    monkeypatch.setattr(uvicorn.Server, "run", run)
    try:
        with pytest.raises(Started):
            serve.main(argv + ["--skip-broken-speakers"])
    finally:
        gc.unfreeze()  # the command froze what it had loaded, as it does before it serves
    assert served == [["dr-kim"]]


#: fairseq-speaker-serve's options of the service: (the promise of docs/reliability.md, arguments, text of the one line)
SERVE_OPTION_PROBES = [
    ("numbers-checked",
     ["m.pt", "--data", "d", "--header-timeout", "0"],
     "--header-timeout must be a positive number of seconds, got 0.0"),
    ("numbers-checked",
     ["m.pt", "--data", "d", "--header-timeout", "nan"], "--header-timeout must be a positive number of seconds"),
    ("one-line-user-errors",
     ["m.pt", "--data", "d", "--log-format", "xml"], "argument --log-format: invalid choice: 'xml'"),
    ("one-line-user-errors", ["m.pt", "--data", "d", "--log-format"], "argument --log-format: expected one argument"),
    ("one-line-user-errors", ["m.pt", "--data", "d", "--access-log", "yes"], "unrecognized arguments: yes"),
    ("one-line-user-errors",
     [], "give the model to serve: CHECKPOINT --data DATA_DIR, or --model ID=CHECKPOINT[:DATA_DIR]"),
    ("one-line-user-errors", ["m.pt"], "the following arguments are required with CHECKPOINT: --data DATA_DIR"),
    ("one-line-user-errors",
     ["--model", "m.pt"], "--model m.pt: no '=': write --model ID=CHECKPOINT or --model ID=CHECKPOINT:DATA_DIR"),
    ("one-line-user-errors",  # the id is there, the checkpoint not: "no model id" misled
     ["--model", "v1"], "--model v1: no '=': write --model ID=CHECKPOINT or --model ID=CHECKPOINT:DATA_DIR"),
    ("one-line-user-errors", ["--model", "=m.pt:d"], "--model =m.pt:d: no model id"),
    ("one-line-user-errors",
     ["--model", "en de=m.pt:d"], "--model en de=m.pt:d: 'en de' is not a model id: use letters, digits"),
    ("one-line-user-errors", ["--model", "en/de=m.pt:d"], "'en/de' is not a model id"),
    ("one-line-user-errors", ["--model", "x=:d"], "--model x=:d: no checkpoint: write --model ID=CHECKPOINT"),
    ("one-line-user-errors",
     ["--model", "x=m.pt"], "--model x=m.pt: no data directory: write --model ID=CHECKPOINT or --model "
                            "ID=CHECKPOINT:DATA_DIR, or give --data DATA_DIR for the models that name none"),
    ("one-line-user-errors",
     ["m.pt", "--data", "d", "--model", "default=n.pt"], "--model default=n.pt: the model id 'default' is given twice "
                                                         "(the model of CHECKPOINT)"),
    ("one-line-user-errors",
     ["--model", "a=m.pt:d", "--model", "a=n.pt:d"], "the model id 'a' is given twice: give each model an id"),
    ("model-ids-differ-beyond-case",
     ["--model", "en-fr=m.pt:d", "--model", "EN-fr=n.pt:d"], "--model EN-fr=n.pt:d: the model ids 'en-fr' and 'EN-fr' "
                                                             "differ only by case"),
    ("model-ids-differ-beyond-case",
     ["m.pt", "--data", "d", "--model", "DEFAULT=n.pt"], "the model ids 'default' and 'DEFAULT' differ only by case"),
    ("one-line-user-errors",
     ["--model", "a=m.pt:d", "--default-model", "b"], "--default-model b: no such model: the models are 'a'"),
    ("one-line-user-errors",
     ["--model", "a=m.pt:no/such/data"], "data directory not found: no/such/data (of --model a)"),
    # every request was then refused (422) for the search's lengths, the service up
    ("numbers-checked", ["--model", "a=m.pt:d", "--max-len-b", "0"],
     "--max-len-b must be at least 1 (a translation of at least one word for every source), got 0"),
    ("numbers-checked", ["--model", "a=m.pt:d", "--max-len-a", "nan"],
     "--max-len-a must be a finite number of at least 0, got nan"),
    # a store in memory: the service started with writes enabled, and lost every onboarded speaker at its restart
    ("store-url-checked", ["--model", "a=m.pt:d", "--store", ":memory:", "--token-env", "TOKEN"],
     "--store :memory: is an SQLite database in memory, gone when the service stops, with every speaker onboarded: "
     "give a file (speakers.db, or sqlite:///speakers.db) or a PostgreSQL database (postgresql://"),
    ("store-url-checked", ["--model", "a=m.pt:d", "--store", "sqlite:///:memory:"],
     "--store sqlite:///:memory: is an SQLite database in memory, gone when the service stops"),
    ("store-url-checked", ["--model", "a=m.pt:d", "--store", "file::memory:?cache=shared"],
     "--store file::memory:?cache=shared is an SQLite database in memory"),
    ("store-url-checked", ["--model", "a=m.pt:d", "--store", "file:speakers.db?mode=memory"],
     "--store file:speakers.db?mode=memory is an SQLite database in memory"),
    ("store-url-checked", ["--model", "a=m.pt:d", "--store", "file:speakers.db?immutable=1"],  # writes failed
     "--store file:speakers.db?immutable=1: an SQLite URI's parameters (immutable) are not taken here"),
]


@pytest.mark.parametrize("argv,message", [row[1:] for row in SERVE_OPTION_PROBES])
def test_the_commands_new_options_are_checked(argv, message, capsys):
    assert message in refused(serve.main, argv, capsys)


#: --model ID=CHECKPOINT:DATA where a path holds ':' itself, in a folder holding the files ck.pt, ck.pt:bin and
#: a:b/c:k.pt, and the folder bin/: (the promise of docs/reliability.md, the arguments, text of the one line)
MODEL_PATH_PROBES = [
    # the data was named "b/c:k.pt:/nonexist" (the split at the first ':')
    ("one-line-user-errors", ["--model", "en=a:b/c:k.pt:/nonexist"],
     "--model en=a:b/c:k.pt:/nonexist: the data directory /nonexist is missing (the checkpoint a:b/c:k.pt is a "
     "file): give the folder the model was trained on, with its dict.*.txt"),
    ("one-line-user-errors", ["--model", "en=ck.pt:ck.pt"],
     "--model en=ck.pt:ck.pt: the data directory ck.pt is a file (the checkpoint ck.pt is a file)"),
    # "no data directory", and with --data the file ck.pt:bin was served, bin dropped without a word
    ("one-line-user-errors", ["--model", "en=ck.pt:bin"],
     "--model en=ck.pt:bin reads two ways: the checkpoint ck.pt:bin or the checkpoint ck.pt with the data directory "
     "bin: rename one, or write --model ID=CHECKPOINT and give the data directory with --data"),
    ("one-line-user-errors", ["--model", "en=ck.pt:bin", "--data", "bin"], "--model en=ck.pt:bin reads two ways"),
    ("one-line-user-errors", ["--model", "a/b=ck.pt:bin"], "--model a/b=ck.pt:bin: 'a/b' is not a model id"),  # the id
    # first: it was "reads two ways"
    # read well, then "data directory not found: d" (fairseq reads d:2024/bin as the folders d and 2024/bin)
    ("one-line-user-errors", ["--model", "en=ck.pt:d:2024/bin", "--port", "18177"],
     "data directory d:2024/bin: fairseq reads a path holding ':' as several data folders (shards), and the model is "
     "read with one: give a folder whose path holds no ':' (rename it, or link it: ln -s 'd:2024/bin' bin) (of --model "
     "en)"),
]


@pytest.mark.parametrize("argv,message", [row[1:] for row in MODEL_PATH_PROBES])
def test_a_model_path_holding_a_colon_is_read_one_way_or_refused(argv, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a:b").mkdir()
    (tmp_path / "bin").mkdir()
    (tmp_path / "d:2024" / "bin").mkdir(parents=True)
    for name in ("ck.pt", "ck.pt:bin", "a:b/c:k.pt"):
        (tmp_path / name).write_bytes(b"not loaded: the options are refused first")
    assert message in refused(serve.main, argv, capsys)


#: loading and removing models without the token: (the promise of docs/reliability.md, method, path, body, headers,
#: status, error code)
TOKEN_PROBES = [
    ("one-json-error", "post", "/models/default/reload", {}, {}, 401, "unauthorized"),
    ("one-json-error",
     "post", "/models/default/reload", {"checkpoint": "m.pt"}, {"Authorization": "Bearer wrong-token-0123456789"},
     401, "unauthorized"),
    ("one-json-error", "post", "/models", {"id": "x", "checkpoint": "m.pt"}, {}, 401, "unauthorized"),
    ("one-json-error", "delete", "/models/default", None, {"Authorization": TOKEN}, 401, "unauthorized"),
    ("one-json-error", "post", "/v1/models/nosuch/reload", None, {}, 401, "unauthorized"),
]


#: two Authorization headers, the right token in either: (the promise of docs/reliability.md, the headers in order)
TWO_TOKENS_PROBES = [
    ("one-json-error", [("Authorization", f"Bearer {TOKEN}"), ("Authorization", "Bearer wrong-token-0123456789")]),
    ("one-json-error", [("Authorization", "Bearer wrong-token-0123456789"), ("Authorization", f"Bearer {TOKEN}")]),
]


@pytest.mark.parametrize("headers", [row[1] for row in TWO_TOKENS_PROBES])
def test_two_authorization_headers_are_refused_whichever_holds_the_token(service, headers):
    """The first one was read, so the order of two headers decided whether a write went through."""
    response = service.put("/speakers/two-tokens", json=PAIRS, headers=headers)
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_request", response.text
    assert "2 Authorization headers: send one" in response.json()["error"]["message"]
    assert service.get("/speakers/two-tokens").status_code == 404


@pytest.mark.parametrize("method,path,body,headers,status,code", [row[1:] for row in TOKEN_PROBES])
def test_loading_and_removing_models_needs_the_token(service, method, path, body, headers, status, code):
    """The token is checked before anything else (the body, the model's id): a client without it learns nothing."""
    response = service.request(method, path, json=body, headers=headers)
    assert response.status_code == status and response.json()["error"]["code"] == code, response.text
    assert response.headers["www-authenticate"] == "Bearer"


def test_models_whose_ids_differ_only_by_case_are_refused_from_python(toy, trained):
    """create_app's models as --model's: ids that read as one model are refused before anything is served."""
    translator = SpeakerTranslator.from_pretrained(trained("lstm_fact_bias"), data=toy["bin"], max_len_b=6)
    with pytest.raises(UserError, match="the model ids 'en-fr' and 'EN-fr' differ only by case"):
        with TestClient(create_app({"en-fr": translator, "EN-fr": translator})):
            pass


def test_loading_models_is_disabled_without_a_token(toy, trained):
    translator = SpeakerTranslator.from_pretrained(trained("lstm_fact_bias"), data=toy["bin"], max_len_b=6)
    with TestClient(create_app(translator), raise_server_exceptions=False) as client:
        response = client.post("/models/default/reload", json={}, headers=AUTH)
    assert response.status_code == 403 and response.json()["error"]["code"] == "writes_disabled"
    assert "--token-file" in response.json()["error"]["message"]


def test_a_body_that_never_ends_is_refused_by_the_middleware_within_the_request_timeout():
    """The bound on a body, without a server: the endpoint reading it gets 408 once --request-timeout has passed."""
    async def endpoint(scope, receive, send):
        await receive()
        await receive()  # never comes
        raise AssertionError("the body was never refused")

    from fairseq_speaker.service.metrics import Metrics

    observed = serve._Observed(endpoint, Metrics(), max_body_bytes=1000, body_timeout=0.3)
    messages = [{"type": "http.request", "body": b'{"sen', "more_body": True}]

    async def receive():
        if messages:
            return messages.pop()
        await asyncio.sleep(60)

    async def send(message):
        pass

    async def main():
        start = time.monotonic()
        with pytest.raises(serve.BodyRefused) as refusal:
            await observed({"type": "http", "method": "POST", "path": "/translate", "headers": []}, receive, send)
        return time.monotonic() - start, refusal.value

    waited, refusal = asyncio.run(main())
    assert refusal.status_code == 408 and refusal.code == "request_timeout"
    assert refusal.headers == {"Connection": "close"}
    assert 0.25 < waited < 2.0


#: bodies judged before they are parsed: (the promise of docs/reliability.md, body, what is wrong in it, or None)
BODY_PROBES = [
    ("body-judged-before-parsing",
     b'{"sentences": ["' + b"[" * 100 + b'"], "speaker": "spk000"}', None),  # brackets in a string are text
    ("body-judged-before-parsing",
     b'{"sentences": ["a \\" ' + b"{" * 100 + b'"], "speaker": "[[["}', None),  # an escaped quote ends no string
    ("body-judged-before-parsing", b"[" * 32 + b"]" * 32, None),
    ("body-judged-before-parsing", b"[" * 33, "more than 32 deep"),
    ("body-judged-before-parsing",
     b'{"a": "\\\\"' + b", [" * 40, "more than 32 deep"),  # the string ends at the quote after the escaped backslash
    ("body-judged-before-parsing", "é".encode("latin-1"), "byte 0xe9 at position 0"),
    ("body-judged-before-parsing",
     b'"\xed\xa0\x80"', "byte 0xed at position 1"),  # a surrogate written in UTF-8: not UTF-8
]


@pytest.mark.parametrize("body,problem", [row[1:] for row in BODY_PROBES])
def test_a_body_is_judged_before_it_is_parsed(body, problem):
    found = serve.body_problem(body)
    assert (found is None) if problem is None else (problem in found[2]), found


#: a store holding speakers of a model id the service does not serve: (the promise of docs/reliability.md, what, the id
#: they were onboarded under, the id served next)
UNSERVED_PROBES = [
    ("unserved-speakers-named", "a store of 0.8 upgraded (its speakers are the model default's) served as en-fr",
     "default", "en-fr"),
    ("unserved-speakers-named", "a model removed before the restart", "old", "default"),
]


@pytest.mark.parametrize("onboarded,served", [row[2:] for row in UNSERVED_PROBES],
                         ids=[row[1] for row in UNSERVED_PROBES])
def test_the_speakers_of_a_model_the_service_does_not_serve_are_named_at_its_start(toy, trained, tmp_path, caplog,
                                                                                  onboarded, served):
    """Requests could not name them, and got the unknown-speaker policy without a word."""
    def translator():
        return SpeakerTranslator.from_pretrained(trained("lstm_fact_bias"), data=toy["bin"], max_len_b=4)

    path = str(tmp_path / "speakers.db")
    with TestClient(create_app({onboarded: translator()}, SpeakerStore(path), token=TOKEN)) as client:
        assert client.put("/speakers/dr-lee", json=PAIRS, headers=AUTH).status_code == 201
    with caplog.at_level(logging.WARNING, logger="fairseq_speaker.service"):
        with TestClient(create_app({served: translator()}, SpeakerStore(path))):
            pass
    assert (f"--store {path} holds 1 speaker(s) of the model {onboarded!r}, which this service does not serve "
            f"({served!r}): requests cannot name them. Serve that model under this id (--model {onboarded}=CHECKPOINT"
            in caplog.text), caplog.text


def test_the_store_refuses_to_write_a_name_the_label_policy_refuses():
    store = SpeakerStore(":memory:")
    with pytest.raises(StoreError, match=r"--store :memory:: cannot store speaker 'lee\\u200b': .*U\+200B"):
        store.put("lee\u200b", b"rows", [("a .", "b .")])
    assert store.speakers() == []
    store.close()


def test_a_record_damaged_while_the_service_runs_gets_503_and_the_others_are_served(toy, trained, stored):
    path = _damaged(stored, "later.db", lambda path: None)
    translator = SpeakerTranslator.from_pretrained(trained("lstm_fact_bias"), data=toy["bin"], max_len_b=6)
    with TestClient(create_app(translator, SpeakerStore(path), token=TOKEN)) as client:
        _sql("UPDATE speakers SET pairs = '{' WHERE name = 'dr-lee'")(path)  # another program, meanwhile
        more = client.post("/speakers/dr-lee/sentences", json=MORE, headers=AUTH)
        kim = client.post("/translate", json={"sentences": MORE["sources"], "speaker": "dr-kim"}).json()
    assert more.status_code == 503 and more.json()["error"]["code"] == "store_damaged", more.text
    assert "the speaker store cannot read this speaker's record" in more.json()["error"]["message"]
    assert kim == stored["dr-kim"]


@pytest.mark.parametrize("fingerprint", ["{}", '{"row_shapes": null}'])
def test_a_model_record_damaged_while_the_service_runs_is_a_503_not_a_reload(toy, trained, stored, caplog,
                                                                            fingerprint):
    """The record of the model the store was made for emptied by another program: a write was told 409
    model_changed, 'reloaded meanwhile with another checkpoint', which no one had done."""
    path = _damaged(stored, "fingerprint.db", lambda path: None)
    translator = SpeakerTranslator.from_pretrained(trained("lstm_fact_bias"), data=toy["bin"], max_len_b=6)
    with TestClient(create_app(translator, SpeakerStore(path), token=TOKEN)) as client:
        _sql(f"UPDATE models SET fingerprint = '{fingerprint}'")(path)  # another program, meanwhile
        with caplog.at_level(logging.ERROR):
            put = client.put("/speakers/dr-new", json=PAIRS, headers=AUTH)
    assert put.status_code == 503 and put.json()["error"]["code"] == "store_damaged", put.text
    assert "(its fingerprint) is not readable (without 'variant_spelling'" in put.json()["error"]["message"]
    assert "To recover: restore" in caplog.text


@pytest.mark.parametrize("table", ["speakers", "models"])
def test_health_is_a_503_once_a_table_of_the_store_is_dropped(toy, trained, stored, table):
    """/health read the count of writes alone: it answered 200 'ok' while every request that read the speakers
    failed."""
    path = _damaged(stored, f"dropped-{table}.db", lambda path: None)
    translator = SpeakerTranslator.from_pretrained(trained("lstm_fact_bias"), data=toy["bin"], max_len_b=6)
    with TestClient(create_app(translator, SpeakerStore(path), token=TOKEN)) as client:
        assert client.get("/health").status_code == 200
        _sql(f"DROP TABLE {table}")(path)  # another program, meanwhile
        health = client.get("/health")
    assert health.status_code == 503 and health.json()["error"]["code"] == "store_unavailable", health.text


def test_a_store_given_by_a_relative_path_is_the_same_file_after_a_change_of_folder(toy, trained, stored, tmp_path,
                                                                                   monkeypatch):
    """A store opened by a relative path, then the process's working folder changed: /health and every write were 503
    "removed or replaced" while the file was intact."""
    path = _damaged(stored, "relative.db", lambda path: None)
    translator = SpeakerTranslator.from_pretrained(trained("lstm_fact_bias"), data=toy["bin"], max_len_b=6)
    monkeypatch.chdir(os.path.dirname(path))
    with TestClient(create_app(translator, SpeakerStore(os.path.basename(path)), token=TOKEN)) as client:
        monkeypatch.chdir(tmp_path)
        assert client.get("/health").status_code == 200
        assert client.put("/speakers/anna", json=PAIRS, headers=AUTH).status_code == 201


@pytest.mark.parametrize("how", ["removed", "replaced"])
def test_a_store_file_removed_or_replaced_while_serving_takes_no_write(toy, trained, stored, how):
    """The file removed (or another put in its place) while the service ran: writes were acknowledged (201) into the
    unlinked file and /health said ok; at the restart every onboarded speaker was lost. Writes and /health are 503
    store_unavailable, saying what happened; translation goes on from memory."""
    path = _damaged(stored, f"{how}.db", lambda path: None)
    translator = SpeakerTranslator.from_pretrained(trained("lstm_fact_bias"), data=toy["bin"], max_len_b=6)
    with TestClient(create_app(translator, SpeakerStore(path), token=TOKEN)) as client:
        os.remove(path)
        if how == "replaced":
            shutil.copy(stored["path"], path)
        put = client.put("/speakers/anna", json=PAIRS, headers=AUTH)
        health = client.get("/health")
        kim = client.post("/translate", json={"sentences": MORE["sources"], "speaker": "dr-kim"})
    for answer in (put, health):
        assert answer.status_code == 503 and answer.json()["error"]["code"] == "store_unavailable", answer.text
        # not "busy or failing; retry later": retrying never helps, restoring the file and restarting does
        assert "was removed or replaced while the service ran" in answer.json()["error"]["message"], answer.text
    assert kim.status_code == 200 and kim.json() == stored["dr-kim"]
    if how == "replaced":  # the file in its place was not written to
        with contextlib.closing(SpeakerStore(path)) as store:
            assert "anna" not in [s.name for s in store.speakers()]


@pytest.mark.parametrize("value", ["'garbage'", "'-3'", "1.5"])
def test_a_count_of_writes_damaged_while_the_service_runs_is_a_503_and_logged(toy, trained, stored, caplog, value):
    """meta 'generation' made unreadable by another program: every request was a 500 internal_error (a ValueError
    of int()), /health included; below 0, or 1.5 (read as 1), it was taken."""
    path = _damaged(stored, f"generation{len(value)}.db", lambda path: None)
    translator = SpeakerTranslator.from_pretrained(trained("lstm_fact_bias"), data=toy["bin"], max_len_b=6)
    with TestClient(create_app(translator, SpeakerStore(path), token=TOKEN)) as client:
        _sql(f"UPDATE meta SET value = {value} WHERE key = 'generation'")(path)  # another program, meanwhile
        with caplog.at_level(logging.ERROR):
            answer = client.post("/translate", json={"sentences": MORE["sources"], "speaker": "dr-kim"})
    assert answer.status_code == 503 and answer.json()["error"]["code"] == "store_unavailable", answer.text
    assert "its count of writes (meta 'generation') is " in caplog.text, caplog.text
    assert "not a whole number from 0: the store is damaged" in caplog.text, caplog.text


# -- where the store is: --store URLs, a server that refuses, fairseq-speaker-store copy ------------------------------

#: (the promise of docs/reliability.md, the --store value, text of the command's one line): refused before the model
#: loads, the database untouched.
#: ``{url}`` is a database of the tests' PostgreSQL server (its password in it), ``{port}`` that server's port;
#: ``{silent}`` a port where nothing listens.
STORE_PROBES = [
    ("store-url-checked",
     "mysql://u@host/db", "--store mysql://u@host/db: mysql:// is not a kind of store this service knows: give an "
                          "SQLite file (speakers.db, or sqlite:///speakers.db"),
    ("store-url-checked",
     "sqlite://host/speakers.db", "--store sqlite://host/speakers.db: an SQLite store is a file on this machine, "
                                  "written sqlite:///FILE (no host"),
    ("store-url-checked", "sqlite:///", "--store sqlite:///: no file named: write sqlite:///speakers.db"),
    ("store-url-checked",
     "sqlite:////no/such/folder/s.db", "--store /no/such/folder/s.db: the folder /no/such/folder does not exist"),
    ("store-url-checked",
     "postgresql:/db", "--store postgresql:/db: a URL is written postgresql://... (two slashes after the colon)"),
    ("store-url-checked",
     "postgresql://u:secret@host:port/db", "--store postgresql://u:***@host:port/db: the port 'port' is not a number "
                                           "between 1 and 65535"),
    ("store-url-checked",
     "postgresql://u@host/db?bogus=1", "--store postgresql://u@host/db?bogus=1: not a PostgreSQL URL (invalid URI "
                                       "query parameter: \"bogus\"): write postgresql://USER@HOST[:PORT]/DATABASE"),
    ("store-url-checked",
     "postgres://u@[::1/db", "--store postgres://u@[::1/db: not a PostgreSQL URL (end of string reached when looking "
                             "for matching \"]\""),
    ("store-url-checked",
     "postgresql://postgres:wrong@127.0.0.1:{port}/postgres", "--store postgresql://postgres:***@127.0.0.1:{port}/"
     "postgres: cannot connect to the PostgreSQL server (connection to server at \"127.0.0.1\", port {port} failed: "
     "FATAL: password authentication failed for user \"postgres\"): the server refused the user or the password"),
    ("store-url-checked",
     "postgresql://postgres@127.0.0.1:{port}/postgres?password=wrong", "?password=***: cannot connect to the "
     "PostgreSQL server (connection to server at \"127.0.0.1\", port {port} failed: FATAL: password authentication"),
    ("store-url-checked",
     "postgresql://postgres@127.0.0.1:{silent}/postgres", "cannot connect to the PostgreSQL server (connection to "
     "server at \"127.0.0.1\", port {silent} failed: Connection refused"),
    ("store-url-checked",
     "{server}/nosuch", "failed: FATAL: database \"nosuch\" does not exist): name a database and a user the server "
                        "has (createdb and createuser make them)"),
    ("store-url-checked",
     "postgresql://nobody:x@127.0.0.1:{port}/postgres", "password authentication failed for user \"nobody\""),
]


@pytest.fixture(scope="module")
def places(postgres):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        silent = s.getsockname()[1]
    return {"port": postgres.port, "silent": silent, "server": postgres.url("")[:-1], "url": postgres.database()}


@pytest.mark.parametrize("store,message", [row[1:] for row in STORE_PROBES], ids=[row[1] for row in STORE_PROBES])
def test_a_store_url_that_cannot_be_used_ends_the_command_in_one_line_before_the_model_loads(store, message, places,
                                                                                              tmp_path, capsys):
    """The model is never loaded (its path does not exist), no file is made, no password is shown."""
    store = store.format(**places)
    line = refused(serve.main, ["no/such/model.pt", "--data", str(tmp_path), "--store", store, "--threads", "1"],
                   capsys)
    assert line.startswith("fairseq-speaker-serve: error: ") and message.format(**places) in line, line
    assert "secret" not in line and ":wrong" not in line and "=wrong" not in line
    assert os.listdir(tmp_path) == []


def test_a_postgresql_url_without_the_driver_names_the_extra_to_install(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "psycopg", None)  # import psycopg raises ImportError
    line = refused(serve.main, ["model.pt", "--data", "d", "--store", "postgresql://u@host/db"], capsys)
    assert ("--store postgresql://u@host/db: a PostgreSQL store needs the driver psycopg 3, which is not installed "
            "(") in line and line.endswith("pip install 'fairseq-speaker[postgres]'"), line


def _fingerprint(variant):
    return {"variant_spelling": variant, "row_shapes": {"bias": [4]}, "target_dictionary_hash": "0" * 40,
            "target_dictionary_size": 4, "shared_sha1": "1" * 40}


def _rows(name, variant="fact", value=0.0):
    """Speaker vectors of ``name`` alone, of the model :func:`_fingerprint` ``(variant)`` describes (rows a copy
    carries are read as a service reads them)."""
    meta = {"format": FORMAT, "format_version": 1, **_fingerprint(variant)}
    return vectors_bytes(SpeakerVectors([name], {"bias": np.full((1, 4), value, np.float32)}, meta))


def _state(url):
    """What a PostgreSQL store holds: its generation and each speaker's version (None: no store there)."""
    import psycopg

    with psycopg.connect(url) as db:
        if db.execute("SELECT to_regclass('fairseq_speaker.meta')").fetchone()[0] is None:
            return None
        return (db.execute("SELECT value FROM fairseq_speaker.meta WHERE key = 'generation'").fetchone(),
                db.execute("SELECT name, version FROM fairseq_speaker.speakers ORDER BY name").fetchall())


@pytest.fixture
def copies(postgres, tmp_path):
    """An SQLite store of a 'fact' model holding dr-lee and dr-kim; PostgreSQL stores: one holding dr-lee otherwise,
    one of a 'full' model, a database without a store; an SQLite store whose dr-kim's sentence pairs are damaged."""
    source = str(tmp_path / "speakers.db")
    with contextlib.closing(SpeakerStore(source)) as store:
        store.bind(_fingerprint("fact"), "fact.pt")
        store.put("dr-lee", _rows("dr-lee"), [("i .", "je .")])
        store.put("dr-kim", _rows("dr-kim"), [("you .", "vous .")])
    damaged = str(tmp_path / "damaged.db")
    shutil.copy(source, damaged)
    _sql("UPDATE speakers SET pairs = '[1' WHERE name = 'dr-kim'")(damaged)
    no_schema = str(tmp_path / "no-schema.db")
    shutil.copy(source, no_schema)
    _sql("UPDATE meta SET value = 'x' WHERE key = 'schema'")(no_schema)
    twin = str(tmp_path / "twin.db")
    with contextlib.closing(SpeakerStore(twin)) as store:
        store.bind(_fingerprint("fact"), "fact.pt")
        store.put("\uff44\uff52-lee", _rows("\uff44\uff52-lee"), [("i .", "je .")])
    places = {"source": source, "damaged": damaged, "empty": postgres.database(), "tmp": str(tmp_path),
              "no_schema": no_schema, "twin": twin}
    places["odd_model"] = str(tmp_path / "odd-model.db")  # a model id --model refuses, written by another program
    shutil.copy(source, places["odd_model"])
    _sql("UPDATE models SET id = 'EN FR'")(places["odd_model"])
    _sql("UPDATE speakers SET model = 'EN FR'")(places["odd_model"])
    for name, rows in (("garbled", b"\x00\x01\x02\x03"), ("misnamed", _rows("dr-lee")),
                       ("foreign", _rows("dr-kim", "full"))):  # rows a service refuses: its restart stopped
        places[name] = str(tmp_path / f"{name}.db")
        shutil.copy(source, places[name])
        _sql("UPDATE speakers SET rows = ? WHERE name = 'dr-kim'", rows)(places[name])
    places["huge"] = str(tmp_path / "huge.db")
    shutil.copy(source, places["huge"])
    _beyond_float32("dr-kim")(places["huge"])
    for name, variant, rows in (("changed", "fact", _rows("dr-lee", value=1.0)),
                                ("other_model", "full", _rows("dr-lee", "full"))):
        places[name] = postgres.database()
        with contextlib.closing(open_store(places[name])) as store:
            store.bind(_fingerprint(variant), f"{variant}.pt")
            store.put("dr-lee", rows, [("i .", "je .")])
    return places


#: (the promise of docs/reliability.md, fairseq-speaker-store copy's arguments, text of its one line): the target
#: unchanged
COPY_PROBES = [
    ("store-copy-whole",
     ["--from", "{source}", "--to", "{changed}"], "--to {changed_shown} holds speaker(s) 'dr-lee' otherwise than "
     "--from {source} (other rows or sentences: changed after an earlier copy?): nothing was copied. Give --replace to "
     "overwrite them with the source's, or delete them from the target (DELETE /speakers/NAME) and copy again"),
    ("store-copy-whole",
     ["--from", "{source}", "--to", "{other_model}"], "--to {other_model_shown} holds the speakers of another model "
     "(full.pt): a 'full' speaker bias"),
    ("store-copy-whole",  # the advice was a service's: "serve that model with this store"
     ["--from", "{source}", "--to", "{other_model}"], "Speaker rows only mean something in the model they were fitted "
     "on: copy into a new --to (a file or database of its own), or into the store of that model"),
    ("store-copy-whole",
     ["--from", "{empty}", "--to", "{changed}"], "--from {empty_shown}: holds no speaker store (no tables meta and "
     "speakers in the schema fairseq_speaker): give the database a service wrote to"),
    ("store-copy-whole",
     ["--from", "{damaged}", "--to", "{changed}"], "--from {damaged}: the record of speaker 'dr-kim' is damaged: its "
     "sentence pairs are not a JSON list of [source, target] strings (Expecting"),
    ("store-copy-whole",
     ["--from", "{source}", "--to", "{server}/nosuch"], "--to {server_shown}/nosuch: cannot connect to the PostgreSQL "
     "server"),
    ("store-copy-whole", ["--from", "{source}", "--to", "{tmp}"], "--to {tmp} is a directory: give the path of a file"),
    # named by its own option, with what to do here (not how to start a service), and no --to made
    ("store-copy-whole",
     ["--from", "{no_schema}", "--to", "{tmp}/new.db"], "--from {no_schema}: its record of its schema (meta 'schema') "
     "is 'x', not a schema's number (1, 2, ...). To recover: restore {no_schema} from a backup (sqlite3 FILE '.backup "
     "COPY' makes one of a live store), check it with sqlite3 {no_schema} 'PRAGMA integrity_check', then run the "
     "command again, or give another --from"),
    ("store-copy-whole",
     ["--from", "{damaged}", "--to", "{tmp}/new.db"], "--from {damaged}: the record of speaker 'dr-kim' is damaged"),
    ("store-copy-whole",
     ["--from", "{twin}", "--to", "{changed}"], "--to {changed_shown}: speaker '\uff44\uff52-lee' looks like "
     "'dr-lee', a speaker the store holds (onboarded by another process meanwhile?): use that name, or one that looks "
     "different; nothing was copied. Delete one of the two (DELETE /speakers/NAME) from --from or --to, then copy "
     "again"),
    # rows no service can read were copied, and stopped the target's next start
    ("store-copy-whole",
     ["--from", "{garbled}", "--to", "{tmp}/new.db"], "--from {garbled}: the record of speaker 'dr-kim' is damaged: its "
     "rows: not a .npz archive, so not a speaker vectors file (damaged or truncated? fairseq-speaker-vectors export "
     "writes them): nothing was copied. Restore the store from a backup, or serve it with --skip-broken-speakers and "
     "onboard that speaker again"),
    ("store-copy-whole", ["--from", "{misnamed}", "--to", "{changed}"],
     "--from {misnamed}: the record of speaker 'dr-kim' is damaged: its rows are named ['dr-lee']: nothing was copied"),
    ("store-copy-whole", ["--from", "{huge}", "--to", "{tmp}/new.db"],
     "--from {huge}: the record of speaker 'dr-kim' is damaged: its rows: "),
    ("store-copy-whole", ["--from", "{foreign}", "--to", "{tmp}/new.db"],
     "--from {foreign}: the record of speaker 'dr-kim' is damaged: its rows are not those of the model the store holds "
     "for model id 'default'"),
    # copied without a word, its speakers were served by no service
    ("store-copy-whole", ["--from", "{odd_model}", "--to", "{tmp}/new.db"],
     "--from {odd_model}: holds the speakers of a model id no service can serve ('EN FR' is not a model id: use "
     "letters, digits, '.', '_' and '-', at most 64, beginning with a letter or digit): nothing was copied"),
    ("store-copy-whole", ["--from", "{tmp}", "--to", "{tmp}/new.db"],
     "--from {tmp} is a directory: give the path of a file (a speaker store's file)"),
    ("store-copy-whole", ["--from", "/dev/null", "--to", "{tmp}/new.db"],  # "not a speaker store (disk I/O error)"
     "--from /dev/null is not a regular file (a device, a pipe or a socket), which no store is"),
    # SQLite reads file:FILE as FILE: a store copied into itself by its URI was reported as "0 copied"
    ("store-copy-whole", ["--from", "{source}", "--to", "file:{source}"],
     "--from {source} and --to {source} are the same store: give another --to"),
    ("store-copy-whole", ["--from", "{source}", "--to", "file://localhost{source}"],
     "--from {source} and --to {source} are the same store"),
    ("store-copy-whole", ["--from", "{source}", "--to", "file:{source}?mode=rw"],
     "--to file:{source}?mode=rw: an SQLite URI's parameters (mode) are not taken here: the store is the file, opened "
     "as the service opens it; give the file's path ({source})"),
    ("store-copy-whole", ["--from", "{source}", "--to", "file://elsewhere/new.db"],
     "--to file://elsewhere/new.db: an SQLite store is a file on this machine (the URI names the host 'elsewhere')"),
    ("store-copy-whole", ["--from", "file:", "--to", "{tmp}/new.db"],
     "--from file: is an SQLite database in memory, gone as soon as it is opened, so that it holds nothing to copy"),
    # reported as copied, and written nowhere
    ("store-copy-whole", ["--from", "{source}", "--to", ":memory:"], "--to :memory: is an SQLite database in memory, "
     "gone when the copy ends, with everything copied: give a file (speakers.db, or sqlite:///speakers.db) or a "
     "PostgreSQL database"),
    ("store-copy-whole",
     ["--from", "{source}", "--to", "sqlite:///:memory:"], "--to sqlite:///:memory: is an SQLite database in memory"),
]


@pytest.mark.parametrize("args,message", [row[1:] for row in COPY_PROBES],
                         ids=[" ".join(row[1]) for row in COPY_PROBES])
def test_a_copy_that_cannot_be_done_ends_in_one_line_and_changes_nothing(args, message, copies, places, capsys):
    values = {**copies, "server": places["server"]}
    values.update({f"{key}_shown": hide_password(value) for key, value in list(values.items())})
    before = {key: _state(values[key]) for key in ("changed", "other_model", "empty")}
    line = refused(store_cli.main, ["copy", *(arg.format(**values) for arg in args)], capsys)
    assert line.startswith("fairseq-speaker-store: error: ") and message.format(**values) in line, line
    assert PASSWORD not in line
    assert {key: _state(values[key]) for key in before} == before
    assert not os.path.exists(os.path.join(values["tmp"], "new.db"))


def _tables(path):
    with contextlib.closing(sqlite3.connect(path)) as db:
        return sorted(name for (name,) in db.execute("SELECT name FROM sqlite_master"))


def test_another_applications_database_and_the_same_store_are_refused_and_left_as_they_were(tmp_path, capsys):
    """A file of another application's tables is no speaker store, to copy into (it was given the store's tables
    beside its own), to serve from, or to read; a copy of a store into itself (by another spelling of its path) was
    reported as 0 copied."""
    store = str(tmp_path / "speakers.db")
    with contextlib.closing(SpeakerStore(store)) as opened:
        opened.bind(_fingerprint("fact"), "fact.pt")
        opened.put("dr-lee", _rows("dr-lee"), [("i .", "je .")])
    foreign = str(tmp_path / "notes.db")
    with contextlib.closing(sqlite3.connect(foreign)) as db:
        db.execute("CREATE TABLE notes (text TEXT)")
        db.commit()
    line = refused(store_cli.main, ["copy", "--from", store, "--to", foreign], capsys)
    assert line == (f"fairseq-speaker-store: error: --to {foreign}: not a speaker store (it holds other tables "
                    f"(notes)): give a new file name, or the store of this model"), line
    line = refused(store_cli.main, ["copy", "--from", foreign, "--to", str(tmp_path / "new.db")], capsys)
    assert line.endswith(f"--from {foreign}: not a speaker store (it holds other tables (notes)): give a speaker "
                         f"store's file"), line
    with pytest.raises(StoreError, match=r"--store .*notes.db: not a speaker store \(it holds other tables"):
        open_store(foreign)
    assert _tables(foreign) == ["notes"]
    assert not os.path.exists(tmp_path / "new.db")
    again = os.path.join(str(tmp_path), ".", "speakers.db")
    line = refused(store_cli.main, ["copy", "--from", store, "--to", again], capsys)
    assert line.endswith(f"--from {store} and --to {again} are the same store: give another --to"), line
    with contextlib.closing(SpeakerStore(store, create=False)) as opened:
        assert opened.get("dr-lee").sentences == 1
    # SQLite's URI filename of the store names the store (--from had called it "no such file")
    store_cli.main(["copy", "--from", f"file:{store}", "--to", f"file:{tmp_path}/new%20copy.db"])
    assert capsys.readouterr().out.startswith(f"copied 1 speaker(s) from {store} to {tmp_path}/new copy.db")
    with contextlib.closing(SpeakerStore(str(tmp_path / "new copy.db"), create=False)) as opened:
        assert opened.get("dr-lee").sentences == 1


#: bodies sent compressed: (the promise of docs/reliability.md, the Content-Encoding, the body)
ENCODING_PROBES = [
    ("body-judged-before-parsing", "gzip", gzip.compress(b'{"sentences": ["i ."], "speaker": "spk000"}', mtime=0)),
    ("body-judged-before-parsing", "br", b'{"sentences": ["i ."], "speaker": "spk000"}'),
]


@pytest.mark.parametrize("encoding,body", [row[1:] for row in ENCODING_PROBES], ids=[row[1] for row in ENCODING_PROBES])
def test_a_compressed_body_gets_415(service, encoding, body):
    """A gzip body was refused as "not UTF-8 (byte 0x8b)", and a plain one labelled br was read as it was."""
    response = service.post("/translate", content=body, headers={"Content-Type": "application/json",
                                                                 "Content-Encoding": encoding})
    assert response.status_code == 415 and response.json()["error"]["code"] == "unsupported_encoding", response.text
    assert f"Content-Encoding {encoding!r}" in response.json()["error"]["message"]


#: a client that goes away while its body is read: (the promise of docs/reliability.md, path)
DISCONNECT_PROBES = [("one-json-error", "/translate"), ("one-json-error", "/speakers/dr-gone")]


@pytest.mark.parametrize("path", [row[1] for row in DISCONNECT_PROBES])
def test_a_client_gone_while_its_body_is_read_is_no_internal_error(service, path):
    """uvicorn answers a malformed chunked body itself and tells the application the client disconnected: that was a
    500 internal_error in the log and the metrics (which an operator alerts on)."""
    app = service.app
    body = [{"type": "http.request", "body": b'{"sentences": ["i', "more_body": True}, {"type": "http.disconnect"}]
    sent = []

    async def receive():
        return body.pop(0) if body else {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    method = "POST" if path == "/translate" else "PUT"
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
             "headers": [(b"content-type", b"application/json"), (b"authorization", f"Bearer {TOKEN}".encode()),
                         (b"transfer-encoding", b"chunked")],
             "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 80), "app": app}
    asyncio.run(app(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    assert start["status"] != 500, sent
    assert 'status="500"' not in service.get("/metrics").text


def test_every_raw_request_has_its_row():
    """The rows above name the raw requests one by one (the promises' test reads the rows as written)."""
    kinds = {row[1] for row in SLOW_CLIENT_PROBES}
    assert set(MALFORMED_REQUESTS) | set(TRANSFER_CODED) <= kinds
