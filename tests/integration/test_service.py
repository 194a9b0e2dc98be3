"""fairseq-speaker-serve: every endpoint, every refusal, the store across restarts and processes, a real server."""

import argparse
import itertools
import json
import os
import re
import shlex
import signal
import sqlite3
import threading
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import fastapi.routing
import numpy as np
import pytest
from fastapi.testclient import TestClient

from fairseq_speaker.errors import UserError
from fairseq_speaker.onboarding import adapter
from fairseq_speaker.service.app import create_app, parse_args, read_token
from fairseq_speaker.service.batcher import BatchOptions
from fairseq_speaker.service.speaker_service import Limits
from fairseq_speaker.data.speaker_labels import retired_name
from fairseq_speaker.service.store import SpeakerStore, StoreError
from fairseq_speaker.serving import SpeakerTranslator
from fairseq_speaker.modules.speaker_words import speaker_words_of
from tests.cli import doctored_checkpoint, run
from tests.helpers import held_translations, http_call, real_server, wait_until
from tests.toy_kinds import attach_gender_kinds, genders

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOKEN = "test-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SENTENCES = ["i am tired .", "you want the drugs .", "i went to the station .", "you are kind ."]
PAIRS = {"sources": ["i am tired .", "you want the drugs ."],
         "targets": ["je suis fatiguée .", "vous voulez les médicaments ."]}
MORE = {"sources": ["i went to the station ."], "targets": ["je suis allée à la gare ."]}


def _translator(checkpoint, toy, **overrides) -> SpeakerTranslator:
    return SpeakerTranslator.from_pretrained(checkpoint, data=toy["bin"], max_len_b=6, **overrides)


def _client(translator, store=None, token=TOKEN, limits=Limits(), batching=BatchOptions()) -> TestClient:
    return TestClient(create_app(translator, store, token=token, limits=limits, batching=batching),
                      raise_server_exceptions=False)


def _rows(translator, name):
    return translator.speaker_vectors([name]).rows


def _texts(response):
    assert response.status_code == 200, response.text
    return [t["text"] for t in response.json()["translations"]]


@pytest.fixture(scope="module")
def doctored(toy, trained, tmp_path_factory):
    """A full-bias model whose speakers spk000 and spk001 each favour a word: mixing up speakers shows."""
    path = str(tmp_path_factory.mktemp("service") / "doctored.pt")
    return doctored_checkpoint(trained("lstm_full_bias"), path, {"spk000": "chien", "spk001": "voiture"},
                               os.path.join(toy["bin"], "dict.fr.txt"))


# -- translating ----------------------------------------------------------------------------------------------


def test_translations_equal_the_translators_sentence_for_sentence_with_mixed_speakers(toy, doctored):
    translator = _translator(doctored, toy)
    speakers = ["spk000", "spk001", "someone-new", "spk001"]
    with _client(translator) as client:
        answer = client.post("/translate", json={"sentences": SENTENCES, "speakers": speakers})
        every = client.post("/v1/translate", json={"sentences": SENTENCES, "speaker": "spk001"})
    texts = _texts(answer)
    assert texts == translator.translate(SENTENCES, speakers)
    assert [t.split()[0] for t in texts[:2]] == ["chien", "voiture"]  # each sentence as its own speaker
    for sentence, speaker, text in zip(SENTENCES, speakers, texts):
        assert text == translator.translate(sentence, speaker)
    assert [t["speaker"] for t in answer.json()["translations"]] == speakers
    assert [t["unknown_speaker_policy_applied"] for t in answer.json()["translations"]] == [False, False, True, False]
    assert answer.json()["unknown_speaker_policy"] == "mean"
    assert _texts(every) == translator.translate(SENTENCES, "spk001")


def test_concurrent_requests_keep_each_sentences_speaker_while_a_speaker_is_onboarded(toy, doctored):
    translator = _translator(doctored, toy)
    names = ["spk000", "spk001", "spk002", "nobody"]
    requests = [{"sentences": [SENTENCES[(i + j) % 4] for j in range(1 + i % 3)],
                 "speakers": [names[(i * 3 + j) % 4] for j in range(1 + i % 3)]} for i in range(24)]
    expected = [translator.translate(r["sentences"], r["speakers"]) for r in requests]
    with _client(translator) as client, ThreadPoolExecutor(max_workers=4) as pool:
        answers = [pool.submit(client.post, "/translate", json=r) for r in requests[:12]]
        onboarded = pool.submit(client.put, "/speakers/dr-lee", json=PAIRS, headers=AUTH)
        answers += [pool.submit(client.post, "/translate", json=r) for r in requests[12:]]
        assert [_texts(a.result()) for a in answers] == expected
        assert onboarded.result().status_code == 201


def _metric(text: str, name: str) -> float:
    found = re.search(rf"^fairseq_speaker_{re.escape(name)} (\S+)$", text, re.MULTILINE)
    assert found, f"no {name} in the metrics"
    return float(found.group(1))


def test_concurrent_clients_with_mixed_speakers_share_beam_searches_and_get_the_sequential_results(toy, doctored):
    """16 clients at once, each with its own mix of speakers (two whose bias favours a word, others, an unknown
    one, one onboarded): the batches are shared, and every sentence is answered as its own speaker alone would be."""
    translator = _translator(doctored, toy)
    batching = BatchOptions(max_gap_ms=300, max_wait_ms=300, max_batch_sentences=64)
    with _client(translator, batching=batching) as client:
        assert client.put("/speakers/dr-lee", json=PAIRS, headers=AUTH).status_code == 201
        names = ["spk000", "spk001", "spk002", "dr-lee", "nobody"]
        requests = [{"sentences": [SENTENCES[(i + j) % 4] for j in range(1 + i % 3)],
                     "speakers": [names[(i * 2 + j) % 5] for j in range(1 + i % 3)]} for i in range(16)]
        expected = [[translator.translate(sentence, speaker) for sentence, speaker in
                     zip(r["sentences"], r["speakers"])] for r in requests]  # one sentence at a time, in turn
        start = threading.Barrier(len(requests))

        def send(request):
            start.wait(timeout=30)
            return client.post("/translate", json=request)

        with ThreadPoolExecutor(max_workers=len(requests)) as pool:
            answers = list(pool.map(send, requests))
        metrics = client.get("/metrics").text
    assert [_texts(a) for a in answers] == expected
    assert [[t["speaker"] for t in a.json()["translations"]] for a in answers] == [r["speakers"] for r in requests]
    assert {text.split()[0] for a, r in zip(answers, requests) for text, speaker in zip(_texts(a), r["speakers"])
            if speaker == "spk000"} == {"chien"}  # the doctored speakers' word: no sentence in another's voice
    assert {text.split()[0] for a, r in zip(answers, requests) for text, speaker in zip(_texts(a), r["speakers"])
            if speaker == "spk001"} == {"voiture"}
    sentences = sum(len(r["sentences"]) for r in requests)
    assert _metric(metrics, "batch_requests_sum") == len(requests)
    assert _metric(metrics, "batch_sentences_sum") == sentences
    assert _metric(metrics, "batch_requests_count") < len(requests) / 2  # gathered, not one search per request
    assert _metric(metrics, 'batch_sentences_bucket{le="1"}') < len(requests)
    assert _metric(metrics, 'queued_sentences{model="default"}') == 0


