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
"""

import copy
import functools
import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import scipy.sparse
import torch
from fairseq import hub_utils
from omegaconf import open_dict
from omegaconf.errors import ValidationError

import fairseq_speaker  # noqa: F401  (registers the task and the models)
from fairseq_speaker.checkpoints import not_a_file, read_checkpoint
from fairseq_speaker.data import preprocessing
from fairseq_speaker.modules.speaker_words import speaker_words_of
from fairseq_speaker.modules.word_kinds import kind_posteriors, kind_words
from fairseq_speaker.onboarding.adapter import SpeakerAdapter, check_pair_counts
from fairseq_speaker.onboarding.arguments import (
    Sentences,
    as_list,
    check_overrides,
    checked_beam,
    checked_nbest,
    checked_options,
    checked_path,
    checked_step_args,
    name_list,
    not_blank,
    per_sentence,
    some,
)
from fairseq_speaker.onboarding.checkpoint import OnboardingError, SpeakerCheckpoint, adaptable_bias, speaker_bias_of
from fairseq_speaker.onboarding.fit import FitOptions, FitReport
from fairseq_speaker.onboarding.prior import prior_of_checkpoint
from fairseq_speaker.tasks.inference import BEAM_STOPS, SpeakerInferenceMixin
from fairseq_speaker.user_dir import check_registered

if TYPE_CHECKING:
    from fairseq_speaker.onboarding.vectors import SpeakerVectors

@dataclass(frozen=True)
class SpeakerTrait:
    """What a speaker's words suggest of one trait of the model's kinds of speaker (``fairseq-speaker-words``;
    :mod:`fairseq_speaker.analysis.choices`): the trait (1, 2, ... in the order of the model's record, as the command
    lists them), the speaker's likeliest ``kind`` of its ``kinds`` (1, 2, ...) and its posterior ``probability``,
    ``evidence`` (how many of the trait's alternatives the speaker said), and ``words``, the words that tell that
    kind from the others (:func:`~fairseq_speaker.modules.word_kinds.kind_words`)."""

    trait: int
    kind: int
    kinds: int
    probability: float
    evidence: int
    words: Tuple[str, ...]


def _serialized(method):
    """Run ``method`` holding the translator's lock (see the module's text)."""
    @functools.wraps(method)
    def locked(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)
    return locked


#: what a translator keeps of its checkpoint to save a new one: all but the weights it holds in memory and
#: the optimizer state, which a saved model does not keep
_NOT_KEPT = ("model", "last_optimizer_state")


def _fitting_copy(model, keep: Sequence = ()):
    """A copy of ``model`` to fit a speaker on while the model translates: modules of its own (a fit swaps their
    parameters: ``torch.func.functional_call``) and speaker rows of its own (a fit writes them); the shared
    weights, the buffers and the objects of ``keep`` are the model's, not copied."""
    owned = {id(p) for p in speaker_bias_of(model).speaker_parameters().values()}
    memo = {id(t): t for t in list(model.parameters()) + list(model.buffers()) if id(t) not in owned}
    memo.update({id(x): x for x in keep})
    return copy.deepcopy(model, memo)


def _file_identity(path: str):
    stat = os.stat(path)
    return stat.st_ino, stat.st_size, stat.st_mtime_ns


