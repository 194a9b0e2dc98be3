"""Where the styles corpus's speaker words are lost: to estimation, or to what the network learned.

On a toy corpus of the styles mode, ``speakers.json`` says every speaker's kind (gender x address x style).
Two measurements with the kinds known, the figures of docs/speaker_learning.md ("Where the style words are
lost"):

``refit``: every speaker of a trained checkpoint given the rows of their TRUE kind, each kind's rows fitted
on the pooled training sentences of its speakers, on the frozen network (cached scores for a variant on the
output, the frozen decoder for one on its state): the best any estimator of the speakers' rows can do with
this network::

    .venv/bin/python scripts/true_kinds.py refit st/bin st/checkpoints/lstm_fact_bias/checkpoint_best.pt \\
        --raw st/raw --save kinds.pt

``relabel``: a copy of a data folder whose speaker labels are the speakers' kinds (``f-informal-s2``; with
``--styles-of CHECKPOINT``, the styles that ``fairseq-speaker-refit --styles K`` learned instead), to
train a model on (``fairseq-train kinds-bin ...``, the demo's options): what the network learns when every
speaker is pooled with their kind from the start::

    .venv/bin/python scripts/true_kinds.py relabel st/bin --raw st/raw --out kinds-bin

Then decode the test set with ``--speaker-file kinds-bin/test.spk`` for a model trained on the relabelled
data (``st/raw/test.spk`` otherwise) and score it as the demo does (``fairseq_speaker.analysis.speaker_words``).
"""

import argparse
import collections
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def kinds_of(raw: str):
    """speaker name -> kind label, from the corpus's ``speakers.json``."""
    path = os.path.join(raw, "speakers.json")
    if not os.path.exists(path):
        sys.exit(f"{path}: not found; --raw must be the raw folder of a styles-mode toy corpus "
                 f"(python -m fairseq_speaker.toy.corpus --styles K ...)")
    with open(path, encoding="utf-8") as f:
        speakers = json.load(f)["speakers"]
    return {name: f"{t['gender']}-{t['address']}-s{t['style']}" for name, t in speakers.items()}


def learned_kinds(data: str, checkpoint_path: str, threads: int):
    """speaker name -> ``style{k}``: the style of the checkpoint's prior (``fairseq-speaker-refit --styles K``) that
    the speaker's training sentences make most probable (log pi_k - NLL of their sentences under style k)."""
    import torch

    import fairseq_speaker  # noqa: F401  (registers the task and models)
    from fairseq_speaker.onboarding.checkpoint import SpeakerCheckpoint
    from fairseq_speaker.onboarding.prior import prior_of_checkpoint
    from fairseq_speaker.onboarding.styles import style_log_likelihoods

    torch.set_num_threads(threads)
    checkpoint = SpeakerCheckpoint.load(checkpoint_path, data=data)
    bias = checkpoint.check_adaptable()
    prior = prior_of_checkpoint(checkpoint.state, bias)
    if prior is None:
        sys.exit(f"{checkpoint_path}: no speaker prior; make one with fairseq-speaker-refit --styles K")
    names, problems = _problems(checkpoint, bias)
    styles = [prior.component_rows(k) for k in range(prior.components)]
    best = (style_log_likelihoods(bias, styles, problems) + prior.log_weights.double()[None]).argmax(1).tolist()
    return {name: f"style{k}" for name, k in zip(names, best)}


def _problems(checkpoint, bias, speakers=None):
    """The training speakers' names and their scored sentences (as the onboarding solver reads them); with
    ``speakers`` (the speaker of each training sentence, in order), grouped by those instead of the checkpoint's
    own labels."""
    from fairseq_speaker.onboarding.adapter import SpeakerAdapter
    from fairseq_speaker.onboarding.checkpoint import split_sentences
    from fairseq_speaker.onboarding.fit_options import FitOptions

    if speakers is None:
        sentences = split_sentences(checkpoint.task, "train")
    else:
        checkpoint.task.load_dataset("train")
        dataset = checkpoint.task.datasets["train"]
        sentences = collections.defaultdict(list)
        for i, speaker in enumerate(speakers):
            item = dataset[i]
            sentences[speaker].append((item["source"], item["target"]))
    adapter = SpeakerAdapter(checkpoint.model, checkpoint.task, FitOptions(), batch_sentences=256,
                             max_unknown_rate=1.0)
    adapter.sentences = {name: list(pairs) for name, pairs in sentences.items()}
    names = list(sentences)
    problems = {name: chunks for group in adapter.score_groups(names) for name, chunks in group}
    return names, [problems[n] for n in names]