def test_with_a_token_cap_no_batch_passes_it_and_every_sentence_is_answered_as_its_speaker_in_order(toy, doctored,
                                                                                                     monkeypatch):
    """--max-batch-tokens: requests queue up behind a held translator, then no batch it gets passes the cap (counted as
    fairseq counts a batch, with the model's own encoding), a request over the cap is split over batches, a sentence
    over it goes alone, and every sentence is answered as its own speaker alone would be, in its request's order."""
    translator = _translator(doctored, toy)
    names = ["spk000", "spk001", "spk002", "nobody"]
    long = " ".join(SENTENCES * 2)  # over the cap by itself
    requests = [{"sentences": [SENTENCES[(i + j) % 4] for j in range(1 + i % 5)],
                 "speakers": [names[(i + 2 * j) % 4] for j in range(1 + i % 5)]} for i in range(10)]
    requests.append({"sentences": [SENTENCES[0], long, SENTENCES[1]], "speakers": ["spk001", "spk000", "spk001"]})
    expected = [[translator.translate(sentence, speaker) for sentence, speaker in zip(r["sentences"], r["speakers"])]
                for r in requests]
    tokens = {s: len(translator.hub.encode(s)) for r in requests for s in r["sentences"]}
    cap = 24
    assert tokens[long] > cap and sum(tokens[s] for s in requests[4]["sentences"]) > cap
    release, entered, calls = held_translations(translator, monkeypatch)
    app = create_app(translator, batching=BatchOptions(max_batch_tokens=cap, max_batch_sentences=8, max_wait_ms=0))
    with TestClient(app) as client, ThreadPoolExecutor(max_workers=len(requests) + 1) as pool:
        first = pool.submit(client.post, "/translate", json={"sentences": ["i ."], "speaker": "spk000"})
        assert entered.wait(timeout=30)
        answers = [pool.submit(client.post, "/translate", json=r) for r in requests]
        wait_until(lambda: app.state.service.batcher.queued == sum(len(r["sentences"]) for r in requests))
        release.set()
        assert first.result().status_code == 200
        answers = [a.result() for a in answers]
    assert [_texts(a) for a in answers] == expected
    batches = calls[1:]
    assert [long] in batches
    assert all(len(b) * max(tokens[s] for s in b) <= cap for b in batches if b != [long]), batches
    assert sorted(s for b in batches for s in b) == sorted(s for r in requests for s in r["sentences"])
    assert len(batches) < sum(len(r["sentences"]) for r in requests) / 2  # shared, within the cap


def test_n_best_translations_come_best_first_and_the_first_is_the_translation(toy, trained):
    translator = _translator(trained("lstm_fact_bias"), toy)
    with _client(translator) as client:
        answer = client.post("/translate", json={"sentences": SENTENCES[:2], "speakers": ["spk000", "spk003"],
                                                 "beam": 4, "nbest": 3})
        plain = client.post("/translate", json={"sentences": SENTENCES[:2], "speaker": "spk000", "beam": 2})
    assert answer.status_code == 200, answer.text
    best = translator.translate_nbest(SENTENCES[:2], ["spk000", "spk003"], beam=4, nbest=3)
    for translation, expected in zip(answer.json()["translations"], best):
        assert [(h["text"], pytest.approx(h["score"])) for h in translation["hypotheses"]] == expected
        assert translation["text"] == expected[0][0]
        assert [h["score"] for h in translation["hypotheses"]] == sorted((h["score"] for h in
                                                                          translation["hypotheses"]), reverse=True)
    assert _texts(answer) == translator.translate(SENTENCES[:2], ["spk000", "spk003"], beam=4)
    assert _texts(plain) == translator.translate(SENTENCES[:2], "spk000", beam=2)
    assert all("hypotheses" not in t for t in plain.json()["translations"])


def test_a_request_past_its_timeout_gets_504_and_is_taken_out_of_the_queue(toy, trained, monkeypatch):
    translator = _translator(trained("lstm_fact_bias"), toy)
    release, entered, calls = held_translations(translator, monkeypatch)
    app = create_app(translator, batching=BatchOptions(request_timeout=0.5, max_wait_ms=0))
    with TestClient(app, raise_server_exceptions=False) as client, ThreadPoolExecutor(max_workers=2) as pool:
        first = pool.submit(client.post, "/translate", json={"sentences": ["i am tired ."], "speaker": "spk000"})
        assert entered.wait(timeout=30)  # the first is being translated; the second waits behind it
        second = client.post("/translate", json={"sentences": ["you are kind .", "i ."], "speaker": "spk001"})
        assert second.status_code == 504, second.text
        assert second.json()["error"]["code"] == "timeout"
        assert "--request-timeout" in second.json()["error"]["message"]
        assert app.state.service.batcher.queued == 0  # withdrawn: never translated
        release.set()
        assert first.result().status_code == 504  # it was translated, but too late for its client
        after = client.post("/translate", json={"sentences": ["i am tired ."], "speaker": "spk000"})
        metrics = client.get("/metrics").text
    assert _texts(after) == [translator.translate("i am tired .", "spk000")]
    assert calls == [["i am tired ."], ["i am tired ."]]
    assert 'fairseq_speaker_errors_total{endpoint="/translate",code="timeout",model="default"} 2' in metrics


def test_a_request_that_would_overflow_the_queue_gets_503_and_the_others_are_answered(toy, trained, monkeypatch):
    translator = _translator(trained("lstm_fact_bias"), toy)
    release, entered, _ = held_translations(translator, monkeypatch)
    app = create_app(translator, limits=Limits(max_sentences=3),
                     batching=BatchOptions(max_queue=4, max_wait_ms=0, max_batch_sentences=1))
    with TestClient(app, raise_server_exceptions=False) as client, ThreadPoolExecutor(max_workers=2) as pool:
        running = pool.submit(client.post, "/translate", json={"sentences": ["i ."], "speaker": "spk000"})
        assert entered.wait(timeout=30)
        waiting = pool.submit(client.post, "/translate", json={"sentences": SENTENCES[:3], "speaker": "spk001"})
        wait_until(lambda: app.state.service.batcher.queued == 3)
        refused = client.post("/translate", json={"sentences": SENTENCES[:2], "speaker": "spk002"})
        release.set()
        assert _texts(running.result()) == [translator.translate("i .", "spk000")]
        assert _texts(waiting.result()) == translator.translate(SENTENCES[:3], "spk001")
    assert refused.status_code == 503, refused.text
    assert refused.json()["error"]["code"] == "overloaded" and refused.headers["retry-after"] == "1"
    assert "3 sentences are waiting" in refused.json()["error"]["message"]
    assert "--max-queue" in refused.json()["error"]["message"]


def test_translations_go_on_while_a_speaker_is_fitted_and_it_is_used_once_stored(toy, trained, monkeypatch):
    """A fit held in the middle (in the fitting code itself) until a translation is answered: if onboarding held
    the translator, the translation would wait for the fit and the fit would give up."""
    translator = _translator(trained("lstm_fact_bias"), toy)
    fitting, translated, waited = threading.Event(), threading.Event(), []
    real = adapter.fit_speakers

    def slow_fit(*args, **kwargs):
        fitting.set()
        waited.append(translated.wait(timeout=20))
        return real(*args, **kwargs)

    monkeypatch.setattr(adapter, "fit_speakers", slow_fit)
    request = {"sentences": SENTENCES[:2], "speakers": ["spk000", "dr-lee"]}
    with _client(translator) as client, ThreadPoolExecutor(max_workers=1) as pool:
        onboarding = pool.submit(client.put, "/speakers/dr-lee", json=PAIRS, headers=AUTH)
        assert fitting.wait(timeout=30)
        during = client.post("/translate", json=request)
        assert client.get("/speakers/dr-lee").status_code == 404  # not stored yet: not there
        translated.set()
        assert onboarding.result().status_code == 201
        after = client.post("/translate", json=request)
    assert waited == [True]
    assert [t["unknown_speaker_policy_applied"] for t in during.json()["translations"]] == [False, True]
    assert _texts(during) == translator.translate(SENTENCES[:2], ["spk000", "nobody"])
    assert [t["unknown_speaker_policy_applied"] for t in after.json()["translations"]] == [False, False]
    assert _texts(after) == translator.translate(SENTENCES[:2], ["spk000", "dr-lee"])


