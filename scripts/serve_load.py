"""Load figures of ``fairseq-speaker-serve``: sentences/s and latency under concurrent clients, against one client
sending requests of 32 sentences, in several rounds.

    OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 python scripts/serve_load.py CHECKPOINT --data DATA_DIR \\
        --input SENTENCES.txt [--clients 1,8,32] [--requests 800] [--rounds 5] [--max-len-b 6]

The service runs in this process as ``fairseq-speaker-serve`` runs it (uvicorn with httptools and uvloop on a
free port of 127.0.0.1, its own thread; the loaded objects frozen for the garbage collector; its batching options,
its defaults unless given here); the clients run in a second process, as clients of a service do (they would
otherwise take the service's interpreter lock): each is an asyncio task with its own connection, sending one
sentence a request and the next once answered, each with the next of the model's speakers in turn. Each round
measures first the reference, one client sending requests of ``--batch`` sentences (mixed speakers) one after
the other, then each number of clients, the most first; the share of the reference is taken within a round (the
load of a shared machine drifts between rounds), and the summary gives the median of the rounds. The translator
called directly with batches of ``--batch`` sentences is measured once, first. ``--no-freeze`` and
``--through-fastapi`` undo two of the service's choices, to see what each is worth. A figure, not a test:
nothing is asserted, and nothing leaves 127.0.0.1.
"""

import argparse
import asyncio
import dataclasses
import gc
import json
import logging
import multiprocessing
import os
import socket
import statistics
import sys
import threading
import time
from typing import Dict, List

