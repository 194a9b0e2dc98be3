"""Load figures of ``fairseq-speaker-serve``: sentences/s and latency under concurrent clients, beside one direct
batch call of the same translator.

    OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 python scripts/serve_load.py CHECKPOINT --data DATA_DIR \\
        --input SENTENCES.txt [--clients 1,8,32] [--requests 400] [--max-len-b 6]

The service runs in this process (uvicorn on a free port of 127.0.0.1, its own thread); the clients run in
a second process, as clients of a service do (they would otherwise take the service's interpreter lock):
each is an asyncio task with its own connection, sending one sentence a request and the next once answered,
each with the next of the model's speakers in turn. The reference is the same translator called directly with batches
of 32 sentences (one speaker each, mixed), as one client sending batches of 32 would get at best. A figure,
not a test: nothing is asserted, and nothing leaves 127.0.0.1.
"""

import argparse
import asyncio
import json
import logging
import multiprocessing
import os
import socket
import statistics
import sys
import threading
import time
from typing import List

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


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--data", required=True, help="the model's data directory (its dict.*.txt)")
    parser.add_argument("--input", required=True, help="sentences to translate, one a line (as the model reads them)")
    parser.add_argument("--clients", default="1,8,32", help="comma-separated numbers of concurrent clients")
    parser.add_argument("--requests", type=int, default=400, help="one-sentence requests per measurement")
    parser.add_argument("--batch", type=int, default=32, help="sentences of one direct call (the reference)")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--max-len-b", type=int, default=None)
    parser.add_argument("--max-batch-sentences", type=int, default=32)
    parser.add_argument("--max-wait-ms", type=float, default=5.0)
    args = parser.parse_args(argv)

    import torch

    from fairseq_speaker.service.app import create_app
    from fairseq_speaker.service.batcher import BatchOptions
    from fairseq_speaker.serving import SpeakerTranslator

    logging.disable(logging.WARNING)  # fairseq's per-batch lines and the unknown-speaker warnings
    with open(args.input, encoding="utf-8") as f:
        sentences = [line.strip() for line in f if line.strip()]
    generate = {"max_len_b": args.max_len_b} if args.max_len_b is not None else {}
    translator = SpeakerTranslator.from_pretrained(args.checkpoint, data=args.data, **generate)
    speakers = translator.speakers

    # the reference: direct calls of batches of 32 sentences, mixed speakers (after one call to warm up)
    batches = [(sentences[i:i + args.batch] * args.batch)[:args.batch] for i in range(0, len(sentences), args.batch)]
    labels = [speakers[i % len(speakers)] for i in range(args.batch)]
    translator.translate(batches[0], labels, beam=args.beam, **generate)
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < 10 or done < 4 * args.batch:
        translator.translate(batches[(done // args.batch) % len(batches)], labels, beam=args.beam, **generate)
        done += args.batch
    direct = done / (time.perf_counter() - start)

    app = create_app(translator, beam=args.beam, generate=generate,
                     batching=BatchOptions(max_batch_sentences=args.max_batch_sentences, max_wait_ms=args.max_wait_ms))
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)

    print(f"{args.checkpoint}: {sum(p.numel() for p in translator.model.parameters())} parameters, "
          f"{len(speakers)} speakers, beam {args.beam}; torch threads {torch.get_num_threads()}, "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '(unset)')}, {os.cpu_count()} CPUs")
    print(f"direct translator, batches of {args.batch}: {direct:.1f} sentences/s")
    batches = app.state.metrics.batch_sentences
    pool = multiprocessing.get_context("spawn").Pool(1)
    # the service's own reference: one client sending requests of --batch sentences, one after the other
    seconds, latencies, _ = pool.apply(_measure, (port, 1, max(1, args.requests // args.batch), sentences, speakers,
                                                  args.batch))
    one_client = args.batch * len(latencies) / seconds
    print(f"one client, requests of {args.batch} sentences: {one_client:.1f} sentences/s "
          f"({100 * one_client / direct:.0f}% of direct)")
    print(f"{'clients':>8} {'requests':>9} {'sentences/s':>12} {'of direct':>10} {'of one client':>14} "
          f"{'p50 ms':>8} {'p99 ms':>8} {'mean batch':>11} {'errors':>7}")
    for clients in [int(c) for c in args.clients.split(",")]:
        count, total = batches.count, batches.sum
        seconds, latencies, errors = pool.apply(_measure, (port, clients, args.requests, sentences, speakers))
        rate = len(latencies) / seconds
        mean_batch = (batches.sum - total) / max(batches.count - count, 1)
        print(f"{clients:>8} {len(latencies):>9} {rate:>12.1f} {100 * rate / direct:>9.0f}% "
              f"{100 * rate / one_client:>13.0f}% "
              f"{1000 * statistics.median(latencies):>8.1f} {1000 * _percentile(latencies, 0.99):>8.1f} "
              f"{mean_batch:>11.1f} {errors:>7}")
    pool.close()
    server.should_exit = True
    thread.join(timeout=30)


if __name__ == "__main__":
    sys.exit(main())
