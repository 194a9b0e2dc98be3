"""The settings of ``fairseq-speaker-words``'s memory (:mod:`fairseq_speaker.onboarding.words`), chosen on held-out
sentences of the corpus: the held-out sentences (:func:`heldout_sentences`: the ``valid`` split where it holds enough
of the speakers, else cross-fitted), the memory built from the rest (:func:`memory_of`, the traits' kinds learned
with :func:`learned_kinds`), every candidate measured on the tokens and decoded (:func:`calibrated`,
:func:`decoded_choice`; the figures and the rule: :mod:`fairseq_speaker.onboarding.calibrate`).
"""


import copy
import dataclasses
from typing import Callable, Dict, List

import numpy as np
from torch import Tensor

from fairseq_speaker.analysis.choices import corpus_kinds
from fairseq_speaker.errors import UserError
from fairseq_speaker.modules import speaker_words
from fairseq_speaker.modules.word_kinds import TraitKinds
from fairseq_speaker.modules.words_options import WordOptions
from fairseq_speaker.onboarding import calibrate
from fairseq_speaker.onboarding.checkpoint import split_sentences
from fairseq_speaker.sequence_generator import check_beam_within
from fairseq_speaker.tasks.speaker_translation import EmptySplit, SplitNotFound

#: the default of --heldout-subset
HELDOUT_SUBSET = "valid"


def learned_kinds(sentences) -> List[TraitKinds]:
    """The traits' kinds of speaker of the sentence pairs of each speaker (name -> [(source ids, target ids)]), their
    choices as target word ids (:func:`fairseq_speaker.analysis.choices.corpus_kinds`, on the ids as words)."""
    sources, targets, labels = [], [], []
    for name, pairs in sentences.items():
        for source, target in pairs:
            sources.append([str(i) for i in source.tolist()])
            targets.append([str(i) for i in target.tolist()])
            labels.append(name)
    return [TraitKinds([np.array([int(w) for w in c.alternatives]) for c in trait], model.prior,
                                     model.alternatives)
            for trait, model in corpus_kinds(sources, targets, labels)]


def memory_of(dictionary, speakers, table_size: int, sentences, options: WordOptions, kinds: bool
            ) -> speaker_words.SpeakerWords:
    """A memory of the target sentences of ``sentences`` (name -> pairs), with the traits' kinds learned from them
    when ``kinds``."""
    words = speaker_words.remembered(dictionary, table_size, {speakers.index(name): [target for _, target in pairs]
                                                              for name, pairs in sentences.items()}, options)
    if kinds:
        words.kinds = learned_kinds(sentences)
    return words


def describe_kinds(kinds: List[TraitKinds]) -> str:
    return "; ".join(f"trait {i}: {len(t.choices)} choices, {len(t.prior)} kinds"
                     for i, t in enumerate(kinds, 1)) or "no choice found"


def heldout_sentences(args, checkpoint, sentences):
    """The held-out sentences ``(name -> pairs)`` of the remembered speakers and how they were made, and the sentences
    the memory is built from while choosing (``sentences`` itself, or its cross-fitted part)."""
    if args.calibrate in ("auto", "split") and args.heldout_subset != args.subset:
        try:
            split = split_sentences(checkpoint.task, args.heldout_subset)
        except (FileNotFoundError, SplitNotFound):  # no such split; a split whose files are wrong says so
            if args.heldout_named:
                raise UserError(f"{args.data}: no binarized {args.heldout_subset!r} split; --heldout-subset names a "
                                f"split of held-out sentences of the same speakers (leave it out to read "
                                f"{HELDOUT_SUBSET!r} where it is there, or pass --calibrate cross-fit)") from None
            split = {}
        except EmptySplit:  # binarized from empty text: no sentences
            split = {}
        split = {name: pairs for name, pairs in split.items() if name in sentences}
        count = sum(map(len, split.values()))
        if count >= calibrate.MIN_SENTENCES:
            return split, f"the {args.heldout_subset!r} split", sentences
        if args.calibrate == "split":
            raise UserError(f"{args.data}: the {args.heldout_subset!r} split holds {count} sentences of the speakers "
                            f"of {args.subset!r}, and --calibrate split needs at least {calibrate.MIN_SENTENCES}: "
                            f"name another with --heldout-subset, or pass --calibrate cross-fit")
    kept, held = calibrate.cross_fit_split(sentences)
    if sum(map(len, held.values())) == 0:
        raise UserError(f"{args.data}: no speaker of the {args.subset!r} split has two sentences, so none can be held "
                        f"out to choose the memory's settings: give a --heldout-subset of the same speakers, or "
                        f"fix --weight, --window and --kinds/--no-kinds (or --calibrate off)")
    return held, f"1 in {calibrate.FOLDS} sentences of each speaker held out (cross-fitted)", kept


