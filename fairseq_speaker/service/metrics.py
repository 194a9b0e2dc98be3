"""The service's metrics, in Prometheus's text format (``GET /metrics``): counters and a latency histogram per
endpoint, the sizes of the shared beam searches, kept in memory by each process (a scraper scrapes each
replica). What counts requests carries the label ``model`` where the request named a model the service serves (or
went to the default one): none for requests of no model (``/health``, ``/metrics``), nor for an id it does not
serve (such labels would be as many as the ids clients make up)."""

import threading
from collections import defaultdict
from typing import Dict, Iterable, List, Tuple

#: upper bounds of the latency histogram's buckets, in seconds
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
#: upper bounds of the buckets of the batch histograms (sentences, requests in one shared beam search)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
PREFIX = "fairseq_speaker"


def _escaped(value: str) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(**labels: str) -> str:
    """The labels of a sample, those whose value is empty left out (to Prometheus an empty label is no label)."""
    given = {key: value for key, value in labels.items() if value != ""}
    return "{" + ",".join(f'{key}="{_escaped(value)}"' for key, value in given.items()) + "}" if given else ""


class _Histogram:
    """Cumulative bucket counts, their total count and the sum of what was observed."""

    def __init__(self, bounds):
        self.bounds, self.counts, self.count, self.sum = bounds, [0] * len(bounds), 0, 0.0

    def observe(self, value: float) -> None:
        for i, bound in enumerate(self.bounds):
            if value <= bound:
                self.counts[i] += 1
        self.count += 1
        self.sum += value

    def samples(self, name: str) -> List[str]:
        lines = [f"{PREFIX}_{name}_bucket{_labels(le=repr(b))} {n}" for b, n in zip(self.bounds, self.counts)]
        return lines + [f"{PREFIX}_{name}_bucket{_labels(le='+Inf')} {self.count}", f"{PREFIX}_{name}_sum {self.sum:g}",
                        f"{PREFIX}_{name}_count {self.count}"]


class Metrics:
    """Counts of requests (by endpoint, method, status and model), of refusals (by endpoint, error code and model),
    of translated sentences (by model), of model loads (by model and outcome), the latency of requests by endpoint and
    model, and the sentences and requests of each shared beam search. Safe to use from several threads."""

    def __init__(self):
        self._lock = threading.Lock()
        self.requests: Dict[Tuple[str, str, int, str], int] = defaultdict(int)
        self.errors: Dict[Tuple[str, str, str], int] = defaultdict(int)
        #: (endpoint, model) -> [count per bucket..., +Inf count, sum]
        self.latency: Dict[Tuple[str, str], List[float]] = {}
        self.sentences: Dict[str, int] = defaultdict(int)
        self.loads: Dict[Tuple[str, str], int] = defaultdict(int)
        self.batch_sentences = _Histogram(BATCH_BUCKETS)
        self.batch_requests = _Histogram(BATCH_BUCKETS)

    def observe(self, endpoint: str, method: str, status: int, seconds: float, model: str = "") -> None:
        with self._lock:
            self.requests[(endpoint, method, status, model)] += 1
            counts = self.latency.setdefault((endpoint, model), [0.0] * (len(BUCKETS) + 2))
            for i, bound in enumerate(BUCKETS):
                if seconds <= bound:
                    counts[i] += 1
            counts[len(BUCKETS)] += 1
            counts[-1] += seconds

    def error(self, endpoint: str, code: str, model: str = "") -> None:
        with self._lock:
            self.errors[(endpoint, code, model)] += 1

    def translated(self, sentences: int, model: str = "") -> None:
        with self._lock:
            self.sentences[model] += sentences

    def loaded(self, model: str, outcome: str) -> None:
        """A load of ``model`` (at the start, ``POST /models`` or a reload) that ``outcome``: ``loaded`` or
        ``failed``."""
        with self._lock:
            self.loads[(model, outcome)] += 1

    def batch(self, sentences: int, requests: int) -> None:
        """One shared beam search of ``sentences`` sentences from ``requests`` requests."""
        with self._lock:
            self.batch_sentences.observe(sentences)
            self.batch_requests.observe(requests)

    def render(self, speakers: Dict[str, Dict[str, int]], queued: Dict[str, int]) -> str:
        """The exposition text; ``speakers``: model -> kind -> number of speakers now; ``queued``: model -> sentences
        waiting."""
        with self._lock:
            lines: List[str] = []
            add = lines.append

            def family(name: str, kind: str, help_: str, samples: Iterable[str]) -> None:
                add(f"# HELP {PREFIX}_{name} {help_}")
                add(f"# TYPE {PREFIX}_{name} {kind}")
                lines.extend(samples)

            family("requests_total", "counter", "HTTP requests answered, by endpoint, method, status and model.",
                   (f"{PREFIX}_requests_total{_labels(endpoint=e, method=m, status=str(s), model=model)} {n}"
                    for (e, m, s, model), n in sorted(self.requests.items())))
            family("errors_total", "counter", "Requests refused or failed, by endpoint, error code and model.",
                   (f"{PREFIX}_errors_total{_labels(endpoint=e, code=c, model=model)} {n}"
                    for (e, c, model), n in sorted(self.errors.items())))
            histogram = []
            for (endpoint, model), counts in sorted(self.latency.items()):
                for bound, count in zip(BUCKETS, counts):
                    bucket = _labels(endpoint=endpoint, model=model, le=repr(bound))
                    histogram.append(f"{PREFIX}_request_duration_seconds_bucket{bucket} {int(count)}")
                every = _labels(endpoint=endpoint, model=model, le="+Inf")
                histogram.append(f"{PREFIX}_request_duration_seconds_bucket{every} {int(counts[len(BUCKETS)])}")
                of = _labels(endpoint=endpoint, model=model)
                histogram.append(f"{PREFIX}_request_duration_seconds_sum{of} {counts[-1]:.6f}")
                histogram.append(f"{PREFIX}_request_duration_seconds_count{of} {int(counts[len(BUCKETS)])}")
            family("request_duration_seconds", "histogram", "Time from request to answer, by endpoint and model.",
                   histogram)
            family("translated_sentences_total", "counter", "Sentences translated, by model.",
                   (f"{PREFIX}_translated_sentences_total{_labels(model=model)} {n}"
                    for model, n in sorted(self.sentences.items())))
            family("model_loads_total", "counter", "Models loaded (at the start, added or reloaded), by model and "
                   "outcome (loaded, failed).", (f"{PREFIX}_model_loads_total{_labels(model=m, outcome=o)} {n}"
                                                 for (m, o), n in sorted(self.loads.items())))
            family("batch_sentences", "histogram", "Sentences in one shared beam search.",
                   self.batch_sentences.samples("batch_sentences"))
            family("batch_requests", "histogram", "Requests sharing one beam search.",
                   self.batch_requests.samples("batch_requests"))
            family("queued_sentences", "gauge", "Sentences waiting to be translated, by model.",
                   (f"{PREFIX}_queued_sentences{_labels(model=model)} {n}" for model, n in queued.items()))
            family("speakers", "gauge", "Speakers the service knows, by model and kind (trained, onboarded).",
                   (f"{PREFIX}_speakers{_labels(model=model, kind=k)} {n}"
                    for model, kinds in speakers.items() for k, n in sorted(kinds.items())))
        return "\n".join(lines) + "\n"