def test_every_flag_says_what_its_search_knew_while_clients_translate_and_speakers_are_onboarded(toy, doctored,
                                                                                                 monkeypatch):
    """Three clients translate (trained, onboarded and unknown speakers, every sentence unique) while dr-lee and dr-kim
    are onboarded and dr-kim deleted; six requests naming dr-lee are admitted while it is unknown and held before
    their search until it is onboarded. Each search records, as it reads the rows, whether the model has each
    sentence's speaker: every answer's unknown_speaker_policy_applied is the opposite, and its text is the
    translation as that speaker (or as one the model does not know)."""
    translator = _translator(doctored, toy)
    pool = iter(" ".join(SENTENCES[j] for j in combo) for combo in itertools.product(range(4), repeat=3))
    at_search = {}  # sentence -> whether the model had its speaker's rows when the search read them
    real = translator.translate_nbest

    def recording(sentences, labels, *args, **kwargs):
        at_search.update(zip(sentences, (label in translator.task.speaker_dictionary for label in labels)))
        return real(sentences, labels, *args, **kwargs)

    monkeypatch.setattr(translator, "translate_nbest", recording)
    app = create_app(translator, token=TOKEN, batching=BatchOptions(max_wait_ms=5))
    service = app.state.service
    hold, go, admitted = threading.Event(), threading.Event(), []
    search, submit = service.batcher.translate, service.submit

    def gated(*args):  # a search waits while held, its requests admitted
        if hold.is_set():
            assert go.wait(timeout=60), "the test never let the search go"
        return search(*args)

    def recorded_submit(prepared):
        admitted.append(list(prepared.sentences))
        return submit(prepared)

    service.batcher.translate = gated
    monkeypatch.setattr(service, "submit", recorded_submit)
    names = ["spk000", "dr-lee", "dr-kim", "nobody", "spk001"]
    background = [[{"sentences": [next(pool)], "speaker": names[(c + i) % 5]} if i % 3 else
                   {"sentences": [next(pool), next(pool)], "speakers": [names[(c + i) % 5], names[(c + i + 1) % 5]]}
                   for i in range(10)] for c in range(3)]
    held = [{"sentences": [next(pool)], "speaker": "dr-lee"} for _ in range(6)]
    answered = []
    with TestClient(app) as client, ThreadPoolExecutor(max_workers=len(held) + 3) as threads:
        def translate(requests):
            for r in requests:
                answered.append((r, client.post("/translate", json=r)))

        clients = [threads.submit(translate, requests) for requests in background]
        wait_until(lambda: len(answered) >= 3)
        hold.set()
        waiting = [threads.submit(translate, [r]) for r in held]
        wait_until(lambda: all(r["sentences"] in admitted for r in held))  # admitted while dr-lee is unknown
        assert client.put("/speakers/dr-lee", json=PAIRS, headers=AUTH).status_code == 201
        assert client.put("/speakers/dr-kim", json=MORE, headers=AUTH).status_code == 201
        hold.clear()
        go.set()
        for future in waiting:
            future.result(timeout=60)
        wait_until(lambda: len(answered) >= 20)
        assert client.delete("/speakers/dr-kim", headers=AUTH).status_code == 200
        for future in clients:
            future.result(timeout=120)
    assert len(answered) == 36
    for request, response in answered:
        assert response.status_code == 200, response.text
        speakers = request.get("speakers") or [request["speaker"]] * len(request["sentences"])
        for sentence, speaker, t in zip(request["sentences"], speakers, response.json()["translations"]):
            assert t["unknown_speaker_policy_applied"] is not at_search[sentence], (sentence, speaker)
            assert t["text"] == translator.translate(sentence, speaker if at_search[sentence] else "nobody")
    assert all(at_search[r["sentences"][0]] for r in held)  # the six were translated as dr-lee, and said so


def test_a_speaker_fitted_on_a_copy_has_the_rows_of_one_added_to_the_model(toy, trained):
    """fit_speaker (what the service onboards with) and add_speaker fit the same rows; fit_speaker leaves the
    model as it was, for fact (a bias on the logits) and hyper-LHUC (the decoder's state)."""
    for system in ("lstm_fact_bias", "lstm_base:fact+hyper_lhuc"):
        fitted, added = _translator(trained(system), toy), _translator(trained(system), toy)
        before = fitted.speaker_vectors().rows
        vectors, report = fitted.fit_speaker("dr-lee", PAIRS["sources"], PAIRS["targets"])
        assert "dr-lee" not in fitted.speakers and report.loss_after < report.loss_before
        for key, value in fitted.speaker_vectors().rows.items():
            np.testing.assert_array_equal(value, before[key])
        added.add_speaker("dr-lee", PAIRS["sources"], PAIRS["targets"])
        assert vectors.names == ["dr-lee"]
        for key, value in _rows(added, "dr-lee").items():
            np.testing.assert_array_equal(vectors.rows[key], value)


# -- onboarding, updating, deleting -----------------------------------------------------------------------------


def test_a_speaker_is_onboarded_updated_replaced_and_deleted(toy, trained):
    checkpoint = trained("lstm_fact_bias")
    translator = _translator(checkpoint, toy)
    with _client(translator) as client:
        put = client.put("/speakers/dr lee", json=PAIRS, headers=AUTH)
        assert put.status_code == 201, put.text
        assert put.json()["speaker"]["kind"] == "onboarded" and put.json()["speaker"]["sentences"] == 2
        assert put.json()["fit"]["tokens"] > 0
        shown = client.get("/speakers/dr lee").json()
        assert shown == put.json()["speaker"] and shown["created"] == shown["updated"]
        assert client.post("/translate", json={"sentences": SENTENCES[:1], "speaker": "dr lee"}).json()[
            "translations"][0]["unknown_speaker_policy_applied"] is False

        more = client.post("/v1/speakers/dr lee/sentences", json=MORE, headers=AUTH)
        assert more.status_code == 200, more.text
        assert more.json()["speaker"]["sentences"] == 3
        assert more.json()["speaker"]["created"] == shown["created"] != more.json()["speaker"]["updated"]
        # an update refits on all the speaker's sentences: the rows of one fit on the three pairs
        fresh = _translator(checkpoint, toy)
        fresh.add_speaker("dr lee", PAIRS["sources"] + MORE["sources"], PAIRS["targets"] + MORE["targets"])
        for key, value in _rows(fresh, "dr lee").items():
            np.testing.assert_allclose(_rows(translator, "dr lee")[key], value, rtol=1e-5, atol=1e-6)

        replaced = client.put("/speakers/dr lee", json={**MORE, "replace": True}, headers=AUTH)
        assert replaced.status_code == 200 and replaced.json()["speaker"]["sentences"] == 1

        listed = client.get("/speakers").json()["speakers"]
        assert [s["name"] for s in listed] == translator.speakers  # the 8 trained ones, then dr lee
        assert [s["kind"] for s in listed] == ["trained"] * 8 + ["onboarded"]
        assert listed[0]["sentences"] == 20 and listed[0]["created"] is None

        assert client.delete("/speakers/dr lee", headers=AUTH).json() == {"deleted": "dr lee"}
        assert client.get("/speakers/dr lee").status_code == 404
        after = client.post("/translate", json={"sentences": SENTENCES[:2], "speaker": "dr lee"})
        assert [t["unknown_speaker_policy_applied"] for t in after.json()["translations"]] == [True, True]
        assert _texts(after) == translator.translate(SENTENCES[:2], "nobody")  # the mean speaker again
        assert client.delete("/speakers/dr lee", headers=AUTH).status_code == 404
        again = client.put("/speakers/dr lee", json=PAIRS, headers=AUTH)  # a deleted name can be onboarded anew
        assert again.status_code == 201 and again.json()["speaker"]["sentences"] == 2
        assert [s["name"] for s in client.get("/speakers").json()["speakers"]][-1] == "dr lee"
    assert translator.model.decoder.speaker_bias.num_speakers == 9  # its retired rows taken again: no new row