def calibrated(args, checkpoint, sentences, options: WordOptions):
    """The options and the kinds' use chosen on held-out sentences, and the :class:`~calibrate.Calibration`."""
    task, speakers = checkpoint.task, checkpoint.task.speaker_dictionary
    held, how, built_from = heldout_sentences(args, checkpoint, sentences)
    unit = dataclasses.replace(options, weight=1.0)
    memory = memory_of(task.target_dictionary, speakers, checkpoint.speaker_bias.num_speakers, built_from, unit,
                     kinds=args.kinds is not False)
    unit_bias: Dict[bool, Callable[[int], Tensor]] = {}
    if args.kinds is not False and memory.kinds:
        unit_bias[True] = memory.bias_row
    if args.kinds is not True or not memory.kinds:
        plain = copy.deepcopy(memory)
        plain.kinds = []
        unit_bias[False] = plain.bias_row
    weights = calibrate.WEIGHTS if args.weight is None else [args.weight]
    windows = calibrate.WINDOWS if args.window is None else [args.window]
    choice_words = [int(w) for t in memory.kinds for c in t.choices for w in c]
    pairs = [(speakers.index(name), pair) for name, ps in held.items() for pair in ps]
    result = calibrate.calibrate(checkpoint.model, task, pairs, unit_bias, how, weights=weights, windows=windows,
                                 choice_words=choice_words, network=args.weight is None, floor=options.floor)
    if args.calibrate_by == "decoding":
        memories = {True: memory, False: plain if False in unit_bias else None}
        decoded = calibrate.evenly(pairs, calibrate.MAX_DECODED)
        result = decoded_choice(args, checkpoint, result, decoded, memories, unit)
    chosen = result.chosen
    chosen_options = dataclasses.replace(options, weight=chosen.weight, window=chosen.window if chosen.weight else
                                         options.window)
    return chosen_options, chosen.kinds if chosen.weight else (args.kinds is not False and bool(memory.kinds)), result


def decoded_choice(args, checkpoint, result, pairs, memories, unit: WordOptions):
    """:func:`calibrate.choose_by_decoding` with the checkpoint's model, each candidate's memory attached in turn."""
    from fairseq import hub_utils

    task, model = checkpoint.task, checkpoint.model
    check_beam_within(args.calibration_beam, len(task.target_dictionary), "--calibration-beam")
    names = [task.speaker_dictionary.names[row] for row, _ in pairs]
    sources = [source for _, (source, _) in pairs]
    eos = task.target_dictionary.eos()
    references = [[w for w in target.tolist() if w != eos] for _, (_, target) in pairs]
    hub = hub_utils.GeneratorHubInterface(checkpoint.state["cfg"], task, [model])
    hub.eval()

    def decode(candidate: calibrate.Candidate):
        memory = memories.get(candidate.kinds) if candidate.weight else None
        if memory is not None:
            memory.set_options(dataclasses.replace(unit, weight=candidate.weight, window=candidate.window))
        speaker_words.attach(model, memory)
        task.set_inference_speakers(names)
        best = hub.generate(sources, beam=args.calibration_beam)
        return [[w for w in hypotheses[0]["tokens"].tolist() if w != eos] for hypotheses in best]

    try:
        return calibrate.choose_by_decoding(result, decode, references, network=args.weight is None)
    finally:
        speaker_words.attach(model, None)