def write_labels(data: str, out: str, kinds, names=None) -> int:
    """Into the folder ``out``, a copy of ``data``'s speaker files (and ``dict.spk.txt``) with every speaker's label
    replaced by their kind (``kinds``: speaker -> kind; ``names``: the kinds of the dictionary, in its order, by
    default those of the training split, sorted); the number of kinds in the training split."""
    counts = collections.Counter()
    for split in ("train", "valid", "test"):
        path = os.path.join(data, f"{split}.spk")
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8") as f:
            labels = [kinds[line.strip()] for line in f]
        if split == "train":
            counts.update(labels)
        with open(os.path.join(out, f"{split}.spk"), "w", encoding="utf-8") as f:
            f.write("".join(label + "\n" for label in labels))
    with open(os.path.join(out, "dict.spk.txt"), "w", encoding="utf-8") as f:
        f.write("".join(f"{k}\t{counts.get(k, 0)}\n" for k in (names or sorted(counts))))
    return len(counts)


def relabel(args) -> None:
    kinds = learned_kinds(args.data, args.styles_of, args.threads) if args.styles_of else kinds_of(args.raw)
    if os.path.exists(args.out):
        sys.exit(f"{args.out}: exists; give a new folder")
    shutil.copytree(args.data, args.out)
    print(f"{write_labels(args.data, args.out, kinds)} kinds; wrote {args.out}")


def refit(args) -> None:
    import torch

    import fairseq_speaker  # noqa: F401  (registers the task and models)
    from fairseq_speaker.onboarding.checkpoint import SpeakerCheckpoint, replace_speakers, stacked_rows
    from fairseq_speaker.onboarding.fit import fit_speakers
    from fairseq_speaker.onboarding.fit_options import FitOptions

    torch.set_num_threads(args.threads)
    kinds = kinds_of(args.raw)
    checkpoint = SpeakerCheckpoint.load(args.checkpoint, data=args.data)
    bias = checkpoint.check_adaptable()
    names, scored = _problems(checkpoint, bias)
    problems = dict(zip(names, scored))
    members = collections.defaultdict(list)
    for name in names:
        members[kinds[name]].append(name)
    options = FitOptions(l2=0.01, max_iter=args.max_iter, label_smoothing=args.label_smoothing)
    rows = {}
    for kind, speakers in members.items():
        fitted, _, _ = fit_speakers(bias, [[c for n in speakers for c in problems[n]]], options)
        rows.update({n: fitted[0] for n in speakers})
    dtype = {name: p.dtype for name, p in bias.speaker_parameters().items()}
    replace_speakers(checkpoint.model, checkpoint.task, names,
                     stacked_rows([{k: v.to(dtype[k]) for k, v in rows[n].items()} for n in names]))
    checkpoint.save(args.save)
    print(f"{len(members)} kinds of {len(names)} speakers; wrote {args.save}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    r = sub.add_parser("refit", help="speakers given their true kind's rows on the frozen network")
    r.add_argument("data")
    r.add_argument("checkpoint")
    r.add_argument("--raw", required=True, help="the corpus's raw folder (speakers.json)")
    r.add_argument("--save", required=True)
    r.add_argument("--max-iter", type=int, default=50, help="L-BFGS iterations per kind")
    r.add_argument("--label-smoothing", type=float, default=0.0)
    r.add_argument("--threads", type=int, default=2)
    lab = sub.add_parser("relabel", help="a data folder whose speakers are the kinds")
    lab.add_argument("data")
    lab.add_argument("--raw", help="the corpus's raw folder (speakers.json): label each speaker with their true kind")
    lab.add_argument("--styles-of", metavar="CHECKPOINT", help="instead, label each speaker with the style that the "
                     "speaker prior of CHECKPOINT (fairseq-speaker-refit --styles K) gives their training sentences")
    lab.add_argument("--threads", type=int, default=2)
    lab.add_argument("--out", required=True)
    args = parser.parse_args()
    if args.mode == "relabel" and not (args.raw or args.styles_of):
        parser.error("relabel needs --raw (true kinds) or --styles-of CHECKPOINT (learned styles)")
    (refit if args.mode == "refit" else relabel)(args)


if __name__ == "__main__":
    main()
