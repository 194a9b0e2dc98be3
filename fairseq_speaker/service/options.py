"""``fairseq-speaker-serve``'s command line: its parser (:func:`build_parser`), the options read and checked
(:func:`parse_args`: the models to serve, the limits, the batching, the fairseq overrides), the token
(:func:`read_token`) and the address to listen on (:func:`check_listening`), each refused in one line that names the
option and how to write it."""

import argparse
import dataclasses
import math
import os
import sys
from typing import Dict, Optional, Sequence, Tuple

from fairseq_speaker.data.speaker_dictionary import UNKNOWN_SPEAKER_POLICIES
from fairseq_speaker.data.speaker_labels import described_character
from fairseq_speaker.errors import UserError
from fairseq_speaker.service.batcher import BatchOptions
from fairseq_speaker.service.logs import LOG_FORMATS
from fairseq_speaker.tasks.inference import BEAM_STOPS
from fairseq_speaker.service.served_models import MODEL_ID_RULE, case_twin, model_id_problem
from fairseq_speaker.service.speaker_service import Limits
from fairseq_speaker.service.store_errors import StoreError
from fairseq_speaker.service.store_location import durable_location
from fairseq_speaker.service.store_schema import DEFAULT_MODEL
from fairseq_speaker.user_dir import add_user_dir_argument

#: the shortest token accepted: a guessable one would make the write endpoints public
MIN_TOKEN_CHARS = 16


def _encoders(tokenizer: Optional[str], bpe: Optional[str]) -> list:
    """The option dataclasses of the chosen fairseq tokenizer and BPE (``--bpe-codes``, ``--sentencepiece-model``,
    ...): fairseq-interactive's options for them."""
    from fairseq.registry import REGISTRIES

    found = [REGISTRIES[registry]["dataclass_registry"].get(name) if name else None
             for registry, name in (("tokenizer", tokenizer), ("bpe", bpe))]
    return [dataclass for dataclass in found if dataclass is not None]


#: the help of each limit (fields of :class:`Limits`)
_LIMITS_HELP = {
    "max_sentences": "sentences in one /translate request",
    "max_chars": "characters in one sentence (to translate, or of an onboarding pair)",
    "max_pairs": "sentence pairs in one onboarding or update request",
    "max_speaker_pairs": "sentence pairs one onboarded speaker is fitted on in all (an update refits on all of them)",
    "max_beam": "the beam a /translate request may ask for",
}

#: the help of each option of :class:`BatchOptions`
_BATCHING_HELP = {
    "max_batch_sentences": "sentences in one shared beam search at most (a request with more is split over several, "
                           "in order)",
    "max_batch_tokens": "source tokens in one shared beam search at most, padding included, as fairseq's --max-tokens "
                        "counts them (a request with more is split over several, in order; a longer sentence goes "
                        "alone)",
    "max_gap_ms": "milliseconds a batch that is not full waits for the next request, after the latest one and after "
                  "the last batch ended (it goes at once when as many requests have come as the last batch answered)",
    "max_wait_ms": "milliseconds the oldest waiting request waits for others to share its beam search, at most",
    "max_queue": "sentences waiting to be translated at most; a request that would pass it gets 503",
    "request_timeout": "seconds a request may take, waiting and translating, before it gets 504",
}


