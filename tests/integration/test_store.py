"""The speaker store's promises on each database it runs on: SQLite, and a real PostgreSQL that the tests start
(tests/postgres.py). Of processes writing one name at once, exactly one succeeds (one 201 per name across
replicas); an update made meanwhile by another process is never overwritten; a replica sees another's write at its
next request; a write acknowledged by a replica survives that replica's kill -9; a PostgreSQL server that goes away
gets 503 until it is back, and the service goes on without a restart. ``fairseq-speaker-store copy`` moves an
SQLite store into PostgreSQL, idempotently, and refuses a conflict.
"""

import dataclasses
import json
import os
import signal
import socket
import sqlite3
import subprocess
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
from fastapi.testclient import TestClient

from fairseq_speaker.service import store_cli
from fairseq_speaker.service.app import create_app
from fairseq_speaker.service.store import StoreConflict
from fairseq_speaker.service.stores import open_store
from fairseq_speaker.serving import SpeakerTranslator
from tests import postgres as postgres_server
from tests.cli import BIN, run

TOKEN = "test-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SENTENCES = ["i am tired .", "you want the drugs .", "i went to the station ."]
PAIRS = {"sources": ["i am tired .", "you want the drugs ."],
         "targets": ["je suis fatiguée .", "vous voulez les médicaments ."]}
MORE = {"sources": ["i went to the station ."], "targets": ["je suis allée à la gare ."]}
KINDS = ["sqlite", "postgresql"]


@pytest.fixture(params=KINDS)
def store_url(request, tmp_path):
    """A new store of each kind, as --store names it (the PostgreSQL server only started for its own case)."""
    if request.param == "sqlite":
        return str(tmp_path / "speakers.db")
    return request.getfixturevalue("postgres").database()


def _translator(trained, toy) -> SpeakerTranslator:
    return SpeakerTranslator.from_pretrained(trained("lstm_fact_bias"), data=toy["bin"], max_len_b=6)


def _client(translator, url) -> TestClient:
    return TestClient(create_app(translator, open_store(url), token=TOKEN), raise_server_exceptions=False)


def _stored_names(url):
    """The names the store holds, read by a connection of its own (as after every process that wrote is gone)."""
    if url.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(url) as db:
            return sorted(name for (name,) in db.execute("SELECT name FROM fairseq_speaker.speakers"))
    with sqlite3.connect(url) as db:
        return sorted(name for (name,) in db.execute("SELECT name FROM speakers"))


# -- the store alone: several connections, as several processes ------------------------------------------------


