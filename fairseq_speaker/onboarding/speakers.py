"""``fairseq-speaker-speakers``: the speakers of a checkpoint, what each was learned from and what it costs.

For every speaker: its name, the sentences it was learned from (the training sentences the speaker
dictionary counted, or the sentence pairs an onboarded speaker was fitted on), whether it was trained or
onboarded (the checkpoint's onboarding record, :func:`~fairseq_speaker.onboarding.checkpoint.onboarded_speakers`;
"unknown" where an older checkpoint does not say), the variant and the speaker's parameters (asked of the
variant's contract); then a summary: speakers, trained, onboarded, what a speaker the model does not know
gets (the unknown-speaker policy and the mean speaker). Only the checkpoint is read: no data directory is
needed (``--data`` fills in sentence counts a checkpoint lacks from its ``dict.spk.txt``).

Usage::

    fairseq-speaker-speakers checkpoints/checkpoint_best.pt
    fairseq-speaker-speakers adapted.pt --onboarded
    fairseq-speaker-speakers adapted.pt 'dr-*' spk003 --json
"""

import argparse
import fnmatch
import json
import os
from dataclasses import asdict, dataclass
from types import SimpleNamespace
from typing import Dict, List, Optional, Sequence

import torch
from fairseq.data import Dictionary

from fairseq_speaker.checkpoint_dictionaries import check_data_folder
from fairseq_speaker.checkpoints import read_checkpoint
from fairseq_speaker.command_registry import program_name
from fairseq_speaker.data import SpeakerDictionary
from fairseq_speaker.data.speaker_labels import is_retired_name
from fairseq_speaker.errors import command
from fairseq_speaker.modules.speaker_words import CHECKPOINT_KEY as WORDS_KEY
from fairseq_speaker.onboarding.checkpoint import OnboardingError, onboarded_speakers, onboarding_complete
from fairseq_speaker.runtime import add_runtime_arguments, configure_output
from fairseq_speaker.tasks.data_files import check_dictionary_files
from fairseq_speaker.user_dir import add_user_dir_argument, check_registered, import_user_dir

PROG = program_name(__name__)
BIAS_PREFIX = "decoder.speaker_bias."
TRAINED, ONBOARDED, UNKNOWN = "trained", "onboarded", "unknown"


@dataclass
class Speaker:
    name: str
    kind: str  # trained, onboarded, or unknown (the checkpoint does not say)
    sentences: Optional[int]  # training sentences, or the pairs an onboarded speaker was fitted on; None: not known
    variant: str
    parameters: int  # the speaker's own parameters


@dataclass
class SpeakerListing:
    checkpoint: str
    arch: str
    variant: str
    parameters_per_speaker: int
    shared_parameters: int  # speaker-side parameters every speaker shares (fact's bias vectors, ...)
    unknown_speaker: str  # the task's policy for a speaker the model does not know
    mean_speaker: str  # what the mean speaker is, in words
    speakers: List[Speaker]
    onboarding_known: bool  # whether the checkpoint says which speakers were onboarded
    words: Optional[int] = None  # how many speakers' words the checkpoint remembers (fairseq-speaker-words); None: none

    def count(self, kind: str) -> int:
        return sum(s.kind == kind for s in self.speakers)


def _options(section) -> Dict:
    if section is None:
        return {}
    return dict(vars(section)) if isinstance(section, argparse.Namespace) else dict(section)


def _placeholder_dictionary(size: int) -> Dictionary:
    d = Dictionary()
    for i in range(size - len(d)):
        d.add_symbol(f"w{i}")
    return d


def _target_vocab_size(model: Dict) -> Optional[int]:
    for key in ("decoder.output_bias", "decoder.output_projection.weight", "decoder.embed_tokens.weight"):
        if key in model:
            return int(model[key].shape[0])
    return None