def test_a_deleted_speakers_name_is_free_as_in_a_service_that_never_had_it(toy, trained, tmp_path):
    """A deleted speaker's rows stayed in the translator under its name: that process refused a new name that looks
    like it ('a known speaker') and a translation as one, where another replica of the same store, which never had
    it, accepted both. Now both answer alike: the new lookalike is onboarded and served, and the deleted name is then
    the lookalike."""
    store = str(tmp_path / "speakers.db")
    twin = "\uff44r lee"  # "ｄr lee"
    with _client(_translator(trained("lstm_fact_bias"), toy), store=SpeakerStore(store)) as one:
        assert one.put("/speakers/dr lee", json=PAIRS, headers=AUTH).status_code == 201
        assert one.delete("/speakers/dr lee", headers=AUTH).status_code == 200
        with _client(_translator(trained("lstm_fact_bias"), toy), store=SpeakerStore(store)) as other:
            put = one.put("/speakers/" + twin, json=MORE, headers=AUTH)
            assert put.status_code == 201, put.text
            for client in (one, other):
                served = client.post("/translate", json={"sentences": SENTENCES[:1], "speaker": twin})
                assert served.json()["translations"][0]["unknown_speaker_policy_applied"] is False, served.text
                back = client.put("/speakers/dr lee", json=PAIRS, headers=AUTH)
                assert back.status_code == 422 and "looks like" in back.json()["error"]["message"], back.text
                deleted = client.post("/translate", json={"sentences": SENTENCES[:1], "speaker": "dr lee"})
                assert deleted.status_code == 422 and "looks like" in deleted.json()["error"]["message"]
            assert [s["name"] for s in one.get("/speakers").json()["speakers"]][8:] == [twin]


def test_a_name_with_a_slash_is_addressed_by_its_path(toy, trained):
    with _client(_translator(trained("lstm_fact_bias"), toy)) as client:
        assert client.put("/speakers/team/dr-lee", json=PAIRS, headers=AUTH).status_code == 201
        assert client.post("/speakers/team/dr-lee/sentences", json=MORE, headers=AUTH).json()["speaker"] == \
            client.get("/v1/speakers/team%2Fdr-lee").json()
        assert client.get("/speakers/team/dr-lee").json()["sentences"] == 3
        assert client.delete("/speakers/team/dr-lee", headers=AUTH).status_code == 200


def test_health_metrics_and_the_openapi_description(toy, trained):
    with _client(_translator(trained("lstm_fact_bias"), toy), token=None) as client:
        health = client.get("/health")
        assert health.status_code == 200
        assert health.json()["speakers"] == {"trained": 8, "onboarded": 0} and health.json()["writes"] is False
        assert health.json()["model"]["variant_spelling"] == "fact"
        assert client.get("/v1/health").json() == health.json()
        client.post("/translate", json={"sentences": SENTENCES[:3], "speaker": "spk000"})
        client.get("/speakers/nobody")
        metrics = client.get("/metrics")
        paths = client.get("/openapi.json").json()["paths"]
        docs = client.get("/docs")
    assert metrics.headers["content-type"].startswith("text/plain")
    text = metrics.text
    assert 'fairseq_speaker_requests_total{endpoint="/translate",method="POST",status="200",model="default"} 1' in text
    assert 'fairseq_speaker_requests_total{endpoint="/health",method="GET",status="200"} 2' in text  # of no model
    assert 'fairseq_speaker_errors_total{endpoint="/speakers/{name}",code="unknown_speaker",model="default"} 1' in text
    assert 'fairseq_speaker_request_duration_seconds_count{endpoint="/translate",model="default"} 1' in text
    assert 'fairseq_speaker_request_duration_seconds_bucket{endpoint="/translate",model="default",le="+Inf"} 1' in text
    assert 'fairseq_speaker_translated_sentences_total{model="default"} 3' in text
    assert 'fairseq_speaker_speakers{model="default",kind="trained"} 8' in text
    assert 'fairseq_speaker_model_loads_total{model="default",outcome="loaded"} 1' in text
    assert sorted(paths) == ["/health", "/limits", "/metrics", "/models", "/models/{model_id}",
                             "/models/{model_id}/reload", "/speakers", "/speakers/{name}", "/speakers/{name}/sentences",
                             "/translate"]
    assert set(paths["/speakers/{name}"]) == {"get", "put", "delete"}
    assert docs.status_code == 200


def test_the_api_description_pages_and_their_scripts_are_served_by_the_service(toy, trained):
    """/docs (Swagger UI) and /redoc (ReDoc) name only paths of the service, and each is served whole: the files of
    the fastapi-offline package, not a CDN's (a blank page where the service has no internet). The Swagger UI served
    is 5.x, which reads the OpenAPI 3.1 that FastAPI writes (4.x refuses it)."""
    import fastapi_offline

    assets = os.path.join(os.path.dirname(fastapi_offline.__file__), "static")
    with _client(_translator(trained("lstm_fact_bias"), toy), token=None) as client:
        assert client.get("/openapi.json").json()["openapi"].startswith("3.1")
        pages = (("/docs", {"swagger-ui-bundle.js", "swagger-ui.css"}), ("/redoc", {"redoc.standalone.js"}))
        for page, needed in pages:
            html = client.get(page).text
            urls = re.findall(r'(?:src|href)="([^"]+)"', html)
            assert urls and all(url.startswith("/") and not url.startswith("//") for url in urls), (page, urls)
            assert needed <= {url.rsplit("/", 1)[-1] for url in urls}, (page, urls)
            for url in urls:
                response = client.get(url)
                assert response.status_code == 200, url
                name = url.rsplit("/", 1)[-1]
                if name in os.listdir(assets):
                    with open(os.path.join(assets, name), "rb") as f:
                        assert response.content == f.read(), url
            assert "http://" not in html and "https://" not in html, page
        assert client.get("/redoc").headers["content-security-policy"] == "img-src 'self' data:"  # no logo fetched
        bundle = client.get("/docs/static/swagger-ui-bundle.js").content
        icon = client.get("/favicon.ico")
    assert re.search(rb'"5\.\d+\.\d+"', bundle)
    assert icon.headers["content-type"] == "image/png" and icon.content.startswith(b"\x89PNG\r\n\x1a\n")


def _paths(client):
    """A path of every endpoint of the app behind ``client`` (the API's from its OpenAPI description, at / and /v1, the
    others from its routes; path parameters filled in; a mount's: one of its files), and whether it answers GET."""
    found = {}
    for path, operations in client.get("/openapi.json").json()["paths"].items():
        for prefix in ("", "/v1"):
            found[prefix + path.replace("{name}", "spk000").replace("{model_id}", "default")] = "get" in operations
    for route in client.app.routes:
        methods = getattr(route, "methods", None)
        if hasattr(route, "path"):
            found[route.path + ("/swagger-ui.css" if methods is None else "")] = methods is None or "GET" in methods
    return found


