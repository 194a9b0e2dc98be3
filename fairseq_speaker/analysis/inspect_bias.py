"""What a checkpoint's speaker bias learned, read through the variant contract (any variant).

The variant is rebuilt from the checkpoint's model options and loaded with its
parameters (``decoder.speaker_bias.*``); everything below asks it, never its name:

- for a speaker: the target words their bias raises and lowers most
  (``forward`` with the speaker's id and no source);
- the speakers compared: nearest speakers by cosine and a 2-D PCA projection of
  :meth:`~fairseq_speaker.modules.speaker_bias.SpeakerBias.speaker_vectors`
  (mixture weights for fact, bias vectors for full, embeddings for proj, ...);
- the shared vectors over the vocabulary
  (:meth:`~fairseq_speaker.modules.speaker_bias.SpeakerBias.vocabulary_vectors`: fact's
  shared bias vectors, simplex's prototypes, topic's topics, ...): the words each favours.
"""

import argparse
import os
from dataclasses import dataclass
from functools import cached_property
from typing import Dict, List, Optional, Tuple

import torch
from fairseq.data import Dictionary
from torch import Tensor

import fairseq_speaker.checkpoints  # noqa: F401  (weights_only loading of fairseq checkpoints)
from fairseq_speaker.checkpoint_dictionaries import dictionaries_record, dictionary_problems
from fairseq_speaker.checkpoints import read_checkpoint, recorded_dictionaries
from fairseq_speaker.data import SpeakerDictionary
from fairseq_speaker.data.speaker_labels import is_retired_name, live_names, retired_among
from fairseq_speaker.errors import UserError
from fairseq_speaker.modules.speaker_bias import SpeakerBias, build_speaker_bias
from fairseq_speaker.tasks.speaker_translation import SPEAKER_TOKEN

WordScores = List[Tuple[str, float]]
PREFIX = "decoder.speaker_bias."


def _options(cfg) -> Dict:
    """A checkpoint's model options as a dict (dataclass models save a dict, argparse models a Namespace)."""
    return dict(vars(cfg)) if isinstance(cfg, argparse.Namespace) else dict(cfg)


def load_speaker_bias(state: Dict, target_dictionary: Dictionary) -> SpeakerBias:
    """The checkpoint's speaker bias variant, rebuilt from its options and loaded with its parameters."""
    options = _options(state["cfg"]["model"])
    speakers = SpeakerDictionary.from_state_dict(state["task_state"]["speaker_dictionary"])
    bias = build_speaker_bias(options.get("speaker_bias") or "none", argparse.Namespace(**options), speakers,
                              target_dictionary)
    params = {k[len(PREFIX):]: v for k, v in state["model"].items() if k.startswith(PREFIX)}
    bias.load_state_dict(params, strict=True)
    return bias.float().eval()


def has_something_to_inspect(checkpoint: str) -> bool:
    """Whether a checkpoint's variant has speaker parameters or shared vocabulary vectors to show."""
    state = read_checkpoint(checkpoint)
    placeholder = Dictionary()
    for i in range((_vocab_size(state) or len(placeholder)) - len(placeholder)):
        placeholder.add_symbol(f"w{i}")
    bias = load_speaker_bias(state, placeholder)
    return bool(bias.speaker_parameters() or bias.vocabulary_vectors())


