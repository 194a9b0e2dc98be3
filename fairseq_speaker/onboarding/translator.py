"""A speaker model in a service: load once, translate each sentence as its speaker, onboard speakers live.

::

    from fairseq_speaker.serving import SpeakerTranslator

    translator = SpeakerTranslator.from_pretrained("checkpoints/checkpoint_best.pt", data="data-bin")
    translator.translate(["i am tired ."], speakers=["spk003"])
    translator.add_speaker("dr-lee", sources=[...], targets=[...])    # a few corrected translations
    translator.update_speaker("dr-lee", "one more source .", "its translation .")
    translator.export_speakers("dr-lee.npz", ["dr-lee"])              # keep per-user parameters outside
    translator.save("checkpoint_with_dr_lee.pt")                       # or a checkpoint fairseq loads

Every method is safe to call from several threads at once (and from an asyncio service through a thread
pool): each call holds the translator for its duration, so every sentence is translated as its own speaker
and a speaker being added or updated is never seen half-written; a call waits at most for the calls
before it (an onboarding fit, a batch of translations). Throughput comes from batching sentences into a
call, not from threads. :meth:`SpeakerTranslator.fit_speaker` fits a speaker on a copy of the model that
shares its weights, holding the translator only while it takes the copy: translations go on meanwhile, and
the rows enter the model in one call (:meth:`SpeakerTranslator.import_speakers`) when the caller chooses.

Loading, tokenization and BPE (the checkpoint's own preprocessing, or ``tokenizer="moses"``,
``bpe="subword_nmt"``, ``bpe_codes=...``) and generation are fairseq's own hub interface
(:class:`fairseq.hub_utils.GeneratorHubInterface`, available as :attr:`SpeakerTranslator.hub`); speakers are added with
:class:`~fairseq_speaker.onboarding.adapter.SpeakerAdapter`.

This module is the class and its loading and saving; its parts are what it does: translating
(:mod:`~fairseq_speaker.onboarding.translator_search`), onboarding and the portable rows
(:mod:`~fairseq_speaker.onboarding.translator_onboarding`), the speakers' words
(:mod:`~fairseq_speaker.onboarding.translator_words`), over what they share
(:mod:`~fairseq_speaker.onboarding.translator_base`).
"""

import os
import threading
from typing import Optional

from fairseq import hub_utils
from omegaconf import open_dict
from omegaconf.errors import ValidationError

import fairseq_speaker  # noqa: F401  (registers the task and the models)
from fairseq_speaker.checkpoints import not_a_file, read_checkpoint
from fairseq_speaker.onboarding.adapter import SpeakerAdapter
from fairseq_speaker.onboarding.arguments import check_overrides, checked_path
from fairseq_speaker.onboarding.checkpoint import OnboardingError, SpeakerCheckpoint
from fairseq_speaker.onboarding.fit_options import FitOptions
from fairseq_speaker.onboarding.translator_base import serialized
from fairseq_speaker.onboarding.translator_onboarding import TranslatorOnboarding
from fairseq_speaker.onboarding.translator_search import TranslatorSearch
from fairseq_speaker.onboarding.translator_words import TranslatorWords
from fairseq_speaker.tasks.data_files import one_folder_problem
from fairseq_speaker.tasks.inference import BEAM_STOPS, SpeakerInferenceMixin
from fairseq_speaker.user_dir import check_registered

#: what a translator keeps of its checkpoint to save a new one: all but the weights it holds in memory and
#: the optimizer state, which a saved model does not keep
_NOT_KEPT = ("model", "last_optimizer_state")


def _file_identity(path: str):
    stat = os.stat(path)
    return stat.st_ino, stat.st_size, stat.st_mtime_ns