def test_head_is_answered_wherever_get_is_with_gets_status_and_headers_and_no_body(toy, trained):
    """Every route and mount of the app (read from the app: a new one is checked the moment it is added) answers HEAD
    as it answers GET, status, type and length, without a body: 200 where GET is, GET's 405 where it is not; the
    metrics count HEAD as HEAD."""
    with _client(_translator(trained("lstm_fact_bias"), toy)) as client:
        paths = _paths(client)
        assert {path for path, get in paths.items() if get} >= {
            "/", "/docs", "/redoc", "/favicon.ico", "/health", "/v1/speakers/spk000", "/models/default", "/metrics",
            "/openapi.json", "/docs/static/swagger-ui.css"}
        for path, get in paths.items():
            got, head = client.get(path), client.head(path)
            assert head.status_code == got.status_code, path
            assert got.status_code == 200 if get else got.status_code in (404, 405), (path, got.status_code)
            assert head.content == b"", path
            assert head.headers["content-type"] == got.headers["content-type"], path
            assert head.headers.get("allow") == got.headers.get("allow"), path
            if path != "/metrics":  # its text grows with every request
                assert head.headers["content-length"] == got.headers["content-length"], path
        metrics = client.get("/metrics").text
    assert paths["/translate"] is False
    assert ('fairseq_speaker_requests_total{endpoint="/speakers/{name}",method="HEAD",status="200",model="default"} 2'
            in metrics)
    assert 'fairseq_speaker_requests_total{endpoint="/translate",method="HEAD",status="405"} 2' in metrics


# -- refusals ------------------------------------------------------------------------------------------------

LIMITS = Limits(max_sentences=3, max_chars=40, max_pairs=2, max_speaker_pairs=3)
BAD_JSON = b'{"sentences": ["i am tired ."], "speaker": "spk000"'

#: (method, path, body, headers, status, error code, text of the message)
REFUSALS = [
    ("put", "/speakers/zoe", PAIRS, {}, 401, "unauthorized", "Authorization: Bearer"),
    ("put", "/speakers/zoe", PAIRS, {"Authorization": "Bearer wrong-token-0123456789"}, 401, "unauthorized",
     "wrong token"),
    ("put", "/speakers/zoe", PAIRS, {"Authorization": TOKEN}, 401, "unauthorized", "Bearer"),
    ("delete", "/v1/speakers/zoe", None, {"Authorization": "Bearer wrong"}, 401, "unauthorized", "wrong token"),
    ("put", "/speakers/a%09b", PAIRS, AUTH, 422, "invalid_speaker", "tabs and control characters"),
    ("put", "/speakers/%20zoe", PAIRS, AUTH, 422, "invalid_speaker", "surrounding whitespace"),
    ("put", "/speakers/", PAIRS, AUTH, 422, "invalid_speaker", "empty speaker label"),
    ("put", "/speakers/spk000", PAIRS, AUTH, 409, "trained_speaker", "trained with the model"),
    ("put", "/speakers/dr-lee", PAIRS, AUTH, 409, "speaker_exists", '"replace": true'),
    ("put", "/speakers/zoe", {"sources": ["a ."] * 3, "targets": ["b ."] * 3}, AUTH, 413, "too_many_pairs",
     "--max-pairs"),
    ("put", "/speakers/zoe", {"sources": ["a" * 41], "targets": ["b ."]}, AUTH, 413, "sentence_too_long",
     "sources[0] has 41 characters; at most 40"),
    ("put", "/speakers/zoe", {"sources": ["a ."], "targets": []}, AUTH, 422, "invalid_request", "1 sources but 0"),
    ("put", "/speakers/zoe", {"sources": [], "targets": []}, AUTH, 422, "invalid_request", "no sentence pairs"),
    ("put", "/speakers/zoe", {"sources": ["a ."]}, AUTH, 422, "invalid_request", "targets: Field required"),
    ("post", "/speakers/spk001/sentences", MORE, AUTH, 409, "trained_speaker", "trained with the model"),
    ("post", "/speakers/nobody/sentences", MORE, AUTH, 404, "unknown_speaker", "PUT /speakers/{name} onboards it"),
    ("post", "/speakers/dr-lee/sentences", {"sources": ["a ."] * 2, "targets": ["b ."] * 2}, AUTH, 413,
     "too_many_pairs", "--max-speaker-pairs"),
    ("delete", "/speakers/spk000", None, AUTH, 409, "trained_speaker", "only onboarded speakers can be deleted"),
    ("delete", "/speakers/nobody", None, AUTH, 404, "unknown_speaker", "no onboarded speaker 'nobody'"),
    ("get", "/speakers/nobody", None, {}, 404, "unknown_speaker", "no speaker 'nobody'"),
    ("post", "/translate", {"sentences": ["i ."] * 4, "speaker": "spk000"}, {}, 413, "too_many_sentences",
     "4 sentences in one request; at most 3"),
    ("post", "/translate", {"sentences": ["i am tired ." * 4], "speaker": "spk000"}, {}, 413, "sentence_too_long",
     "sentences[0] has 48 characters"),
    ("post", "/translate", BAD_JSON, {"Content-Type": "application/json"}, 422, "invalid_json", "not valid JSON"),
    ("post", "/translate", {"sentences": ["i ."]}, {}, 422, "invalid_request", "give either 'speakers'"),
    ("post", "/translate", {"sentences": ["i ."], "speaker": "a", "speakers": ["a"]}, {}, 422, "invalid_request",
     "give either 'speakers'"),
    ("post", "/translate", {"sentences": ["i .", "you ."], "speakers": ["spk000"]}, {}, 422, "invalid_request",
     "1 speakers for 2 sentences"),
    ("post", "/translate", {"sentences": ["i ."], "speakrs": ["spk000"]}, {}, 422, "invalid_request",
     "speakrs: Extra inputs are not permitted"),
    ("post", "/translate", {"sentences": [3], "speaker": "spk000"}, {}, 422, "invalid_request",
     "sentences.0: Input should be a valid string"),
    ("post", "/translate", {"sentences": [], "speaker": "spk000"}, {}, 422, "invalid_request", "no sentences"),
    ("post", "/translate", {"sentences": ["i ."], "speaker": "a\tb"}, {}, 422, "invalid_speaker", "contains '\\t'"),
    ("post", "/translate", b"x" * 200_000, {"Content-Type": "application/json"}, 413, "too_large",
     "the request body is over"),
    ("post", "/translate", {"sentences": ["i ."], "speaker": "spk000", "nbest": 6}, {}, 422, "invalid_request",
     "nbest: 6 translations of each sentence need a beam of at least 6 (the beam is 5)"),
    ("post", "/translate", {"sentences": ["i ."], "speaker": "spk000", "beam": 17}, {}, 422, "invalid_request",
     "beam: 17 is over this service's largest beam, 16 (fairseq-speaker-serve --max-beam)"),
    ("post", "/translate", {"sentences": ["i ."], "speaker": "spk000", "beam": 0}, {}, 422, "invalid_request",
     "beam: Input should be greater than or equal to 1"),
    ("get", "/translate", None, {}, 405, "method_not_allowed", "Method Not Allowed"),
    ("get", "/nowhere", None, {}, 404, "not_found", "no endpoint /nowhere"),
]


@pytest.fixture(scope="module")
def guarded(toy, trained):
    """A service with a token and small limits, which has onboarded dr-lee on two sentence pairs."""
    with _client(_translator(trained("lstm_fact_bias"), toy), limits=LIMITS) as client:
        assert client.put("/speakers/dr-lee", json=PAIRS, headers=AUTH).status_code == 201
        yield client


def _send(client, method, path, body, headers):
    if isinstance(body, bytes):
        return client.request(method, path, content=body, headers=headers)
    return client.request(method, path, json=body, headers=headers)


