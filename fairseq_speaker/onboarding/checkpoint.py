"""A speaker checkpoint opened for onboarding: its task, its model, and a way to save it with new speakers.

Loading follows fairseq's own path (``load_checkpoint_to_cpu``, the task state, ``build_model``,
``load_state_dict``), so a checkpoint opens here exactly as ``fairseq-generate`` opens it. Saving
keeps everything fairseq wrote (its options, training history) and replaces the model's parameters
and the speaker dictionary; the optimizer state, whose speaker tables would be too small, is left
out, so that ``fairseq-train --restore-file`` on the result starts a fresh optimizer.

The task state records which speakers were onboarded, and from how many sentence pairs
(:data:`ONBOARDED_KEY`, read by :func:`onboarded_speakers`): every way a speaker is added or refitted
(:func:`add_speakers`, :func:`replace_speakers`) keeps it. A checkpoint written before the record existed
gets it as it is read where it can be told (:func:`settle_onboarded_speakers`), and none where it cannot.
"""

import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple

import torch
from fairseq import checkpoint_utils, tasks
from omegaconf import OmegaConf
from torch import Tensor

from fairseq_speaker.atomic_write import atomic_path
from fairseq_speaker.checkpoints import ONBOARDED_KEY, SPEAKER_NAMES_KEY, not_a_file, on_checkpoint_load
from fairseq_speaker.data import SpeakerDataError
from fairseq_speaker.data.speaker_labels import is_retired_name, new_label_problem, shown, visible_form
from fairseq_speaker.errors import UserError
from fairseq_speaker.modules.speaker_bias import SpeakerBias
from fairseq_speaker.modules.speaker_words import speaker_words_of
from fairseq_speaker.tasks.speaker_translation import EmptySplit, SplitNotFound
from fairseq_speaker.user_dir import check_registered, import_user_dir

if TYPE_CHECKING:
    from fairseq.models import BaseFairseqModel
    from fairseq.tasks import FairseqTask

    from fairseq_speaker.onboarding.scoring import Pair

logger = logging.getLogger(__name__)


class OnboardingError(SpeakerDataError):
    """A user error of the onboarding commands; the message says what to do."""