class SpeakerTranslator:
    """A loaded speaker model (see the module documentation)."""

    def __init__(self, hub: hub_utils.GeneratorHubInterface, checkpoint: str, fit: Optional[FitOptions] = None,
                 state: Optional[dict] = None):
        self.hub = hub
        self.checkpoint = checkpoint
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

    # -- translating --------------------------------------------------------------------------------
    @property
    def task(self):
        return self.hub.task

    @property
    def model(self):
        return self.hub.models[0]

    @property
    def speakers(self) -> List[str]:
        """The speakers the model knows, in the order of their rows."""
        with self._lock:
            return list(self.task.speaker_dictionary.names)

    def _not_lookalikes(self, labels: List[str]) -> List[str]:
        """``labels`` if none looks like a speaker of the model without being it (invisible characters added, another
        normalization, another space: docs/reliability.md, "Speaker labels"): such a label would silently get the
        unknown-speaker policy instead of the speaker meant."""
        dictionary = self.task.speaker_dictionary
        for i, label in enumerate(labels):
            if not label.strip():
                raise OnboardingError(f"speakers[{i}] is {'empty' if not label else 'only whitespace'}: give a "
                                      f"speaker's name (an unknown one gets the unknown-speaker policy)")
            twin = dictionary.lookalike(label) if label not in dictionary else None
            if twin is not None:
                raise OnboardingError(f"speakers[{i}]: {label!r} looks like {twin!r}, a speaker of the model, but is "
                                      f"not it (invisible characters, another space or another Unicode normalization): "
                                      f"write {twin!r}")
        return labels

    @_serialized
    def translate(self, sentences: Sentences, speakers: Sentences, beam: Optional[int] = None,
                  **kwargs) -> Union[str, List[str]]:
        """Translate each sentence as its speaker (one name for all, or one per sentence). Speakers the
        model does not know get what the task's ``unknown_speaker`` says (the mean speaker by default).
        A single sentence gives a single translation."""
        hypotheses = self._search(sentences, speakers, beam, None, kwargs)
        out = [self.hub.decode(best[0]["tokens"]) for best in hypotheses]
        return out[0] if isinstance(sentences, str) else out

    def _search(self, sentences: Sentences, speakers: Sentences, beam: Optional[int], nbest: Optional[int],
                options: dict) -> List[List[dict]]:
        """The beam search of :meth:`translate` and :meth:`translate_nbest`, every argument checked first (``beam``:
        the translator's own where None; ``nbest``: checked against the beam where given): each sentence's
        hypotheses, best first."""
        batch = some(not_blank(as_list(sentences)))
        if beam is None and options.get("sampling"):  # a sample is one draw: as many as the translations asked for
            beam = nbest or 1
        beam = checked_beam(self.hub.cfg.generation.beam if beam is None else beam)
        if nbest is not None:
            checked_nbest(nbest, beam)
        options = checked_options(options, self.hub.cfg.generation)
        if options.get("sampling") and (nbest or 1) != beam:  # fairseq-generate refuses it: not a sample
            raise OnboardingError(f"sampling draws one translation for each of the beam's {beam} hypotheses, and "
                                  f"{nbest or 1} of them is asked for (the likeliest of the draws, no longer a "
                                  f"sample): give beam=1 for one sample, or translate_nbest with nbest equal to beam")
        tokens = self._encoded(batch)
        checked_step_args(options, len(batch), len(self.task.target_dictionary))
        self.task.set_inference_speakers(self._not_lookalikes(per_sentence(speakers, len(batch))))
        return self.hub.generate(tokens, beam, **options)

    def source_lengths(self, sentences: Sequence[str]) -> List[int]:
        """How many tokens the model reads of each sentence (its tokenizer and BPE, the end of sentence); a sentence
        longer than the model takes is refused, naming its place in ``sentences``."""
        return [len(tokens) for tokens in self._encoded(some(not_blank(as_list(sentences))))]

    def _encoded(self, batch: List[str]) -> List[torch.Tensor]:
        """Each sentence as the model's token ids (the hub's ``encode``); one longer than the model takes is refused,
        naming it (fairseq's batching ends in an assertion or an exception)."""
        tokens = [self.hub.encode(sentence) for sentence in batch]
        positions = self.hub.max_positions
        positions = positions[0] if isinstance(positions, tuple) else positions
        max_tokens = self.hub.cfg.dataset.max_tokens
        for i, sentence in enumerate(tokens):
            for limit, what in ((positions, "source positions the model takes"),
                                (max_tokens, "tokens of a batch (max_tokens)")):
                if limit is not None and len(sentence) > limit:
                    raise OnboardingError(f"sentences[{i}]: {len(sentence)} tokens (with the end of sentence), more "
                                          f"than the {int(limit)} {what}: split it into sentences")
        return tokens

    @_serialized
    def translate_nbest(self, sentences: Sequence[str], speakers: Sentences, beam: Optional[int] = None, nbest: int = 1,
                        **kwargs) -> List[List[Tuple[str, float]]]:
        """The ``nbest`` best translations of each sentence as its speaker, best first, each with fairseq's score
        (the mean log-probability of its tokens, with their speaker's words' bias in a model that remembers them);
        the first is what :meth:`translate` gives."""
        hypotheses = self._search(sentences, speakers, beam, nbest, kwargs)
        return [[(self.hub.decode(h["tokens"]), float(h["score"])) for h in best[:nbest]] for best in hypotheses]

    @_serialized
    def translate_nbest_known(self, sentences: Sequence[str], speakers: Sentences, beam: Optional[int] = None,
                              nbest: int = 1, **kwargs) -> Tuple[List[List[Tuple[str, float]]], List[bool]]:
        """:meth:`translate_nbest`, and for each sentence whether the model knew its speaker when it was translated
        (False: the speaker got the unknown-speaker policy). Both come from one call, holding the translator: a
        speaker another thread imports meanwhile is known to both or to neither, so the answer says which rows
        were read."""
        labels = per_sentence(speakers, len(as_list(sentences)))
        known = [label in self.task.speaker_dictionary for label in labels]
        return self.translate_nbest(sentences, labels, beam=beam, nbest=nbest, **kwargs), known

    # -- onboarding ---------------------------------------------------------------------------------
    @property
    def adapter(self) -> SpeakerAdapter:
        if self._adapter is None:
            self._adapter = self._new_adapter(self.model, self.task)
        return self._adapter

    def _new_adapter(self, model, task) -> SpeakerAdapter:
        """The adapter of ``model`` (this translator's, or a copy of it: :meth:`fit_speaker`)."""
        return SpeakerAdapter(model, task, self._fit,
                              prior=prior_of_checkpoint(self._state, adaptable_bias(model, task)))

    def encode_pairs(self, sources: Sentences, targets: Sentences, named: Tuple[str, str] = ("sources", "targets")):
        """Token ids of raw sentence pairs, tokenized and BPE-encoded as the model's inputs are (the targets with
        the target language's tokenization rules, where the tokenizer has languages: Moses); ``named``: the two
        lists' names in a refusal."""
        source_name, target_name = named
        sources, targets = as_list(sources, source_name), as_list(targets, target_name)
        check_pair_counts(sources, targets, named)
        tokenizer = self.hub.tokenizer
        if self._target_tokenizer is None or self._target_tokenizer[0] is not tokenizer:
            self._target_tokenizer = (tokenizer, preprocessing.for_target(tokenizer))
        target_tokenizer = self._target_tokenizer[1]
        sources = [self.hub.apply_bpe(self.hub.tokenize(x)) for x in not_blank(sources, source_name)]
        targets = [self.hub.apply_bpe(target_tokenizer.encode(x) if target_tokenizer is not None else x)
                   for x in not_blank(targets, target_name)]
        return self.adapter.encode(sources, targets)

    @_serialized
    def add_speaker(self, name: str, sources: Sentences, targets: Sentences, heldout_sources: Sentences = (),
                    heldout_targets: Sentences = (), replace: bool = False) -> FitReport:
        """Learn a speaker's parameters from their sentences and their translations (raw text, tokenized
        and BPE-encoded as the model's inputs are); a known name needs ``replace=True``."""
        if not isinstance(replace, bool):  # "no" would replace
            raise OnboardingError(f"replace must be True or False, got {replace!r}")
        heldout = self._heldout(name, heldout_sources, heldout_targets)
        return self.adapter.adapt({name: self.encode_pairs(sources, targets)}, heldout, replace=replace)[name]

    def _heldout(self, name: str, sources: Sentences, targets: Sentences):
        """The held-out pairs of ``name`` as a fit takes them, or None where none are given (sources without targets,
        or targets without sources, are refused by :meth:`encode_pairs`)."""
        return ({name: self.encode_pairs(sources, targets, ("heldout_sources", "heldout_targets"))}
                if as_list(sources, "heldout_sources") or as_list(targets, "heldout_targets") else None)

    def fit_speaker(self, name: str, sources: Sentences, targets: Sentences, heldout_sources: Sentences = (),
                    heldout_targets: Sentences = ()) -> Tuple["SpeakerVectors", FitReport]:
        """A speaker fitted on their sentences as :meth:`add_speaker` fits them, without putting them in the
        model: their rows, for :meth:`import_speakers` (one short locked call), and the fit's report.

        The fit runs on a copy of the model that shares its weights and has its own speaker table and speaker
        dictionary; the translator is held only while the copy is taken, so translations go on during the fit.
        A name the model knows is fitted again from its sentences alone (``replace``)."""
        from fairseq_speaker.onboarding.vectors import speaker_vectors

        with self._lock:  # copies of a table no call is changing
            self.adapter  # noqa: B018  (the model's own, made once: it encodes the sentences below)
            task = self.task.copy_with_own_speakers()
            model = _fitting_copy(self.model, keep=(task.source_dictionary, task.target_dictionary))
            adapter = self._new_adapter(model, task)
            adapter.share_starts(self.adapter)  # the known speakers where a fit starts, made once for all copies
        pairs = self.encode_pairs(sources, targets)
        heldout = self._heldout(name, heldout_sources, heldout_targets)
        report = adapter.adapt({name: pairs}, heldout, replace=name in task.speaker_dictionary)[name]
        self.adapter.share_starts(adapter)
        return speaker_vectors(adapter.bias, [name], task.target_dictionary, model_label=self.checkpoint,
                               words=speaker_words_of(model)), report

    @_serialized
    def update_speaker(self, name: str, sources: Sentences, targets: Sentences) -> FitReport:
        """One or a few more sentences of a speaker the model knows (a post-edit, a correction): a warm-started refit.
        A name the model does not know is refused (a misspelt name would become a new speaker): :meth:`add_speaker`
        adds one."""
        if not isinstance(name, str) or name not in self.task.speaker_dictionary:
            raise OnboardingError(f"update_speaker: no speaker {name!r} in the model ({len(self.speakers)} speakers: "
                                  f"translator.speakers lists them); add_speaker(name, sources, targets) adds a new "
                                  f"one")
        return self.adapter.update(name, self.encode_pairs(sources, targets))

    @_serialized
    def export_speakers(self, path: str, names: Optional[Sequence[str]] = None):
        """Write the parameters of ``names`` (default: all speakers) to a portable ``.npz`` file."""
        from fairseq_speaker.onboarding.vectors import save_speaker_vectors

        names = name_list(names, "export_speakers", empty=False) if names is not None else self.speakers
        bias = adaptable_bias(self.model, self.task, self.checkpoint)
        return save_speaker_vectors(path, bias, names, self.task.target_dictionary, words=speaker_words_of(self.model))

    @_serialized
    def speaker_vectors(self, names: Optional[Sequence[str]] = None) -> "SpeakerVectors":
        """The parameters of ``names`` (default: all speakers) in memory, as :meth:`export_speakers` writes them."""
        from fairseq_speaker.onboarding.vectors import speaker_vectors

        names = name_list(names, "speaker_vectors", empty=False) if names is not None else self.speakers
        bias = adaptable_bias(self.model, self.task, self.checkpoint)
        return speaker_vectors(bias, names, self.task.target_dictionary, model_label=self.checkpoint,
                               words=speaker_words_of(self.model))

    @_serialized
    def import_speakers(self, path: Union[str, "SpeakerVectors"], replace: bool = False) -> List[str]:
        """Add (or with ``replace``, overwrite) the speakers of a file written by :meth:`export_speakers` (or of
        :meth:`speaker_vectors` in memory); returns their names. Rows of an incompatible model are refused."""
        from fairseq_speaker.onboarding.vectors import SpeakerVectors, import_vectors, load_speaker_vectors

        if not isinstance(replace, bool):
            raise OnboardingError(f"import_speakers: replace must be True or False, got {replace!r}")
        if isinstance(path, os.PathLike):
            path = os.fspath(path)
        if not isinstance(path, (str, SpeakerVectors)):
            raise OnboardingError(f"import_speakers: give the path of a speaker vectors file (or the SpeakerVectors of "
                                  f"speaker_vectors()), got {type(path).__name__} {path!r:.80}")
        vectors = load_speaker_vectors(path) if isinstance(path, str) else path
        import_vectors(vectors, self.model, self.task, replace, where=self.checkpoint)
        return list(vectors.names)

    @_serialized
    def speaker_traits(self, names: Optional[Sequence[str]] = None) -> Optional[Dict[str, List[SpeakerTrait]]]:
        """What each speaker's words suggest of them (``names``, default every speaker; names the model does not know
        are left out): for each trait of the model's kinds of speaker with more than one kind, of which the speaker
        said at least one alternative, a :class:`SpeakerTrait`. None for a model that keeps no kinds of speaker (no
        memory of its speakers' words, or one built with ``--no-kinds`` or where no trait has two kinds)."""
        if names is not None:
            names = name_list(names, "speaker_traits")
        memory = speaker_words_of(self.model)
        traits = [(i, trait) for i, trait in enumerate(memory.kinds if memory is not None else [], 1)
                  if len(trait.prior) > 1]
        if memory is None or not traits:
            return None
        dictionary = self.task.speaker_dictionary
        names = [name for name in (names if names is not None else dictionary.names) if name in dictionary]
        said_words = [memory.words_of(dictionary.index(name)) for name in names]
        ids = np.concatenate(said_words).astype(np.int64) if said_words else np.zeros(0, np.int64)
        said = scipy.sparse.csr_matrix((np.ones(len(ids)), ids, np.cumsum([0] + [len(w) for w in said_words])),
                                       shape=(len(names), memory.vocab))  # [N, V]: who said what
        out: Dict[str, List[SpeakerTrait]] = {name: [] for name in names}
        target = self.task.target_dictionary
        for number, trait in traits:
            posterior = kind_posteriors(trait, said)  # [N, K]
            evidence = np.asarray(said[:, np.concatenate(trait.choices)].sum(axis=1)).ravel()
            described = {}
            for name, row, count in zip(names, posterior, evidence):
                if count == 0:  # said none of its alternatives: the prior, nothing the speaker showed
                    continue
                kind = int(np.argmax(row))
                if kind not in described:
                    described[kind] = tuple(target[i] for i in kind_words(trait, kind))
                out[name].append(SpeakerTrait(number, kind + 1, len(trait.prior), float(row[kind]), int(count),
                                              described[kind]))
        return out

    def sentence_words(self, pairs: Sequence[Tuple[str, str]]):
        """The word ids of the translations of raw sentence ``pairs`` as the model's memory of its speakers' words
        keeps a speaker's (``fairseq-speaker-words``); None for a model without one."""
        words = speaker_words_of(self.model)
        if words is None or not pairs:
            return None
        encoded = self.encode_pairs([source for source, _ in pairs], [target for _, target in pairs])
        return words.ids([target for _, target in encoded])

    @_serialized
    def forget_words(self, names: Sequence[str]) -> None:
        """The model's memory of its speakers' words (``fairseq-speaker-words``; nothing without one) forgets those
        of ``names`` (a list of speakers the model knows): a speaker deleted from a service must not shape the others'
        neighbours. A string instead of a list, an empty list, or a name the model does not know, is refused: nothing
        would be forgotten."""
        names = name_list(names, "forget_words", empty=False, every=False)
        unknown = [name for name in names if name not in self.task.speaker_dictionary]
        if unknown:
            raise OnboardingError(f"forget_words: no speaker(s) {', '.join(map(repr, unknown[:5]))} in the model "
                                  f"(translator.speakers lists them): nothing was forgotten")
        words = speaker_words_of(self.model)
        if words is not None:
            words.forget([self.task.speaker_dictionary.index(name) for name in names])

    @_serialized
    def save(self, path: str) -> None:
        """Write a checkpoint with every speaker added here, for fairseq-generate / fairseq-interactive."""
        path = checked_path(path, "save: the file")
        SpeakerCheckpoint(self.checkpoint, dict(self._state), self.task, self.model).save(path)