def build_parser(tokenizer: Optional[str] = None, bpe: Optional[str] = None) -> argparse.ArgumentParser:
    import fairseq.data.encoders  # noqa: F401  (fills the tokenizer and BPE registries)
    from fairseq.dataclass.utils import gen_parser_from_dataclass
    from fairseq.registry import REGISTRIES

    parser = argparse.ArgumentParser(
        prog="fairseq-speaker-serve", conflict_handler="resolve",
        description="Serve a speaker model over HTTP: translate each sentence as its speaker, onboard speakers "
        "(with a token), keep them in a store. Guide: docs/serving.md; API: /docs once running.")
    encoders = parser.add_argument_group("the tokenizer's and BPE's options (fairseq's)")
    for dataclass in _encoders(tokenizer, bpe):  # first: ours below win where names are shared (--source-lang)
        gen_parser_from_dataclass(encoders, dataclass())
    parser.add_argument("checkpoint", metavar="CHECKPOINT", nargs="?",
                        help=f"the model (a fairseq-speaker checkpoint), served as the model '{DEFAULT_MODEL}'")
    parser.add_argument("--data", metavar="DATA_DIR",
                        help="the data directory the model was trained on (its dict.*.txt); required with CHECKPOINT, "
                        "and the data of a --model that names none")
    models = parser.add_argument_group("several models (docs/serving.md, \"Several models\")")
    models.add_argument("--model", action="append", default=[], metavar="ID=CHECKPOINT[:DATA_DIR]", dest="models",
                        help=f"serve CHECKPOINT (with DATA_DIR's dictionaries, default --data) as the model ID (a "
                        f"path that holds ':' is read whole where it is a file); repeat it for several. A request names its model (\"model\" of POST /translate, ?model= of "
                        f"the speaker endpoints) or goes to the default one. ID: {MODEL_ID_RULE}")
    models.add_argument("--default-model", metavar="ID",
                        help=f"the model a request that names none goes to (default: '{DEFAULT_MODEL}', CHECKPOINT's, "
                        f"if given, else the first --model)")
    net = parser.add_argument_group("network")
    net.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s, this machine "
                     "only)")
    net.add_argument("--port", type=int, default=8000, help="port to listen on (default: %(default)s)")
    net.add_argument("--header-timeout", type=float, default=10.0, metavar="X",
                     help="seconds a client has to send a request's line and headers, from its connection or the "
                     "request's first byte; then 408 and the connection is closed (default: %(default)s; the body must "
                     "arrive within --request-timeout)")
    logs = parser.add_argument_group("the log (standard error)")
    logs.add_argument("--log-format", choices=LOG_FORMATS, default="text",
                      help="text: one line a record for a person; json: one JSON object a line (time, level, logger, "
                      "message and the record's fields) for a log collector (default: %(default)s)")
    logs.add_argument("--access-log", action="store_true",
                      help="log every request (client, method, path, status: uvicorn's access line); off by default, "
                      "as a proxy or load balancer in front usually keeps that log: refusals are logged either way, "
                      "and /metrics counts every request")
    auth = parser.add_argument_group("writes (onboarding, updating, deleting speakers)")
    auth.add_argument("--token-file", metavar="FILE", help="a file holding the token that write requests must send "
                      "as 'Authorization: Bearer <token>'; without a token writes are disabled")
    auth.add_argument("--token-env", metavar="VARIABLE", help="the environment variable holding the token "
                      "(instead of --token-file)")
    auth.add_argument("--store", metavar="FILE|URL", help="where onboarded speakers are kept: an SQLite file "
                      "(speakers.db or sqlite:///speakers.db; created if missing; processes on one machine may share "
                      "it), or a PostgreSQL database (postgresql://USER@HOST[:PORT]/DATABASE, the password best in "
                      "PGPASSWORD or ~/.pgpass; replicas on many machines may share it; pip install "
                      "'fairseq-speaker[postgres]'); required with a token")
    auth.add_argument("--skip-broken-speakers", action="store_true",
                      help="start even when some stored speakers cannot be read (a damaged store) or used, serving "
                      "without them and logging their names; without it such a store is refused at start-up, saying "
                      "how to recover")
    model = parser.add_argument_group("translation")
    model.add_argument("--beam", type=int, default=5, help="beam size (default: %(default)s)")
    model.add_argument("--beam-stop", choices=BEAM_STOPS,
                       help="when the beam search ends a sentence (fairseq-generate's --beam-stop; default: the "
                       "checkpoint's, fairseq's rule): 'unbeaten' searches on while a live hypothesis beats the ended")
    model.add_argument("--max-len-a", type=float, help="fairseq's: at most a*source length + b target tokens")
    model.add_argument("--max-len-b", type=int, help="fairseq's (default: the checkpoint's)")
    model.add_argument("--unknown-speaker", choices=UNKNOWN_SPEAKER_POLICIES,
                       help="what a speaker the model does not know gets (default: the checkpoint's, mean): the mean "
                       "speaker, no speaker, or a 404")
    model.add_argument("--source-lang", help="if fairseq cannot infer the language pair from DATA_DIR")
    model.add_argument("--target-lang")
    model.add_argument("--tokenizer", choices=sorted(REGISTRIES["tokenizer"]["registry"]),
                       help="tokenize raw input as the training data was (fairseq's, e.g. moses; default: the "
                       "checkpoint's preprocessing, if its data recorded one)")
    model.add_argument("--bpe", choices=sorted(REGISTRIES["bpe"]["registry"]),
                       help="apply the training data's BPE (fairseq's, e.g. subword_nmt with --bpe-codes; default: "
                       "the checkpoint's)")
    model.add_argument("--preprocessing", choices=["auto", "none"],
                       help="auto (default): apply the preprocessing kept in the checkpoint to raw input and undo it "
                       "on the translations, where --tokenizer/--bpe are not given; none: the requests' sentences "
                       "are already in the model's tokens (docs/sated.md)")
    model.add_argument("--threads", type=int, help="torch threads (default: the cores this process may use, or "
                       "OMP_NUM_THREADS if set)")
    add_user_dir_argument(model)
    limits = parser.add_argument_group("limits of one request")
    for field in dataclasses.fields(Limits):
        limits.add_argument("--" + field.name.replace("_", "-"), type=int, default=field.default, metavar="N",
                            help=_LIMITS_HELP[field.name] + " (default: %(default)s)")
    batching = parser.add_argument_group("batching of concurrent translations, queue, timeout")
    for field in dataclasses.fields(BatchOptions):
        kind = float if field.type in (float, "float") else int
        default = "none" if field.default is None else "%(default)s"
        batching.add_argument("--" + field.name.replace("_", "-"), type=kind, default=field.default,
                              metavar="N" if kind is int else "X",
                              help=f"{_BATCHING_HELP[field.name]} (default: {default})")
    return parser


