"""The batcher of fairseq-speaker-serve without a model: a translate function that records the batches it gets."""

import threading
import time
from concurrent.futures import wait

import pytest

from fairseq_speaker.service.batcher import Batcher, BatchOptions


def _translation(sentence: str, label: str):
    return [(f"{label}:{sentence}", -float(len(sentence)))]


class Recorder:
    """A translate function that answers each sentence by its speaker and text, and records every batch; it can
    be held until released, so that requests pile up behind it, and made to fail on a sentence."""

    def __init__(self, fail_on=None):
        self.batches = []
        self.fail_on = fail_on
        self.release = threading.Event()
        self.release.set()
        self.entered = threading.Event()

    def __call__(self, sentences, labels, beam, nbest):
        self.batches.append(list(sentences))
        self.entered.set()
        assert self.release.wait(timeout=30)
        if self.fail_on in sentences:
            raise ValueError(f"cannot translate {self.fail_on!r}")
        return [_translation(s, label) for s, label in zip(sentences, labels)]


def _tokens(sentence: str) -> int:
    return len(sentence.split()) + 1  # with the end of sentence, as fairseq counts


def _submit(batcher, sentences, labels, beam=5, nbest=1):
    return batcher.submit(sentences, labels, beam, nbest, tokens=[_tokens(s) for s in sentences])


def _padded(batch) -> int:
    return len(batch) * max(_tokens(s) for s in batch)


def test_a_batch_never_passes_the_token_cap_and_every_request_gets_its_own_sentences_in_order():
    translate = Recorder()
    translate.release.clear()  # hold the first batch: the others queue up behind it
    batcher = Batcher(translate, BatchOptions(max_batch_sentences=8, max_batch_tokens=20, max_wait_ms=0))
    first = _submit(batcher, ["warm up ."], ["a"])
    assert translate.entered.wait(timeout=30)
    requests = [([" ".join(["w"] * (1 + (i * 7 + j) % 6)) + f" {i}.{j}" for j in range(1 + i % 4)],
                 [f"spk{(i + j) % 3}" for j in range(1 + i % 4)]) for i in range(20)]
    futures = [_submit(batcher, sentences, labels) for sentences, labels in requests]
    translate.release.set()
    wait([first] + futures, timeout=30)
    batcher.close(timeout=30)
    for (sentences, labels), future in zip(requests, futures):
        assert future.result() == [_translation(s, label) for s, label in zip(sentences, labels)]  # as unbatched
    shared = translate.batches[1:]
    assert all(_padded(batch) <= 20 for batch in shared), [(_padded(b), b) for b in shared]
    assert sorted(s for batch in shared for s in batch) == sorted(s for sentences, _ in requests for s in sentences)
    assert max(len(batch) for batch in shared) > 1  # shared, not one by one
    assert [s for batch in shared for s in batch] == [s for sentences, _ in requests for s in sentences]  # in order


def test_a_request_over_the_caps_is_split_over_batches_in_order_and_answered_whole():
    translate = Recorder()
    batcher = Batcher(translate, BatchOptions(max_batch_sentences=3, max_batch_tokens=12, max_wait_ms=0))
    sentences = [f"s{i} ." + " x" * (i % 3) for i in range(8)]
    labels = [f"spk{i % 2}" for i in range(8)]
    answer = _submit(batcher, sentences, labels).result(timeout=30)
    batcher.close(timeout=30)
    assert answer == [_translation(s, label) for s, label in zip(sentences, labels)]
    assert [s for batch in translate.batches for s in batch] == sentences
    assert len(translate.batches) > 2 and all(len(b) <= 3 and _padded(b) <= 12 for b in translate.batches)


def test_a_sentence_over_the_token_cap_is_translated_alone_not_refused():
    translate = Recorder()
    batcher = Batcher(translate, BatchOptions(max_batch_tokens=4, max_wait_ms=0))
    long = "one two three four five six ."
    answer = _submit(batcher, ["a .", long, "b ."], ["x", "y", "z"]).result(timeout=30)
    batcher.close(timeout=30)
    assert answer == [_translation("a .", "x"), _translation(long, "y"), _translation("b .", "z")]
    assert [long] in translate.batches
    assert all(len(b) == 1 or _padded(b) <= 4 for b in translate.batches)


def test_without_a_token_cap_a_request_over_the_sentence_cap_is_split_too():
    translate = Recorder()
    batcher = Batcher(translate, BatchOptions(max_batch_sentences=2, max_wait_ms=0))
    answer = batcher.submit(["a", "b", "c", "d", "e"], ["x"] * 5, 5, 1).result(timeout=30)
    batcher.close(timeout=30)
    assert answer == [_translation(s, "x") for s in "abcde"]
    assert translate.batches == [["a", "b"], ["c", "d"], ["e"]]


