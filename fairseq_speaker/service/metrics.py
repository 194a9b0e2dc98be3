"""The service's metrics, in Prometheus's text format (``GET /metrics``): counters and a latency histogram per
endpoint, the sizes of the shared beam searches, kept in memory by each process (a scraper scrapes each
replica)."""

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
    return "{" + ",".join(f'{key}="{_escaped(value)}"' for key, value in labels.items()) + "}" if labels else ""


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
    """Counts of requests (by endpoint, method and status), of refusals (by endpoint and error code), of
    translated sentences, the latency of requests by endpoint, and the sentences and requests of each shared
    beam search. Safe to use from several threads."""

    def __init__(self):
        self._lock = threading.Lock()
        self.requests: Dict[Tuple[str, str, int], int] = defaultdict(int)
        self.errors: Dict[Tuple[str, str], int] = defaultdict(int)
        self.latency: Dict[str, List[float]] = {}  # endpoint -> [count per bucket..., +Inf count, sum]
        self.sentences = 0
        self.batch_sentences = _Histogram(BATCH_BUCKETS)
        self.batch_requests = _Histogram(BATCH_BUCKETS)

    def observe(self, endpoint: str, method: str, status: int, seconds: float) -> None:
        with self._lock:
            self.requests[(endpoint, method, status)] += 1
            counts = self.latency.setdefault(endpoint, [0.0] * (len(BUCKETS) + 2))
            for i, bound in enumerate(BUCKETS):
                if seconds <= bound:
                    counts[i] += 1
            counts[len(BUCKETS)] += 1
            counts[-1] += seconds

    def error(self, endpoint: str, code: str) -> None:
        with self._lock:
            self.errors[(endpoint, code)] += 1

    def translated(self, sentences: int) -> None:
        with self._lock:
            self.sentences += sentences

    def batch(self, sentences: int, requests: int) -> None:
        """One shared beam search of ``sentences`` sentences from ``requests`` requests."""
        with self._lock:
            self.batch_sentences.observe(sentences)
            self.batch_requests.observe(requests)

    def render(self, speakers: Dict[str, int], queued: int = 0) -> str:
        """The exposition text; ``speakers``: kind -> number of speakers now; ``queued``: sentences waiting."""
        with self._lock:
            lines: List[str] = []
            add = lines.append

            def family(name: str, kind: str, help_: str, samples: Iterable[str]) -> None:
                add(f"# HELP {PREFIX}_{name} {help_}")
                add(f"# TYPE {PREFIX}_{name} {kind}")
                lines.extend(samples)

            family("requests_total", "counter", "HTTP requests answered, by endpoint, method and status.",
                   (f"{PREFIX}_requests_total{_labels(endpoint=e, method=m, status=str(s))} {n}"
                    for (e, m, s), n in sorted(self.requests.items())))
            family("errors_total", "counter", "Requests refused or failed, by endpoint and error code.",
                   (f"{PREFIX}_errors_total{_labels(endpoint=e, code=c)} {n}"
                    for (e, c), n in sorted(self.errors.items())))
            histogram = []
            for endpoint, counts in sorted(self.latency.items()):
                for bound, count in zip(BUCKETS, counts):
                    bucket = _labels(endpoint=endpoint, le=repr(bound))
                    histogram.append(f"{PREFIX}_request_duration_seconds_bucket{bucket} {int(count)}")
                histogram.append(f"{PREFIX}_request_duration_seconds_bucket{_labels(endpoint=endpoint, le='+Inf')} "
                                 f"{int(counts[len(BUCKETS)])}")
                histogram.append(f"{PREFIX}_request_duration_seconds_sum{_labels(endpoint=endpoint)} {counts[-1]:.6f}")
                histogram.append(f"{PREFIX}_request_duration_seconds_count{_labels(endpoint=endpoint)} "
                                 f"{int(counts[len(BUCKETS)])}")
            family("request_duration_seconds", "histogram", "Time from request to answer, by endpoint.", histogram)
            family("translated_sentences_total", "counter", "Sentences translated.",
                   [f"{PREFIX}_translated_sentences_total {self.sentences}"])
            family("batch_sentences", "histogram", "Sentences in one shared beam search.",
                   self.batch_sentences.samples("batch_sentences"))
            family("batch_requests", "histogram", "Requests sharing one beam search.",
                   self.batch_requests.samples("batch_requests"))
            family("queued_sentences", "gauge", "Sentences waiting to be translated.",
                   [f"{PREFIX}_queued_sentences {queued}"])
            family("speakers", "gauge", "Speakers the service knows, by kind (trained, onboarded).",
                   (f"{PREFIX}_speakers{_labels(kind=k)} {n}" for k, n in sorted(speakers.items())))
        return "\n".join(lines) + "\n"