import uvicorn


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _percentile(values: List[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


class _Connection:
    """One keep-alive HTTP/1.1 connection to the service: a minimal client, so that the clients' process measures
    the service rather than a client library (httpx costs a few milliseconds of CPU a request)."""

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.reader = self.writer = None

    async def post(self, path: str, body: dict):
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        data = json.dumps(body).encode()
        self.writer.write(f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
                          f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
        status = int((await self.reader.readline()).split()[1])
        length = 0
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        return status, json.loads(await self.reader.readexactly(length))

    def close(self):
        if self.writer is not None:
            self.writer.close()


async def _load(port: int, clients: int, requests: int, sentences: List[str], speakers: List[str], size: int = 1):
    """``requests`` requests of ``size`` sentences (one speaker each, mixed) from ``clients`` concurrent clients:
    (seconds, latencies, errors)."""
    latencies: List[float] = []
    errors = 0
    counter = iter(range(requests))

    async def client(connection: _Connection):
        nonlocal errors
        for i in counter:
            first = i * size
            body = {"sentences": [sentences[(first + j) % len(sentences)] for j in range(size)],
                    "speakers": [speakers[(first + j) % len(speakers)] for j in range(size)]}
            start = time.perf_counter()
            status, _ = await connection.post("/translate", body)
            latencies.append(time.perf_counter() - start)
            errors += status != 200

    connections = [_Connection("127.0.0.1", port) for _ in range(clients)]
    start = time.perf_counter()
    await asyncio.gather(*(client(c) for c in connections))
    seconds = time.perf_counter() - start
    for connection in connections:
        connection.close()
    return seconds, latencies, errors


def _measure(port: int, clients: int, requests: int, sentences: List[str], speakers: List[str], size: int = 1):
    """:func:`_load` after a warm-up round, in the clients' process."""
    asyncio.run(_load(port, clients, min(requests, 4 * clients), sentences, speakers, size))
    return asyncio.run(_load(port, clients, requests, sentences, speakers, size))


class _Collections:
    """The cyclic garbage collector's passes over the oldest generation in this process: count and seconds."""

    def __init__(self):
        self.count, self.seconds, self._start = 0, 0.0, 0.0
        gc.callbacks.append(self._observe)

    def _observe(self, phase: str, info: dict) -> None:
        if info["generation"] == 2:
            if phase == "start":
                self._start = time.perf_counter()
            else:
                self.count, self.seconds = self.count + 1, self.seconds + time.perf_counter() - self._start


def main(argv=None) -> None:
    from fairseq_speaker.service.batcher import BatchOptions

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--data", required=True, help="the model's data directory (its dict.*.txt)")
    parser.add_argument("--input", required=True, help="sentences to translate, one a line (as the model reads them)")
    parser.add_argument("--clients", default="1,8,32", help="comma-separated numbers of concurrent clients")
    parser.add_argument("--requests", type=int, default=800, help="sentences per measurement (one-sentence "
                        "requests: at most 50 a client)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of the reference and every number of clients")
    parser.add_argument("--batch", type=int, default=32, help="sentences of one request of the reference")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--max-len-b", type=int, default=None)
    parser.add_argument("--no-freeze", action="store_true", help="leave the loaded objects to the garbage collector "
                        "(fairseq-speaker-serve freezes them once the model is loaded)")
    parser.add_argument("--through-fastapi", action="store_true", help="answer /translate through FastAPI's route "
                        "(the service answers it directly)")
    batching = parser.add_argument_group("batching: fairseq-speaker-serve's options, with its defaults")
    options = ("max_batch_sentences", "max_batch_tokens", "max_gap_ms", "max_wait_ms")
    for field in dataclasses.fields(BatchOptions):
        if field.name in options:
            kind = float if field.type in (float, "float") else int
            batching.add_argument("--" + field.name.replace("_", "-"), default=field.default, type=kind,
                                  metavar="N" if kind is int else "X", help="(default: %(default)s)")
    args = parser.parse_args(argv)
    try:
        clients = [int(c) for c in args.clients.split(",")]
    except ValueError:
        clients = []
    if not clients or min(clients) < 1:
        parser.error(f"--clients: comma-separated numbers of concurrent clients, each at least 1, got {args.clients!r}")
    for name in ("requests", "rounds", "batch", "beam"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    try:
        with open(args.input, encoding="utf-8") as f:
            sentences = [line.strip() for line in f if line.strip()]
    except (OSError, UnicodeDecodeError) as e:
        parser.error(f"--input {args.input}: cannot read it ({e})")
    if not sentences:
        parser.error(f"--input {args.input}: no sentence to translate")

    import torch

    from fairseq_speaker.service.app import create_app, freeze_loaded_objects
    from fairseq_speaker.service.connections import bounded_http_protocol
    from fairseq_speaker.serving import SpeakerTranslator

    logging.disable(logging.WARNING)  # fairseq's per-batch lines and the unknown-speaker warnings
    generate = {"max_len_b": args.max_len_b} if args.max_len_b is not None else {}
    from fairseq_speaker.errors import UserError

    try:
        translator = SpeakerTranslator.from_pretrained(args.checkpoint, data=args.data, **generate)
    except UserError as e:
        parser.error(str(e))
    speakers = translator.speakers

    # the translator called directly: batches of --batch sentences, mixed speakers (after one call to warm up)
    batches = [(sentences[i:i + args.batch] * args.batch)[:args.batch] for i in range(0, len(sentences), args.batch)]
    labels = [speakers[i % len(speakers)] for i in range(args.batch)]
    translator.translate(batches[0], labels, beam=args.beam, **generate)
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < 10 or done < 4 * args.batch:
        translator.translate(batches[(done // args.batch) % len(batches)], labels, beam=args.beam, **generate)
        done += args.batch
    direct = done / (time.perf_counter() - start)

    batching = BatchOptions(**{name: getattr(args, name) for name in options})
    app = create_app(translator, beam=args.beam, generate=generate, batching=batching)
    app.state.translate_directly = not args.through_fastapi
    if not args.no_freeze:
        freeze_loaded_objects()  # as fairseq-speaker-serve does before it serves
    collections = _Collections()
    port = _free_port()
    protocol = bounded_http_protocol(10.0)  # as fairseq-speaker-serve runs it (its default --header-timeout)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error",
                                           http=protocol or "auto"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)

    print(f"{args.checkpoint}: {sum(p.numel() for p in translator.model.parameters())} parameters, "
          f"{len(speakers)} speakers, beam {args.beam}; torch threads {torch.get_num_threads()}, "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '(unset)')}, {os.cpu_count()} CPUs")
    print(f"batching: {', '.join(f'--{n.replace(chr(95), chr(45))} {getattr(batching, n)}' for n in options)}; "
          f"/translate {'through FastAPI' if args.through_fastapi else 'directly'}; loaded objects "
          f"{'left to the collector' if args.no_freeze else 'frozen'}")
    print(f"direct translator, batches of {args.batch}: {direct:.1f} sentences/s")
    print(f"{'round':>5} {'clients':>8} {'sentences':>9} {'sentences/s':>12} {'of ref.':>8} {'p50 ms':>8} "
          f"{'p99 ms':>8} {'mean batch':>11} {'errors':>7}")
    searched = app.state.metrics.batch_sentences
    rows: Dict[str, List[tuple]] = {}  # "ref" or a number of clients -> (sentences/s, share, latencies) per round
    pool = multiprocessing.get_context("spawn").Pool(1)
    for round_ in range(1, args.rounds + 1):
        reference = None
        # the most clients right after the reference: the share that matters is taken over the shortest drift
        for name, count, size in [("ref", 1, args.batch)] + [(str(c), c, 1) for c in sorted(clients, reverse=True)]:
            requests = max(1, args.requests // size) if size > 1 else min(args.requests, 50 * count)
            searches, searched_sentences = searched.count, searched.sum
            seconds, latencies, errors = pool.apply(_measure, (port, count, requests, sentences, speakers, size))
            rate = size * len(latencies) / seconds
            reference = reference or rate
            rows.setdefault(name, []).append((rate, rate / reference, latencies))
            mean_batch = (searched.sum - searched_sentences) / max(searched.count - searches, 1)
            label = f"1 x {size}" if name == "ref" else name
            print(f"{round_:>5} {label:>8} {size * len(latencies):>9} {rate:>12.1f} {100 * rate / reference:>7.0f}% "
                  f"{1000 * statistics.median(latencies):>8.1f} {1000 * _percentile(latencies, 0.99):>8.1f} "
                  f"{mean_batch:>11.1f} {errors:>7}", flush=True)
    pool.close()
    server.should_exit = True
    thread.join(timeout=30)

    print(f"the garbage collector's passes over its oldest generation while serving: {collections.count}, "
          f"{collections.seconds:.2f} s in all ({gc.get_freeze_count()} objects frozen)")
    print(f"median of {args.rounds} rounds (of ref.: the share of the same round's reference, one client sending "
          f"{args.batch} sentences a request; latencies: all rounds' requests)")
    print(f"{'clients':>8} {'sentences/s':>12} {'of ref.':>8} {'p50 ms':>8} {'p99 ms':>8}")
    for name, measured in sorted(rows.items(), key=lambda row: -1 if row[0] == "ref" else int(row[0])):
        latencies = [latency for _, _, round_latencies in measured for latency in round_latencies]
        label = f"1 x {args.batch}" if name == "ref" else name
        print(f"{label:>8} {statistics.median(r for r, _, _ in measured):>12.1f} "
              f"{100 * statistics.median(s for _, s, _ in measured):>7.0f}% "
              f"{1000 * statistics.median(latencies):>8.1f} {1000 * _percentile(latencies, 0.99):>8.1f}")


if __name__ == "__main__":
    sys.exit(main())
