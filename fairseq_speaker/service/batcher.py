"""Concurrent translation requests gathered into shared beam searches.

On a CPU the fixed cost of one call of fairseq's generator (building it, collating, the first decoder
steps) dominates a single sentence: 32 sentences in one beam search cost a few times one sentence, not 32
times. So requests are not translated one by one: one worker thread takes the requests that arrived within
``max_wait_ms`` of the oldest one waiting (or until ``max_batch_sentences`` sentences are there), and
translates the sentences of those that ask for the same decoding (beam, n-best) in one call, each sentence
with its own speaker. Each request gets the results of its own sentences, in its order.

A batch that fails is translated again one request at a time, so that one request's failure is that
request's alone. The queue holds at most ``max_queue`` sentences waiting: a request that would overflow it
is refused at once (:class:`QueueFull`), rather than answered late.
"""

import collections
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Callable, Deque, List, Optional, Sequence, Tuple


#: the n best translations of each sentence, each (text, score), best first
Hypotheses = List[List[Tuple[str, float]]]


@dataclass(frozen=True)
class BatchOptions:
    """How requests are gathered (each is a command-line option of ``fairseq-speaker-serve``)."""

    #: sentences in one shared beam search at most (a request with more is translated alone, not split)
    max_batch_sentences: int = 32
    #: how long the oldest waiting request waits for others to share its beam search, in milliseconds
    max_wait_ms: float = 5.0
    #: sentences waiting to be translated at most; a request that would overflow the queue is refused (503)
    max_queue: int = 1024
    #: seconds a request may take, waiting and translating; past it the client gets 504
    request_timeout: float = 30.0

    def __post_init__(self):
        for name in ("max_batch_sentences", "max_queue"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be at least 1, got {value!r}")
        if not 0 <= self.max_wait_ms <= 1000:
            raise ValueError(f"--max-wait-ms must be between 0 and 1000, got {self.max_wait_ms!r}")
        if not 0 < self.request_timeout < float("inf"):
            raise ValueError(f"--request-timeout must be a number of seconds above 0, got {self.request_timeout!r}")


class QueueFull(Exception):
    """The queue cannot take a request now (full, or the batcher is closed); the message says which."""


@dataclass
class Job:
    """One request's sentences, their speakers (as the translator takes them) and decoding, and its answer."""

    sentences: List[str]
    labels: List[str]
    beam: int
    nbest: int
    future: "Future[Hypotheses]" = field(default_factory=Future)
    arrived: float = field(default_factory=time.monotonic)

    @property
    def decoding(self) -> Tuple[int, int]:
        """What must be equal for two requests to share a beam search."""
        return self.beam, self.nbest


class Batcher:
    """The queue and its worker thread (see the module documentation).

    Args:
        translate: ``translate(sentences, labels, beam, nbest)`` -> the n best of each sentence, in order.
        options: the batch and queue sizes, the wait.
        on_batch: called with the sentences and the requests of each batch translated (for the metrics).
    """

    def __init__(self, translate: Callable[[List[str], List[str], int, int], Hypotheses],
                 options: BatchOptions = BatchOptions(), on_batch: Optional[Callable[[int, int], None]] = None):
        self.translate, self.options, self.on_batch = translate, options, on_batch
        self._cond = threading.Condition()
        self._queue: Deque[Job] = collections.deque()
        self._queued = 0  # sentences in the queue
        self._closed = False
        self._worker: Optional[threading.Thread] = None
        self._free_since = 0.0  # when the worker finished its last batch (time.monotonic)

    @property
    def queued(self) -> int:
        """Sentences waiting now."""
        with self._cond:
            return self._queued

    def submit(self, sentences: Sequence[str], labels: Sequence[str], beam: int, nbest: int) -> "Future[Hypotheses]":
        """Queue a request; its future gets the n best of each sentence (or the translator's exception).
        Cancelling the future before its batch starts takes the request out of the queue."""
        job = Job(list(sentences), list(labels), beam, nbest)
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
            self._queue.append(job)
            self._queued += len(job.sentences)
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
                self._queue.remove(job)
                self._queued -= len(job.sentences)

    def _run(self) -> None:
        while True:
            jobs = self._take()
            if jobs is None:
                return
            self._serve(jobs)
            self._free_since = time.monotonic()

    def _take(self) -> Optional[List[Job]]:
        """The next batch: the oldest request and the requests of the same decoding after it that fit, once
        enough sentences are there or ``max_wait_ms`` have passed since the oldest arrived and since the last batch
        ended. None once closed and empty."""
        limit, wait = self.options.max_batch_sentences, self.options.max_wait_ms / 1000
        with self._cond:
            while True:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue:
                    return None
                first = self._queue[0]
                # wait from the later of the oldest request's arrival and the end of the last batch: under load
                # the requests answered by the last batch come back within the wait, and the threads that read
                # requests get the interpreter meanwhile
                deadline = max(first.arrived, self._free_since) + wait
                while not self._closed:
                    ready = sum(len(j.sentences) for j in self._queue if j.decoding == first.decoding)
                    left = deadline - time.monotonic()
                    if ready >= limit or left <= 0 or first not in self._queue:
                        break
                    self._cond.wait(left)
                if not self._queue or self._queue[0] is not first:  # withdrawn meanwhile: look again
                    continue
                batch, size, rest = [], 0, collections.deque()
                for job in self._queue:
                    fits = not batch or size + len(job.sentences) <= limit
                    if job.decoding == first.decoding and fits and job.future.set_running_or_notify_cancel():
                        batch.append(job)
                        size += len(job.sentences)
                    elif not job.future.cancelled():
                        rest.append(job)
                self._queue = rest
                self._queued = sum(len(j.sentences) for j in rest)
                if batch:
                    return batch

    def _serve(self, jobs: List[Job]) -> None:
        sentences = [s for job in jobs for s in job.sentences]
        labels = [label for job in jobs for label in job.labels]
        beam, nbest = jobs[0].decoding
        try:
            results = self.translate(sentences, labels, beam, nbest)
        except BaseException as e:  # noqa: B036  (handed to the requests; the worker must go on)
            if len(jobs) > 1:  # one request's failure is that request's alone
                for job in jobs:
                    self._serve_alone(job)
            else:
                jobs[0].future.set_exception(e)
            return
        if self.on_batch is not None:
            self.on_batch(len(sentences), len(jobs))
        start = 0
        for job in jobs:
            job.future.set_result(results[start:start + len(job.sentences)])
            start += len(job.sentences)

    def _serve_alone(self, job: Job) -> None:
        try:
            results = self.translate(job.sentences, job.labels, job.beam, job.nbest)
        except BaseException as e:  # noqa: B036
            job.future.set_exception(e)
            return
        if self.on_batch is not None:
            self.on_batch(len(job.sentences), 1)
        job.future.set_result(results)