@pytest.mark.parametrize("method,path,body,headers,status,code,message", REFUSALS,
                         ids=[f"{r[0]} {r[1]} {r[4]} {r[5]}" for r in REFUSALS])
def test_a_refused_request_gets_one_json_error(guarded, method, path, body, headers, status, code, message):
    response = _send(guarded, method, path, body, headers)
    assert response.status_code == status, response.text
    assert set(response.json()) == {"error"} and response.json()["error"]["code"] == code, response.text
    assert message in response.json()["error"]["message"], response.text
    assert "Traceback" not in response.text
    if status == 401:
        assert response.headers["www-authenticate"] == "Bearer"


def test_a_chunked_body_over_the_limit_is_refused_as_it_arrives(guarded):
    chunks = iter([b'{"sentences": ["'] + [b"x" * 8192] * 20 + [b'"], "speaker": "spk000"}'])
    response = guarded.post("/translate", content=chunks, headers={"Content-Type": "application/json"})
    assert response.status_code == 413 and response.json()["error"]["code"] == "too_large"


#: /translate bodies (sent as JSON unless bytes with their headers): the refusals' and some answered ones
TRANSLATE_BODIES = [(body, headers) for method, path, body, headers, *_ in REFUSALS if path == "/translate"
                    and method == "post"] + [
    ({"sentences": SENTENCES[:3], "speakers": ["spk000", "dr-lee", "nobody"]}, {}),
    ({"sentences": SENTENCES[:2], "speaker": "spk001", "beam": 3, "nbest": 2}, {}),
    (b"", {"Content-Type": "application/json"}),
    (b"[1, 2]", {"Content-Type": "application/json; charset=utf-8"}),
    (b'{"sentences": ["i ."], "speaker": "spk000"}', {"Content-Type": "text/plain"}),
    (b'{"sentences": ["i ."], "speaker": "spk000"}', {}),
]


@pytest.mark.parametrize("path", ["/translate", "/v1/translate"])
def test_translate_answers_alike_directly_and_through_fastapis_route(guarded, path, monkeypatch):
    """POST /translate is answered without FastAPI's request handling (its cost, under load, is the service's):
    every answer and refusal is the one FastAPI's route gives, and the metrics count it under the endpoint."""
    solved = []
    real = fastapi.routing.solve_dependencies

    async def counted(*args, **kwargs):
        solved.append(1)
        return await real(*args, **kwargs)

    before = guarded.get("/metrics").text
    monkeypatch.setattr(fastapi.routing, "solve_dependencies", counted)
    answers = {}
    for directly in (True, False):
        guarded.app.state.translate_directly = directly
        try:
            answers[directly] = [_send(guarded, "post", path, body, headers) for body, headers in TRANSLATE_BODIES]
        finally:
            guarded.app.state.translate_directly = True
        if directly:  # only the two bodies not sent as JSON went on to FastAPI
            assert len(solved) == 2, "a JSON body went through FastAPI's route"
    for direct, routed, (body, _) in zip(answers[True], answers[False], TRANSLATE_BODIES):
        assert (direct.status_code, direct.json()) == (routed.status_code, routed.json()), body
    assert {a.status_code for a in answers[True]} >= {200, 413, 422}
    answered = [re.search(r'_requests_total\{endpoint="/translate",method="POST",status="200",model="default"\} (\d+)',
                          text)
                for text in (before, guarded.get("/metrics").text)]
    assert int(answered[1].group(1)) - (int(answered[0].group(1)) if answered[0] else 0) == 2 * 2


def test_the_refusals_changed_nothing(guarded):
    speakers = guarded.get("/speakers").json()["speakers"]
    assert [s["name"] for s in speakers if s["kind"] == "onboarded"] == ["dr-lee"]
    assert speakers[-1]["sentences"] == 2


@pytest.mark.parametrize("method,path", [("put", "/speakers/zoe"), ("post", "/v1/speakers/zoe/sentences"),
                                         ("delete", "/speakers/zoe")])
def test_writes_are_disabled_without_a_token_and_say_how_to_enable_them(toy, trained, method, path):
    with _client(_translator(trained("lstm_fact_bias"), toy), token=None) as client:
        response = _send(client, method, path, PAIRS if method != "delete" else None, AUTH)
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "writes_disabled"
    assert "--token-file" in response.json()["error"]["message"]


def test_an_unknown_speaker_is_refused_when_the_policy_is_fail(toy, trained):
    with _client(_translator(trained("lstm_fact_bias"), toy, unknown_speaker="fail")) as client:
        refused = client.post("/translate", json={"sentences": SENTENCES[:2], "speakers": ["spk000", "nobody"]})
        known = client.post("/translate", json={"sentences": SENTENCES[:2], "speaker": "spk000"})
    assert refused.status_code == 404 and "'nobody'" in refused.json()["error"]["message"]
    assert known.status_code == 200 and known.json()["unknown_speaker_policy"] == "fail"


def test_health_says_503_when_the_store_does_not_answer(toy, trained):
    store = SpeakerStore(":memory:")
    with _client(_translator(trained("lstm_fact_bias"), toy), store) as client:
        store.close()  # as a file gone bad would
        health = client.get("/health")
        translated = client.post("/translate", json={"sentences": ["i ."], "speaker": "spk000"})
    assert health.status_code == 503 and health.json()["error"]["code"] == "store_unavailable"
    assert translated.status_code == 503  # not translated with speakers the store may have changed


@pytest.mark.parametrize("content,message", [("short-token\n", "the token has 11 characters; use at least 16"),
                                             ("a token with spaces\n", "printable ASCII without spaces"),
                                             ("\ufeffa-token-of-enough-chars\n", "a byte-order mark (U+FEFF)"),
                                             ("a-token-of-enough-chars\nanother-line-of-it\n", "more than one line"),
                                             (" \n", "the token is empty")])
def test_an_unusable_token_is_refused(tmp_path, content, message):
    (tmp_path / "token").write_text(content)
    with pytest.raises(UserError, match=re.escape(message)):
        read_token(argparse.Namespace(token_file=str(tmp_path / "token"), token_env=None))
    (tmp_path / "token").write_text(f"  {TOKEN}\n")
    assert read_token(argparse.Namespace(token_file=str(tmp_path / "token"), token_env=None)) == TOKEN


def test_an_internal_error_reaches_the_client_without_its_traceback(toy, trained, monkeypatch):
    translator = _translator(trained("lstm_fact_bias"), toy)
    with _client(translator) as client:
        monkeypatch.setattr(translator, "translate_nbest", lambda *a, **k: 1 / 0)
        response = client.post("/translate", json={"sentences": ["i ."], "speaker": "spk000"})
    assert response.status_code == 500
    assert response.json()["error"]["code"] == "internal_error"
    assert "ZeroDivision" not in response.text and "Traceback" not in response.text


# -- the store ------------------------------------------------------------------------------------------------


def test_a_speaker_onboarded_through_the_api_survives_a_restart(toy, trained, tmp_path):
    checkpoint, store = trained("lstm_fact_bias"), str(tmp_path / "speakers.db")
    first = _translator(checkpoint, toy)
    request = {"sentences": SENTENCES * 2, "speakers": ["dr-lee"] * 4 + ["dr-kim"] * 4}
    with _client(first, SpeakerStore(store)) as client:
        shown = client.put("/speakers/dr-lee", json=PAIRS, headers=AUTH).json()["speaker"]
        client.put("/speakers/dr-kim", json=MORE, headers=AUTH)
        before = _texts(client.post("/translate", json=request))
    second = _translator(checkpoint, toy)  # a new process: the model as trained, the store as left
    assert "dr-lee" not in second.speakers
    with _client(second, SpeakerStore(store)) as client:
        assert client.get("/speakers/dr-lee").json() == shown
        assert [s["name"] for s in client.get("/speakers").json()["speakers"]][-2:] == ["dr-lee", "dr-kim"]
        assert _texts(client.post("/translate", json=request)) == before
    for name in ("dr-lee", "dr-kim"):
        for key, value in _rows(first, name).items():
            np.testing.assert_array_equal(_rows(second, name)[key], value)


