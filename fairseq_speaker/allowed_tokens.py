"""The hub's ``prefix_allowed_tokens_fn``: a caller's function that says which target words may come next.

fairseq's hub interface (and so :class:`~fairseq_speaker.onboarding.translator.SpeakerTranslator`'s ``translate``
and ``translate_nbest``) takes ``prefix_allowed_tokens_fn(batch_id, tokens)``: called at each step of the beam
search for each hypothesis, with the index of its sentence among those given (``batch_id``) and the tokens it holds
so far (``tokens``, a LongTensor starting with the end-of-sentence id that opens every hypothesis), it returns the
ids of the target words allowed next (fairseq's ``PrefixConstrainedBeamSearch``). Where fairseq's search meets
something else than what it expects it ends in an ``IndexError``, or in an empty result: an id outside the target
dictionary, a function that never allows the end of the sentence (no translation ends, and the hub's ``translate``
takes the first of none), and a ``--speaker-token`` model, whose hypotheses start with the speaker's token that the
task forces at the first step and the function does not allow.

:class:`AllowedTokensSearch` is fairseq's search with these made plain: the function's answers are checked (a
:class:`UserError` naming the id and the range), the speaker token is allowed where the task forces it and left out
of the ``tokens`` the function sees (so it sees a hypothesis as it will be decoded, as with any other model), and
:func:`check_ended` refuses a result in which a sentence has no translation because the function let none end.
:func:`restricted` puts it in a generator the task builds; a function given with another search (sampling, diverse
beam search, ...), which fairseq would ignore without a word, is refused.
"""

import math
from typing import Callable, List, Optional, Sequence

import numpy as np
import torch
from fairseq.search import PrefixConstrainedBeamSearch
from torch import Tensor

from fairseq_speaker.errors import UserError

#: fairseq's searches that take the place of the one ``prefix_allowed_tokens_fn`` restricts: the generation option
#: that chooses each, and whether a value of it does
_OTHER_SEARCHES = (
    ("sampling", lambda v: bool(v)),
    ("diverse_beam_groups", lambda v: v is not None and v > 0),
    ("match_source_len", lambda v: bool(v)),
    ("diversity_rate", lambda v: v is not None and v > -1),
    ("constraints", lambda v: bool(v)),
)


class AllowedTokensSearch(PrefixConstrainedBeamSearch):
    """fairseq's beam search restricted at each step to the words ``allowed(batch_id, tokens)`` returns (the
    module's text). ``hidden``: the ids of the speaker tokens a ``--speaker-token`` model's hypotheses start with
    (allowed at the first step, where the task forces one, and left out of the tokens ``allowed`` sees)."""

    def __init__(self, tgt_dict, allowed: Callable, hidden: Sequence[int] = ()):
        super().__init__(tgt_dict, allowed)
        self.hidden = torch.tensor(sorted(hidden), dtype=torch.long)

    def step(self, step: int, lprobs: Tensor, scores: Optional[Tensor], prev_output_tokens: Tensor,
             original_batch_idxs: Tensor):
        """fairseq's step, with 2 x ``beam`` candidates as its beam search takes (fairseq's takes ``beam``): where
        fewer than ``beam`` of them do not end the sentence, the generator kept ended hypotheses in the beam and
        went on writing them, so that the n-best held one translation several times ("suis", "suis </s>",
        "suis </s> </s>"), each longer one scored better by the length normalization, and ``--beam-stop unbeaten``
        met fairseq's assertion that a sentence has a live candidate."""
        # lprobs: [bsz, beam, V]; scores: [bsz, beam, step] (the hypotheses' scores so far)
        bsz, beam_size, vocab_size = lprobs.size()
        lprobs = lprobs + self.apply_mask(lprobs.view(bsz * beam_size, 1, vocab_size), prev_output_tokens,
                                          original_batch_idxs).view(bsz, beam_size, vocab_size)
        if step == 0:  # every hypothesis is the same at the first step: the first beam's
            lprobs = lprobs[:, ::beam_size, :].contiguous()
        else:
            assert scores is not None
            lprobs = lprobs + scores[:, :, step - 1].unsqueeze(-1)
        flat = lprobs.view(bsz, -1)
        top_scores, top = torch.topk(flat, k=min(beam_size * 2, flat.size(1) - 1))  # -1: pad is never chosen
        return top_scores, top.fmod(vocab_size), torch.div(top, vocab_size, rounding_mode="trunc")

    def apply_mask(self, x: Tensor, prev_output_tokens: Tensor, original_batch_idxs: Tensor) -> Tensor:
        # x: [bsz * beam, 1, V]; prev_output_tokens: [bsz * beam, step + 1]; original_batch_idxs: [bsz]
        beam_size = x.shape[0] // original_batch_idxs.shape[0]
        sentences = original_batch_idxs.repeat_interleave(beam_size).tolist()
        mask = torch.full_like(x, -math.inf)
        for row, (tokens, sentence) in enumerate(zip(prev_output_tokens, sentences)):
            shown = tokens
            if len(self.hidden):
                if tokens.numel() == 1:  # the first step, where the task forces the sentence's speaker token
                    mask[row, :, self.hidden.to(x.device)] = 0
                elif bool((self.hidden == tokens[1].cpu()).any()):
                    shown = torch.cat([tokens[:1], tokens[2:]])
            mask[row, :, self.checked(self.prefix_allowed_tokens_fn(sentence, shown), sentence, shown,
                                      x.size(-1))] = 0
        return mask

    @staticmethod
    def checked(ids, sentence: int, tokens: Tensor, vocab_size: int) -> Tensor:
        """``ids`` (what the function returned) as a LongTensor of target word ids, or a :class:`UserError`."""
        call = f"prefix_allowed_tokens_fn({sentence}, {str(tokens.tolist()):.60})"
        if isinstance(ids, (Tensor, np.ndarray)):
            ok = ids.ndim == 1 and (ids.dtype in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)
                                    if isinstance(ids, Tensor) else np.issubdtype(ids.dtype, np.integer))
            values = ids.tolist() if ok else None
        else:
            try:
                values = list(ids)
            except TypeError:
                values = None
            ok = values is not None and all(isinstance(i, (int, np.integer)) and not isinstance(i, bool)
                                            for i in values)
        if not ok or values is None:
            raise UserError(f"{call} returned {ids!r:.80}: it must return the ids of the target words allowed next "
                            f"(a list of ints, e.g. [translator.task.target_dictionary.index('word')])")
        outside = [i for i in values if not 0 <= i < vocab_size]
        if outside:
            raise UserError(f"{call} returned the id {outside[0]}, outside the target dictionary (ids 0 to "
                            f"{vocab_size - 1}): return ids of its words (target_dictionary.index('word'))")
        return torch.tensor(values, dtype=torch.long)


