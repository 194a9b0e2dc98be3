"""Onboarding speakers live: the part of :class:`~fairseq_speaker.onboarding.translator.SpeakerTranslator` that adds,
updates and fits speakers (:class:`TranslatorOnboarding`: ``add_speaker``, ``update_speaker``, ``fit_speaker`` on a
copy of the model that shares its weights, :func:`fitting_copy`), and that exports and imports their rows as portable
speaker vectors (``export_speakers``, ``speaker_vectors``, ``import_speakers``;
:mod:`~fairseq_speaker.onboarding.vectors`), and that releases the names of speakers whose rows stay
(``retire_speakers``, ``restore_speakers``).
"""

import copy
import os
from typing import TYPE_CHECKING, List, Optional, Sequence, Tuple, Union

from fairseq_speaker.data.speaker_labels import retired_name
from fairseq_speaker.modules.speaker_words import speaker_words_of
from fairseq_speaker.onboarding.arguments import Sentences, as_list, name_list
from fairseq_speaker.onboarding.checkpoint import OnboardingError, adaptable_bias, rename_speakers, speaker_bias_of
from fairseq_speaker.onboarding.fit import FitReport
from fairseq_speaker.onboarding.translator_base import TranslatorBase, serialized

if TYPE_CHECKING:
    from fairseq_speaker.onboarding.vectors_file import SpeakerVectors


def fitting_copy(model, keep: Sequence = ()):
    """A copy of ``model`` to fit a speaker on while the model translates: modules of its own (a fit swaps their
    parameters: ``torch.func.functional_call``) and speaker rows of its own (a fit writes them); the shared
    weights, the buffers and the objects of ``keep`` are the model's, not copied."""
    owned = {id(p) for p in speaker_bias_of(model).speaker_parameters().values()}
    memo = {id(t): t for t in list(model.parameters()) + list(model.buffers()) if id(t) not in owned}
    memo.update({id(x): x for x in keep})
    return copy.deepcopy(model, memo)