@dataclass
class BiasInspection:
    variant: str  # the --speaker-bias of the checkpoint ("fact", "fact+topic", ...)
    speakers: List[str]
    words: List[str]  # the target vocabulary, index = logit position
    bias_module: SpeakerBias

    @classmethod
    def from_checkpoint(cls, checkpoint: str, target_dictionary: Optional[str] = None,
                        data: Optional[str] = None) -> "BiasInspection":
        """``target_dictionary``: the ``dict.{tgt}.txt`` the model was trained with; without it,
        ``{data}/dict.{target_lang}.txt`` with the target language read from the checkpoint."""
        state = read_checkpoint(checkpoint)
        if target_dictionary is None:
            if data is None:
                raise ValueError("give the target dictionary or the data directory of the checkpoint")
            target_dictionary = _target_dictionary(data, state)
        speakers = ((state.get("task_state") or {}).get("speaker_dictionary") or {}).get("names")
        if speakers is None:  # fairseq's own translation task (a stock --arch lstm or transformer)
            raise UserError(f"{checkpoint}: not a fairseq-speaker model's checkpoint (its task state names no "
                            f"speakers): give a checkpoint trained with --task speaker_translation")
        dictionary = Dictionary.load(target_dictionary)
        in_file = dictionaries_record(dictionary, None)["source"]  # as the file holds it, before any speaker token
        if state["task_state"].get("speaker_token"):
            for name in speakers:
                dictionary.add_symbol(SPEAKER_TOKEN.format(name))
        vocab_size = _vocab_size(state)
        if vocab_size is not None and vocab_size != len(dictionary):
            raise ValueError(f"{target_dictionary} has {len(dictionary)} words but {checkpoint} was trained with "
                             f"{vocab_size}: give the target dictionary of the model's data directory")
        recorded = recorded_dictionaries(state["task_state"]).get("target")
        problems = dictionary_problems({"target": dict(recorded or {})}, {"target": in_file},
                                       {"target": target_dictionary})
        if problems:  # the same size, other words or another order: the bias of a word would go to another
            raise ValueError(f"{target_dictionary} is not the target dictionary {checkpoint} was trained with: "
                             f"{problems[0]}; give the target dictionary of the model's data directory")
        bias = load_speaker_bias(state, dictionary)
        variant = _options(state["cfg"]["model"]).get("speaker_bias") or "none"
        if not bias.speaker_parameters() and not bias.vocabulary_vectors():
            raise ValueError(f"{checkpoint}: a {variant!r} model has no speaker parameters nor shared vocabulary "
                             f"vectors: nothing to inspect")
        return cls(variant, list(speakers), [dictionary[i] for i in range(len(dictionary))], bias)

    @property
    def has_speakers(self) -> bool:
        """Whether the variant has parameters of its own per speaker."""
        return bool(self.bias_module.speaker_parameters())

    @property
    def has_bias(self) -> bool:
        """Whether the variant gives speakers a bias on the logits (not only a decoder state) to read word by word."""
        return self.bias_module.acts_on_output

    @property
    def has_speaker_vectors(self) -> bool:
        """Whether speakers can be compared (nearest speakers, projection)."""
        return self.bias_module.speaker_vectors() is not None

    def check_speakers(self, speakers: List[str]) -> None:
        """Raise a ValueError naming the speakers the model does not know."""
        unknown = [s for s in speakers if s not in self.speakers]
        if unknown:
            known = ", ".join(self.speakers[:5]) + (", ..." if len(self.speakers) > 5 else "")
            raise ValueError(f"speaker(s) {', '.join(map(repr, unknown))} not among the model's "
                             f"{len(self.speakers)} speakers ({known})")

    @property
    def speaker_vector_label(self) -> str:
        """What :meth:`speaker_vectors` holds: the labels of the variants (nested ones too) it is made of."""
        labels = [v.speaker_vector_label for _, v in self.bias_module.named_variants()
                  if v.own_speaker_vectors() is not None]
        return " and ".join(labels) if labels else "speaker parameters"

    def _index(self, speaker: str) -> int:
        if speaker in self.speakers and not is_retired_name(speaker):
            return self.speakers.index(speaker)
        raise ValueError(f"speaker {speaker!r} is not among the model's {len(live_names(self.speakers))} speakers"
                         f"{retired_among([speaker], self.speakers)}")

    def bias(self, speaker: str) -> Tensor:
        """b_s ``[V]``: the speaker's bias, without any source sentence."""
        with torch.no_grad():
            out = self.bias_module(torch.tensor([self._index(speaker)]))
        if out is None:
            raise ValueError(f"the {self.variant!r} bias gives speakers no bias of their own")
        return out[0]

    @cached_property
    def _real_words(self) -> Tensor:
        """Mask of the vocabulary entries worth listing (no special or padding symbols)."""
        return torch.tensor([not (w.startswith("<") and w.endswith(">")) and not w.startswith("madeupword")
                             for w in self.words])

    def _extremes(self, values: Tensor, k: int) -> Tuple[WordScores, WordScores]:
        mask = self._real_words
        k = min(k, int(mask.sum()))
        up = values.masked_fill(~mask, float("-inf")).topk(k)
        down = values.masked_fill(~mask, float("inf")).topk(k, largest=False)
        return ([(self.words[i], float(v)) for v, i in zip(up.values, up.indices)],
                [(self.words[i], float(v)) for v, i in zip(down.values, down.indices)])

    def top_words(self, speaker: str, k: int = 10) -> Tuple[WordScores, WordScores]:
        """The words the speaker's bias raises most, and those it lowers most."""
        return self._extremes(self.bias(speaker), k)

    def vocabulary_vector_words(self, k: int = 10) -> Dict[str, List[Tuple[WordScores, WordScores]]]:
        """For each kind of shared vocabulary vector, for each vector: its highest and lowest words."""
        return {label: [self._extremes(vectors[:, j], k) for j in range(vectors.size(1))]
                for label, vectors in self.bias_module.vocabulary_vectors().items()}

    def speaker_vectors(self) -> Tensor:
        """What speakers are compared by ``[S, d]`` (the variant's ``speaker_vectors``)."""
        vectors = self.bias_module.speaker_vectors()
        if vectors is None:
            raise ValueError(f"the {self.variant!r} bias has no parameters per speaker")
        return vectors

    def projection(self) -> Tensor:
        """A 2-D PCA projection of the speakers ``[S, 2]``."""
        x = self.speaker_vectors()
        x = x - x.mean(0, keepdim=True)
        if x.size(1) < 2 or x.size(0) < 2:
            return torch.cat([x[:, :1], torch.zeros(x.size(0), 2 - min(x.size(1), 1))], dim=1)[:, :2]
        _, _, v = torch.pca_lowrank(x, q=2, center=False)
        return x @ v

    def nearest(self, speaker: str, k: int = 5) -> List[Tuple[str, float]]:
        """The k speakers closest to ``speaker`` by cosine similarity of their speaker vectors."""
        x = torch.nn.functional.normalize(self.speaker_vectors(), dim=1)
        s = self._index(speaker)
        similarity = x @ x[s]
        similarity[s] = float("-inf")
        best = similarity.topk(min(k, len(self.speakers) - 1))
        return [(self.speakers[i], float(v)) for v, i in zip(best.values, best.indices)]


def _vocab_size(state: Dict) -> Optional[int]:
    """The target vocabulary size a checkpoint was trained with (its output layer's rows)."""
    for key in ("decoder.output_bias", "decoder.output_projection.weight", "decoder.embed_tokens.weight"):
        if key in state["model"]:
            return int(state["model"][key].shape[0])
    return None


def _target_dictionary(data: str, state: dict) -> str:
    """``{data}/dict.{target_lang}.txt``, the target language read from a loaded checkpoint."""
    task = state["cfg"]["task"]
    lang = (vars(task) if isinstance(task, argparse.Namespace) else task).get("target_lang")
    if not lang:  # trained without --target-lang: fairseq inferred the pair from the data's file names
        from fairseq.data import data_utils

        _, lang = data_utils.infer_language_pair(data)
    if not lang:
        raise ValueError(f"cannot tell the target language: the checkpoint was trained without --target-lang "
                         f"and {data} has no binarized SPLIT.SRC-TGT.* files to infer it from")
    path = os.path.join(data, f"dict.{lang}.txt")
    if not os.path.exists(path):
        raise ValueError(f"target dictionary not found: expected {path}")
    return path
