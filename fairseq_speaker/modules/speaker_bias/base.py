"""The contract of a speaker bias variant.

A variant turns the speakers of a batch (and, if it wants, the source
sentences) into a bias over the target vocabulary that the decoder adds to its
logits: ``p_t = softmax(E_T o_t + b_T + bias)``. Shapes: B sentences, V target
words, S speakers.

A variant may also (or instead) act on the decoder's state, through a per-sentence
:class:`SpeakerState`: an offset ``[B, d_in]`` added to the decoder's input (the embedding of
the previous word) at every step, and per decoder layer a scale ``[B, d_l]`` on its hidden
units (LHUC: ``h' = h * scale``). Where that is, and its sizes, the family's decoder says
(:class:`StateSites`, from its ``speaker_state_sites()``); the model gives the sites to the
variant once, when it attaches it (:meth:`SpeakerBias.attach`), before any optimizer is built
and any checkpoint is loaded, so that the variant creates its matrices at the right sizes.

What a variant declares (class attributes):

- ``config_class``: its options, a dataclass deriving from :class:`SpeakerBiasConfig`
  (given to :func:`~fairseq_speaker.modules.speaker_bias.register_speaker_bias`).
  Every field becomes a command-line flag (``speaker_rank`` -> ``--speaker-rank``) and a
  key of the model's hydra config (``model.speaker_rank``) of every speaker model.
- ``speaker_parameter_names``: the parameters whose row i belongs to speaker i
  (dimension 0 has size S). Everything else the variant owns is shared by all
  speakers. Freezing, inspection, export/import, growth and sparse updates go by this.
- ``needs_speakers``: whether it needs speaker ids (False for variants that only read the source);
  ``reads_source``: whether its bias depends on the source sentence.
- ``acts_on_output`` / ``acts_on_state``: whether it gives a bias on the logits (:meth:`lookup`),
  a :class:`SpeakerState` (:meth:`state_lookup`), or both. Output only by default.
- ``speaker_vector_label``: what :meth:`own_speaker_vectors` holds, for the report.
- its parameter count, on a line ``Parameters: <formula>`` of the class docstring, in S, V, the
  ``symbol`` metadata of its options and the names :meth:`formula_symbols` gives (checked by the
  unit tests).

What a variant implements:

- :meth:`lookup` ``(speakers [B] in [0, S), encoder_out) -> [B, V] or None``: the bias of
  known speakers. ``encoder_out`` is the encoder's output dict, or None; it always has
  ``encoder_out["source_tokens"] == [src_tokens [B, src_len]]``. A variant that needs the
  source returns None without it; a variant that acts only on the state returns None.
- a state variant: :meth:`attach` ``(sites)`` (create the parameters whose sizes the decoder
  gives) and :meth:`state_of_rows` ``(rows) -> SpeakerState`` (the state of speakers given their
  rows of the speaker parameters, ``[B, ...]`` each; :meth:`state_lookup` reads the rows with
  :meth:`row_lookup`). The mean speaker's state is that of the mean rows (:meth:`mean_state`).
- optionally :meth:`build` (to read files or check dictionaries), :meth:`mean_bias` (closed
  form of the mean speaker), :meth:`mean_speaker_row` (the parameter row a new speaker starts
  from), :meth:`aux_losses` (its regularizers), :meth:`own_speaker_vectors` and
  :meth:`own_vocabulary_vectors` (what inspection shows), :meth:`example_options` (what a
  small working instance needs, for tests and accounting).

What the base class provides from that: :meth:`forward` and :meth:`speaker_state` (range checks,
unseen speakers: ``MEAN_SPEAKER`` gets the mean speaker's bias and state, ``NO_SPEAKER`` none: no
bias, offset 0, scale 1), the speaker /
shared partition of the parameters, :meth:`grow`, :meth:`export_speakers` /
:meth:`import_speakers`, and the default auxiliary loss (the L2 pull of ``--speaker-l2``).
Variants built of other variants (``sum``) hold them as submodules: the speaker parameters,
rows and vectors of every nested variant are found and named by their path.
``docs/bias_variants.md`` is the guide.

:class:`SpeakerBias` is put together here from its parts in ``contract/``, one concern a module; a variant
subclasses it and imports what it names from here:

- ``contract/options.py``: :class:`SpeakerBiasConfig`, :class:`RowSparseConfig`;
- ``contract/state.py``: :class:`StateSites`, :class:`SpeakerState`;
- ``contract/variant.py``: everything above that a variant declares or implements, with its default;
- ``contract/parameters.py``: the speaker / shared partition, :meth:`row_lookup`, :meth:`check_speakers`;
- ``contract/lookup.py``: :meth:`forward`, :meth:`speaker_state`, unseen speakers, the regularizers of a batch;
- ``contract/table.py``: :meth:`grow`, :meth:`freeze_mean`, the speakers' names in the checkpoint;
- ``contract/export.py``: :meth:`export_speakers` / :meth:`import_speakers`, :meth:`speaker_vectors`,
  :meth:`vocabulary_vectors`.
"""

from typing import TYPE_CHECKING, Iterator, Tuple

from .contract.export import SpeakerExport
from .contract.lookup import SpeakerLookup
from .contract.options import RowSparseConfig, SpeakerBiasConfig
from .contract.state import SpeakerState, StateSites
from .contract.table import SpeakerTable
from .contract.variant import EncoderOut, source_tokens


class SpeakerBias(SpeakerLookup, SpeakerTable, SpeakerExport):
    """Base class of the speaker bias variants; see the module documentation for the contract.

    Args:
        cfg: the variant's options (an instance of ``config_class``).
        num_speakers: S, the size of the speaker dictionary (0 for a task without speakers).
        vocab_size: V, the size of the target dictionary.
    """

    if TYPE_CHECKING:  # the registry takes no other class: every variant nested in one is a SpeakerBias too
        def named_variants(self) -> Iterator[Tuple[str, "SpeakerBias"]]: ...

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # a variant built alone (inspection, the report) takes the decoder's sites its parameters were made for
        # from the checkpoint (its extra state, see contract/table.py): attached first, it has their shapes
        extra = state_dict.get(prefix + "_extra_state")
        sites = extra.get("sites") if isinstance(extra, dict) else None
        if sites is not None and self.sites is None:
            self.attach(StateSites(int(sites["input_dim"]), tuple(sites["layer_dims"])))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


__all__ = ["EncoderOut", "RowSparseConfig", "SpeakerBias", "SpeakerBiasConfig", "SpeakerState", "StateSites",
           "source_tokens"]
