"""Concurrent translation requests gathered into shared beam searches.

On a CPU the fixed cost of one beam search (fairseq's generator, collating, one decoder step after another
for the longest sentence) dominates: 32 sentences in one search cost a few times one sentence, not 32 times.
So requests are not translated one by one: one worker thread takes the oldest waiting request and the
requests after it that ask for the same decoding (beam, n-best), and translates their sentences in one call,
each sentence with its own speaker. Each request gets the results of its own sentences, in its order.

When a batch goes:

- at once when it is full: ``max_batch_sentences`` sentences, or the next sentence would take it over
  ``max_batch_tokens`` (counted as fairseq's ``--max-tokens`` counts a batch: the sentences times the longest
  one's tokens, padding included);
- at once when as many requests have arrived since the last batch ended as that batch answered: clients that
  send their next request once answered are all back (a lone client waits for nothing);
- otherwise once no request has arrived for ``max_gap_ms``, or the oldest has waited ``max_wait_ms``. Both
  count from the end of the last batch at the earliest: under load, the clients answered by the last batch
  come back within the gap, and their requests join the next batch instead of splitting the clients into two
  halves that take turns with half-full batches.

A request with more sentences than a batch takes is split, in order, over consecutive batches (sharing them
with other requests where they fit); a sentence over ``max_batch_tokens`` by itself is translated alone. A
request is answered once its last sentence is translated.

A batch that fails is translated again one request at a time, so that one request's failure is that
request's alone. The queue holds at most ``max_queue`` sentences waiting: a request that would overflow it
is refused at once (:class:`QueueFull`), rather than answered late.
"""

import collections
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable, Deque, List, Optional, Sequence, Tuple


#: the n best translations of each sentence, each (text, score), best first
Hypotheses = List[List[Tuple[str, float]]]
#: what ``translate`` gives for a batch: one result per sentence, in order (the service's: the n best and whether
#: the speaker was known at the search); the batcher hands each request the results of its own sentences
Results = List[Any]


@dataclass(frozen=True)
class BatchOptions:
    """How requests are gathered (each is a command-line option of ``fairseq-speaker-serve``)."""

    #: sentences in one shared beam search at most (a request with more is split over several, in order)
    max_batch_sentences: int = 32
    #: source tokens in one shared beam search at most, padding included (None: no cap but the sentences')
    max_batch_tokens: Optional[int] = None
    #: how long a batch that is not full waits for another request, after the latest one, in milliseconds
    max_gap_ms: float = 5.0
    #: how long the oldest waiting request waits for others to share its beam search, at most, in milliseconds
    max_wait_ms: float = 20.0
    #: sentences waiting to be translated at most; a request that would overflow the queue is refused (503)
    max_queue: int = 1024
    #: seconds a request may take, waiting and translating; past it the client gets 504
    request_timeout: float = 30.0

    def __post_init__(self):
        for name in ("max_batch_sentences", "max_queue"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be at least 1, got {value!r}")
        tokens = self.max_batch_tokens
        if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1):
            raise ValueError(f"--max-batch-tokens must be at least 1 (or not given: no cap), got {tokens!r}")
        for name in ("max_gap_ms", "max_wait_ms"):
            if not 0 <= getattr(self, name) <= 1000:
                raise ValueError(f"--{name.replace('_', '-')} must be between 0 and 1000, got {getattr(self, name)!r}")
        if not 0 < self.request_timeout < float("inf"):
            raise ValueError(f"--request-timeout must be a number of seconds above 0, got {self.request_timeout!r}")


class QueueFull(Exception):
    """The queue cannot take a request now (full, or the batcher is closed); the message says which."""


@dataclass(eq=False)  # a request is itself: two equal requests are two jobs
class Job:
    """One request: its sentences, their speakers (as the translator takes them), their source tokens (with a
    token cap), its decoding, and its answer as it is put together batch by batch."""

    sentences: List[str]
    labels: List[str]
    beam: int
    nbest: int
    tokens: Optional[List[int]] = None
    future: "Future[Results]" = field(default_factory=Future)
    arrived: float = field(default_factory=time.monotonic)
    #: sentences handed to batches so far (the first ``taken``, in order)
    taken: int = 0
    #: the results of the sentences translated so far, in order
    results: Results = field(default_factory=list)

    @property
    def decoding(self) -> Tuple[int, int]:
        """What must be equal for two requests to share a beam search."""
        return self.beam, self.nbest

    @property
    def left(self) -> int:
        """Sentences not yet handed to a batch."""
        return len(self.sentences) - self.taken