@dataclass
class SpeakerCheckpoint:
    path: str
    state: dict
    task: "FairseqTask"
    model: "BaseFairseqModel"

    @classmethod
    def load(cls, path: str, data: Optional[str] = None, overrides: Optional[Dict] = None) -> "SpeakerCheckpoint":
        """Open ``path``; ``data`` replaces the data directory it was trained on (for the dictionaries)."""
        if not os.path.isfile(path):
            raise OnboardingError(not_a_file(path) or f"checkpoint not found: {path}")
        # fairseq-interactive's speakers of its input lines, if the training command line gave them, are no speakers
        # of the splits read here (the task refuses them where a split is loaded)
        arg_overrides = {"speaker": None, "speaker_per_line": False, **(overrides or {})}
        if data is not None:
            if not os.path.isdir(data):
                raise OnboardingError(f"data directory not found: {data} (the one the model was trained on, "
                                      f"with its dict.*.txt)")
            arg_overrides["data"] = data
        try:  # an unreadable or unsafe file is a CheckpointError already (fairseq_speaker.checkpoints)
            state = checkpoint_utils.load_checkpoint_to_cpu(path, arg_overrides=arg_overrides)
        except UserError:
            raise
        except (KeyError, ValueError) as e:  # a readable file that is no fairseq checkpoint
            raise OnboardingError(f"{path}: not a readable fairseq checkpoint (damaged, or another kind of file: "
                                  f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") from None
        check_registered(state, path)
        cfg = state["cfg"]
        where = arg_overrides.get("data") or cfg.task.data
        try:
            task = tasks.setup_task(cfg.task)
        except OSError as e:  # a dictionary missing from the data directory
            raise OnboardingError(f"{where}: {e} (the data directory must hold the dictionaries the model "
                                  f"was trained with)") from None
        except Exception as e:  # fairseq's "Could not infer language pair" is a bare Exception
            if "language pair" not in str(e):
                raise
            raise OnboardingError(f"{where}: {e} (pass --source-lang and --target-lang)") from None
        if "task_state" in state:
            task.load_state_dict(state["task_state"])
        model = task.build_model(cfg.model, from_checkpoint=True)
        model.load_state_dict(state["model"], strict=True, model_cfg=cfg.model)
        model.eval()
        return cls(path, state, task, model)

    @property
    def speaker_bias(self) -> SpeakerBias:
        try:
            return speaker_bias_of(self.model)
        except OnboardingError as e:
            raise OnboardingError(f"{self.path}: {e}") from None

    @property
    def speaker_names(self) -> List[str]:
        return list(self.task.speaker_dictionary.names)

    def check_adaptable(self) -> SpeakerBias:
        """The speaker bias, if it has parameters of its own per speaker; else a message saying why not."""
        return adaptable_bias(self.model, self.task, self.path)

    # -- changing the speaker table ------------------------------------------------------------
    def add_speakers(self, names: Sequence[str], rows: Dict[str, Tensor], counts: Optional[Sequence[int]] = None,
                     init: str = "zero") -> None:
        add_speakers(self.model, self.task, names, rows, counts, init)

    def replace_speakers(self, names: Sequence[str], rows: Dict[str, Tensor]) -> None:
        replace_speakers(self.model, self.task, names, rows)

    # -- saving ---------------------------------------------------------------------------------
    def save(self, path: str) -> None:
        """Write the checkpoint with the current parameters and speaker dictionary, atomically."""
        state = dict(self.state)
        if OmegaConf.is_config(state.get("cfg")):  # as fairseq's trainer writes it
            state["cfg"] = OmegaConf.to_container(state["cfg"], resolve=True, enum_to_str=True)
        state["model"] = {k: v for k, v in self.model.state_dict().items()}
        state["task_state"] = self.task.state_dict()
        state.pop("last_optimizer_state", None)
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            raise OnboardingError(f"cannot write {path}: the folder {folder} does not exist")
        with atomic_path(path) as tmp:
            torch.save(state, tmp)
        logger.info(f"saved {path} ({len(self.speaker_names)} speakers)")


def speaker_bias_of(model) -> SpeakerBias:
    bias = getattr(getattr(model, "decoder", None), "speaker_bias", None)
    if not isinstance(bias, SpeakerBias):
        raise OnboardingError("not a fairseq-speaker model (no speaker bias)")
    return bias


def add_speakers(model, task, names: Sequence[str], rows: Dict[str, Tensor], counts: Optional[Sequence[int]] = None,
                 init: str = "zero") -> None:
    """Add ``names`` after the model's known speakers, with their parameter rows (name -> ``[n, ...]``,
    as ``SpeakerBias.export_speakers`` gives them); the task's speaker dictionary follows."""
    bias = speaker_bias_of(model)
    for name in names:  # every way in (adapt, vectors, the API) follows the speaker files' label rules
        problem = new_label_problem(name, task.speaker_dictionary)
        if problem:
            raise OnboardingError(f"cannot add a speaker: {problem}")
    known = [name for name in names if name in task.speaker_dictionary]
    if known:
        raise OnboardingError(f"speaker(s) {', '.join(map(repr, known[:5]))} already in the model")
    seen: Dict[str, str] = {}
    for name in names:  # and the new names of one file or call among themselves (two were both onboarded)
        twin = seen.setdefault(visible_form(name), name)
        if twin != name:
            raise OnboardingError(f"cannot add a speaker: speaker labels {shown(twin)} and {shown(name)} look alike "
                                  f"(other forms of the same letters or digits, or other spaces): give them names that "
                                  f"look different, or one name")
    bias.freeze_mean()  # unseen speakers keep getting the trained speakers' mean
    start = bias.num_speakers
    bias.grow(len(names), init, names=list(names))
    bias.import_speakers(range(start, start + len(names)), rows)
    words = speaker_words_of(model)
    if words is not None:  # the new rows know no words until their sentences are given (SpeakerAdapter)
        words.resize(bias.num_speakers)
    task.adopt_speaker_names(bias.speaker_names, new_counts=dict(zip(names, counts or [0] * len(names))))
    _record_onboarded(task, names, counts)


def replace_speakers(model, task, names: Sequence[str], rows: Dict[str, Tensor], keep_words: bool = False,
                     counts: Optional[Sequence[Optional[int]]] = None) -> None:
    """Overwrite the rows of speakers the model knows; the words the model remembers of them (if it does) are
    forgotten, unless ``keep_words`` (the rows were refitted on the same sentences). ``counts``: the sentence pairs
    each was fitted on now, where known (an update: the earlier ones and the new), for the onboarding record."""
    ids = [task.speaker_dictionary.index(name) for name in names]
    unknown = [name for name, i in zip(names, ids) if i is None]
    if unknown:
        raise OnboardingError(f"speaker(s) {', '.join(map(repr, unknown[:5]))} not in the model")
    speaker_bias_of(model).import_speakers(ids, rows)
    words = speaker_words_of(model)
    if words is not None and not keep_words:  # they were the old rows' sentences (SpeakerAdapter gives new ones)
        words.drop(ids)  # the other speakers' rows stay as they were built (forget_words takes them from everyone)
    record = task.state.state_dict.get(ONBOARDED_KEY)
    if isinstance(record, dict) and any(name in record["names"] for name in names):
        # an onboarded speaker refitted: on the sentence pairs the caller says, else no longer known
        now = dict(zip(names, counts)) if counts is not None else {}
        sentences = [now.get(name) if name in names else n for name, n in zip(record["names"], record["sentences"])]
        task.state.merge_state_dict({ONBOARDED_KEY: dict(record, sentences=sentences)})


def rename_speakers(model, task, renames: Dict[str, str]) -> None:
    """Give speakers of the model other names (old -> new), their rows, words and sentence counts kept: what the
    service does to a deleted speaker's rows (a name no speaker can have, so that a new speaker may look like the
    deleted one, and its name again means nothing until it is onboarded again), and back."""
    bias = speaker_bias_of(model)
    names = list(bias.speaker_names or [])
    missing = [old for old in renames if old not in names]
    taken = [new for old, new in renames.items() if new in names and new not in renames]
    if missing or taken:
        raise OnboardingError(f"cannot rename speakers: {', '.join(map(shown, missing + taken))} "
                              f"{'not in the model' if missing else 'already in the model'}")
    dictionary = task.speaker_dictionary
    counts = {renames[old]: dictionary.counts[i] for old in renames if (i := dictionary.index(old)) is not None}
    bias.speaker_names = [renames.get(name, name) for name in names]
    task.adopt_speaker_names(bias.speaker_names, new_counts=counts)
    record = task.state.state_dict.get(ONBOARDED_KEY)
    if isinstance(record, dict) and any(name in record["names"] for name in renames):
        task.state.merge_state_dict({ONBOARDED_KEY: dict(record, names=[renames.get(n, n) for n in record["names"]])})


def adaptable_bias(model, task, where: str = "the model") -> SpeakerBias:
    """The model's speaker bias, if speakers can be added to it; else an :class:`OnboardingError` saying why."""
    try:
        bias = speaker_bias_of(model)
    except OnboardingError as e:
        raise OnboardingError(f"{where}: {e}") from None
    if getattr(task, "uses_speaker_token", False):
        raise OnboardingError(
            f"{where}: a --speaker-token model: its speakers are word embeddings learned with the "
            f"network, and a speaker cannot be added after training; use a speaker-bias model "
            f"(--speaker-bias full, fact, ...)")
    if not bias.speaker_parameters():
        raise OnboardingError(
            f"{where}: this model has no speaker parameters (its speaker bias is {bias.name!r}: every speaker, known "
            f"or new, is translated alike), so there is nothing to adapt, refit or remember of a speaker; give the "
            f"checkpoint of a model trained with speaker parameters (fairseq-train --speaker-bias fact or full, or an "
            f"--arch such as lstm_fact_bias)")
    return bias


# -- the onboarding record ------------------------------------------------------------------------------

# the record's key, ONBOARDED_KEY, is defined with the checkpoint reader, which reads it too


def speaker_counts(task) -> Dict[str, int]:
    """Each live speaker of ``task``'s model (its retired rows left out) -> the sentences it was trained or fitted on:
    the onboarding record's count for an onboarded speaker, where it has one, else the speaker dictionary's (0: not
    recorded)."""
    dictionary = task.speaker_dictionary
    counts = {name: count for name, count in zip(dictionary.names, dictionary.counts) if not is_retired_name(name)}
    for name, count in (onboarded_speakers({"task_state": task.state.state_dict}) or {}).items():
        if name in counts and count is not None:
            counts[name] = count
    return counts


def onboarded_speakers(state: dict) -> Optional[Dict[str, Optional[int]]]:
    """The speakers onboarded into a checkpoint (``state`` as read), name -> the sentence pairs each was fitted on
    (None where not recorded); ``{}`` when every speaker was trained; None when the checkpoint does not say (see
    :func:`settle_onboarded_speakers`). With an incomplete record (:data:`ONBOARDED_KEY`) the speakers it does
    not name are not known to be trained: :func:`onboarding_complete` tells."""
    task_state = state.get("task_state") if isinstance(state, dict) else None
    if not isinstance(task_state, dict):
        return None
    record = task_state.get(ONBOARDED_KEY)
    if isinstance(record, dict):
        return dict(zip(record.get("names", []), record.get("sentences", [])))
    return _onboarded_before_the_record(state)


def onboarding_complete(state: dict) -> bool:
    """Whether :func:`onboarded_speakers` names every onboarded speaker of the checkpoint."""
    task_state = state.get("task_state") if isinstance(state, dict) else None
    record = task_state.get(ONBOARDED_KEY) if isinstance(task_state, dict) else None
    if isinstance(record, dict):
        return bool(record.get("complete", True))
    return onboarded_speakers(state) is not None


def _onboarded_before_the_record(state: dict) -> Optional[Dict[str, Optional[int]]]:
    """What a checkpoint without the record tells: the mean speaker kept since the first onboarding (the
    speaker bias's ``mean_of``: the rows after it were onboarded); or an optimizer state, which fairseq-train
    writes and onboarding never does (every speaker trained); otherwise nothing (None)."""
    task_state, model = state.get("task_state"), state.get("model")
    speakers = task_state.get("speaker_dictionary") if isinstance(task_state, dict) else None
    if not isinstance(speakers, dict):
        return None
    extra = model.get(SPEAKER_NAMES_KEY) if isinstance(model, dict) else None
    mean_of = extra.get("mean_of") if isinstance(extra, dict) else None
    if isinstance(mean_of, int):
        names, counts = list(speakers.get("names", [])), list(speakers.get("counts", []))
        return {name: (counts[i] or None) if i < len(counts) else None
                for i, name in enumerate(names) if i >= mean_of}
    if state.get("last_optimizer_state") is not None:
        return {}
    return None


def settle_onboarded_speakers(state: dict) -> dict:
    """Give a checkpoint written before the record its :data:`ONBOARDED_KEY` where it can be told (run on every
    checkpoint as it is read), so that onboarding it keeps a complete record."""
    task_state = state.get("task_state") if isinstance(state, dict) else None
    if isinstance(task_state, dict) and ONBOARDED_KEY not in task_state:
        onboarded = _onboarded_before_the_record(state)
        if onboarded is not None:
            task_state[ONBOARDED_KEY] = {"names": list(onboarded), "sentences": list(onboarded.values()),
                                         "complete": True}
    return state


on_checkpoint_load(settle_onboarded_speakers)


def _record_onboarded(task, names: Sequence[str], counts: Optional[Sequence[int]]) -> None:
    """Add ``names`` (fitted on ``counts`` sentence pairs, None: not known) to the task's onboarding record."""
    record = task.state.state_dict.get(ONBOARDED_KEY)
    if not isinstance(record, dict):  # the model did not say which of its speakers were onboarded before
        record = {"names": [], "sentences": [], "complete": False}
    sentences = [int(n) if n else None for n in counts] if counts is not None else [None] * len(names)
    task.state.merge_state_dict({ONBOARDED_KEY: {"names": list(record["names"]) + list(names),
                                                 "sentences": list(record["sentences"]) + sentences,
                                                 "complete": bool(record.get("complete", True))}})


# -- the sentences of a checkpoint's speakers ------------------------------------------------------


def split_sentences(task, subset: str) -> Dict[str, List["Pair"]]:
    """The sentence pairs of every known speaker in ``subset`` of the task's data, by speaker name."""
    task.load_dataset(subset)
    dataset = task.datasets[subset]
    names = task.speaker_dictionary.names
    out: Dict[str, List["Pair"]] = {}
    for i, speaker in enumerate(dataset.speakers.tolist()):
        if speaker < 0:  # a sentence of no known speaker
            continue
        item = dataset[i]
        out.setdefault(names[speaker], []).append((item["source"], item["target"]))
    return out


def open_with_sentences(args) -> Tuple["SpeakerCheckpoint", Dict[str, List["Pair"]]]:
    """The checkpoint ``args.path`` opened on ``args.data`` (after ``args.user_dir``'s registrations), and the
    sentence pairs of its speakers in the split ``args.subset``, for the commands that fit a checkpoint's trained
    speakers again (``fairseq-speaker-refit``, ``-words``); a message when either cannot be."""
    import_user_dir(args.user_dir)  # a folder that is not there, or no package: one line (it was a traceback)
    import fairseq_speaker  # noqa: F401  (registers the task and models)

    checkpoint = SpeakerCheckpoint.load(args.path, data=args.data)
    checkpoint.check_adaptable()
    try:
        sentences = split_sentences(checkpoint.task, args.subset)
    except (FileNotFoundError, SplitNotFound):  # other refusals (its speaker file, its text) say what is wrong
        raise OnboardingError(f"{args.data}: no binarized {args.subset!r} split; --subset names the split the "
                              f"speakers were trained on (default: train)") from None
    except EmptySplit as e:  # its advice named fairseq-generate's and -train's options, which these commands lack
        raise OnboardingError(f"{str(e).split('; ')[0]}; --subset names the split the speakers were trained on "
                              f"(default: train): name one that holds sentences") from None
    if not sentences:
        raise OnboardingError(f"{args.data}: the {args.subset!r} split has no sentence of a speaker the model knows")
    return checkpoint, sentences


def stacked_rows(rows: List[Dict[str, Tensor]]) -> Dict[str, Tensor]:
    """Speakers' rows (one dict of their parameters each) as :func:`add_speakers` and :func:`replace_speakers` take
    them: each parameter's rows concatenated in order."""
    return {key: torch.cat([r[key] for r in rows]) for key in rows[0]}