def test_a_process_sees_what_another_process_sharing_the_store_wrote(toy, trained, tmp_path):
    """Two services on one store file, as two replicas: each request sees every write committed before it."""
    checkpoint, store = trained("lstm_fact_bias"), str(tmp_path / "speakers.db")
    with _client(_translator(checkpoint, toy), SpeakerStore(store)) as one, \
            _client(_translator(checkpoint, toy), SpeakerStore(store)) as other:
        one.put("/speakers/dr-lee", json=PAIRS, headers=AUTH)
        request = {"sentences": SENTENCES, "speaker": "dr-lee"}
        assert other.get("/speakers/dr-lee").json()["sentences"] == 2
        assert _texts(other.post("/translate", json=request)) == _texts(one.post("/translate", json=request))
        assert other.post("/speakers/dr-lee/sentences", json=MORE, headers=AUTH).json()["speaker"]["sentences"] == 3
        assert one.get("/speakers/dr-lee").json()["sentences"] == 3
        assert _texts(one.post("/translate", json=request)) == _texts(other.post("/translate", json=request))
        assert one.put("/speakers/dr-lee", json=PAIRS, headers=AUTH).status_code == 409  # onboarded by the other
        assert one.delete("/speakers/dr-lee", headers=AUTH).status_code == 200
        assert other.get("/speakers/dr-lee").status_code == 404
        gone = other.post("/translate", json=request).json()["translations"]
        assert all(t["unknown_speaker_policy_applied"] for t in gone)


def test_a_store_made_for_another_model_is_refused(toy, trained, tmp_path):
    store = str(tmp_path / "speakers.db")
    with _client(_translator(trained("lstm_fact_bias"), toy), SpeakerStore(store)):
        pass  # a store made for the fact model, holding no speaker: another model may take it (it was refused)
    with _client(_translator(trained("lstm_full_bias"), toy), SpeakerStore(store)):
        pass
    with _client(_translator(trained("lstm_fact_bias"), toy), SpeakerStore(store)) as client:
        client.put("/speakers/dr-lee", json=PAIRS, headers=AUTH)
    other = SpeakerStore(store)
    with pytest.raises(StoreError, match=r"holds the speakers of another model .*'fact'.* has a 'full' speaker bias"):
        create_app(_translator(trained("lstm_full_bias"), toy), other)
    other.close()


def test_a_checkpoint_that_has_a_stored_speaker_as_a_trained_one_is_refused(toy, trained, tmp_path):
    translator, store = _translator(trained("lstm_fact_bias"), toy), str(tmp_path / "speakers.db")
    with _client(translator, SpeakerStore(store)) as client:
        client.put("/speakers/dr-lee", json=PAIRS, headers=AUTH)
    translator.save(str(tmp_path / "with_dr_lee.pt"))
    other = SpeakerStore(store)
    with pytest.raises(StoreError, match="holds speaker.* 'dr-lee' that .*with_dr_lee.pt was trained with"):
        create_app(_translator(str(tmp_path / "with_dr_lee.pt"), toy), other)
    other.close()


def test_a_file_that_is_no_store_is_refused(tmp_path):
    path = tmp_path / "notes.db"
    path.write_text("not a database, but my notes\n" * 100)
    with pytest.raises(StoreError, match="not a speaker store"):
        SpeakerStore(str(path))
    assert path.read_text().startswith("not a database")


# -- a real server ------------------------------------------------------------------------------------------


def test_a_real_server_answers_health_translates_onboards_and_stops_on_sigterm(toy, trained, tmp_path):
    checkpoint, store = trained("lstm_fact_bias"), str(tmp_path / "speakers.db")
    with real_server([checkpoint, "--data", toy["bin"], "--store", store, "--token-env", "SERVICE_TOKEN",
                      "--max-len-b", "6", "--threads", "1"], tmp_path / "server.log",
                     env={"SERVICE_TOKEN": TOKEN}) as (server, base):
        status, health = http_call(base + "/health")
        assert status == 200 and health["status"] == "ok" and health["writes"] is True
        status, answer = http_call(base + "/v1/translate", {"sentences": SENTENCES[:2], "speaker": "spk000"})
        assert status == 200
        assert [t["text"] for t in answer["translations"]] == _translator(checkpoint, toy).translate(SENTENCES[:2],
                                                                                                     "spk000")
        status, onboarded = http_call(base + "/speakers/dr-lee", PAIRS, method="PUT", headers=AUTH)
        assert status == 201 and onboarded["speaker"]["sentences"] == 2
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=30) in (0, -signal.SIGTERM)  # uvicorn raises the signal again once it stopped
    output = open(tmp_path / "server.log").read()
    assert "Traceback" not in output, output[-3000:]
    assert f"closed the speaker store {store}" in output  # a graceful shutdown
    assert "HTTP/1.1" not in output  # no access log unless asked for (--access-log)
    with sqlite3.connect(store) as db:  # committed before the answer, readable once the server is gone
        assert db.execute("SELECT name, sentences FROM speakers").fetchall() == [("dr-lee", 2)]


def test_json_logs_are_one_object_a_line_with_each_records_fields_and_the_access_log_when_asked(toy, trained,
                                                                                                 tmp_path):
    """--log-format json --access-log: every line the server writes, uvicorn's too, is a JSON object with its time,
    level, logger and message; each request has an access line with its method, path and status, and a refusal its
    code; a newline in a path stays inside its line."""
    with real_server([trained("lstm_fact_bias"), "--data", toy["bin"], "--max-len-b", "6", "--threads", "1",
                      "--log-format", "json", "--access-log"], tmp_path / "server.log") as (server, base):
        assert http_call(base + "/v1/translate", {"sentences": SENTENCES[:1], "speaker": "spk000"})[0] == 200
        assert http_call(base + "/speakers/zoe", PAIRS, method="PUT")[0] == 403
        assert http_call(base + "/speakers/nobody")[0] == 404
        assert http_call(base + "/speakers/no%0Aone")[0] == 422  # the label policy's, as for any name it refuses
        with urllib.request.urlopen(urllib.request.Request(base + "/", method="HEAD"), timeout=30) as head:
            assert head.status == 200 and head.read() == b""
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
    lines = [line for line in open(tmp_path / "server.log").read().splitlines() if line.strip()]
    records = [json.loads(line) for line in lines]  # every line: one JSON object
    assert all({"time", "level", "logger", "message"} <= set(r) for r in records)
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", r["time"]) for r in records)
    assert any(r["logger"] == "uvicorn.error" and "Uvicorn running" in r["message"] for r in records)
    assert any(r["message"] == "threads: 1 (--threads 1)" for r in records)
    access = {(r["method"], r["path"], r["status"]) for r in records if r["logger"] == "uvicorn.access"}
    assert {("GET", "/health", 200), ("POST", "/v1/translate", 200), ("PUT", "/speakers/zoe", 403),
            ("GET", "/speakers/nobody", 404), ("GET", "/speakers/no%0Aone", 422), ("HEAD", "/", 200)} <= access
    refused = {(r["method"], r["path"], r["status"], r["code"]) for r in records if "code" in r}
    assert {("PUT", "/speakers/zoe", 403, "writes_disabled"), ("GET", "/speakers/nobody", 404, "unknown_speaker"),
            ("GET", "/speakers/no\\none", 422, "invalid_speaker")} <= refused and len(refused) == 3, refused