#: a part of one request in a batch: the job and the range of its sentences
Piece = Tuple[Job, int, int]


class Batcher:
    """The queue and its worker thread (see the module documentation).

    Args:
        translate: ``translate(sentences, labels, beam, nbest)`` -> the result of each sentence, in order
            (:data:`Results`).
        options: the batch and queue sizes, the waits.
        on_batch: called with the sentences and the requests of each batch translated (for the metrics).
    """

    def __init__(self, translate: Callable[[List[str], List[str], int, int], Results],
                 options: BatchOptions = BatchOptions(), on_batch: Optional[Callable[[int, int], None]] = None):
        self.translate, self.options, self.on_batch = translate, options, on_batch
        self._cond = threading.Condition()
        self._queue: Deque[Job] = collections.deque()
        self._queued = 0  # sentences in the queue, not yet handed to a batch
        self._queued_tokens = 0  # their tokens (with a token cap)
        self._closed = False
        self._worker: Optional[threading.Thread] = None
        self._free_since = 0.0  # when the worker finished its last batch (time.monotonic)
        self._last_arrival = 0.0  # when the latest request arrived (time.monotonic)
        self._answered = 0  # requests the last batch answered
        self._back = 0  # requests that arrived since the last batch ended

    @property
    def queued(self) -> int:
        """Sentences waiting now."""
        with self._cond:
            return self._queued

    def submit(self, sentences: Sequence[str], labels: Sequence[str], beam: int, nbest: int,
               tokens: Optional[Sequence[int]] = None) -> "Future[Results]":
        """Queue a request; its future gets the result of each sentence (or the translator's exception).
        ``tokens``: each sentence's source tokens, needed with ``max_batch_tokens``. Cancelling the future
        before its first batch starts takes the request out of the queue."""
        if self.options.max_batch_tokens is not None and (tokens is None or len(tokens) != len(sentences)):
            raise ValueError("with max_batch_tokens, give the tokens of each sentence")
        job = Job(list(sentences), list(labels), beam, nbest, list(tokens) if tokens is not None else None)
        with self._cond:
            if self._closed:
                raise QueueFull("the service is shutting down")
            if self._queued + len(job.sentences) > self.options.max_queue:
                raise QueueFull(f"{self._queued} sentences are waiting to be translated, and this request's "
                                f"{len(job.sentences)} would pass the queue's {self.options.max_queue} "
                                f"(--max-queue)")
            if self._worker is None:
                self._worker = threading.Thread(target=self._run, name="fairseq-speaker-batcher", daemon=True)
                self._worker.start()
            idle = not self._queue
            self._queue.append(job)
            self._queued += len(job.sentences)
            self._queued_tokens += sum(job.tokens or ())
            self._last_arrival = job.arrived
            self._back += 1
            # the worker waits out the gaps on its own: it is woken only to start waiting, or to go at once
            cap = self.options.max_batch_tokens
            if (idle or self._queued >= self.options.max_batch_sentences or (cap and self._queued_tokens >= cap)
                    or self._back == self._answered):
                self._cond.notify_all()
        job.future.add_done_callback(lambda future: self._withdraw(job) if future.cancelled() else None)
        return job.future

    def close(self, timeout: Optional[float] = None) -> None:
        """Refuse new requests, translate those waiting, and stop the worker."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            worker = self._worker
        if worker is not None:
            worker.join(timeout)

    # -- the worker ---------------------------------------------------------------------------------
    def _withdraw(self, job: Job) -> None:
        with self._cond:
            if job in self._queue:
                self._remove(job)

    def _remove(self, job: Job) -> None:
        """Take ``job`` out of the queue, with its sentences not handed to a batch (holding the lock)."""
        self._queue.remove(job)
        self._queued -= job.left
        self._queued_tokens -= sum((job.tokens or ())[job.taken:])

    def _run(self) -> None:
        while True:
            pieces = self._take()
            if pieces is None:
                return
            answered = self._serve(pieces)
            with self._cond:
                self._free_since, self._answered, self._back = time.monotonic(), answered, 0

    def _plan(self, decoding: Tuple[int, int]) -> Tuple[List[Piece], bool]:
        """The batch that could go now: the waiting sentences of ``decoding``, in the queue's order, that fit
        (a sentence over the token cap by itself goes alone); and whether it is full (one more does not fit)."""
        max_sentences, max_tokens = self.options.max_batch_sentences, self.options.max_batch_tokens
        pieces: List[Piece] = []
        count = longest = 0
        for job in self._queue:
            if job.decoding != decoding:
                continue
            end = job.taken
            while end < len(job.sentences):
                length = max(longest, job.tokens[end]) if job.tokens is not None else 0
                fits = count + 1 <= max_sentences and (max_tokens is None or length * (count + 1) <= max_tokens)
                if not fits and count:
                    break
                count, longest, end = count + 1, length, end + 1
                if not fits:  # alone, over the token cap: nothing joins it
                    break
            if end > job.taken:
                pieces.append((job, job.taken, end))
            if end < len(job.sentences) or count >= max_sentences or (max_tokens and longest * count >= max_tokens):
                return pieces, True
        return pieces, False

    def _take(self) -> Optional[List[Piece]]:
        """The next batch (see the module documentation), once full or once the waits are over; None once closed
        and empty."""
        gap, wait = self.options.max_gap_ms / 1000, self.options.max_wait_ms / 1000
        with self._cond:
            while True:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue:
                    return None
                first = self._queue[0]
                while True:
                    pieces, full = self._plan(first.decoding)
                    free = self._free_since
                    deadline = min(max(first.arrived, free) + wait, max(self._last_arrival, free) + gap)
                    left = deadline - time.monotonic()
                    back = 0 < self._answered <= self._back
                    if full or back or left <= 0 or self._closed or not self._queue or self._queue[0] is not first:
                        break
                    self._cond.wait(left)
                if not self._queue or self._queue[0] is not first:  # withdrawn meanwhile: look again
                    continue
                batch = []
                for job, start, end in pieces:
                    if job.taken == 0 and not job.future.set_running_or_notify_cancel():
                        self._remove(job)  # cancelled: its callback finds it gone
                        continue
                    batch.append((job, start, end))
                    self._queued -= end - start
                    self._queued_tokens -= sum((job.tokens or ())[start:end])
                    job.taken = end
                    if not job.left:
                        self._queue.remove(job)
                if batch:
                    return batch

    def _serve(self, pieces: List[Piece]) -> int:
        """Translate a batch, answer the requests it completes; returns how many it answered (or failed)."""
        sentences = [s for job, start, end in pieces for s in job.sentences[start:end]]
        labels = [label for job, start, end in pieces for label in job.labels[start:end]]
        beam, nbest = pieces[0][0].decoding
        try:
            results = self.translate(sentences, labels, beam, nbest)
        except BaseException as e:  # noqa: B036  (handed to the requests; the worker must go on)
            if len(pieces) > 1:  # one request's failure is that request's alone
                return sum(self._serve([piece]) for piece in pieces)
            self._fail(pieces[0][0], e)
            return 1
        if self.on_batch is not None:
            self.on_batch(len(sentences), len(pieces))
        at, answered = 0, 0
        for job, start, end in pieces:
            job.results.extend(results[at:at + end - start])
            at += end - start
            if len(job.results) == len(job.sentences) and not job.future.done():
                job.future.set_result(job.results)
                answered += 1
        return answered

    def _fail(self, job: Job, error: BaseException) -> None:
        """``job`` gets ``error``; its sentences still waiting are not translated."""
        with self._cond:
            if job in self._queue:
                self._remove(job)
        if not job.future.done():
            job.future.set_exception(error)