def test_a_full_batch_goes_at_once_and_a_lone_request_waits_only_the_gap():
    translate = Recorder()
    batcher = Batcher(translate, BatchOptions(max_batch_sentences=4, max_gap_ms=1000, max_wait_ms=1000))
    start = time.monotonic()
    futures = [batcher.submit([f"s{i}"], ["x"], 5, 1) for i in range(4)]
    wait(futures, timeout=30)
    assert time.monotonic() - start < 0.9  # full: it did not wait the second out
    assert translate.batches == [["s0", "s1", "s2", "s3"]]
    batcher.close(timeout=30)
    translate = Recorder()
    batcher = Batcher(translate, BatchOptions(max_gap_ms=50, max_wait_ms=1000))
    start = time.monotonic()
    batcher.submit(["alone"], ["x"], 5, 1).result(timeout=30)
    waited = time.monotonic() - start
    batcher.close(timeout=30)
    assert 0.045 <= waited < 0.9, waited  # the gap, not the longest wait


def test_once_the_clients_the_last_batch_answered_are_back_the_next_batch_goes_without_waiting_the_gap():
    translate = Recorder()
    batcher = Batcher(translate, BatchOptions(max_gap_ms=400, max_wait_ms=1000))
    start = time.monotonic()
    wait([batcher.submit([f"a{i}"], ["x"], 5, 1) for i in range(3)], timeout=30)
    first = time.monotonic() - start
    start = time.monotonic()
    futures = [batcher.submit([f"b{i}"], ["x"], 5, 1) for i in range(3)]  # the three clients, back
    wait(futures, timeout=30)
    second = time.monotonic() - start
    alone = batcher.submit(["c"], ["x"], 5, 1)  # one of three: waits for the others, then the gap
    alone.result(timeout=30)
    batcher.close(timeout=30)
    assert first >= 0.38 and second < 0.3, (first, second)
    assert translate.batches == [["a0", "a1", "a2"], ["b0", "b1", "b2"], ["c"]]


def test_requests_arriving_within_the_gap_share_a_batch_and_different_decodings_do_not():
    translate = Recorder()
    batcher = Batcher(translate, BatchOptions(max_gap_ms=400, max_wait_ms=1000))
    futures = [batcher.submit([f"s{i}"], ["x"], 5, 1) for i in range(3)] + [batcher.submit(["n"], ["x"], 5, 2)]
    wait(futures, timeout=30)
    batcher.close(timeout=30)
    assert translate.batches == [["s0", "s1", "s2"], ["n"]]


def test_a_failing_request_fails_alone_and_its_later_sentences_are_not_translated():
    translate = Recorder(fail_on="bad")
    translate.release.clear()
    batcher = Batcher(translate, BatchOptions(max_batch_sentences=2, max_wait_ms=0))
    first = batcher.submit(["warm up"], ["x"], 5, 1)
    assert translate.entered.wait(timeout=30)
    good = batcher.submit(["g1"], ["x"], 5, 1)
    failing = batcher.submit(["bad", "after1", "after2"], ["y"] * 3, 5, 1)
    translate.release.set()
    wait([first, good, failing], timeout=30)
    batcher.close(timeout=30)
    assert good.result() == [_translation("g1", "x")]
    with pytest.raises(ValueError, match="cannot translate 'bad'"):
        failing.result()
    assert "after2" not in [s for batch in translate.batches for s in batch]
    assert batcher.queued == 0


def test_a_request_cancelled_while_it_waits_is_never_translated():
    translate = Recorder()
    translate.release.clear()
    batcher = Batcher(translate, BatchOptions(max_wait_ms=0))
    first = batcher.submit(["first"], ["x"], 5, 1)
    assert translate.entered.wait(timeout=30)
    cancelled = batcher.submit(["cancelled"], ["x"], 5, 1)
    assert cancelled.cancel() and batcher.queued == 0
    translate.release.set()
    first.result(timeout=30)
    batcher.close(timeout=30)
    assert translate.batches == [["first"]]


def test_the_token_cap_needs_each_sentences_tokens():
    batcher = Batcher(Recorder(), BatchOptions(max_batch_tokens=10))
    with pytest.raises(ValueError, match="tokens of each sentence"):
        batcher.submit(["a"], ["x"], 5, 1)


@pytest.mark.parametrize("options,message", [
    ({"max_batch_tokens": 0}, "--max-batch-tokens must be at least 1 (or not given: no cap), got 0"),
    ({"max_batch_tokens": -3}, "--max-batch-tokens must be at least 1"),
    ({"max_batch_tokens": True}, "--max-batch-tokens must be at least 1"),
    ({"max_batch_sentences": 0}, "--max-batch-sentences must be at least 1"),
    ({"max_gap_ms": -1.0}, "--max-gap-ms must be between 0 and 1000"),
    ({"max_wait_ms": 2000.0}, "--max-wait-ms must be between 0 and 1000"),
])
def test_bad_batch_options_are_refused_with_the_option_named(options, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        BatchOptions(**options)