def _speaker_bias(state: dict, names: List[str], path: str):
    """The checkpoint's speaker bias variant, built alone from its options and loaded with its parameters (a state
    variant takes its decoder's sizes from them), or None for a checkpoint without one."""
    from fairseq_speaker.modules.speaker_bias import build_speaker_bias

    options = _options(state["cfg"]["model"])
    params = {k[len(BIAS_PREFIX):]: v for k, v in state["model"].items() if k.startswith(BIAS_PREFIX)}
    vocab = _target_vocab_size(state["model"])
    if vocab is None:
        return None
    try:
        bias = build_speaker_bias(options.get("speaker_bias") or "none", argparse.Namespace(**options),
                                  SpeakerDictionary(names), _placeholder_dictionary(vocab))
        missing, unexpected = bias.load_state_dict(params, strict=False)
    except (RuntimeError, OSError) as e:  # shapes or files the options name that do not fit
        raise OnboardingError(f"{path}: its speaker bias cannot be rebuilt from its options ({e})") from None
    if unexpected or any(not key.endswith("_extra_state") for key in missing):  # names of releases < 0.3.0 aside
        raise OnboardingError(f"{path}: its speaker bias does not match its options (missing {missing}, unexpected "
                              f"{unexpected}): a damaged checkpoint?")
    return bias


def _speaker_token_parameters(model: Dict, vocab: Optional[int]) -> int:
    """A --speaker-token model's speaker is a target word: its rows of every table over the target vocabulary."""
    rows = [v for k, v in model.items() if k.startswith("decoder.") and hasattr(v, "shape")
            and v.dim() >= 1 and vocab is not None and v.shape[0] == vocab]
    return sum(int(v[0].numel()) for v in rows)


def list_speakers(path: str, data: Optional[str] = None) -> SpeakerListing:
    """Read ``path`` (a fairseq-speaker checkpoint) and describe its speakers; ``data``: a data directory whose
    ``dict.spk.txt`` gives the sentence counts the checkpoint lacks."""
    state = read_checkpoint(path)
    task_state = state.get("task_state")
    if not isinstance(task_state, dict) or "cfg" not in state or not isinstance(state.get("model"), dict):
        raise OnboardingError(f"{path}: not a fairseq-speaker checkpoint (no task state): give a checkpoint of a "
                              f"speaker model, written by fairseq-train or fairseq-speaker-adapt")
    check_registered(state, path)
    dictionary = _speaker_dictionary(state, path, data)
    if data is not None:  # its dict.spk.txt fills in counts: a folder of other word dictionaries is another corpus
        languages = _options(state["cfg"]["task"])
        check_dictionary_files(SimpleNamespace(data=data, source_lang=languages.get("source_lang"),
                                               target_lang=languages.get("target_lang")))
        check_data_folder(state, path, data)
    names, counts = list(dictionary.names), list(dictionary.counts)
    model_options = _options(state["cfg"]["model"])
    task_options = _options(state["cfg"]["task"])
    variant = model_options.get("speaker_bias") or "none"
    bias = _speaker_bias(state, names, path)
    vocab = _target_vocab_size(state["model"])
    if task_state.get("speaker_token"):
        variant, per_speaker, shared = "spk_token", _speaker_token_parameters(state["model"], vocab), 0
    elif bias is not None:
        per_speaker = bias.parameters_per_speaker()
        shared = sum(p.numel() for p in bias.shared_parameters().values())
    else:
        per_speaker = shared = 0
    onboarded = onboarded_speakers(state)
    complete = onboarding_complete(state)
    if variant == "spk_token" or not per_speaker:  # no speaker can be added to such a model: all were trained
        onboarded, complete = {}, True
    speakers = []
    for name, count in zip(names, counts):
        if is_retired_name(name):  # rows of a retired speaker, saved with the model: no speaker's
            continue
        if onboarded is not None and name in onboarded:
            kind, sentences = ONBOARDED, onboarded[name]
        elif onboarded is not None and complete:
            kind, sentences = TRAINED, count
        else:
            kind, sentences = UNKNOWN, count or None
        speakers.append(Speaker(name, kind, sentences, variant, per_speaker))
    mean_of = getattr(bias, "mean_of", None)
    return SpeakerListing(
        checkpoint=path, arch=str(model_options.get("arch") or model_options.get("_name")), variant=variant,
        parameters_per_speaker=per_speaker, shared_parameters=shared,
        unknown_speaker=str(task_options.get("unknown_speaker") or "mean"),
        mean_speaker=_mean_speaker(variant, per_speaker, bias, len(names), mean_of),
        speakers=speakers, onboarding_known=onboarded is not None and complete, words=_remembered(state["model"]))