class SpeakerTranslator(TranslatorSearch, TranslatorOnboarding, TranslatorWords):
    """A loaded speaker model (see the module documentation)."""

    def __init__(self, hub: hub_utils.GeneratorHubInterface, checkpoint: str, fit: Optional[FitOptions] = None,
                 state: Optional[dict] = None):
        self.hub = hub
        self.checkpoint = checkpoint
        # the file itself, wherever the process goes later (a relative path named another file after a chdir)
        self._checkpoint_file = os.path.abspath(checkpoint) if isinstance(checkpoint, str) and checkpoint else None
        self._fit = fit
        self._adapter: Optional[SpeakerAdapter] = None
        self._lock = threading.RLock()
        #: (the hub's tokenizer, the same for target sentences): :meth:`encode_pairs`
        self._target_tokenizer: Optional[tuple] = None
        #: the checkpoint as it was read, without the weights (:meth:`save` writes the model in memory)
        self._state = {k: v for k, v in (state or {}).items() if k not in _NOT_KEPT}

    @classmethod
    def from_pretrained(cls, checkpoint: str, data: str, fit: Optional[FitOptions] = None,
                        **overrides) -> "SpeakerTranslator":
        """Load ``checkpoint`` with the dictionaries of ``data``; ``overrides`` are fairseq options (``beam=5``, the
        beam of a translation that names none, ``tokenizer="moses"``, ``bpe="subword_nmt"``, ``bpe_codes=...``,
        ``source_lang=...``, ``unknown_speaker="fail"``, ``preprocessing="none"``; a name that is no option is
        refused). A checkpoint trained on data that records its preprocessing (``examples/sated/prepare.py``) takes
        raw text and gives detokenized text, unless ``tokenizer=``/``bpe=`` or ``preprocessing="none"`` say otherwise
        (docs/sated.md)."""
        checkpoint = checked_path(checkpoint, "from_pretrained: checkpoint")
        data = checked_path(data, "from_pretrained: data")
        if os.path.isdir(checkpoint):
            raise OnboardingError(f"checkpoint {checkpoint} is a directory: give the checkpoint file in it (e.g. "
                                  f"{os.path.join(checkpoint, 'checkpoint_best.pt')})")
        if not os.path.isfile(checkpoint):
            raise OnboardingError(not_a_file(checkpoint) or f"checkpoint not found: {checkpoint}")
        if os.pathsep in os.path.basename(checkpoint):
            # fairseq's hub reads a file name as checkpoints separated by ':' (an ensemble): 'co' and 'lon.pt'
            raise OnboardingError(f"checkpoint {checkpoint}: fairseq reads a file name holding {os.pathsep!r} as "
                                  f"several checkpoints (an ensemble): rename the file, or link it under a name "
                                  f"without {os.pathsep!r} (ln -s)")
        shards = one_folder_problem(data)
        if shards:
            raise OnboardingError(f"from_pretrained: data {shards}")
        before = _file_identity(checkpoint)
        # the search's stop: a generation default of the translator (a checkpoint saved before the option existed
        # has no such key for fairseq to override, which would drop it without a word)
        beam_stop = overrides.pop("beam_stop", None)
        if beam_stop is not None and beam_stop not in BEAM_STOPS:
            raise OnboardingError(f"beam_stop must be one of {', '.join(BEAM_STOPS)}, got {beam_stop!r}")
        state = read_checkpoint(checkpoint)  # what save() keeps of it: the same file, checked below
        check_registered(state, checkpoint)  # a variant of another package: say to import it (--user-dir)
        check_overrides(overrides, state.get("cfg"), checkpoint)
        # fairseq-interactive's speakers, where the training command line gave them, are left out, as the
        # onboarding commands leave them out (SpeakerCheckpoint.load)
        try:
            loaded = hub_utils.from_pretrained(os.path.dirname(os.path.abspath(checkpoint)),
                                               checkpoint_file=os.path.basename(checkpoint),
                                               data_name_or_path=os.path.abspath(data), speaker=None,
                                               speaker_per_line=False, **overrides)
        except ValidationError as e:  # an override of a choice outside its choices (unknown_speaker="bogus")
            key = getattr(e, "full_key", None)
            raise OnboardingError(f"from_pretrained: {key.split('.')[-1] + ': ' if key else ''}"
                                  f"{str(e).splitlines()[0]}") from None
        if _file_identity(checkpoint) != before:
            raise OnboardingError(f"{checkpoint} was replaced while it was being loaded: load it again")
        if not isinstance(loaded["task"], SpeakerInferenceMixin):  # fairseq's own translation task and model
            raise OnboardingError(f"{checkpoint}: not a fairseq-speaker checkpoint (trained with fairseq's "
                                  f"{type(loaded['task']).__name__}, without speakers): give a checkpoint trained with "
                                  f"--task speaker_translation")
        translator = cls._of(loaded["args"], loaded["task"], loaded["models"], checkpoint, fit, state)
        # raw text in, raw text out: the task builds the checkpoint's preprocessing where tokenizer=/bpe= are not
        # given (fairseq's hub builds only those)
        hub, cfg = translator.hub, loaded["args"]
        hub.tokenizer, hub.bpe = hub.task.build_tokenizer(cfg.tokenizer), hub.task.build_bpe(cfg.bpe)
        if beam_stop is not None:
            with open_dict(hub.cfg.generation):
                hub.cfg.generation.beam_stop = beam_stop
        return translator

    @classmethod
    def from_checkpoint(cls, opened: SpeakerCheckpoint, fit: Optional[FitOptions] = None) -> "SpeakerTranslator":
        """A translator of a checkpoint opened with :meth:`SpeakerCheckpoint.load` (whose errors say
        which file or data folder is wrong)."""
        return cls._of(opened.state["cfg"], opened.task, [opened.model], opened.path, fit, opened.state)

    @classmethod
    def _of(cls, cfg, task, models, checkpoint: str, fit: Optional[FitOptions], state: dict) -> "SpeakerTranslator":
        hub = hub_utils.GeneratorHubInterface(cfg, task, models)
        hub.eval()
        return cls(hub, checkpoint, fit, state)

    @serialized
    def save(self, path: str) -> None:
        """Write a checkpoint with every speaker added here, for fairseq-generate / fairseq-interactive."""
        path = self._output(path, "save: the file")
        SpeakerCheckpoint(self.checkpoint, dict(self._state), self.task, self.model).save(path)