def model_specs(args: argparse.Namespace) -> Dict[str, Tuple[str, str]]:
    """The models the command serves, by id, in order: ``(checkpoint, data directory)``; raises :class:`UserError`
    naming the option that is wrong and how to write it."""
    specs: Dict[str, Tuple[str, str]] = {}
    if args.checkpoint is not None:
        if args.data is None:
            raise UserError("the following arguments are required with CHECKPOINT: --data DATA_DIR (the data directory "
                            "the model was trained on)")
        specs[DEFAULT_MODEL] = (args.checkpoint, args.data)
    for spec in args.models:
        model, equals, rest = spec.partition("=")
        form = "write --model ID=CHECKPOINT or --model ID=CHECKPOINT:DATA_DIR"
        if not equals:
            raise UserError(f"--model {spec}: no '=': {form}")
        if not model:
            raise UserError(f"--model {spec}: no model id: {form}")
        problem = model_id_problem(model)
        if problem:
            raise UserError(f"--model {spec}: {problem}")
        checkpoint, data = _checkpoint_and_data(rest, f"--model {spec}")  # the id first: it was "reads two ways"
        if not checkpoint:
            raise UserError(f"--model {spec}: no checkpoint: {form}")
        if not data and args.data is None:
            raise UserError(f"--model {spec}: no data directory: {form}, or give --data DATA_DIR for the models that "
                            f"name none")
        if model in specs:
            also = " (the model of CHECKPOINT)" if model == DEFAULT_MODEL and args.checkpoint is not None else ""
            raise UserError(f"--model {spec}: the model id {model!r} is given twice{also}: give each model an id of "
                            f"its own")
        twin = case_twin(model, specs)
        if twin is not None:
            raise UserError(f"--model {spec}: the model ids {twin!r} and {model!r} differ only by case: give each "
                            f"model an id that differs from the others in more than case")
        specs[model] = (checkpoint, data or args.data)
    if not specs:
        raise UserError("give the model to serve: CHECKPOINT --data DATA_DIR, or --model ID=CHECKPOINT[:DATA_DIR] "
                        "(repeated for several)")
    if args.default_model is not None and args.default_model not in specs:
        raise UserError(f"--default-model {args.default_model}: no such model: the models are "
                        f"{', '.join(map(repr, specs))}")
    return specs