def _remembered(model: Dict) -> Optional[int]:
    """How many speakers a checkpoint's memory of its speakers' words knows words of (None: it has none)."""
    record = model.get(WORDS_KEY)
    lengths = record.get("lengths") if isinstance(record, dict) else None
    return int((lengths > 0).sum()) if torch.is_tensor(lengths) else None


def _speaker_dictionary(state: dict, path: str, data: Optional[str]) -> SpeakerDictionary:
    """The checkpoint's speaker dictionary; sentence counts it lacks (0) from ``data``'s ``dict.spk.txt``."""
    saved = state["task_state"].get("speaker_dictionary")
    from_data = None
    if data is not None:
        if not os.path.isdir(data):
            what = "is a file, not a folder" if os.path.exists(data) else "no such folder"
            raise OnboardingError(f"--data {data}: {what} (give the data directory the model was trained on)")
        spk_dict = os.path.join(data, "dict.spk.txt")
        if os.path.exists(spk_dict):
            from_data = SpeakerDictionary.load(spk_dict)
        elif saved is None:
            raise OnboardingError(f"--data {data}: no dict.spk.txt there, and {path} holds no speaker dictionary")
    if saved is None:
        if from_data is None:
            raise OnboardingError(f"{path}: holds no speaker dictionary: pass --data with the data directory the "
                                  f"model was trained on (its dict.spk.txt)")
        return from_data
    dictionary = SpeakerDictionary.from_state_dict(saved)
    if from_data is not None:
        dictionary.counts = [count or (from_data.counts[i] if (i := from_data.index(name)) is not None else 0)
                             for name, count in zip(dictionary.names, dictionary.counts)]
    return dictionary


def _mean_speaker(variant: str, per_speaker: int, bias, num_speakers: int, mean_of: Optional[int]) -> str:
    if variant == "spk_token":
        return "none: no speaker token is forced, the model chooses the first word"
    if bias is None or not per_speaker:
        return "none: the variant has no parameters per speaker, every speaker gets the same"
    if mean_of is not None:
        return f"the mean of the first {mean_of} speakers (those the model was trained with)"
    return f"the mean of all {num_speakers} speakers"


def select(listing: SpeakerListing, patterns: Sequence[str], kind: Optional[str]) -> List[Speaker]:
    """The speakers of ``listing`` of ``kind`` (None: any) whose name matches one of ``patterns`` (shell-style,
    ``dr-*``; none: every speaker). A pattern matching no speaker is an :class:`OnboardingError`."""
    if kind is not None and not listing.onboarding_known:
        raise OnboardingError(
            f"{listing.checkpoint} does not record which speakers were onboarded (written by fairseq-speaker-adapt, "
            f"-vectors or the service of 0.4.0 or earlier, or by fairseq-train without its optimizer state): "
            f"list every speaker without --{kind}")
    chosen = [s for s in listing.speakers if kind is None or s.kind == kind]
    if patterns:
        unmatched = [p for p in patterns if not any(fnmatch.fnmatchcase(s.name, p) for s in listing.speakers)]
        if unmatched:
            known = ", ".join(s.name for s in listing.speakers[:5]) + (", ..." if len(listing.speakers) > 5 else "")
            raise OnboardingError(f"no speaker of {listing.checkpoint} is called {', '.join(map(repr, unmatched))} "
                                  f"(its {len(listing.speakers)} speakers: {known}; a NAME may use * and ?)")
        chosen = [s for s in chosen if any(fnmatch.fnmatchcase(s.name, p) for p in patterns)]
    return chosen