class TranslatorOnboarding(TranslatorBase):
    """A part of :class:`~fairseq_speaker.onboarding.translator.SpeakerTranslator`: see the module documentation."""

    @serialized
    def add_speaker(self, name: str, sources: Sentences, targets: Sentences, heldout_sources: Sentences = (),
                    heldout_targets: Sentences = (), replace: bool = False) -> FitReport:
        """Learn a speaker's parameters from their sentences and their translations (raw text, tokenized
        and BPE-encoded as the model's inputs are); a known name needs ``replace=True``."""
        if not isinstance(replace, bool):  # "no" would replace
            raise OnboardingError(f"replace must be True or False, got {replace!r}")
        heldout = self._heldout(name, heldout_sources, heldout_targets, sources, targets)
        return self.adapter.adapt({name: self.encode_pairs(sources, targets)}, heldout, replace=replace)[name]

    def _heldout(self, name: str, sources: Sentences, targets: Sentences, fitted_sources: Sentences = (),
                 fitted_targets: Sentences = ()):
        """The held-out pairs of ``name`` as a fit takes them, or None where none are given (sources without targets,
        or targets without sources, are refused by :meth:`encode_pairs`). Held-out pairs that are all among the pairs
        fitted (``fitted_*``) are refused: the fit would stop early on its own sentences (fairseq-speaker-adapt refuses
        a --heldout-prefix naming the adaptation files)."""
        if not (as_list(sources, "heldout_sources") or as_list(targets, "heldout_targets")):
            return None
        pairs = set(zip(as_list(sources, "heldout_sources"), as_list(targets, "heldout_targets")))
        if pairs and pairs <= set(zip(as_list(fitted_sources, "sources"), as_list(fitted_targets, "targets"))):
            raise OnboardingError("heldout_sources and heldout_targets are pairs the speaker is fitted on: held-out "
                                  "pairs judge the fit on sentences it did not see; give other pairs, or none")
        return {name: self.encode_pairs(sources, targets, ("heldout_sources", "heldout_targets"))}

    def fit_speaker(self, name: str, sources: Sentences, targets: Sentences, heldout_sources: Sentences = (),
                    heldout_targets: Sentences = ()) -> Tuple["SpeakerVectors", FitReport]:
        """A speaker fitted on their sentences as :meth:`add_speaker` fits them, without putting them in the
        model: their rows, for :meth:`import_speakers` (one short locked call), and the fit's report.

        The fit runs on a copy of the model that shares its weights and has its own speaker table and speaker
        dictionary; the translator is held only while the copy is taken, so translations go on during the fit.
        A name the model knows is fitted again from its sentences alone (``replace``)."""
        from fairseq_speaker.onboarding.vectors_file import speaker_vectors

        with self._lock:  # copies of a table no call is changing
            self.adapter  # noqa: B018  (the model's own, made once: it encodes the sentences below)
            task = self.task.copy_with_own_speakers()
            model = fitting_copy(self.model, keep=(task.source_dictionary, task.target_dictionary))
            adapter = self._new_adapter(model, task)
            adapter.share_starts(self.adapter)  # the known speakers where a fit starts, made once for all copies
        pairs = self.encode_pairs(sources, targets)
        heldout = self._heldout(name, heldout_sources, heldout_targets, sources, targets)
        report = adapter.adapt({name: pairs}, heldout, replace=name in task.speaker_dictionary)[name]
        self.adapter.share_starts(adapter)
        return speaker_vectors(adapter.bias, [name], task.target_dictionary, model_label=self.checkpoint,
                               words=speaker_words_of(model)), report

    @serialized
    def update_speaker(self, name: str, sources: Sentences, targets: Sentences) -> FitReport:
        """One or a few more sentences of a speaker the model knows (a post-edit, a correction): a warm-started refit.
        A name the model does not know is refused (a misspelt name would become a new speaker): :meth:`add_speaker`
        adds one."""
        if not isinstance(name, str) or name not in self.task.speaker_dictionary:
            raise OnboardingError(f"update_speaker: no speaker {name!r} in the model ({len(self.speakers)} speakers: "
                                  f"translator.speakers lists them); add_speaker(name, sources, targets) adds a new "
                                  f"one")
        return self.adapter.update(name, self.encode_pairs(sources, targets))

    @serialized
    def export_speakers(self, path: str, names: Optional[Sequence[str]] = None):
        """Write the parameters of ``names`` (default: all speakers) to a portable ``.npz`` file."""
        from fairseq_speaker.onboarding.vectors_file import save_speaker_vectors

        path = self._output(path, "export_speakers: path")  # None ended in a TypeError deep in numpy
        names = name_list(names, "export_speakers", empty=False) if names is not None else self.speakers
        bias = adaptable_bias(self.model, self.task, self.checkpoint)
        return save_speaker_vectors(path, bias, names, self.task.target_dictionary, words=speaker_words_of(self.model))

    @serialized
    def speaker_vectors(self, names: Optional[Sequence[str]] = None) -> "SpeakerVectors":
        """The parameters of ``names`` (default: all speakers) in memory, as :meth:`export_speakers` writes them."""
        from fairseq_speaker.onboarding.vectors_file import speaker_vectors

        names = name_list(names, "speaker_vectors", empty=False) if names is not None else self.speakers
        bias = adaptable_bias(self.model, self.task, self.checkpoint)
        return speaker_vectors(bias, names, self.task.target_dictionary, model_label=self.checkpoint,
                               words=speaker_words_of(self.model))

    @serialized
    def import_speakers(self, path: Union[str, "SpeakerVectors"], replace: bool = False) -> List[str]:
        """Add (or with ``replace``, overwrite) the speakers of a file written by :meth:`export_speakers` (or of
        :meth:`speaker_vectors` in memory); returns their names. Rows of an incompatible model are refused."""
        from fairseq_speaker.onboarding.vectors_compat import import_vectors
        from fairseq_speaker.onboarding.vectors_file import SpeakerVectors, load_speaker_vectors

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

    @serialized
    def retire_speakers(self, names: Sequence[str]) -> None:
        """Release the names of ``names`` (speakers of the model): their rows stay, unused, under a name no speaker can
        have (:func:`retired_name`), and their words are forgotten. Translating as one of them then gets the
        unknown-speaker policy, and a new speaker may take a name that looks like theirs (what a service does to a
        deleted speaker, so that it answers as a service that never had it). :meth:`restore_speakers` gives the
        names back to the rows."""
        names = self._known_names(names, "retire_speakers", "retired")
        self._forget_words_of(names)
        renames = {}
        for name in dict.fromkeys(names):
            if retired_name(name) in self.task.speaker_dictionary:  # rows of an earlier retire of the name, kept apart
                renames[retired_name(name)] = _earlier_retired_name(name, self.task.speaker_dictionary)
            renames[name] = retired_name(name)
        rename_speakers(self.model, self.task, renames)

    @serialized
    def restore_speakers(self, names: Sequence[str]) -> List[str]:
        """Give the rows :meth:`retire_speakers` kept of ``names`` their names back (to be overwritten by
        ``import_speakers(..., replace=True)``: the table does not grow); returns the names restored (a name with no
        retired rows is left out)."""
        names = name_list(names, "restore_speakers", empty=True, every=False)
        dictionary = self.task.speaker_dictionary
        twins = [(name, twin) for name in names if name not in dictionary and (twin := dictionary.lookalike(name))]
        if twins:
            raise OnboardingError(f"restore_speakers: {twins[0][0]!r} looks like {twins[0][1]!r}, a speaker of the "
                                  f"model since it was retired: nothing was restored")
        again = [name for name in names if name in dictionary and retired_name(name) in dictionary]
        if again:  # the retired rows could not take the name: it was left out without a word
            raise OnboardingError(f"restore_speakers: {again[0]!r} is a speaker of the model again, added after it "
                                  f"was retired: retire it first to restore the earlier rows, or keep it as it is; "
                                  f"nothing was restored")
        back = {retired_name(name): name for name in dict.fromkeys(names)
                if retired_name(name) in dictionary and name not in dictionary}
        if back:
            rename_speakers(self.model, self.task, back)
        return list(back.values())


def _earlier_retired_name(name: str, dictionary) -> str:
    """A name for the rows of an earlier retire of ``name`` (retired, added again, and retired again: the second
    retire was refused, "' y (deleted) ' already in the model"), one no speaker can have and none of the model has."""
    k = 2
    while f" {name} (deleted {k}) " in dictionary:
        k += 1
    return f" {name} (deleted {k}) "