# -- what the page needs: the limits, the speakers' traits ------------------------------------------------------


def test_the_limits_are_those_the_requests_are_held_to(toy, trained):
    limits = Limits(max_sentences=3, max_chars=40, max_pairs=2, max_speaker_pairs=5, max_beam=4)
    app = create_app(_translator(trained("lstm_fact_bias"), toy), token=TOKEN, limits=limits, beam=4)
    with TestClient(app, raise_server_exceptions=False) as client:
        shown = client.get("/v1/limits").json()
        at = client.post("/translate", json={"sentences": ["i ."] * shown["max_sentences"], "speaker": "spk000"})
        over = client.post("/translate", json={"sentences": ["i ."] * (shown["max_sentences"] + 1), "speaker": "x"})
        long = client.post("/translate", json={"sentences": ["a" * (shown["max_chars"] + 1)], "speaker": "x"})
        pairs = {"sources": ["i ."] * (shown["max_pairs"] + 1), "targets": ["je ."] * (shown["max_pairs"] + 1)}
        too_many = client.put("/speakers/zoe", json=pairs, headers=AUTH)
        beam = client.post("/translate", json={"sentences": ["i ."], "speaker": "x", "beam": shown["max_beam"] + 1})
        body = client.post("/translate", content=b" " * (shown["max_body_bytes"] + 1),
                           headers={"Content-Type": "application/json"})
    assert shown == {"max_sentences": 3, "max_chars": 40, "max_pairs": 2, "max_speaker_pairs": 5, "max_beam": 4,
                     "beam": 4, "max_body_bytes": limits.max_body_bytes}
    assert at.status_code == 200
    assert [r.json()["error"]["code"] for r in (over, long, too_many, beam, body)] == [
        "too_many_sentences", "sentence_too_long", "too_many_pairs", "invalid_request", "too_large"]


@pytest.fixture(scope="module")
def remembering(toy, trained, tmp_path_factory):
    """lstm_fact_bias with the memory of its speakers' words (fairseq-speaker-words, its settings fixed)."""
    out = str(tmp_path_factory.mktemp("words") / "words.pt")
    run("fairseq-speaker-words", [toy["bin"], "--path", trained("lstm_fact_bias"), "--save", out, "--threads", "1",
                                  "--calibrate", "off"])
    return out


def test_speakers_show_the_traits_their_words_suggest_and_a_model_without_kinds_shows_none(toy, trained, remembering):
    """With the toy's gender as kinds of speaker (tests/toy_kinds.py): every speaker, trained or onboarded from a few
    pairs, shows the kind of its own gender (speakers.tsv, or the onboarded sentences), told by that gender's words;
    the trait of one kind is shown to none. A model without kinds shows null."""
    translator = _translator(remembering, toy)
    words = attach_gender_kinds(translator)
    gender = genders(toy["raw"])
    with _client(translator, token=TOKEN) as client:
        onboarded = client.put("/speakers/dr-lee", json=PAIRS, headers=AUTH)  # je suis fatiguée
        listed = client.get("/speakers").json()["speakers"]
        one = client.get("/v1/speakers/spk003").json()
    gender["dr-lee"] = "f"
    assert onboarded.status_code == 201 and onboarded.json()["speaker"]["traits"] == listed[-1]["traits"]
    assert [s["name"] for s in listed] == [f"spk00{i}" for i in range(8)] + ["dr-lee"]
    for speaker in listed:
        (trait,) = speaker["traits"]
        expected = 2 if gender[speaker["name"]] == "f" else 1
        assert (trait["trait"], trait["kind"], trait["kinds"]) == (1, expected, 2), speaker
        assert trait["probability"] >= 0.9 - 1e-9 and trait["evidence"] >= 1  # 0.9: one word of 0.9 to 0.1
        assert trait["words"] and set(trait["words"]) <= set(words[gender[speaker["name"]]]), speaker
    assert one == listed[3]
    with _client(_translator(trained("lstm_fact_bias"), toy)) as client:
        assert all(s["traits"] is None for s in client.get("/speakers").json()["speakers"])


# -- the guide -----------------------------------------------------------------------------------------------


def test_the_guides_command_lines_parse_and_its_curl_requests_name_endpoints(toy, trained):
    text = open(os.path.join(ROOT, "docs", "serving.md"), encoding="utf-8").read()
    commands = [line for line in text.replace("\\\n", " ").splitlines() if line.startswith("fairseq-speaker-serve ")]
    assert commands
    for command in commands:
        args, overrides, limits = parse_args(shlex.split(command)[1:])
        assert args.store and args.token_file and overrides["beam"] == 5
    requests = re.findall(r"curl -s (?:-X (\w+) )?'?localhost:8000(/[^\s'?]+)", text)
    assert len(requests) >= 13
    with _client(_translator(trained("lstm_fact_bias"), toy)) as client:
        routes = {(method, path) for method, path in
                  ((m.upper(), p) for p, ops in client.get("/openapi.json").json()["paths"].items() for m in ops)}
    for method, path in requests:
        template = re.sub(r"/models/[^/]+", "/models/{model_id}", re.sub(r"/speakers/[^/]+", "/speakers/{name}", path))
        assert ((method or ("POST" if path == "/translate" else "GET")), template) in routes, (method, path)


def test_speakers_have_their_words_in_every_process_sharing_the_store_until_deleted(toy, trained, tmp_path):
    """A model that remembers its speakers' words (fairseq-speaker-words) behind the service."""
    plain_checkpoint, out = trained("lstm_fact_bias"), str(tmp_path / "words.pt")
    run("fairseq-speaker-words", [toy["bin"], "--path", plain_checkpoint, "--save", out, "--threads", "1"])
    store = str(tmp_path / "speakers.db")
    one, other, plain = _translator(out, toy), _translator(out, toy), _translator(plain_checkpoint, toy)
    dictionary = one.task.target_dictionary

    def words_of(translator, name):
        return set(speaker_words_of(translator.model).words_of(translator.task.speaker_dictionary.index(name)).tolist())

    def said(pairs):
        return {dictionary.index(w) for t in pairs for w in t.split()} | {dictionary.eos()}

    with _client(one, SpeakerStore(store)) as first, _client(other, SpeakerStore(store)) as second, \
            _client(plain, SpeakerStore(store)) as third:
        assert first.put("/speakers/dr-lee", json=PAIRS, headers=AUTH).status_code == 201
        assert first.post("/speakers/dr-lee/sentences", json=MORE, headers=AUTH).status_code == 200
        assert second.get("/speakers/dr-lee").json()["sentences"] == 3  # the other process reads the store
        for translator in (one, other):
            assert words_of(translator, "dr-lee") == said(PAIRS["targets"] + MORE["targets"])
        # a process whose model remembers no words stores rows without them: the others read them from the sentences
        assert third.put("/speakers/dr-kim", json=MORE, headers=AUTH).status_code == 201
        assert first.get("/speakers/dr-kim").status_code == 200
        assert words_of(one, "dr-kim") == said(MORE["targets"])
        # a deleted speaker's words are forgotten, in the process that deleted it and in the others
        assert first.delete("/speakers/dr-lee", headers=AUTH).status_code == 200
        assert second.get("/speakers/dr-lee").status_code == 404
        retired = retired_name("dr-lee")  # its rows stay, under a name no speaker can have
        assert words_of(one, retired) == set() and words_of(other, retired) == set()