def _checkpoint_and_data(rest: str, option: str) -> Tuple[str, str]:
    """``CHECKPOINT[:DATA_DIR]`` split where a path may hold ':' itself (``runs/12:30/model.pt``): at the one place
    where the checkpoint is a file and the data a folder (or the whole, where it is a file). Two such readings
    (a file ``ck.pt:bin`` beside ``ck.pt`` and ``bin/``) are refused naming both (:class:`UserError`, ``option``
    names the value); a checkpoint that is a file before data that is no folder names that data; where no part is
    a file, the split at the first ':' (the model's loading then names the missing checkpoint)."""
    splits = [(rest[:i], rest[i + 1:]) for i, c in enumerate(rest) if c == ":"]
    readings = [(rest, "")] if os.path.isfile(rest) else []
    readings += [(checkpoint, data) for checkpoint, data in splits if os.path.isfile(checkpoint) and os.path.isdir(data)]
    if len(readings) > 1:
        shown = " or ".join(f"the checkpoint {c}" + (f" with the data directory {d}" if d else "") for c, d in readings)
        raise UserError(f"{option} reads two ways: {shown}: rename one, or write --model ID=CHECKPOINT and give the data "
                        f"directory with --data")
    if readings:
        return readings[0]
    for checkpoint, data in reversed(splits):
        if os.path.isfile(checkpoint) and data:
            raise UserError(f"{option}: the data directory {data} is {'a file' if os.path.exists(data) else 'missing'} "
                            f"(the checkpoint {checkpoint} is a file): give the folder the model was trained on, with "
                            f"its dict.*.txt")
    checkpoint, _, data = rest.partition(":")
    return checkpoint, data


def check_listening(host: str, port: int) -> None:
    """Refuse (:class:`UserError`) an address the service could not listen on: a port in use, a host that is no
    address of this machine or that does not resolve. Bound and let go at once, as uvicorn binds it (SO_REUSEADDR)."""
    import socket

    fix = "give a free port (--port) or an address of this machine (--host; 127.0.0.1 or 0.0.0.0)"
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except OSError as e:  # socket.gaierror included
        raise UserError(f"--host {host} --port {port}: cannot listen there ({e.strerror or e}): {fix}") from None


#: the shortest --request-timeout the service starts with (seconds)
MIN_REQUEST_TIMEOUT = 0.1


