"""Three estimators of speakers measured on the styles corpus and not kept: the figures of docs/speaker_learning.md
("Measured and not kept"). Each runs stock fairseq commands, with one change made in this process only.

``cluster-pull``: ``fairseq-train`` where, from epoch ``--start-epoch`` on, every speaker's parameter rows are
pulled towards the centre of their cluster: at the start of each epoch the rows of all speakers (every speaker
parameter of the variant, flattened and concatenated) are clustered by scikit-learn's k-means (k-means++
starts, the best of three), and the loss of a batch gets ``weight * mean over its sentences of ||theta_s - c_{z_s}||^2`` (added as the
variant's own regularizers are: times the sample size). An empirical-Bayes prior learned during training rather
than after it; with ``--raw`` (a styles-mode corpus) it prints how pure the clusters are (the share of speakers
whose cluster's most common true kind, or style, is theirs)::

    python scripts/speaker_estimators.py cluster-pull --clusters 24 --weight 0.03 --start-epoch 10 --raw st/raw \\
        -- st/bin --user-dir fairseq_speaker --arch transformer_speaker ... (the demo's options) --max-epoch 30

``knn-store`` and ``knn-generate``: a per-speaker memory of what the speaker said, as nearest-neighbour machine
translation (Khandelwal et al., 2021) with one datastore per speaker: the keys are the decoder's last features,
teacher-forced with the speaker's own parameters, at every target position of the speaker's training sentences,
the values the words said there; at each generation step the hypothesis's features find their k nearest keys
among its speaker's, and the next word's distribution becomes ``(1 - lam) p_model + lam p_knn``, ``p_knn`` the
neighbours' words weighted by ``softmax(-distance^2 / temperature)``. No parameter per speaker: their ~300
positions (30 sentences) are the memory::

    python scripts/speaker_estimators.py knn-store st/bin --path CHECKPOINT --out store.pt
    python scripts/speaker_estimators.py knn-generate --store store.pt --lam 0.3 --temperature 3 --k 8 \\
        -- st/bin --user-dir fairseq_speaker --task speaker_translation --path CHECKPOINT --beam 5 \\
           --batch-size 64 --gen-subset test --speaker-file st/raw/test.spk > knn.out

``kinds-em``: kinds of speakers learned jointly with the network, by hard EM between rounds of training. It starts
from a model trained per speaker and the styles ``fairseq-speaker-refit --styles K`` learned on it (each speaker
the style their sentences make most probable: E-step 0); then each round trains the network (continuing, the
stock ``fairseq-train`` with the options after ``--``) on the data relabelled with every speaker's kind (one row per
kind: speakers pooled), and its E-step gives every speaker the kind whose rows, in the network as trained, make
their training sentences most probable. It prints the speakers that changed kind and the kinds' purity (with
``--raw``), and leaves the data with the last labels in ``WORKDIR/binR`` (decode with ``--speaker-file
WORKDIR/binR/test.spk``)::

    fairseq-speaker-refit st/bin --path CHECKPOINT --save styles.pt --styles 24
    python scripts/speaker_estimators.py kinds-em st/bin --start CHECKPOINT --styles styles.pt --raw st/raw \
        --workdir em --rounds 5 --epochs 5 -- --user-dir fairseq_speaker --arch transformer_speaker ... (the demo's
        options)

``row-clusters``: how pure in true kind the k-means clusters of a checkpoint's speaker rows are (what
``cluster-pull`` clusters)::

    python scripts/speaker_estimators.py row-clusters st/bin --path CHECKPOINT --raw st/raw

Score the output as the demo does (``fairseq_speaker.toy.demo.read_generate_output``, ``trait_accuracy``). Run
alone on the machine: they train or decode.
"""

import argparse
import collections
import json
import os
import sys
from typing import Dict, List, Optional

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # true_kinds.py, beside this script