def test_of_processes_writing_one_name_at_once_exactly_one_succeeds(store_url):
    """Six connections (each a replica's) put each of 20 names at the same moment: every name is won once, the
    others are told it exists, and each write got a version of its own."""
    stores = [open_store(store_url) for _ in range(6)]
    names = [f"speaker-{i}" for i in range(20)]
    together = threading.Barrier(len(stores))
    outcomes = {name: [] for name in names}

    def write(store):
        for name in names:
            together.wait(timeout=60)
            try:
                outcomes[name].append(store.put(name, b"rows of " + name.encode(), [("a .", "b .")]).version)
            except StoreConflict as e:
                outcomes[name].append(e.reason)

    threads = [threading.Thread(target=write, args=(store,)) for store in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    won = {name: [o for o in got if isinstance(o, int)] for name, got in outcomes.items()}
    assert all(len(versions) == 1 for versions in won.values()), won
    assert all(sorted(got, key=str)[1:] == ["exists"] * 5 for got in outcomes.values()), outcomes
    assert sorted(v for versions in won.values() for v in versions) == list(range(1, 21))
    assert stores[0].generation() == 20 and sorted(stores[1].versions()[1]) == sorted(names)
    for store in stores:
        store.close()


#: names that look like 'dr-lee' (full-width letters, two spaces for one, a ligature-free twin in NFKC)
LOOKALIKES = ["\uff44\uff52-lee", "\uff44r-lee"]


def test_of_processes_writing_lookalike_names_at_once_exactly_one_succeeds(store_url):
    """Three connections put 'dr-lee' and two names that look like it at the same moment (each replica's own check
    saw none of the others): one is stored, the others are refused as lookalikes, and nothing else is written. The
    same name of another model, and the winner written again, are not lookalikes."""
    stores = [open_store(store_url) for _ in range(3)]
    names = ["dr-lee"] + LOOKALIKES
    together, outcomes = threading.Barrier(len(stores)), {}

    def write(store, name):
        together.wait(timeout=60)
        try:
            outcomes[name] = store.put(name, name.encode(), [("a .", "b .")]).version
        except StoreConflict as e:
            outcomes[name] = e.reason

    threads = [threading.Thread(target=write, args=pair) for pair in zip(stores, names)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    won = [name for name, outcome in outcomes.items() if isinstance(outcome, int)]
    assert len(won) == 1 and sorted(map(str, outcomes.values()))[1:] == ["lookalike"] * 2, outcomes
    assert list(stores[0].versions()[1]) == won and stores[0].generation() == 1
    loser = next(name for name in names if name not in won)
    with pytest.raises(StoreConflict, match=f"looks like {won[0]!r}, a speaker the store holds") as refused:
        stores[1].put(loser, b"rows", [("a .", "b .")])
    assert refused.value.reason == "lookalike"
    stores[1].put(won[0], b"rows again", [("a .", "b .")], replace=True)
    stores[2].put(loser, b"rows", [("a .", "b .")], model="other")
    record = stores[0].records()[0]
    with pytest.raises(StoreConflict, match="looks like"):  # a copy of one into a store of the other
        stores[0].put_records([dataclasses.replace(record, name=loser, model=record.model)])
    assert sorted((r.model, r.name) for r in stores[0].records()) == [("default", won[0]), ("other", loser)]
    for store in stores:
        store.close()


def test_an_update_made_meanwhile_by_another_process_is_never_overwritten(store_url):
    """Two connections read a speaker's version, then both write it expecting that version: one succeeds, the other
    is told it changed; ten rounds."""
    one, other = open_store(store_url), open_store(store_url)
    version = one.put("dr-lee", b"rows 0", [("a .", "b .")]).version
    for round in range(10):
        together, results = threading.Barrier(2), []

        def update(store, rows):
            together.wait(timeout=60)
            try:
                results.append(store.put("dr-lee", rows, [("a .", "b .")], expect=version))
            except StoreConflict as e:
                results.append(e.reason)

        threads = [threading.Thread(target=update, args=(store, f"rows {round} {i}".encode()))
                   for i, store in enumerate((one, other))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        written = [r for r in results if not isinstance(r, str)]
        assert len(written) == 1 and [r for r in results if isinstance(r, str)] == ["changed"], results
        version = written[0].version
        assert other.get("dr-lee").version == version
    one.close()
    other.close()


def test_a_connection_sees_another_connections_write_at_its_next_read(store_url):
    writer, reader = open_store(store_url), open_store(store_url)
    before = reader.generation()
    writer.put("dr-lee", b"rows", [("a .", "b .")])
    assert reader.generation() > before and reader.get("dr-lee").pairs == [("a .", "b .")]
    writer.delete("dr-lee")
    assert reader.get("dr-lee") is None and reader.versions()[1] == {}
    writer.close()
    reader.close()


# -- replicas of the service ------------------------------------------------------------------------------------


def test_replicas_see_each_others_writes_at_their_next_request(toy, trained, store_url):
    with _client(_translator(trained, toy), store_url) as one, _client(_translator(trained, toy), store_url) as other:
        assert one.put("/speakers/dr-lee", json=PAIRS, headers=AUTH).status_code == 201
        request = {"sentences": SENTENCES, "speaker": "dr-lee"}
        assert other.get("/speakers/dr-lee").json()["sentences"] == 2
        assert other.post("/translate", json=request).json() == one.post("/translate", json=request).json()
        assert other.post("/speakers/dr-lee/sentences", json=MORE, headers=AUTH).status_code == 200
        assert one.get("/speakers/dr-lee").json()["sentences"] == 3
        assert one.delete("/speakers/dr-lee", headers=AUTH).status_code == 200
        assert other.get("/speakers/dr-lee").status_code == 404
        gone = other.post("/translate", json=request).json()["translations"]
        assert all(t["unknown_speaker_policy_applied"] for t in gone)


def test_replicas_onboarding_one_name_at_once_answer_201_once(toy, trained, store_url):
    """Two replicas on one store, each asked to onboard each of three names twice at once: one 201 a name, every
    other answer 409 speaker_exists, and both replicas then serve the winner's speaker."""
    names = ["dr-a", "dr-b", "dr-c"]
    with _client(_translator(trained, toy), store_url) as one, _client(_translator(trained, toy), store_url) as other, \
            ThreadPoolExecutor(max_workers=8) as pool:
        answers = {name: [pool.submit(client.put, f"/speakers/{name}", json=PAIRS, headers=AUTH)
                          for client in (one, other, one, other)] for name in names}
        statuses = {name: sorted(a.result().status_code for a in got) for name, got in answers.items()}
        codes = {a.result().json().get("error", {}).get("code") for got in answers.values() for a in got}
        assert statuses == {name: [201, 409, 409, 409] for name in names}, statuses
        assert codes == {None, "speaker_exists"}
        for name in names:
            assert one.get(f"/speakers/{name}").json() == other.get(f"/speakers/{name}").json()


def test_a_replica_that_had_not_seen_a_lookalike_name_is_refused_by_the_store_and_both_go_on(toy, trained, store_url,
                                                                                            monkeypatch):
    """Replica B onboards a name that looks like one replica A stored a moment before, before B's next sync: the
    store refuses it (422, as B's own check would have), and both replicas go on serving (when both names were
    stored, every request of both ended in a 500)."""
    with _client(_translator(trained, toy), store_url) as one, _client(_translator(trained, toy), store_url) as other:
        assert one.put("/speakers/dr-lee", json=PAIRS, headers=AUTH).status_code == 201
        service = other.app.state.service
        with monkeypatch.context() as patch:
            patch.setattr(service, "sync", lambda strict=False: None)  # B has not looked at the store since
            twin = other.put("/speakers/" + LOOKALIKES[0], json=PAIRS, headers=AUTH)
        request = {"sentences": SENTENCES, "speaker": "dr-lee"}
        answers = [client.post("/translate", json=request) for client in (one, other)]
    assert twin.status_code == 422 and twin.json()["error"]["code"] == "invalid_speaker", twin.text
    assert "looks like 'dr-lee', a speaker the store holds" in twin.json()["error"]["message"]
    assert [a.status_code for a in answers] == [200, 200] and answers[0].json() == answers[1].json()
    assert _stored_names(store_url) == ["dr-lee"]


class _Replica:
    """fairseq-speaker-serve in a process of its own, on ``store``, as a replica runs."""

    def __init__(self, checkpoint, toy, store, log_path):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.log_path = log_path
        env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", SERVICE_TOKEN=TOKEN)
        self.proc = subprocess.Popen([os.path.join(BIN, "fairseq-speaker-serve"), checkpoint, "--data", toy["bin"],
                                      "--port", str(self.port), "--store", store, "--token-env", "SERVICE_TOKEN",
                                      "--max-len-b", "6", "--threads", "1"],
                                     env=env, stdout=open(log_path, "w"), stderr=subprocess.STDOUT)

    def log(self) -> str:
        return open(self.log_path).read()

    def ready(self) -> "_Replica":
        deadline = time.monotonic() + 120
        while True:
            assert self.proc.poll() is None, self.log()[-3000:]
            try:
                if self.call("GET", "/health")[0] == 200:
                    return self
            except (urllib.error.URLError, ConnectionError):
                pass
            assert time.monotonic() < deadline, "the replica did not answer /health within 120 s"
            time.sleep(0.2)

    def call(self, method, path, body=None):
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", method=method,
                                         data=json.dumps(body).encode() if body is not None else None,
                                         headers={"Content-Type": "application/json", **AUTH})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        assert self.proc.wait(timeout=30) == -signal.SIGKILL

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)


def test_a_write_a_replica_acknowledged_survives_its_kill_9(toy, trained, store_url, tmp_path):
    """Replica A onboards four speakers asked at once and is killed (SIGKILL) as its first 201 arrives, the others
    under way; then replica B, killed likewise after its own 201. Every acknowledged speaker is in the store and
    served by a replica started afterwards; one asked but not acknowledged is there whole or not at all."""
    checkpoint = trained("lstm_fact_bias")
    a, b = (_Replica(checkpoint, toy, store_url, tmp_path / f"{name}.log") for name in "ab")
    replicas = [a, b]
    try:
        a.ready(), b.ready()
        names = [f"dr-{i}" for i in range(4)]
        acknowledged, first = [], threading.Event()

        def onboard(name):
            try:
                status, _ = a.call("PUT", f"/speakers/{name}", PAIRS)
            except (urllib.error.URLError, ConnectionError, OSError):
                return  # killed under way
            if status == 201:
                acknowledged.append(name)
                first.set()

        threads = [threading.Thread(target=onboard, args=(name,)) for name in names]
        for thread in threads:
            thread.start()
        assert first.wait(timeout=120), a.log()[-3000:]
        a.kill()
        for thread in threads:
            thread.join(timeout=60)
        assert acknowledged
        assert b.call("GET", "/speakers/" + acknowledged[0])[0] == 200  # at its next request
        assert b.call("PUT", "/speakers/dr-b", MORE)[0] == 201
        b.kill()
        stored = _stored_names(store_url)
        assert set(acknowledged) | {"dr-b"} <= set(stored), (acknowledged, stored)
        c = _Replica(checkpoint, toy, store_url, tmp_path / "c.log")
        replicas.append(c)
        c.ready()  # it loads every stored speaker: none half-written
        status, listed = c.call("GET", "/speakers")
        onboarded = sorted(s["name"] for s in listed["speakers"] if s["kind"] == "onboarded")
        assert status == 200 and onboarded == stored
        for name in stored:
            status, answer = c.call("POST", "/translate", {"sentences": SENTENCES[:1], "speaker": name})
            assert status == 200 and answer["translations"][0]["unknown_speaker_policy_applied"] is False
    finally:
        for replica in replicas:
            replica.stop()
    assert "Traceback" not in c.log()


def test_a_postgresql_server_that_goes_away_gets_503_and_the_service_goes_on_once_it_is_back(postgres, toy, trained):
    """A server of this test's own, stopped while the service runs (as a crash would): every request that needs the
    store gets 503 store_unavailable (none hangs, none is a 500), and once the server is back the same service
    answers again, its connection opened anew."""
    server = postgres_server.start()
    try:
        url = server.database()
        with _client(_translator(trained, toy), url) as client:
            assert client.put("/speakers/dr-lee", json=PAIRS, headers=AUTH).status_code == 201
            server.stop("immediate")
            request = {"sentences": SENTENCES[:1], "speaker": "dr-lee"}
            for answer in (client.get("/health"), client.post("/translate", json=request),
                           client.put("/speakers/dr-kim", json=MORE, headers=AUTH)):
                assert answer.status_code == 503 and answer.json()["error"]["code"] == "store_unavailable", answer.text
            server.start()
            assert client.get("/health").status_code == 200
            assert client.post("/translate", json=request).json()["translations"][0][
                "unknown_speaker_policy_applied"] is False
            assert client.put("/speakers/dr-kim", json=MORE, headers=AUTH).status_code == 201
    finally:
        server.remove()


# -- fairseq-speaker-store copy ----------------------------------------------------------------------------------


def test_an_sqlite_store_copied_into_postgresql_serves_its_speakers_alike(postgres, toy, trained, tmp_path, capsys):
    """A store onboarded on SQLite, copied by the command: the PostgreSQL store lists the same speakers (their times
    too) and translates alike. Copied again, nothing changes; a speaker changed in the target since is a conflict that
    changes nothing, and --replace overwrites it with the source's."""
    sqlite_store, url = str(tmp_path / "speakers.db"), postgres.database()
    request = {"sentences": SENTENCES * 2, "speakers": ["dr-lee"] * 3 + ["dr-kim"] * 3}
    with _client(_translator(trained, toy), sqlite_store) as client:
        client.put("/speakers/dr-lee", json=PAIRS, headers=AUTH)
        client.put("/speakers/dr-kim", json=MORE, headers=AUTH)
        listed, translated = client.get("/speakers").json(), client.post("/translate", json=request).json()

    def copy(*extra):  # in this process (the real command line's run is the first)
        code = 0
        try:
            store_cli.main(["copy", "--from", sqlite_store, "--to", url, *extra])
        except SystemExit as e:
            code = e.code
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess([], code, out, err)

    first = run("fairseq-speaker-store", ["copy", "--from", sqlite_store, "--to", url], check=False)
    assert first.returncode == 0 and "copied 2 speaker(s) from" in first.stdout, first.stderr
    assert postgres_server.PASSWORD not in first.stdout + first.stderr  # postgresql://postgres:***@...
    with _client(_translator(trained, toy), url) as client:
        assert client.get("/speakers").json() == listed
        assert client.post("/translate", json=request).json() == translated
    generation = open_store(url).generation()
    again = copy()
    assert again.returncode == 0 and "copied 0 speaker(s)" in again.stdout and "2 already there alike" in again.stdout
    assert open_store(url).generation() == generation  # nothing written
    with _client(_translator(trained, toy), url) as client:
        assert client.post("/speakers/dr-lee/sentences", json=MORE, headers=AUTH).status_code == 200
    refused = copy()
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "holds speaker(s) 'dr-lee' otherwise than --from" in refused.stderr
    assert "nothing was copied. Give --replace" in refused.stderr
    assert open_store(url).get("dr-lee").sentences == 3
    replaced = copy("--replace")
    assert replaced.returncode == 0 and "1 replaced ('dr-lee')" in replaced.stdout, replaced.stderr
    source, target = open_store(sqlite_store).get("dr-lee"), open_store(url).get("dr-lee")
    assert (target.rows, target.pairs, target.created, target.updated) == (source.rows, source.pairs, source.created,
                                                                            source.updated)