def parse_args(argv: Optional[Sequence[str]] = None) -> Tuple[argparse.Namespace, Dict, Limits]:
    """The options, the fairseq overrides for :meth:`SpeakerTranslator.from_pretrained`, and the limits; ``args.specs``
    are the models to serve (:func:`model_specs`)."""
    argv = list(argv) if argv is not None else sys.argv[1:]
    first, _ = build_parser().parse_known_args(argv)
    parser = build_parser(first.tokenizer, first.bpe)
    args = parser.parse_args(argv)
    try:
        args.specs = model_specs(args)
    except UserError as e:
        parser.error(str(e))
    if not 1 <= args.port <= 65535:
        parser.error(f"--port must be between 1 and 65535, got {args.port}")
    if not (args.header_timeout > 0 and math.isfinite(args.header_timeout)):
        parser.error(f"--header-timeout must be a positive number of seconds, got {args.header_timeout}")
    for option in ("beam", "threads"):
        value = getattr(args, option)
        if value is not None and value < 1:
            parser.error(f"--{option} must be at least 1, got {value}")
    # every request would be refused (422) for the search's lengths: a translation of at most 0 words, or NaN
    if args.max_len_a is not None and not (math.isfinite(args.max_len_a) and args.max_len_a >= 0):
        parser.error(f"--max-len-a must be a finite number of at least 0, got {args.max_len_a}")
    if args.max_len_b is not None and args.max_len_b < (0 if args.max_len_a else 1):
        parser.error(f"--max-len-b must be at least {0 if args.max_len_a else 1} (a translation of at least one word"
                     f"{' for every source' if not args.max_len_a else ''}), got {args.max_len_b}")
    try:
        limits = Limits(**{f.name: getattr(args, f.name) for f in dataclasses.fields(Limits)})
        #: how concurrent translations are gathered (:class:`BatchOptions`), for :func:`create_app`
        args.batching = BatchOptions(**{f.name: getattr(args, f.name) for f in dataclasses.fields(BatchOptions)})
    except ValueError as e:
        parser.error(str(e))
    if args.beam > limits.max_beam:
        parser.error(f"--beam {args.beam} is over --max-beam {limits.max_beam}")
    if args.batching.max_queue < limits.max_sentences:
        parser.error(f"--max-queue ({args.max_queue}) must be at least --max-sentences ({limits.max_sentences}), or "
                     f"the largest request could never be queued")
    if limits.max_speaker_pairs < limits.max_pairs:
        parser.error(f"--max-speaker-pairs ({limits.max_speaker_pairs}) must be at least --max-pairs "
                     f"({limits.max_pairs}), or the largest onboarding could never be kept")
    if args.batching.request_timeout < MIN_REQUEST_TIMEOUT:  # every request with a body got 408, blaming its client
        parser.error(f"--request-timeout must be at least {MIN_REQUEST_TIMEOUT:g} s (the time a request's body has to "
                     f"arrive and its translation to be made), got {args.batching.request_timeout:g}")
    if args.token_file and args.token_env:
        parser.error("give the token with --token-file or with --token-env, not both")
    if (args.token_file or args.token_env) and not args.store:
        parser.error("a token enables onboarding: give --store FILE too, to keep the onboarded speakers")
    if args.store is not None:
        try:  # its form and driver, before the model loads (the database is reached once it has)
            durable_location(args.store, lost="when the service stops, with every speaker onboarded")
        except StoreError as e:
            parser.error(str(e))
    overrides = {"beam": args.beam}
    for key in ("unknown_speaker", "beam_stop", "source_lang", "target_lang", "max_len_a", "max_len_b", "tokenizer", "bpe",
                "preprocessing"):
        if getattr(args, key) is not None:
            overrides[key] = getattr(args, key)
    for dataclass in _encoders(args.tokenizer, args.bpe):
        for field in dataclasses.fields(dataclass):
            value = getattr(args, field.name, None)
            if value == "???":
                parser.error(f"--{field.name.replace('_', '-')} is required with this --tokenizer/--bpe")
            if value is not None and field.name not in overrides:
                overrides[field.name] = value
    return args, overrides, limits


def read_token(args: argparse.Namespace) -> Optional[str]:
    """The token of ``--token-file`` or ``--token-env`` (None: writes disabled); a user error when unusable."""
    if args.token_file:
        where = f"--token-file {args.token_file}"
        try:
            with open(args.token_file, encoding="utf-8") as f:
                token = f.read().strip()
        except (OSError, UnicodeDecodeError) as e:
            raise UserError(f"{where}: cannot be read ({getattr(e, 'strerror', None) or e})") from None
    elif args.token_env:
        where = f"--token-env {args.token_env}"
        token = os.environ.get(args.token_env, "").strip()
    else:
        return None
    if not token:
        raise UserError(f"{where}: the token is empty" + (" (is the variable set?)" if args.token_env else ""))
    bad = next((i for i, c in enumerate(token) if not 33 <= ord(c) < 127), None)
    if bad is not None:
        c = token[bad]
        what = ("a byte-order mark (U+FEFF) at its start, which some editors write: save the file without it"
                if c == "\ufeff" and bad == 0 else
                "more than one line: give the token alone" if c in "\r\n" else
                f"{described_character(c)} at character {bad + 1}")
        raise UserError(f"{where}: the token must be printable ASCII without spaces (it travels in an HTTP header), "
                        f"and this one holds {what}")
    if len(token) < MIN_TOKEN_CHARS:
        raise UserError(f"{where}: the token has {len(token)} characters; use at least {MIN_TOKEN_CHARS}, e.g. from "
                        f"python -c 'import secrets; print(secrets.token_urlsafe(32))'")
    return token