def _rows(bias, speakers: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Every speaker parameter of the variant, flattened and concatenated: ``[S, P]`` for all speakers, detached,
    or ``[B, P]`` for ``speakers``, with their gradient, as training reads them."""
    if speakers is None:
        return torch.cat([p.detach().reshape(p.size(0), -1).float() for p in bias.speaker_parameters().values()], 1)
    parts = []
    for _, variant in bias.named_variants():
        for name in variant.speaker_parameter_names:
            table = variant.row_lookup(name, speakers)
            parts.append(table.reshape(table.size(0), -1).float())
    return torch.cat(parts, 1)


def cluster(x: torch.Tensor, k: int):
    """k-means (scikit-learn's: k-means++ starts, the best of three): ``(centres [k, P], assignments [N])``."""
    from sklearn.cluster import KMeans

    fit = KMeans(n_clusters=k, n_init=3, random_state=0).fit(x.numpy())
    return torch.from_numpy(fit.cluster_centers_).float(), torch.from_numpy(fit.labels_).long()


def purity(assignments: List[int], names: List[str], truth: Dict[str, dict]) -> Dict[str, float]:
    """The share of speakers whose cluster's most common true kind (and style) is theirs."""
    keys = {"kind": lambda t: f"{t['gender']}-{t['address']}-s{t['style']}", "style": lambda t: t["style"]}
    out = {}
    for label, key in keys.items():
        groups = collections.defaultdict(collections.Counter)
        for speaker, cluster in zip(names, assignments):
            if speaker in truth:
                groups[cluster][key(truth[speaker])] += 1
        out[label] = sum(g.most_common(1)[0][1] for g in groups.values()) / max(len(names), 1)
    return out


def cluster_pull(args, fairseq_args: List[str]) -> None:
    from fairseq_cli.train import cli_main

    from fairseq_speaker.modules import speaker_decoder, speaker_encoder
    from fairseq_speaker.tasks.speaker_translation import SpeakerTranslationTask

    truth = None
    if args.raw:
        with open(os.path.join(args.raw, "speakers.json"), encoding="utf-8") as f:
            truth = json.load(f)["speakers"]
    begin_epoch = SpeakerTranslationTask.begin_epoch
    sentence_effects = speaker_decoder.SpeakerDecoderMixin.sentence_effects

    def patched_begin_epoch(self, epoch, model):
        begin_epoch(self, epoch, model)
        bias = model.speaker_bias
        if epoch < args.start_epoch:
            return
        centres, z = cluster(_rows(bias), args.clusters)
        bias._pull_centres, bias._pull_clusters = centres, z
        sizes = sorted(torch.bincount(z, minlength=args.clusters).tolist(), reverse=True)
        line = f"cluster-pull: epoch {epoch}, {args.clusters} clusters of {sizes}"
        if truth is not None:
            names = self.speaker_dictionary.names[:len(z)]
            line += ", purity " + ", ".join(f"{k} {v:.3f}" for k, v in purity(z.tolist(), names, truth).items())
        print(line, flush=True)

    def patched_sentence_effects(self, encoder_out, incremental_state=None):
        bias, state, losses = sentence_effects(self, encoder_out, incremental_state)
        variant = self.speaker_bias
        speakers = speaker_encoder.encoder_speakers(encoder_out)
        centres = getattr(variant, "_pull_centres", None)
        if incremental_state is None and variant.training and centres is not None and speakers is not None:
            known = speakers[speakers >= 0]
            if known.numel():
                rows = _rows(variant, known)
                target = centres[variant._pull_clusters[known]].to(rows)
                losses = dict(losses, cluster_pull=args.weight * (rows - target).pow(2).sum() / speakers.numel())
        return bias, state, losses

    SpeakerTranslationTask.begin_epoch = patched_begin_epoch
    speaker_decoder.SpeakerDecoderMixin.sentence_effects = patched_sentence_effects
    sys.argv = ["fairseq-train"] + fairseq_args
    cli_main()


@torch.no_grad()
def knn_store(args) -> None:
    from fairseq import checkpoint_utils

    import fairseq_speaker  # noqa: F401  (registers the task and models)

    models, _, task = checkpoint_utils.load_model_ensemble_and_task([args.path], arg_overrides={"data": args.data})
    model = models[0].eval()
    task.load_dataset(args.subset)
    batches = task.get_batch_iterator(task.dataset(args.subset), max_tokens=4000).next_epoch_itr(shuffle=False)
    keys, values, speakers = [], [], []
    for batch in batches:
        net = batch["net_input"]
        features, _ = model(**net, features_only=True)
        keep = batch["target"].ne(task.target_dictionary.pad())
        keys.append(features[keep].float())
        values.append(batch["target"][keep])
        speakers.append(net["speakers"].unsqueeze(1).expand_as(keep)[keep])
    keys, values, speakers = torch.cat(keys), torch.cat(values), torch.cat(speakers)
    order = torch.argsort(speakers, stable=True)
    torch.save({"keys": keys[order], "values": values[order], "speakers": speakers[order]}, args.out)
    print(f"{args.out}: {keys.size(0)} positions of {int(speakers.max()) + 1} speakers, keys of {keys.size(1)}")


def knn_generate(args, fairseq_args: List[str]) -> None:
    from fairseq_cli.generate import cli_main

    from fairseq_speaker.modules import speaker_decoder, speaker_encoder

    store = torch.load(args.store)
    keys, values, owners = store["keys"], store["values"], store["speakers"]
    count = int(owners.max()) + 1
    bounds = torch.searchsorted(owners, torch.arange(count + 1))
    log_model, log_memory = torch.log(torch.tensor(1 - args.lam)), torch.log(torch.tensor(args.lam))
    forward = speaker_decoder.SpeakerDecoderMixin.forward

    def patched_forward(self, prev_output_tokens, encoder_out=None, incremental_state=None, features_only=False,
                        **kwargs):
        if incremental_state is None or features_only:
            return forward(self, prev_output_tokens, encoder_out, incremental_state, features_only, **kwargs)
        features, extra = forward(self, prev_output_tokens, encoder_out, incremental_state, True, **kwargs)
        lprobs = torch.log_softmax(self._step_logits(features, self._step_bias(encoder_out, incremental_state))
                                   [:, -1].float(), dim=-1)
        speakers = speaker_encoder.encoder_speakers(encoder_out)  # one per hypothesis (the beam reorders them)
        memory = torch.zeros_like(lprobs)
        remembered = torch.zeros(lprobs.size(0), dtype=torch.bool)
        query = features[:, -1].float()
        for speaker in speakers.unique().tolist():
            start, end = (int(bounds[speaker]), int(bounds[speaker + 1])) if 0 <= speaker < count else (0, 0)
            if end == start:
                continue
            rows = (speakers == speaker).nonzero().squeeze(1)
            distance, nearest = torch.cdist(query[rows], keys[start:end]).pow(2).topk(min(args.k, end - start),
                                                                                        largest=False)
            weights = torch.softmax(-distance / args.temperature, dim=-1)
            memory[rows] = memory[rows].scatter_add(1, values[start:end][nearest], weights)
            remembered[rows] = True
        mixed = torch.logaddexp(lprobs + log_model, memory.clamp_min(1e-30).log() + log_memory)
        return torch.where(remembered.unsqueeze(1), mixed, lprobs).unsqueeze(1), extra

    speaker_decoder.SpeakerDecoderMixin.forward = patched_forward
    sys.argv = ["fairseq-generate"] + fairseq_args
    cli_main()


def _relabelled(data: str, out: str, kinds: Dict[str, str], names: List[str]) -> str:
    """A copy of the data folder ``data`` (its binarized files linked) whose speaker files say each speaker's kind."""
    from true_kinds import write_labels

    os.makedirs(out, exist_ok=True)
    for name in os.listdir(data):
        if not (name.endswith(".spk") or name == "dict.spk.txt" or os.path.exists(os.path.join(out, name))):
            os.symlink(os.path.abspath(os.path.join(data, name)), os.path.join(out, name))
    write_labels(data, out, kinds, names)
    return out


def _kinds_of_sentences(checkpoint_path: str, data: str, original: List[str], names: List[str]) -> Dict[str, str]:
    """Every speaker of ``original`` (the training split's speaker of each sentence) -> the kind of ``names`` whose
    rows in the checkpoint make the speaker's training sentences most probable."""
    from true_kinds import _problems

    from fairseq_speaker.onboarding.checkpoint import SpeakerCheckpoint
    from fairseq_speaker.onboarding.styles import style_log_likelihoods

    checkpoint = SpeakerCheckpoint.load(checkpoint_path, data=data)
    bias = checkpoint.check_adaptable()
    speakers, problems = _problems(checkpoint, bias, original)
    table = checkpoint.task.speaker_dictionary.names
    rows = [{k: v.float() for k, v in bias.export_speakers([table.index(name)]).items()} for name in names]
    best = style_log_likelihoods(bias, rows, problems).argmax(1).tolist()
    return {speaker: names[k] for speaker, k in zip(speakers, best)}


def kinds_em(args, fairseq_args: List[str]) -> None:
    import subprocess

    from true_kinds import learned_kinds

    torch.set_num_threads(args.threads)
    truth = None
    if args.raw:
        with open(os.path.join(args.raw, "speakers.json"), encoding="utf-8") as f:
            truth = json.load(f)["speakers"]
    with open(os.path.join(args.data, "train.spk"), encoding="utf-8") as f:
        original = [line.strip() for line in f]
    kinds = {speaker: style.replace("style", "kind") for speaker, style in
             learned_kinds(args.data, args.styles, args.threads).items()}
    names = sorted(set(kinds.values()), key=lambda k: int(k[4:]))

    def report(line: str) -> None:
        speakers = sorted(kinds)
        if truth is not None:
            line += ", purity " + ", ".join(f"{k} {v:.3f}" for k, v in purity(
                [kinds[s] for s in speakers], speakers, truth).items())
        sizes = sorted(collections.Counter(kinds.values()).values(), reverse=True)
        print(f"kinds-em: {line}; {len(sizes)} kinds of {sizes}", flush=True)

    report("E-step 0 (the styles of the start)")
    save = os.path.join(args.workdir, "checkpoints")
    for r in range(1, args.rounds + 1):
        data = _relabelled(args.data, os.path.join(args.workdir, f"bin{r}"), kinds, names)
        extra = ["--save-dir", save, "--max-epoch", str(r * args.epochs)]
        if r == 1:  # the network of the start, one row per kind (its speakers' rows do not carry over by name)
            extra += ["--restore-file", args.start, "--reset-optimizer", "--reset-dataloader", "--reset-meters"]
        subprocess.run(["fairseq-train", data, *fairseq_args, *extra], check=True)
        new = _kinds_of_sentences(os.path.join(save, "checkpoint_last.pt"), data, original, names)
        moved = sum(new[s] != kinds[s] for s in kinds)
        kinds = new
        report(f"round {r} (epoch {r * args.epochs} of the rounds), {moved} speaker(s) changed kind")
    data = _relabelled(args.data, os.path.join(args.workdir, f"bin{args.rounds + 1}"), kinds, names)
    print(f"kinds-em: the last labels in {data}; the model: {save}/checkpoint_last.pt")


def row_clusters(args) -> None:
    """How pure the k-means clusters of a checkpoint's speaker rows are in true kind (what ``cluster-pull`` clusters)."""
    from fairseq_speaker.onboarding.checkpoint import SpeakerCheckpoint

    torch.set_num_threads(args.threads)
    with open(os.path.join(args.raw, "speakers.json"), encoding="utf-8") as f:
        truth = json.load(f)["speakers"]
    checkpoint = SpeakerCheckpoint.load(args.path, data=args.data)
    rows = _rows(checkpoint.check_adaptable())
    names = checkpoint.task.speaker_dictionary.names[:rows.size(0)]
    _, z = cluster(rows, args.clusters)
    sizes = sorted(torch.bincount(z, minlength=args.clusters).tolist(), reverse=True)
    print(f"row-clusters: {args.clusters} clusters of {sizes}, purity " + ", ".join(
        f"{k} {v:.3f}" for k, v in purity(z.tolist(), names, truth).items()))


def main() -> None:
    argv = sys.argv[1:]
    fairseq_args: List[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, fairseq_args = argv[:at], argv[at + 1:]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    pull = commands.add_parser("cluster-pull", help="fairseq-train (its options after --) with the cluster pull")
    pull.add_argument("--clusters", type=int, default=24)
    pull.add_argument("--weight", type=float, default=0.03, help="of the pull, per sentence (times the sample size)")
    pull.add_argument("--start-epoch", type=int, default=10, help="the first epoch whose start clusters the rows")
    pull.add_argument("--raw", help="a styles-mode corpus's raw folder: print the clusters' purity")
    store = commands.add_parser("knn-store", help="the per-speaker datastore of a checkpoint's training sentences")
    store.add_argument("data")
    store.add_argument("--path", required=True, metavar="CHECKPOINT")
    store.add_argument("--subset", default="train")
    store.add_argument("--out", required=True)
    generate = commands.add_parser("knn-generate", help="fairseq-generate (its options after --) with the memory")
    generate.add_argument("--store", required=True)
    generate.add_argument("--lam", type=float, default=0.3, help="the memory's share of the next word's distribution")
    generate.add_argument("--temperature", type=float, default=3.0)
    generate.add_argument("--k", type=int, default=8, help="neighbours")
    em = commands.add_parser("kinds-em", help="rounds of fairseq-train (its options after --) on learned kinds")
    em.add_argument("data")
    em.add_argument("--start", required=True, metavar="CHECKPOINT", help="a model trained per speaker")
    em.add_argument("--styles", required=True, metavar="CHECKPOINT",
                    help="fairseq-speaker-refit --styles K of the start: E-step 0")
    em.add_argument("--workdir", required=True)
    em.add_argument("--rounds", type=int, default=5)
    em.add_argument("--epochs", type=int, default=5, help="epochs of each round")
    em.add_argument("--raw", help="a styles-mode corpus's raw folder: print the kinds' purity")
    em.add_argument("--threads", type=int, default=2)
    rows = commands.add_parser("row-clusters", help="how pure the k-means clusters of a checkpoint's speaker rows are")
    rows.add_argument("data")
    rows.add_argument("--path", required=True, metavar="CHECKPOINT")
    rows.add_argument("--raw", required=True, help="the styles-mode corpus's raw folder (speakers.json)")
    rows.add_argument("--clusters", type=int, default=24)
    rows.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    if args.command not in ("knn-store", "row-clusters") and not fairseq_args:
        parser.error(f"{args.command}: give the fairseq command's options after --")
    if args.command == "cluster-pull":
        cluster_pull(args, fairseq_args)
    elif args.command == "knn-store":
        knn_store(args)
    elif args.command == "kinds-em":
        kinds_em(args, fairseq_args)
    elif args.command == "row-clusters":
        row_clusters(args)
    else:
        if not 0 < args.lam < 1:
            parser.error(f"--lam must be between 0 and 1, got {args.lam}")
        knn_generate(args, fairseq_args)


if __name__ == "__main__":
    main()