def restricted(generator, args, allowed: Optional[Callable], tgt_dict, hidden: Sequence[int] = ()):
    """``generator`` with its search an :class:`AllowedTokensSearch` of ``allowed`` (the hub's
    ``prefix_allowed_tokens_fn``, or the generation options' ``args.prefix_allowed_tokens_fn``); unchanged where
    there is none.

    Raises:
        UserError: ``allowed`` is not a function, or another search is chosen (fairseq would ignore ``allowed``).
    """
    allowed = allowed or getattr(args, "prefix_allowed_tokens_fn", None)
    if allowed is None:
        return generator
    if not callable(allowed):
        raise UserError(f"prefix_allowed_tokens_fn must be a function (batch_id, tokens) -> the ids of the target "
                        f"words allowed next, got {type(allowed).__name__} {allowed!r:.60}")
    if not isinstance(getattr(generator, "search", None), PrefixConstrainedBeamSearch):
        chosen = [name for name, on in _OTHER_SEARCHES if on(getattr(args, name, None))]
        raise UserError(f"prefix_allowed_tokens_fn restricts fairseq's beam search, and "
                        f"{' and '.join(chosen) or 'another option'} chooses another search, which would ignore it: "
                        f"give one of them")
    generator.search = AllowedTokensSearch(tgt_dict, allowed, hidden)
    return generator


def check_ended(generator, sample: dict, hypos: List[list]) -> List[list]:
    """``hypos`` (a generator's result for ``sample``), unless ``generator``'s :class:`AllowedTokensSearch` let a
    sentence end with no translation (its function never allowed the end of the sentence where the search could
    take it): then a :class:`UserError` naming the sentence (its ``batch_id``)."""
    if not isinstance(getattr(generator, "search", None), AllowedTokensSearch):
        return hypos
    ids = sample.get("id")
    unended = sorted(int(ids[i]) if isinstance(ids, Tensor) else i for i, found in enumerate(hypos) if not found)
    if unended:
        more = f", nor of {len(unended) - 1} more sentence(s) of the batch" if len(unended) > 1 else ""
        raise UserError(
            f"prefix_allowed_tokens_fn let no translation of sentence {unended[0]} (its batch_id) end{more}: allow the "
            f"end of the sentence (id {generator.search.eos}, target_dictionary.eos()) where a translation may end, "
            f"after at least min_len ({getattr(generator, 'min_len', 1)}) words and before the maximum length "
            f"(max_len_a={getattr(generator, 'max_len_a', '?')}, max_len_b={getattr(generator, 'max_len_b', '?')})")
    return hypos