def summary(listing: SpeakerListing) -> str:
    total = len(listing.speakers)
    if listing.onboarding_known:
        kinds = f"{listing.count(TRAINED)} trained, {listing.count(ONBOARDED)} onboarded"
    else:
        named = listing.count(ONBOARDED)
        kinds = (f"{named} onboarded, the others not known to be trained or onboarded" if named else
                 "trained or onboarded: not recorded by this checkpoint")
    return (f"{total} speakers ({kinds}); variant {listing.variant} ({listing.arch}), "
            f"{listing.parameters_per_speaker:,} parameters per speaker, {listing.shared_parameters:,} shared; "
            f"unknown speakers: {listing.unknown_speaker} ({_policy(listing)})"
            + (f"; the words of {listing.words} speakers remembered (fairseq-speaker-words)"
               if listing.words is not None else ""))


def _policy(listing: SpeakerListing) -> str:
    if listing.unknown_speaker == "mean":
        return f"mean speaker: {listing.mean_speaker}"
    if listing.unknown_speaker == "none":
        return "no speaker bias"
    return "refused with a message"


def _sentences(speaker: Speaker) -> str:
    if speaker.sentences is None:
        return "?"
    return f"{speaker.sentences:,}"


def format_table(listing: SpeakerListing, speakers: List[Speaker]) -> str:
    width = max([len("speaker")] + [len(s.name) for s in speakers])
    variant = max([10] + [len(s.variant) for s in speakers])  # fact+hyper_lhuc overran a column of 10
    lines = [summary(listing), "",
             f"{'speaker':<{width}}  {'kind':<9}  {'sentences':>9}  {'variant':<{variant}}  {'parameters':>10}"]
    for s in speakers:
        lines.append(f"{s.name:<{width}}  {s.kind:<9}  {_sentences(s):>9}  {s.variant:<{variant}}  "
                     f"{s.parameters:>10,}")
    if len(speakers) != len(listing.speakers):
        lines.append(f"({len(speakers)} of {len(listing.speakers)} speakers listed)")
    if any(s.kind == ONBOARDED for s in speakers):
        lines.append("sentences: training sentences of a trained speaker, the sentence pairs an onboarded one was "
                     "fitted on (?: not recorded)")
    return "\n".join(lines)


def as_json(listing: SpeakerListing, speakers: List[Speaker]) -> Dict:
    fields = asdict(listing)
    fields["speakers"] = [asdict(s) for s in speakers]
    fields["summary"] = {"speakers": len(listing.speakers), "trained": listing.count(TRAINED),
                         "onboarded": listing.count(ONBOARDED), "unknown": listing.count(UNKNOWN),
                         "listed": len(speakers)}
    return fields


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     description=__doc__.split("\n\n")[0] + "\n\n" + __doc__.split("\n\n", 1)[1])
    parser.add_argument("checkpoint", metavar="CHECKPOINT", help="a fairseq-speaker checkpoint")
    parser.add_argument("names", nargs="*", default=[], metavar="NAME",
                        help="list only these speakers (shell-style patterns: 'dr-*', 'spk00?')")
    parser.add_argument("--data", metavar="DATA_DIR",
                        help="the data directory the model was trained on: its dict.spk.txt fills in sentence counts "
                        "the checkpoint lacks")
    kinds = parser.add_mutually_exclusive_group()
    kinds.add_argument("--trained", action="store_const", dest="kind", const=TRAINED,
                       help="only the speakers the model was trained with")
    kinds.add_argument("--onboarded", action="store_const", dest="kind", const=ONBOARDED,
                       help="only the speakers added after training (fairseq-speaker-adapt, -vectors import, the "
                       "service)")
    parser.add_argument("--json", action="store_true", help="print JSON: the summary's fields and one object a speaker")
    add_user_dir_argument(parser)
    add_runtime_arguments(parser, threads=False)
    return parser


@command()
def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    configure_output(args.verbose)
    unknown = [a for a in rest if a.startswith("-")]
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    args.names += rest  # NAMEs after the options
    import_user_dir(args.user_dir)
    import fairseq_speaker  # noqa: F401  (the variants, before the checkpoint names one)

    listing = list_speakers(args.checkpoint, args.data)
    speakers = select(listing, args.names, args.kind)
    if args.json:
        print(json.dumps(as_json(listing, speakers), indent=1, ensure_ascii=False))
    else:
        print(format_table(listing, speakers))


if __name__ == "__main__":
    main()

