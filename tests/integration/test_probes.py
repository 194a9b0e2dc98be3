"""Bad input on every surface, as a careless user or an unlucky operator would give it: each case ends in
one message that names the option or file and what to do, with the exit status it should have, and never
in a Python traceback. Organized by surface: a new command or option gets its rows here when it is written.

Exit status, one convention for every command (fairseq_speaker/errors.py): 2 for every user error, whether
the parser refuses the command line or the input is refused once read (a file, a checkpoint, a combination
of options fairseq's parser accepts); 1 only for an unexpected failure, which keeps its traceback.

The commands run in this process (:data:`MAINS`, fairseq-train and fairseq-generate included); the real
command line of one case of each is run too (:func:`test_the_real_command_line_ends_likewise`). A row's
arguments may name files by ``{placeholder}``: :class:`Places` makes each on first use (the toy data, the one
tiny trained model the fixtures share, broken files in the test's folder).
"""

import errno
import os
import re
import shutil
import sys
import unicodedata
from typing import Callable, Dict, List

import numpy as np
import pytest
import torch

from fairseq_speaker.analysis import parameter_accounting
from fairseq_speaker.command_registry import COMMANDS, main_of
from fairseq_speaker.data import preprocessing
from fairseq_speaker.errors import USER_ERROR_STATUS, user_error_in
from fairseq_speaker.onboarding import evaluate, vectors, words
from tests.cli import USER_DIR, assert_user_error, run, run_here, train_args


def fairseq_train(argv: List[str]) -> None:
    """``fairseq-train`` in this process, as its console script runs it."""
    from fairseq import distributed_utils, options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq_cli import train

    args = options.parse_args_and_arch(options.get_training_parser(), input_args=argv)
    args.num_workers = 0  # batches read here: no worker process, whose exit takes seconds (tests/cli.py's run_here)
    distributed_utils.call_main(convert_namespace_to_omegaconf(args), train.main)


def fairseq_generate(argv: List[str]) -> None:
    """``fairseq-generate`` in this process, as its console script runs it."""
    from fairseq import options
    from fairseq_cli import generate

    args = options.parse_args_and_arch(options.get_generation_parser(), input_args=argv)
    args.num_workers = 0  # as fairseq_train's
    generate.main(args)


#: fairseq's commands with our task, run in this process as their console scripts run them
FAIRSEQ_MAINS: Dict[str, Callable] = {"fairseq-train": fairseq_train, "fairseq-generate": fairseq_generate}
#: the entry points of every command of the package (its command registry) and of fairseq's, run in this process
#: (the real command line of one case each is run below)
MAINS: Dict[str, Callable] = {**{name: main_of(name) for name in COMMANDS}, **FAIRSEQ_MAINS}
#: the options every adapt / onboarding-eval row starts with (the checks come before any file is opened)
ADAPT = ["data", "--path", "model.pt", "--adapt-prefix", "new/adapt", "--save", "out.pt"]
EVAL = ["data", "--path", "model.pt", "--heldout-prefix", "raw/heldout", "--out", "eval"]
#: the same with real files: the toy data and the shared tiny model
ADAPT_ON = ["{data}", "--path", "{ckpt}"]
EVAL_ON = ["{data}", "--path", "{ckpt}", "--max-len-b", "4", "--shots", "0", "1"]
#: the serve rows are refused before the checkpoint is opened (the HTTP refusals: tests/integration/test_service.py)
SERVE = ["model.pt", "--data", "data"]
#: fairseq's commands with our task
TRAIN = ["{data}", "--user-dir", USER_DIR, "--task", "speaker_translation", "--arch", "lstm_base",
         "--max-tokens", "1000", "--max-epoch", "1", "--save-dir", "{tmp}/ckpt", "--no-progress-bar"]
GENERATE = ["--user-dir", USER_DIR, "--task", "speaker_translation", "--beam", "2", "--max-len-b", "4",
            "--gen-subset", "test"]
REPORT = ["--out", "{tmp}/report", "--tokenize", "none", "--bootstrap", "10"]

#: a checkpoint with a data folder whose target dictionary has two lines swapped: same size, other words
SWAPPED = ("{ckpt} was trained with the dictionaries of another data folder than {swapped}: line 5 of "
           "{swapped}/dict.fr.txt is '{fr6}', the model's target dictionary has '{fr5}' there. Give the data folder "
           "the model was trained on")

#: a data folder without dictionaries or binarized splits (check_data_folder of the speaker task)
NO_DICTIONARIES = ("{emptydir}: no binarized split (SPLIT.SRC-TGT.SRC.bin) to read the languages from, and no "
                   "dict.SRC.txt and dict.TGT.txt: give the data folder the model was trained on")

#: the rows of the commands that read a checkpoint's training sentences and save a new checkpoint (refit, words:
#: onboarding.checkpoint.open_with_sentences and their --save check)
TRAINED_SPEAKERS_TO_SAVE = [
        # the checkpoint read under another name (a link), a file of the data folder: the write replaced it
        ("refused-before-writing",
         ["{owndata}", "--path", "{ownlink}", "--save", "{ownckpt}"], 2,
         "--save {ownckpt} is the checkpoint given by --path, which the command reads"),
        ("refused-before-writing",
         ["{owndata}", "--path", "{ckpt}", "--save", "{owndata}/dict.fr.txt"], 2,
         "--save {owndata}/dict.fr.txt is a file of the data folder ({owndata})"),
        ("not-a-checkpoint",
         ["{data}", "--path", "{tmp}/missing.pt", "--save", "{tmp}/o.pt"], 2, "checkpoint not found: {tmp}/missing.pt"),
        ("one-line-user-errors", ["{data}", "--save", "{tmp}/o.pt"], 2, "the following arguments are required: --path"),
        ("not-a-checkpoint",
         ["{data}", "--path", "{garbage}", "--save", "{tmp}/o.pt"], 2, "{garbage}: not a readable fairseq checkpoint"),
        ("refused-before-writing",
         ["{data}", "--path", "{ckpt}", "--save", "{ckpt}"], 2, "--save must not be the checkpoint given by --path"),
        ("one-line-user-errors",
         ["{tmp}/nowhere", "--path", "{ckpt}", "--save", "{tmp}/o.pt"], 2, "data directory not found: {tmp}/nowhere"),
        ("speaker-file-fits-split",
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--subset", "nosuch"], 2,
         "no binarized 'nosuch' split; --subset names the split"),
        ("dictionaries-compared", ["{swapped}", "--path", "{ckpt}", "--save", "{tmp}/o.pt"], 2, SWAPPED),
        ("speaker-file-fits-split",
         ["{shortspk}", "--path", "{ckpt}", "--save", "{tmp}/o.pt"], 2,
         "{shortspk}/train.spk: 155 speaker labels but the text has 160 sentences; the speaker file needs exactly one "
         "label per sentence, in the same order"),
        ("speaker-file-fits-split",
         ["{strangerspk}", "--path", "{ckpt}", "--save", "{tmp}/o.pt"], 2,
         "{strangerspk}/train.spk:7: speaker 'stranger' is not among the model's 8 speakers; the "
         "train split's speakers are those of {ckpt}: give the data folder it was trained on, with the speaker file "
         "of its training sentences"),
]

#: surface -> (the promise of docs/reliability.md the row checks, arguments, exit status, text the last line of
#: standard error contains)
COMMAND_PROBES = {
    "fairseq-speaker-benchmark": [
        ("ignored-options-refused",  # measured twice: two rows of one name, different figures
         ["--configs", "lstm_fact_bias", "lstm_fact_bias"], 2, "--configs names lstm_fact_bias twice: give each once"),
        ("ignored-options-refused", ["--speakers", "4", "8", "4"], 2, "--speakers names 4 twice: give each once"),
        ("numbers-checked", ["--seed", "-1"], 2, "argument --seed: must be from 0 to 4294967295 (numpy's seeds), got -1"),
        ("ignored-options-refused",
         ["--gen-sentences", "8", "--gen-batch", "4"], 2, "--gen-sentences 8 --gen-batch 4: sizes of the generation "
                                                          "runs, and only training is timed: add --generate, or drop "
                                                          "them"),
        ("ignored-options-refused",
         ["--family", "transformer", "--configs", "lstm_fact_bias"], 2,
         "--family transformer chooses the configurations measured where --configs is not given, and --configs names "
         "each one's family: drop one of them"),
        ("numbers-checked", ["--batch", "0"], 2, "--batch must be at least 1, got 0"),
        ("refused-before-writing", ["--json", "{tmp}"], 2, "{tmp} is a directory: give the path of a file to write"),
        ("refused-before-writing",
         ["--json", "{tmp}/nowhere/figures.json"], 2, "cannot write {tmp}/nowhere/figures.json: the folder"),
        ("numbers-checked", ["--sentences", "0"], 2, "--sentences must be at least 1, got 0"),
        ("numbers-checked", ["--updates", "0"], 2, "--updates must be at least 1"),
        ("numbers-checked", ["--repeats", "-1"], 2, "--repeats must be at least 1"),
        ("numbers-checked", ["--threads", "0"], 2, "--threads must be at least 1"),
        ("numbers-checked", ["--vocab", "3"], 2, "--vocab must be at least 8"),
        ("numbers-checked", ["--speakers", "10", "-4"], 2, "--speakers must be at least 1, got -4"),
        ("numbers-checked", ["--sizes", "512", "0", "256"], 2, "--sizes must be positive"),
        ("numbers-checked", ["--min-len", "9", "--max-len", "3"], 2, "--max-len 3 is shorter than --min-len 9"),
        ("numbers-checked",
         ["--batch", "64", "--sentences", "10"], 2, "--batch 64 is more than the corpus's --sentences 10"),
        ("one-line-user-errors",
         ["--configs", "lstm_nonsense"], 2, "--configs lstm_nonsense: not an arch of a speaker model family"),
        ("numbers-checked", ["--fp16"], 2, "--fp16 is timed on a GPU: add --gpu"),
        ("numbers-checked", ["--bf16"], 2, "--bf16 is timed on a GPU: add --gpu"),
        ("numbers-checked", ["--gen-batch", "0", "--generate"], 2, "--gen-batch must be at least 1"),
        ("ignored-options-refused",
         ["--paired", "--plain"], 2, "--paired runs every configuration in one process, and --plain needs a "
                                     "process of its own (FAIRSEQ_SPEAKER_PLAIN=1): use one or the other"),
        ("one-line-user-errors", ["--batch", "x"], 2, "argument --batch: invalid int value: 'x'"),
        ("one-line-user-errors",
         ["--configs", "lstm_base:nope"], 2, "--configs lstm_base:nope: unknown --speaker-bias 'nope'; registered "
                                             "variants: "),
        ("one-line-user-errors",
         ["--configs", "transformer_base:fact+fact"], 2, "--configs transformer_base:fact+fact: --speaker-bias "
                                                         "'fact+fact' names a variant twice"),
        ("one-line-user-errors",
         ["--configs", "lstm_base", "--versus", "lstm_fact_bias"], 2, "--versus lstm_fact_bias is not one of the "
                                                                      "configurations measured (lstm_base): add it "
                                                                      "to --configs"),
        ("one-line-user-errors",
         ["--configs", "lstm_nonsense:fact"], 2, "--configs lstm_nonsense:fact: not an arch of a speaker model family"),
        ("one-line-user-errors",
         ["--configs", "stock_lstm:fact"], 2, "--configs stock_lstm:fact: a stock fairseq model has no speaker "
                                              "variant; give the variant to a preset (lstm_base:fact)"),
        ("one-line-user-errors",
         ["--configs", "lstm_base:topic"], 2, "--configs lstm_base:topic: the benchmark gives a variant its default "
                                              "options, and --speaker-bias topic needs --topic-model FILE"),
        ("one-line-user-errors",
         ["--configs", "lstm_base+spk_token"], 2, "--configs lstm_base+spk_token: the benchmark times speaker "
                                                  "variants (ARCH:VARIANT), not the speaker token: drop +spk_token"),
        ("numbers-checked",
         ["--configs", "lstm_fact_bias@lr-scale=0"], 2, "--configs lstm_fact_bias@lr-scale=0: --speaker-lr-scale '0': "
                                                        "give 'auto' (the default) or a positive number"),
        ("numbers-checked",
         ["--configs", "lstm_fact_bias@lr-scale=fast"], 2, "--configs lstm_fact_bias@lr-scale=fast: "
                                                           "--speaker-lr-scale 'fast': give 'auto'"),
        ("one-line-user-errors",
         ["--configs", "stock_lstm@lr-scale=2"], 2, "--configs stock_lstm@lr-scale=2: a stock fairseq model has no "
                                                    "speaker rows to scale"),
        ("needs-speaker-parameters",
         ["--configs", "stock_lstm@words", "--no-train"], 2, "--configs stock_lstm@words: a stock fairseq model has "
                                                             "no speakers whose words to remember"),
        ("needs-speaker-parameters",
         ["--configs", "lstm_base@words", "--no-train"], 2, "--configs lstm_base@words: the speakers' words are "
                                                            "remembered for variants whose speakers have parameters"),
        ("ignored-options-refused",
         ["--configs", "lstm_fact_bias@words"], 2, "--configs lstm_fact_bias@words: the speakers' words act in "
                                                   "generation only: time it with --no-train --generate"),
        ("one-line-user-errors",
         ["--configs", "lstm_fact_bias@words@lr-scale=2", "--no-train"], 2, "--configs "
                                                                            "lstm_fact_bias@words@lr-scale=2: @words "
                                                                            "comes last "
                                                                            "(lstm_fact_bias@lr-scale=2@words)"),
    ],
    "fairseq-speaker-demo": [
        ("numbers-checked", ["--speakers", "0"], 2, "--speakers must be at least 1, got 0"),  # a ZeroDivisionError
        ("refused-before-writing", ["--workdir", "{afile}"], 2, "--workdir {afile} is a file: give a folder"),
        ("refused-before-writing", ["--workdir", ""], 2, "--workdir is empty: give a folder"),
        ("ignored-options-refused",
         ["--topics", "0", "--archs", "lstm_base"], 2, "--topics 0 sizes the topic model of the topic variant, and no "
                                                        "system of --archs has it"),
        ("numbers-checked", ["--topics", "0", "--archs", "lstm_base:fact+topic"], 2, "--topics must be at least 1, got 0"),
        ("ignored-options-refused",
         ["--no-report", "--classifier-epochs", "3"], 2, "--classifier-epochs 3 trains the report's speaker "
                                                         "classifier, and --no-report writes no report: drop one of "
                                                         "them"),
        ("one-line-user-errors",
         ["--archs", "lstm_nonsense"], 2, "unknown system 'lstm_nonsense': a system is PRESET, PRESET:VARIANT, or "
                                          "either with +spk_token at the end; start it with a preset"),
        ("one-line-user-errors",  # told to start with a preset, which it did
         ["--archs", "lstm_base+spk_token:fact"], 2, "a system is PRESET, PRESET:VARIANT, or either with +spk_token "
                                                     "at the end"),
        ("one-line-user-errors",
         ["--archs", "lstm_base:nope"], 2, "system 'lstm_base:nope': unknown --speaker-bias 'nope'"),
        ("numbers-checked", ["--styles", "-1"], 2, "--styles must be 0 (the default corpus) or more"),
        ("numbers-checked", ["--deviation", "1.5"], 2, "--deviation 1.5 is not a probability (0 to 1)"),
        ("one-line-user-errors", ["--no-such-option"], 2, "unrecognized arguments: --no-such-option"),
        ("numbers-checked", ["--beams", "0", "5"], 2, "--beams must be at least 1 (1: greedy), got 0"),
        ("numbers-checked", ["--beams", "5", "1", "5"], 2, "--beams 5 1 5 names a beam size twice"),
        ("numbers-checked", ["--epochs", "0"], 2, "--epochs must be at least 1, got 0"),
        ("ignored-options-refused", ["--archs", "lstm_base", "lstm_base"], 2, "--archs lstm_base lstm_base names a "
                                                                              "system twice"),
        ("ignored-options-refused",  # one model trained twice, under two names
         ["--archs", "lstm_fact_bias", "lstm_base:fact"], 2, "--archs: lstm_fact_bias and lstm_base:fact are one "
                                                             "system (the same family, speaker bias and speaker token)"),
        ("ignored-options-refused",
         ["--archs", "lstm_base:fact+topic", "lstm_fact_bias:topic+fact"], 2,
         "--archs: lstm_base:fact+topic and lstm_fact_bias:topic+fact are one system"),
        ("ignored-options-refused",
         ["--deviation", "0.2"], 2, "--deviation 0.2 is the styles corpus's: give --styles K too"),
        ("numbers-checked", ["--lr", "nan"], 2, "--lr must be a number above 0, got nan"),
        ("numbers-checked", ["--lr", "-1"], 2, "--lr must be a number above 0, got -1.0"),
        ("numbers-checked", ["--train", "10"], 2, "--train 10: fewer sentences than the 24 speakers (--speakers)"),
        ("numbers-checked", ["--test", "0"], 2, "--test 0: fewer sentences than the 24 speakers (--speakers)"),
        ("numbers-checked",  # refused by the report, after every system had trained
         ["--classifier-epochs", "0"], 2, "--classifier-epochs must be at least 1, got 0"),
        ("one-line-user-errors", ["--beams", "greedy"], 2, "argument --beams: invalid int value: 'greedy'"),
        ("numbers-checked", ["--threads", "0"], 2, "--threads must be at least 1, got 0"),
        ("search-options-checked",  # found after training (exit 1, the results lost), the advice naming --beam
         ["--workdir", "{tmp}/demo", "--speakers", "4", "--train", "40", "--test", "8", "--archs", "lstm_base",
          "--beams", "5", "100000", "--threads", "1"], 2,
         "--beams 100000 is more hypotheses than the target dictionary's"),
        ("one-line-user-errors",  # a KeyError's traceback
         ["--archs", "lstm_base: fact"], 2, "a variant's name holds no spaces: write 'fact'"),
    ],
    "fairseq-speaker-toy-corpus": [
        ("numbers-checked", ["--out", "{tmp}/c", "--speakers", "0"], 2, "--speakers must be at least 1, got 0"),
        ("numbers-checked",  # refused before any speaker is made (a trillion speakers were made first, for minutes)
         ["--out", "{tmp}/c", "--train", "10", "--valid", "2", "--test", "2", "--speakers", "1000000000000"], 2,
         "split train has 10 sentences, fewer than the 1000000000000 speakers"),
        ("numbers-checked",  # "split train has -5 sentences, fewer than the 24 speakers: give larger --train/--valid/..."
         ["--out", "{tmp}/c", "--train", "-5", "--valid", "-1"], 2, "--train must be at least 1, got -5"),
        ("numbers-checked",
         ["--out", "{tmp}/c", "--train", "5"], 2, "split train has 5 sentences, fewer than the 24 speakers: give "
                                                   "larger --train/--valid/--test or fewer --speakers"),
        ("toy-corpus-names", ["--out", "{afile}"], 2, "--out {afile} is a file: give a folder for the corpus"),
        ("ignored-options-refused",
         ["--out", "{tmp}/c", "--train", "50", "--sentences-per-speaker", "2"], 2,
         "give --train or --sentences-per-speaker, not both"),
        ("numbers-checked",
         ["--out", "{tmp}/c", "--sentences-per-speaker", "0"], 2,
         "--sentences-per-speaker must be at least 1, got 0"),
        ("numbers-checked", ["--out", "{tmp}/c", "--styles", "-2"], 2, "--styles must be 0 (no styles) or more"),
        ("ignored-options-refused",
         ["--out", "{tmp}/c", "--deviation", "0.2"], 2, "--deviation is the styles mode's: give --styles K too"),
        ("numbers-checked",
         ["--out", "{tmp}/c", "--heldout", "--heldout-speakers", "0"], 2, "--heldout-speakers must be at least 1, got 0"),
        ("ignored-options-refused",
         ["--out", "{tmp}/c", "--heldout-speakers", "3"], 2,
         "--heldout-speakers describe the held-out speakers: give --heldout too"),
        ("toy-corpus-names",
         ["--out", "{tmp}/c", "--structure", "nope"], 2, "--structure: no structure 'nope'; the structures: base, "
                                                         "correlated-address, binary-many,"),
        ("toy-corpus-names",
         ["--out", "{tmp}/c", "--structure", "drawn-7-0"], 2, "no structure 'drawn-7-0'; the structures: base,"),
        ("one-line-user-errors", ["--structure", "base"], 2, "the following arguments are required: --out"),
        ("toy-corpus-names",
         ["--out", "{afile}", "--structure", "early"], 2, "--out {afile} is a file: give a folder for the corpus"),
        ("ignored-options-refused",
         ["--out", "{tmp}/c", "--structure", "base", "--speakers", "5", "--styles", "3"], 2,
         "--structure base takes no --speakers --styles: a structure's sizes, model and seed are its own"),
        ("ignored-options-refused",
         ["--list-structures", "--out", "{tmp}/c"], 2, "--list-structures writes nothing: drop --out"),
        ("ignored-options-refused",
         ["--list-structures", "--structure", "base"], 2, "give --list-structures or --structure NAME, not both"),
        # one spelling per drawn structure (drawn-007-1 was drawn-7-1 under another name; '²' an int() error)
        ("toy-corpus-names",
         ["--out", "{tmp}/c", "--structure", "drawn-007-1"], 2, "--structure: no structure 'drawn-007-1'"),
        ("toy-corpus-names",
         ["--out", "{tmp}/c", "--structure", "drawn-\u00b2-1"], 2, "--structure: no structure 'drawn-\u00b2-1'"),
        ("toy-corpus-names", ["--out", "{tmp}/c", "--structure", "drawn-3-101"], 2, "no structure 'drawn-3-101'"),
        ("toy-corpus-names",
         ["--out", "{afile}/c", "--structure", "base"], 2,
         "--out {afile}/c: {afile} is a file, so no folder can be made under it: give a folder for the corpus"),
        ("toy-corpus-names",
         ["--out", "{afile}/c", "--train", "48"], 2, "--out {afile}/c: {afile} is a file, so no folder can be made"),
    ],
    "fairseq-speaker-params": [
        ("one-line-user-errors",  # the help's own example; refused after fairseq-train's whole usage, with 'data'
         ["--arch", "lstm_fact_bias", "--tgt-vocab", "100", "--speakers", "10", "--encoder-layers", "3"], 2,
         "--encoder-layers 3: no option of fairseq-train with --arch lstm_fact_bias (fairseq-train --task "
         "speaker_translation --arch lstm_fact_bias --help lists them)"),
        ("numbers-checked",  # read as not given: "give --path, --data, or --tgt-vocab and --speakers"
         ["--arch", "lstm_fact_bias", "--tgt-vocab", "0", "--speakers", "5"], 2,
         "--tgt-vocab must be at least 5 (fairseq's 4 special symbols and a word), got 0"),
        ("numbers-checked",  # torch's "Overflow when unpacking long long"
         ["--arch", "lstm_fact_bias", "--src-vocab", "10", "--tgt-vocab", "10", "--speakers", "99999999999999999999"],
         2, "--speakers must be at most 9223372036854775807 (a 64-bit count), got 99999999999999999999"),
        ("numbers-checked",
         ["--arch", "lstm_fact_bias", "--src-vocab", "10", "--tgt-vocab", "10", "--speakers", "5", "--encoder-embed-dim",
          "0"], 2, "--encoder-embed-dim 0: a size of the network must be at least 1"),
        ("numbers-checked",
         ["--arch", "transformer_fact_bias", "--src-vocab", "10", "--tgt-vocab", "10", "--speakers", "5",
          "--encoder-attention-heads", "3"], 2,
         "--encoder-embed-dim 512 is not a multiple of --encoder-attention-heads 3: each head takes an equal share of "
         "the embedding"),
        ("data-folder-has-dictionaries",
         ["--arch", "lstm_fact_bias", "--data", "{data}", "--source-lang", "en", "--target-lang", "xx"], 2,
         "{data}: no dict.xx.txt there: give the data folder the model is trained on"),
        ("numbers-checked",
         ["--tgt-vocab", "4000000000000", "--speakers", "4000000000000", "--arch", "lstm_full_bias"], 2,
         "--src-vocab 4000000000000, --tgt-vocab 4000000000000, --speakers 4000000000000: a table of this model would "
         "have more entries than a 64-bit count holds"),
        ("numbers-checked", ["--tgt-vocab", "40000", "--speakers", "-5"], 2, "--speakers must not be negative, got -5"),
        ("numbers-checked", ["--tgt-vocab", "-3", "--speakers", "5"], 2, "--tgt-vocab must be at least 5"),
        ("numbers-checked",
         ["--tgt-vocab", "40000", "--src-vocab", "0", "--speakers", "5"], 2, "--src-vocab must be at least 5"),
        ("one-line-user-errors", ["--speakers", "5"], 2, "--data, or --tgt-vocab and --speakers"),
        ("one-line-user-errors",
         ["--data", "/nonexistent/data-bin"], 2, "--data /nonexistent/data-bin: no such folder"),
        ("one-line-user-errors",
         ["--data", "{emptydir}"], 2, "could not infer the language pair in {emptydir}: pass "
                                      "--source-lang and --target-lang"),
        ("not-a-checkpoint", ["--path", "{tmp}/missing.pt"], 2, "checkpoint not found: {tmp}/missing.pt"),
        ("not-a-checkpoint", ["--path", "{garbage}"], 2, "{garbage}: not a readable fairseq checkpoint"),
        ("not-a-checkpoint",
         ["--path", "{notckpt}"], 2, "--path {notckpt}: not a fairseq-speaker checkpoint (no model or task state)"),
        ("ignored-options-refused",
         ["--path", "{ckpt}", "--arch", "lstm_base"], 2, "--path reads the model's options and sizes from the "
                                                         "checkpoint: drop --arch"),
        ("one-line-user-errors",
         ["--path", "{ckpt}", "--user-dir", "{tmp}/nowhere"], 2, "--user-dir {tmp}/nowhere: no such folder"),
    ],
    "fairseq-speaker-refit": [
        ("empty-split",
         ["{emptyvalid}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--subset", "valid"], 2,
         "split of {emptyvalid} holds no sentences; --subset names the split the speakers were trained on"),
        ("one-line-user-errors",  # a traceback: fairseq's import of the user dir was called directly
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--user-dir", "{tmp}/nowhere"], 2,
         "--user-dir {tmp}/nowhere: no such folder"),
        *TRAINED_SPEAKERS_TO_SAVE,
        ("numbers-checked", ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--max-cache-gb", "inf"], 2,
         "--max-cache-gb must be at most 1e+06, got inf"),  # an OverflowError after loading
        ("numbers-checked", ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--seed", "4294967296"], 2,
         "argument --seed: must be from 0 to 4294967295 (numpy's seeds), got 4294967296"),
        ("numbers-checked",
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--components", "9"], 2,
         "--components 9: more than the 8 speakers with sentences in the train split, which a mixture of 9 cannot be "
         "fitted to: give at most 8, or auto"),
        ("numbers-checked",
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--styles", "50"], 2,
         "--styles 50: more than the 8 speakers with sentences in the train split"),
        ("ignored-options-refused",
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--shared", "keep", "--l2", "3"], 2,
         "--l2 applies when the shared parameters are fitted, and --shared keep keeps them as trained: drop it, or use "
         "--shared fit"),
        ("ignored-options-refused",
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--shared", "keep", "--label-smoothing", "0.2",
          "--max-cache-gb", "1"], 2, "--label-smoothing, --max-cache-gb apply when the shared parameters are fitted"),
        ("ignored-options-refused",
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--subset", "valid", "--heldout-subset", "valid"], 2,
         "--heldout-subset valid is the split refitted (--subset): held-out sentences must be others"),
        ("speaker-file-fits-split",
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--shared", "fit", "--heldout-subset", "nosuch"], 2,
         "no binarized 'nosuch' split; --heldout-subset none"),
        ("numbers-checked",
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--iterations", "0"], 2,
         "--iterations must be at least 1, got 0"),
        ("numbers-checked",
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--components", "0"], 2,
         "must be 'auto' or a whole number >= 1, got '0'"),
        ("numbers-checked",
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--components", "many"], 2,
         "must be 'auto' or a whole number >= 1, got 'many'"),
        ("numbers-checked",
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--styles", "0"], 2,
         "argument --styles: must be 'auto' or a whole number >= 1, got '0'"),
        ("numbers-checked",
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--styles", "some"], 2,
         "argument --styles: must be 'auto' or a whole number >= 1, got 'some'"),
        ("numbers-checked",
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--styles", "2", "--style-precision", "-1"], 2,
         "argument --style-precision: must be 'fit' or a positive number up to 1e+09, got '-1'"),
        ("numbers-checked",
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--styles", "2", "--style-precision", "inf"], 2,
         "argument --style-precision: must be 'fit' or a positive number up to 1e+09, got 'inf'"),
        ("ignored-options-refused",
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--style-precision", "3"], 2,
         "--style-precision 3.0 is the pull of the --styles prior: give --styles K (or auto) too, or drop "
         "--style-precision"),
        ("ignored-options-refused",
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--styles", "2", "--components", "auto"], 2,
         "--components auto sets the mixture fitted to the speakers' rows, and --styles 2 learns the prior as styles "
         "instead: give one or the other"),
        ("numbers-checked",
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--l2", "-1"], 2,
         "--l2 must be a number from 0 to 1e+09, got -1.0"),
        ("numbers-checked",
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--l2", "nan"], 2,
         "--l2 must be a number from 0 to 1e+09, got nan"),
        ("numbers-checked",
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--l2", "1e300"], 2,
         "--l2 must be a number from 0 to 1e+09, got 1e+300"),
        ("numbers-checked",
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--label-smoothing", "1"], 2,
         "must be 'auto' or a number from 0 to below 1, got '1'"),
        ("numbers-checked",
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--label-smoothing", "some"], 2,
         "must be 'auto' or a number from 0 to below 1, got 'some'"),
        ("numbers-checked",
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--threads", "0"], 2, "--threads must be at least 1"),
        ("numbers-checked",
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--max-iter", "0"], 2,
         "--max-iter must be at least 1, got 0"),
        ("numbers-checked",  # the message named three options for one
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--batch-sentences", "-1"], 2,
         "--batch-sentences must be at least 1, got -1"),
        ("numbers-checked",
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--max-cache-gb", "0"], 2,
         "--max-cache-gb must be positive, got 0.0"),
        ("numbers-checked",
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--shared", "fit", "--max-cache-gb", "1e-9"], 2,
         "more than 0.0 GB here; pass --shared keep"),
    ],
    "fairseq-speaker-words": [
        *TRAINED_SPEAKERS_TO_SAVE,
        ("one-line-user-errors",  # a traceback: fairseq's import of the user dir was called directly
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--user-dir", "{tmp}/nowhere"], 2,
         "--user-dir {tmp}/nowhere: no such folder"),
        ("one-line-user-errors",  # the package's own error ended in its traceback, in every command
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--user-dir", "{raisingpkg}"], 2,
         "--user-dir {raisingpkg}: importing the package failed at {raisingpkg}/__init__.py:2: RuntimeError: "
         "registration failed: fix the package"),
        ("numbers-checked", ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--evidence", "1e308"], 2,
         "argument --evidence: expected a number between 0 and 1e+06, got '1e308' (a count of words"),
        ("numbers-checked", ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--kinds-prior", "1e7"], 2,
         "argument --kinds-prior: expected a number above 0 and at most 1e+06, got '1e7'"),
        # every translation one word repeated to the length limit (BLEU 91.7 -> 4.5), written without a word
        ("memory-weight-bounded", ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--window", "8"], 2,
         "argument --window: expected a number between 0 and 4, got '8' (a wider window puts a speaker's bias on "
         "nearly every word"),
        ("memory-weight-bounded",  # re-ranked no word against another, written without a word
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--window", "-0"], 2,
         "argument --window: expected a number above 0 and at most 4, got '-0' (at 0 no word is re-ranked against "
         "another; for a memory that does nothing, give --weight 0)"),
        ("search-options-checked",
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--calibration-beam", "100000"], 2,
         "--calibration-beam 100000 is more hypotheses than the target dictionary's"),
        ("ignored-options-refused",
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--weight", "0", "--window", "3"], 2,
         "--window: how the memory acts, and --weight 0 writes a memory that does not act (the network alone): drop "
         "it, or give a weight above 0"),
        ("ignored-options-refused",
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--weight", "0", "--own", "0.2", "--add-to",
          "logits"], 2, "--own and --add-to: how the memory acts, and --weight 0 writes a memory that does not act"),
        ("ignored-options-refused",
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--calibrate", "off", "--neighbours", "0",
          "--neighbours-k", "3", "--power", "2"], 2,
         "--neighbours-k and --power: how the speakers most like a speaker are read, and --neighbours 0 reads none"),
        ("ignored-options-refused",
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--weight", "0", "--window", "3", "--no-kinds"], 2,
         "--window and --no-kinds: how the memory acts, and --weight 0"),
        ("refused-before-writing",
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/gone/o.pt"], 2, "cannot write {tmp}/gone/o.pt: the folder"),
        ("not-a-checkpoint",
         ["{data}", "--path", "{badwords}", "--save", "{tmp}/o.pt"], 2,
         "are damaged (their word ids do not add up to their speakers' counts"),
        ("numbers-checked",
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--weight", "-1"], 2,
         "argument --weight: expected a number >= 0, got '-1'"),
        ("numbers-checked",
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--window", "nan"], 2,
         "argument --window: expected a number >= 0, got 'nan'"),
        ("numbers-checked",
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--own", "2"], 2,
         "argument --own: expected a share between 0 and 1, got '2'"),
        ("numbers-checked",
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--own", "0.5", "--neighbours", "0.6"], 2,
         "--own and --neighbours are shares of one rate: their sum must be at most 1, got 0.5 + 0.6"),
        ("numbers-checked",
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--neighbours-k", "0"], 2,
         "--neighbours-k must be at least 1, got 0"),
        ("one-line-user-errors",
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--add-to", "probs"], 2,
         "argument --add-to: invalid choice: 'probs' (choose from"),
        ("not-a-checkpoint",
         ["{data}", "--path", "{badaddto}", "--save", "{tmp}/o.pt"], 2,
         "have bad options (speaker words: add_to must be one of log_probs, logits, got 'probs')"),
        ("one-line-user-errors",
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--rank-choices", "votes"], 2,
         "argument --rank-choices: invalid choice: 'votes' (choose from"),
        ("numbers-checked",
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--kinds-prior", "0"], 2,
         "argument --kinds-prior: expected a number > 0, got '0'"),
        ("numbers-checked",
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--threads", "0"], 2, "--threads must be at least 1"),
        ("needs-speaker-parameters",
         ["{data}", "--path", "{lstmbase}", "--save", "{tmp}/o.pt"], 2,
         "{lstmbase}: this model has no speaker parameters (its speaker bias is 'none': every speaker, known or new, "
         "is translated alike), so there is nothing to adapt, refit or remember of a speaker; give the checkpoint of "
         "a model trained with speaker parameters"),
        ("memory-weight-bounded",
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--weight", "1e30"], 2,
         "argument --weight: expected a number between 0 and 100, got '1e30'"),
        ("one-line-user-errors",
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--calibrate", "guess"], 2,
         "argument --calibrate: invalid choice: 'guess' (choose from"),
        ("one-line-user-errors",
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--calibrate-by", "bleu"], 2,
         "argument --calibrate-by: invalid choice: 'bleu' (choose from"),
        ("numbers-checked",
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--calibration-beam", "0"], 2,
         "--calibration-beam must be at least 1, got 0"),
        ("one-line-user-errors",
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--calibrate", "split", "--heldout-subset", "train"],
         2, "--heldout-subset train is the split remembered (--subset): held-out sentences must be others"),
        ("speaker-file-fits-split",
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--calibrate", "split", "--heldout-subset", "nowhere"],
         2, "{data}: no binarized 'nowhere' split; --heldout-subset names a split of held-out sentences of the same "
         "speakers (leave it out to read 'valid' where it is there, or pass --calibrate cross-fit)"),
        # a split named that is not there (a typo) was replaced by cross-fitting without a word
        ("speaker-file-fits-split",
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--heldout-subset", "valdi"], 2,
         "{data}: no binarized 'valdi' split; --heldout-subset names a split"),
        ("one-line-user-errors",
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--heldout-subset", "train"], 2,
         "--heldout-subset train is the split remembered (--subset): held-out sentences must be others"),
        # the calibration's options where nothing is calibrated, or where another option makes them idle
        ("ignored-options-refused",
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--no-kinds", "--kinds-prior", "2"], 2,
         "--kinds-prior 2.0: how the kinds of speaker are used, and --no-kinds learns none: drop it, or drop --no-kinds"),
        ("ignored-options-refused",
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--no-kinds", "--rank-choices", "rates",
          "--kinds-prior", "0.5"], 2,
         "--rank-choices rates --kinds-prior 0.5: how the kinds of speaker are used, and --no-kinds learns none: "
         "drop them"),
        ("ignored-options-refused",
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--calibrate", "off", "--calibrate-by", "tokens"], 2,
         "--calibrate-by tokens: --calibrate off chooses no settings on held-out sentences: drop it, or drop "
         "--calibrate off"),
        ("ignored-options-refused",
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--calibrate", "off", "--heldout-subset", "valid",
          "--calibration-beam", "2"], 2, "--heldout-subset valid --calibration-beam 2: --calibrate off chooses no "
                                        "settings on held-out sentences: drop them"),
        ("ignored-options-refused",
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--calibrate-by", "tokens", "--calibration-beam", "3"],
         2, "--calibration-beam 3 is the beam of --calibrate-by decoding, and --calibrate-by tokens decodes nothing"),
        ("ignored-options-refused",
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--calibrate", "cross-fit", "--heldout-subset", "test"],
         2, "--heldout-subset test names a split for --calibrate auto or split, and --calibrate cross-fit holds out "
         "sentences of the remembered split itself"),
        ("ignored-options-refused",
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--weight", "2", "--window", "1", "--kinds",
          "--calibrate", "split"], 2, "--calibrate split: --weight, --window and --kinds/--no-kinds fix every setting, "
                                      "so nothing is chosen on held-out sentences: drop it"),
        ("ignored-options-refused",
         ["{data}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--weight", "0", "--calibrate", "cross-fit"], 2,
         "--calibrate cross-fit: --weight 0 writes a memory that does not act"),
        # odd data: an empty held-out split (a traceback of fairseq's), every speaker with one sentence (behaved)
        ("empty-split",  # the advice named --gen-subset, --valid-subset and --train-subset, options of fairseq's
         ["{emptyvalid}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--subset", "valid", "--calibrate", "off"], 2,
         "split of {emptyvalid} holds no sentences; --subset names the split the speakers were trained on (default: "
         "train): name one that holds sentences"),
        ("empty-split",
         ["{emptyvalid}", "--path", "{ckpt}", "--save", "{tmp}/o.pt", "--calibrate", "split"], 2,
         "{emptyvalid}: the 'valid' split holds 0 sentences of the speakers of 'train', and --calibrate split needs"),
        ("one-line-user-errors",
         ["{onesentence}", "--path", "{ckpt}", "--save", "{tmp}/o.pt"], 2,
         "{onesentence}: no speaker of the 'train' split has two sentences, so none can be held out to choose the "
         "memory's settings"),
        ("memory-weight-bounded",
         ["{data}", "--path", "{badweight}", "--save", "{tmp}/o.pt"], 2,
         "have bad options (speaker words: weight must be at most 100, got 1e+30)"),
        ("memory-weight-bounded",  # such a record was decoded, every translation one word repeated
         ["{data}", "--path", "{badwindow}", "--save", "{tmp}/o.pt"], 2,
         "have bad options (speaker words: window must be at most 4, got 30.0)"),
        ("not-a-checkpoint",
         ["{data}", "--path", "{badbuilt}", "--save", "{tmp}/o.pt"], 2,
         "are damaged (their build's rows do not add up)"),
    ],
    "fairseq-speaker-speakers": [
        ("not-a-checkpoint", ["{tmp}/missing.pt"], 2, "checkpoint not found: {tmp}/missing.pt"),
        ("one-line-user-errors", [], 2, "the following arguments are required: CHECKPOINT"),
        ("not-a-checkpoint", ["{garbage}"], 2, "{garbage}: not a readable fairseq checkpoint"),
        ("not-a-checkpoint", ["{fifo}"], 2, "{fifo}: not a regular file (a device, a pipe or a socket), which no "
                                            "checkpoint is"),
        ("not-a-checkpoint", ["{notckpt}"], 2, "{notckpt}: not a fairseq-speaker checkpoint (no task state)"),
        ("one-line-user-errors", ["{ckpt}", "nobody"], 2, "no speaker of {ckpt} is called 'nobody'"),
        ("data-folder-has-dictionaries", ["{ckpt}", "--data", "{emptydir}"], 2, NO_DICTIONARIES),
        ("one-line-user-errors",
         ["{ckpt}", "--trained", "--onboarded"], 2, "argument --onboarded: not allowed with argument --trained"),
        ("one-line-user-errors", ["{ckpt}", "--data", "{tmp}/nowhere"], 2, "--data {tmp}/nowhere: no such folder"),
        ("one-line-user-errors",  # the file was called "no such folder"
         ["{ckpt}", "--data", "{refs}"], 2, "--data {refs}: is a file, not a folder"),
        ("one-line-user-errors",
         ["{ckpt}", "--user-dir", "{tmp}/nowhere"], 2, "--user-dir {tmp}/nowhere: no such folder"),
        ("one-line-user-errors", ["{ckpt}", "--no-such-option"], 2, "unrecognized arguments: --no-such-option"),
        ("dictionaries-compared", ["{ckpt}", "--data", "{swapped}"], 2, SWAPPED),
        ("dictionaries-compared",
         ["{ckpt}", "--data", "{other}"], 2, "{ckpt} was trained with the dictionaries of another data folder than "
                                             "{other}: its source dictionary has 64 symbols, {other}/dict.en.txt has "
                                             "56; its target dictionary has 88 symbols, {other}/dict.fr.txt has 80"),
    ],
    "fairseq-speaker-report": [
        ("numbers-checked",  # drawn at once: numpy's MemoryError of 35.8 GiB
         [*REPORT[:-1], "100000000", "--references", "{refs}", "--system", "a={refs}"], 2,
         "--bootstrap must be at most 10000 (1000 is the usual), got 100000000"),
        ("ignored-options-refused",
         [*REPORT, "--references", "{refs}", "--system", "a={refs}", "--classifier-epochs",
          "3"], 2, "--classifier-epochs: options of the speaker classifier, a section written only with --train-text, "
                   "--train-speakers and --test-speakers: give those, or leave it out"),
        ("ignored-options-refused",
         [*REPORT, "--references", "{refs}", "--system", "a={refs}", "--speaker",
          "spk000", "--top-words", "5"], 2,
         "--speaker and --top-words: options of the bias inspection, a section written only with --checkpoint: give "
         "it, or leave them out"),
        ("not-a-checkpoint",
         [*REPORT, "--references", "{refs}", "--system", "a={refs}", "--checkpoint", "a={stock}", "--data", "{data}"], 2,
         "--checkpoint a: {stock}: not a fairseq-speaker model's checkpoint (its task state names no speakers): give "
         "a checkpoint trained with --task speaker_translation"),
        ("one-line-user-errors",
         [*REPORT, "--references", "{refs}", "--system", "nameless"], 2, "--system takes NAME=PATH, got 'nameless'"),
        ("one-line-user-errors",
         [*REPORT, "--references", "{refs}", "--system", "a={tmp}/missing.txt"], 2,
         "--system a: file not found: {tmp}/missing.txt"),
        ("one-line-user-errors",
         [*REPORT, "--references", "{refs}", "--system", "a={refs}", "--system", "a={refs}"], 2,
         "--system a is given twice (the report would show one under the name): give each a name of its own"),
        ("one-line-user-errors",
         [*REPORT, "--references", "{refs}", "--system", "caf\u00e9={refs}", "--system", "cafe\u0301={refs}"], 2,
         "--system 'cafe\u0301' looks like 'caf\u00e9', given before (another space, invisible characters or another "
         "Unicode normalization): the report's rows could not be told apart; give each a name of its own"),
        ("one-line-user-errors",
         [*REPORT, "--references", "{refs}", "--system", "a={refs}", "--system", "a ={refs}"], 2,
         "--system 'a ' looks like 'a', given before"),
        ("one-line-user-errors",
         [*REPORT, "--references", "{refs}", "--system", "  ={refs}"], 2,
         "--system '  ': a NAME that shows nothing: give each a name a reader sees"),
        ("not-utf8",
         [*REPORT, "--references", "{latin1}.fr", "--system", "a={refs}"], 2,
         "{latin1}.fr:2: not valid UTF-8 (byte 0xe9 at column 4): text files must be UTF-8; convert this one, e.g. "
         "from Latin-1: iconv -f latin1 -t utf-8 {latin1}.fr > {latin1}.fr.utf8"),
        ("not-utf8",
         [*REPORT, "--references", "{refs}", "--system", "a={latin1}.fr"], 2,
         "{latin1}.fr:2: not valid UTF-8 (byte 0xe9 at column 4)"),
        ("one-line-user-errors",
         [*REPORT, "--references", "{empty}", "--system", "a={refs}"], 2,
         "--references {empty} is empty: there is nothing to score against"),
        ("one-line-user-errors",
         [*REPORT, "--references", "{refs}", "--system", "a={short}.fr"], 2,
         "--system a={short}.fr: 2 hypotheses for the 3 references of {refs}; give the output of the same test set"),
        ("one-line-user-errors",  # the system was blamed: "3 hypotheses for the 4 references"
         [*REPORT, "--references", "{blanktail}", "--system", "a={refs}"], 2,
         "--references {blanktail} ends in 1 blank line (line 4), which no system's output has (--system a={refs}: 3 "
         "hypotheses, as many as its other lines): remove the blank line at its end"),
        ("refused-before-writing",  # the references were replaced by the report, and lost
         ["--out", "{tmp}", "--tokenize", "none", "--references", "{reportmd}", "--system", "a={refs}"], 2,
         "--out {reportmd} is the --references, which the command reads: writing it would replace it"),
        ("one-line-user-errors",  # a KeyError of sacrebleu's, after the files were read
         [*REPORT[:2], "--tokenize", "bogus", "--references", "{refs}", "--system", "a={refs}"], 2,
         "argument --tokenize: invalid choice: 'bogus' (choose from 'none', 'zh', '13a'"),
        ("one-line-user-errors",  # the first run's hypotheses were scored without a word
         [*REPORT, "--references", "{refs}", "--system", "a={appended}"], 2,
         "--system a={appended}: {appended}: line 10: sentence id 1 again (first at line 7): two outputs appended "
         "(>>)? give the output of one run"),
        ("ignored-options-refused",  # the speakers named were inspected, --inspect-speakers ignored
         [*REPORT, "--references", "{refs}", "--system", "a={refs}", "--checkpoint", "m={ckpt}", "--data", "{data}",
          "--speaker", "spk000", "--inspect-speakers", "5"], 2,
         "--inspect-speakers 5 and --speaker both choose the speakers inspected: give one"),
        ("one-line-user-errors",  # an output of another split, as many sentences: scored (BLEU 6.6) without a word
         [*REPORT, "--references", "{refs}", "--system", "a={samesplit}", "--system", "b={othersplit}"], 2,
         "--system b={othersplit}: {othersplit}: its references (T- lines, the sentences fairseq-generate translated) "
         "are not those of --references on 3 of 3 sentences (sentence 0: 'g h .' against 'a b .'): an output of another "
         "split or corpus?"),
        ("one-line-user-errors",  # report.md's row had a cell too many: BLEU under chrF
         [*REPORT, "--references", "{refs}", "--system", "a b|c={refs}"], 2,
         "--system 'a b|c': a NAME is a column of the report's tables, and this one holds '|' (U+007C VERTICAL LINE) "
         "at character 4: give one without '|' or characters that do not print"),
        ("one-line-user-errors",  # the row was split across two lines
         [*REPORT, "--references", "{refs}", "--system", "a\nb={refs}"], 2, "--system 'a\\nb': a NAME is a column"),
        ("one-line-user-errors",  # a no-break space was called a control character
         [*REPORT, "--references", "{refs}", "--system", "a\xa0b={refs}"], 2,
         "holds '\\xa0' (U+00A0 NO-BREAK SPACE) at character 2"),
        ("one-line-user-errors",  # waited for a writer for ever
         [*REPORT, "--references", "{fifo}", "--system", "a={refs}"], 2,
         "--references {fifo}: {fifo} is a named pipe (or a socket): reading it waits for a program to write it, for "
         "ever if none does: give a file"),
        ("one-line-user-errors",
         [*REPORT, "--references", "{refs}", "--system", "a={refs}", "--train-text", "{refs}"], 2,
         "the speaker classifier needs --train-text, --train-speakers and --test-speakers"),
        ("one-line-user-errors",
         [*REPORT, "--references", "{refs}", "--system", "a={refs}", "--checkpoint", "m={ckpt}"], 2,
         "--checkpoint needs --data, the data directory with the target dictionary"),
        ("refused-before-writing",
         ["--out", "{afile}", "--references", "{refs}", "--system", "a={refs}"], 2,
         "--out {afile} is a file: give a folder for the report (it is made if missing)"),
        ("one-line-user-errors",
         [*REPORT, "--references", "{refs}", "--system", "a={refs}", "--baseline", "b"], 2,
         "--baseline b: not the NAME of a --system"),
        ("numbers-checked",
         [*REPORT, "--references", "{refs}", "--system", "a={refs}", "--bootstrap", "0"], 2,
         "--bootstrap must be at least 1, got 0"),
        ("dictionaries-compared",
         [*REPORT, "--references", "{refs}", "--system", "a={refs}", "--checkpoint", "m={ckpt}", "--data", "{other}"],
         2, "--checkpoint m: {other}/dict.fr.txt has 80 words but {ckpt} was trained with 88"),
        ("not-utf8",
         [*REPORT, "--references", "{refs}", "--system", "a={refs}", "--train-text", "{refs}", "--train-speakers",
          "{latin1}.spk", "--test-speakers", "{refs}"], 2, "{latin1}.spk:1: not valid UTF-8"),
        ("one-line-user-errors",  # open() waited for a writer for ever
         [*REPORT, "--references", "{refs}", "--system", "a={refs}", "--train-text", "{refs}", "--train-speakers",
          "{fifo}", "--test-speakers", "{refs}"], 2, "--train-speakers {fifo} is a named pipe (or a socket)"),
        ("one-line-user-errors",
         [*REPORT, "--references", "{refs}", "--system", "a={refs}", "--train-text", "{refs}", "--train-speakers",
          "{refs}", "--test-speakers", "{fifo}"], 2, "--test-speakers {fifo} is a named pipe (or a socket)"),
        ("numbers-checked",
         [*REPORT, "--references", "{refs}", "--system", "a={refs}", "--threads", "0"], 2,
         "--threads must be at least 1, got 0"),
        ("dictionaries-compared",
         [*REPORT, "--references", "{refs}", "--system", "a={refs}", "--checkpoint", "m={ckpt}", "--data",
          "{swapped}"], 2, "--checkpoint m: {swapped}/dict.fr.txt is not the target dictionary {ckpt} was trained "
                           "with: line 5 of {swapped}/dict.fr.txt is '{fr6}', the model's target dictionary has "
                           "'{fr5}' there"),
    ],
    "fairseq-speaker-topics": [
        ("refused-before-writing",  # the topic model was written over the data folder's dictionary
         ["{owndata}", "--out", "{owndata}/dict.en.txt"], 2,
         "--out {owndata}/dict.en.txt is a file of the data folder ({owndata})"),
        ("numbers-checked", ["{data}", "--out", "{tmp}/t.npz", "--seed", "-1"], 2,
         "argument --seed: must be from 0 to 4294967295 (numpy's seeds), got -1"),
        ("numbers-checked",  # fitted for ever, writing nothing
         ["{data}", "--out", "{tmp}/t.npz", "--topics", "100000"], 2,
         "--topics 100000: more topics than the training sources have words (60); a topic is a distribution over "
         "the source words: give at most 60"),
        ("one-line-user-errors",
         ["{tmp}/missing", "--out", "{tmp}/t.npz"], 2, "data directory not found: {tmp}/missing (a folder binarized "
                                                        "by fairseq-preprocess)"),
        ("refused-before-writing",
         ["{data}", "--out", "{tmp}/no/t.npz"], 2, "--out {tmp}/no/t.npz: the folder {tmp}/no does not exist"),
        ("refused-before-writing",
         ["{data}", "--out", "{tmp}"], 2, "--out {tmp} is a directory: give the path of the file to write"),
        ("numbers-checked",
         ["{data}", "--out", "{tmp}/t.npz", "--topics", "0"], 2, "--topics must be at least 1, got 0"),
        ("numbers-checked",
         ["{data}", "--out", "{tmp}/t.npz", "--max-iter", "0"], 2, "--max-iter must be at least 1, got 0"),
        ("one-line-user-errors",
         ["{emptydir}", "--out", "{tmp}/t.npz"], 2, "could not infer the language pair in {emptydir}: pass "
                                                     "--source-lang and --target-lang"),
        ("one-line-user-errors",
         ["{data}", "--out", "{tmp}/t.npz", "--source-lang", "de", "--target-lang", "fr"], 2,
         "source dictionary not found: expected {data}/dict.de.txt (is --source-lang right?)"),
        ("numbers-checked",
         ["{data}", "--out", "{tmp}/t.npz", "--threads", "0"], 2, "--threads must be at least 1, got 0"),
    ],
    "fairseq-speaker-adapt": [
        ("new-name-not-lookalike",  # the names of one file were compared with the model's only: both were onboarded
         [*ADAPT_ON, "--adapt-prefix", "{twinadapt}", "--save", "{tmp}/o.pt"], 2,
         "speaker labels 'dr lee' and 'dr  lee' look alike"),
        ("refused-before-writing",  # the adapted model was written over the adaptation text
         [*ADAPT_ON, "--adapt-prefix", "{adapt}", "--save", "{adapt}.en"], 2,
         "--save {adapt}.en is a file of the adaptation sentences (--adapt-prefix), which the command reads"),
        ("empty-sentences-refused",
         [*ADAPT_ON, "--adapt-prefix", "{blankadapt}", "--save", "{tmp}/o.pt"], 2,
         "{blankadapt}.en:2: the sentence is empty: give the sentence, or remove the line from the three files"),
        ("ignored-options-refused",
         [*ADAPT, "--heldout-prefix", "new/adapt"], 2, "--heldout-prefix new/adapt is the adaptation sentences "
                                                        "(--adapt-prefix): the fit would stop on the loss it minimizes"),
        ("ignored-options-refused",  # the fit early-stopped on its own training sentences
         [*ADAPT_ON, "--adapt-prefix", "{adapt}", "--heldout-prefix", "{adaptlinks}", "--save", "{tmp}/o.pt"], 2,
         "--heldout-prefix {adaptlinks} is the adaptation sentences (--adapt-prefix)"),
        ("ignored-options-refused",
         [*ADAPT, "--log-file", "adapt.log"], 2, "--log-file: fairseq-speaker-adapt does not read it"),
        ("numbers-checked", [*ADAPT, "--seed", "-1"], 2, "--seed must be from 0 to 4294967295 (numpy's seeds), got -1"),
        ("ignored-options-refused",
         [*ADAPT, "--fp16"], 2, "--fp16: fairseq-speaker-adapt does not read it (it fits the speakers and saves the "
                                "model with its own options: give decoding options such as --beam or "
                                "--unknown-speaker to fairseq-generate or -interactive when translating): leave it out"),
        ("ignored-options-refused",
         [*ADAPT, "--sampling", "--beam", "0", "--unknown-speaker", "fail"], 2,
         "--beam, --sampling, --unknown-speaker: fairseq-speaker-adapt does not read them"),
        ("ignored-options-refused",
         [*ADAPT, "--max-tokens", "5", "--gen-subset", "nosuch", "--speaker-token"], 2,
         "--max-tokens, --gen-subset, --speaker-token: fairseq-speaker-adapt does not read them"),
        ("numbers-checked", [*ADAPT, "--adapt-l2", "nan"], 2, "--adapt-l2 must be a number from 0 to 1e+09, got nan"),
        ("numbers-checked", [*ADAPT, "--adapt-l2", "-1"], 2, "--adapt-l2 must be a number from 0 to 1e+09, got -1.0"),
        ("numbers-checked", [*ADAPT, "--adapt-l2", "1e300"], 2,
         "--adapt-l2 must be a number from 0 to 1e+09, got 1e+300"),
        ("numbers-checked", [*ADAPT, "--adapt-max-iter", "0"], 2, "--adapt-max-iter must be at least 1, got 0"),
        ("numbers-checked",
         [*ADAPT, "--max-unknown-rate", "1.5"], 2, "--max-unknown-rate is a share of words, from 0 to 1"),
        ("one-line-user-errors",
         ["data", "--adapt-prefix", "new/adapt", "--save", "out.pt"], 2, "--path CHECKPOINT is required"),
        ("refused-before-writing",
         ["data", "--path", "m.pt", "--adapt-prefix", "new/adapt", "--save", "m.pt"], 2,
         "--save must not be the checkpoint given by --path"),
        ("dictionaries-compared",
         ["{other}", "--path", "{ckpt}", "--adapt-prefix", "{adapt}", "--save", "{tmp}/o.pt"], 2,
         "{ckpt} was trained with the dictionaries of another data folder than {other}: its source dictionary has "
         "64 symbols, {other}/dict.en.txt has 56; its target dictionary has 88 symbols, {other}/dict.fr.txt has 80. "
         "Give the data folder the model was trained on (its dict.*.txt), or binarize this data with the model's "
         "dictionaries (fairseq-preprocess --srcdict DICT --tgtdict DICT)"),
        ("not-utf8",
         [*ADAPT_ON, "--adapt-prefix", "{latin1}", "--save", "{tmp}/o.pt"], 2,
         "{latin1}.en:2: not valid UTF-8 (byte 0xe9 at column 4): text files must be UTF-8; convert this one, e.g. "
         "from Latin-1: iconv -f latin1 -t utf-8 {latin1}.en > {latin1}.en.utf8 (then use that file)"),
        ("one-line-user-errors",
         [*ADAPT_ON, "--adapt-prefix", "{tmp}/none", "--save", "{tmp}/o.pt"], 2,
         "file not found: expected {tmp}/none.en"),
        ("one-line-user-errors",
         [*ADAPT_ON, "--adapt-prefix", "{short}", "--save", "{tmp}/o.pt"], 2,
         "{short}.en has 3 lines but {short}.fr has 2: they must hold the same sentences"),
        ("speaker-file-fits-split",
         [*ADAPT_ON, "--adapt-prefix", "{nospk}", "--save", "{tmp}/o.pt"], 2,
         "speaker file not found: expected {nospk}.spk; put the speaker of each line of {nospk}.en on the same line"),
        ("refused-before-writing",
         [*ADAPT_ON, "--adapt-prefix", "{adapt}", "--save", "{tmp}"], 2,
         "{tmp} is a directory: give the path of a file to write"),
        ("one-line-user-errors",
         [*ADAPT_ON, "--adapt-prefix", "{adapt}", "--save", "{tmp}/o.pt", "--raw-text"], 2,
         "{ckpt}: --raw-text, but the checkpoint records no preprocessing of its training data; give the model's "
         "--tokenizer / --bpe options instead"),
        ("refused-before-writing",
         [*ADAPT_ON, "--adapt-prefix", "{adapt}", "--save", "{tmp}/no/o.pt"], 2,
         "cannot write {tmp}/no/o.pt: the folder {tmp}/no does not exist"),
        ("not-a-checkpoint",
         ["{data}", "--path", "{tmp}/none.pt", "--adapt-prefix", "{adapt}", "--save", "{tmp}/o.pt"], 2,
         "checkpoint not found: {tmp}/none.pt"),
        ("not-a-checkpoint",
         ["{data}", "--path", "{garbage}", "--adapt-prefix", "{adapt}", "--save", "{tmp}/o.pt"], 2,
         "{garbage}: not a readable fairseq checkpoint"),
        ("one-line-user-errors",
         [*ADAPT_ON, "--adapt-prefix", "{adapt}", "--heldout-prefix", "{stranger}", "--save", "{tmp}/o.pt"], 2,
         "{stranger}.spk: speaker(s) 'stranger' have held-out lines but no adaptation lines in {adapt}.spk"),
        ("one-line-user-errors",  # open() of its speaker file waited for a writer for ever
         [*ADAPT_ON, "--adapt-prefix", "{fifoadapt}", "--save", "{tmp}/o.pt"], 2,
         "--adapt-prefix {fifoadapt}.spk is a named pipe (or a socket)"),
        ("text-not-in-the-models-words",
         [*ADAPT_ON, "--adapt-prefix", "{untokenized}", "--save", "{tmp}/o.pt"], 2,
         "100% of the words (24 of 24) are not in the model's dictionaries (more than 10%): the text is probably not in "
         "the form of the training data"),
        ("numbers-checked", [*ADAPT, "--threads", "0"], 2, "--threads must be at least 1, got 0"),
        ("text-not-in-the-models-words",
         [*ADAPT_ON, "--adapt-prefix", "{nfd}", "--save", "{tmp}/o.pt"], 2,
         "are not in the model's dictionaries (more than 10%): the target text (from its line 1) is in Unicode NFD, an "
         "accent written as a character of its own, while the model's words are NFC: convert the file(s) to NFC, e.g. "
         "python -c \"import sys, unicodedata; sys.stdout.write(unicodedata.normalize('NFC', sys.stdin.read()))\" < "
         "FILE > FILE.nfc (or uconv -x NFC < FILE > FILE.nfc)"),
        ("dictionaries-compared",
         ["{swapped}", "--path", "{ckpt}", "--adapt-prefix", "{adapt}", "--save", "{tmp}/o.pt"], 2, SWAPPED),
    ],
    "fairseq-speaker-vectors": [
        ("refused-before-writing",  # the export wrote the vectors over the checkpoint it read
         ["export", "{owndata}", "--path", "{ownlink}", "--out", "{ownckpt}"], 2,
         "--out {ownckpt} is the checkpoint given by --path, which the command reads"),
        ("refused-before-writing",
         ["export", "{owndata}", "--path", "{ckpt}", "--out", "{owndata}/dict.en.txt"], 2,
         "--out {owndata}/dict.en.txt is a file of the data folder ({owndata})"),
        ("refused-before-writing",
         ["import", "{data}", "--path", "{ckpt}", "--vectors", "{ownvecs}", "--save", "{ownvecs}"], 2,
         "--save {ownvecs} is the vectors file given by --vectors, which the command reads"),
        ("vectors-of-another-model",
         ["import", "{data}", "--path", "{ckpt}", "--vectors", "{bytesnames}", "--save", "{tmp}/o.pt"], 2,
         "{bytesnames}: its names are stored as |S3 (bytes or other values), not as text"),
        ("dictionaries-compared",
         ["export", "{other}", "--path", "{ckpt}", "--out", "{tmp}/v.npz"], 2,
         "{ckpt} was trained with the dictionaries of another data folder than {other}"),
        ("refused-before-writing",
         ["export", "{data}", "--path", "{ckpt}", "--out", "{tmp}"], 2,
         "{tmp} is a directory: give the path of a file to write"),
        ("refused-before-writing",
         ["export", "{data}", "--path", "{ckpt}", "--out", "{tmp}/no/v.npz"], 2,
         "--out {tmp}/no/v.npz: the folder {tmp}/no does not exist"),
        ("not-a-checkpoint",
         ["export", "{data}", "--path", "{tmp}/none.pt", "--out", "{tmp}/v.npz"], 2,
         "checkpoint not found: {tmp}/none.pt"),
        ("one-line-user-errors",
         ["export", "{data}", "--path", "{ckpt}", "--out", "{tmp}/v.npz", "--speakers", "nobody"], 2,
         "{ckpt}: no speaker(s) 'nobody' (it has 8 speakers: 'spk000', 'spk001'"),
        ("vectors-of-another-model",
         ["import", "{data}", "--path", "{ckpt}", "--vectors", "{fifo}", "--save", "{tmp}/o.pt"], 2,
         "{fifo} is not a regular file (a device, a pipe or a socket), which no speaker vectors file is"),
        ("vectors-of-another-model",
         ["import", "{data}", "--path", "{ckpt}", "--vectors", "{tmp}/none.npz", "--save", "{tmp}/o.pt"], 2,
         "speaker vectors not found: {tmp}/none.npz (fairseq-speaker-vectors export writes them)"),
        ("vectors-of-another-model",
         ["import", "{data}", "--path", "{ckpt}", "--vectors", "{badwordsnpz}", "--save", "{tmp}/o.pt"], 2,
         "{badwordsnpz}: its speakers' words (words/lengths, words/ids) do not add up to 8 speakers"),
        ("vectors-of-another-model",
         ["import", "{data}", "--path", "{ckpt}", "--vectors", "{garbage}", "--save", "{tmp}/o.pt"], 2,
         "{garbage}: not a .npz archive, so not a speaker vectors file"),
        ("vectors-of-another-model",
         ["import", "{data}", "--path", "{ckpt}", "--vectors", "{topics_nan}", "--save", "{tmp}/o.pt"], 2,
         "{topics_nan}: not a speaker vectors file (fairseq-speaker-vectors export writes them)"),
        ("refused-before-writing",
         ["import", "{data}", "--path", "m.pt", "--vectors", "v.npz", "--save", "m.pt"], 2,
         "--save must not be the checkpoint given by --path: write the new model to another file"),
        ("one-line-user-errors", ["export", "{data}"], 2, "the following arguments are required: --path, --out"),
        ("dictionaries-compared", ["export", "{swapped}", "--path", "{ckpt}", "--out", "{tmp}/v.npz"], 2, SWAPPED),
    ],
    "fairseq-speaker-onboarding-eval": [
        ("ignored-options-refused", [*EVAL, "--shots", "2", "2"], 2, "--shots: 2 given twice: give each number once"),
        ("numbers-checked", [*EVAL, "--max-len-b", "0"], 2,
         "--max-len-b must be at least 1 (a translation of at least one token), got 0"),
        ("numbers-checked", [*EVAL, "--adapt-l2", "nan"], 2, "--adapt-l2 must be a number from 0 to 1e+09, got nan"),
        ("numbers-checked", [*EVAL, "--adapt-l2", "1e300"], 2, "--adapt-l2 must be a number from 0 to 1e+09, got 1e+300"),
        ("numbers-checked", [*EVAL, "--beam", "0"], 2, "--beam must be at least 1, got 0"),
        ("numbers-checked", [*EVAL, "--adapt-max-iter", "0"], 2, "--adapt-max-iter must be at least 1, got 0"),
        ("numbers-checked", [*EVAL, "--shots", "-1"], 2, "--shots: numbers of sentences must be 0 or more"),
        ("results-never-mixed",
         [*EVAL_ON, "--heldout-prefix", "{adapt}", "--out", "{full}"], 2,
         "--out {full} already holds files (an earlier run?): give another folder, or --force to replace the results "
         "written there"),
        ("refused-before-writing",
         [*EVAL_ON, "--heldout-prefix", "{adapt}", "--out", "{afile}"], 2,
         "--out {afile} is a file: give a folder for the results"),
        ("not-utf8",
         [*EVAL_ON, "--heldout-prefix", "{latin1}", "--out", "{tmp}/e"], 2,
         "{latin1}.en:2: not valid UTF-8 (byte 0xe9 at column 4): text files must be UTF-8"),
        ("dictionaries-compared",
         ["{other}", "--path", "{ckpt}", "--heldout-prefix", "{adapt}", "--out", "{tmp}/e"], 2,
         "{ckpt} was trained with the dictionaries of another data folder than {other}"),
        ("dictionaries-compared",
         ["{swapped}", "--path", "{ckpt}", "--heldout-prefix", "{adapt}", "--out", "{tmp}/e"], 2, SWAPPED),
        ("one-line-user-errors",
         [*EVAL_ON, "--heldout-prefix", "{tmp}/none", "--out", "{tmp}/e"], 2, "file not found: expected {tmp}/none.en"),
        ("not-utf8",
         [*EVAL_ON, "--heldout-prefix", "{badtraits}", "--out", "{tmp}/e"], 2,
         "{badtraits}.traits:1: not valid UTF-8"),
        ("numbers-checked", [*EVAL, "--threads", "0"], 2, "--threads must be at least 1, got 0"),
        ("one-line-user-errors", [*EVAL, "--threads", "many"], 2, "argument --threads: invalid int value: 'many'"),
        ("one-line-user-errors",
         [*EVAL_ON, "--heldout-prefix", "{adapt}", "--out", "{tmp}/e", "--oracle", "{tmp}/none.json"], 2,
         "--oracle {tmp}/none.json: not found; give the speakers.json of a styles-mode toy corpus"),
        ("one-line-user-errors",
         [*EVAL_ON, "--heldout-prefix", "{adapt}", "--out", "{tmp}/e", "--oracle", "{afile}"], 2,
         "--oracle {afile}: the oracle scores the speaker words of {adapt}.traits, which is not there"),
        ("one-line-user-errors",
         [*EVAL_ON, "--heldout-prefix", "{traited}", "--out", "{tmp}/e", "--oracle", "{notstyles}"], 2,
         "{notstyles}: not the speakers.json of a styles-mode toy corpus (KeyError: 'items')"),
    ],
    # the store's URLs, a server that refuses and copies that conflict: test_probes_service.py
    "fairseq-speaker-store": [
        ("one-line-user-errors",
         ["copy", "--from", "{tmp}/none.db", "--to", "{tmp}/new.db"], 2,
         "--from {tmp}/none.db: no such file (the SQLite store to read)"),
        ("foreign-database-refused",
         ["copy", "--from", "{afile}", "--to", "{tmp}/new.db"], 2, "--from {afile}: not a speaker store"),
        ("store-url-checked",
         ["copy", "--from", "ftp://host/s.db", "--to", "{tmp}/new.db"], 2,
         "--from ftp://host/s.db: ftp:// is not a kind of store this service knows: give an SQLite file"),
        ("store-url-checked",
         ["copy", "--from", "{tmp}/none.db", "--to", "sqlite:///{tmp}/copy.db?mode=ro"], 2,
         "--to sqlite:///{tmp}/copy.db?mode=ro: an SQLite store URL takes no parameters (?...) or fragment (#...)"),
        ("store-url-checked",
         ["copy", "--from", "{tmp}/none.db", "--to", "sqlite:///{tmp}/c%205.db"], 2,
         "--to sqlite:///{tmp}/c%205.db: an SQLite store URL's path is taken as written, and '%' escapes"),
        ("store-url-checked",
         ["copy", "--from", "{tmp}/none.db", "--to", "sqlite://host/s.db"], 2,
         "--to sqlite://host/s.db: an SQLite store is a file on this machine, written sqlite:///FILE"),
        ("one-line-user-errors", ["copy", "--from", "{tmp}/none.db"], 2, "the following arguments are required: --to"),
        ("one-line-user-errors", [], 2, "the following arguments are required: ACTION"),
        ("one-line-user-errors", ["move"], 2, "argument ACTION: invalid choice: 'move'"),
    ],
    "fairseq-speaker-doctor": [
        ("one-line-user-errors", ["--user-dir", "{tmp}/nowhere"], 2, "--user-dir {tmp}/nowhere: no such folder"),
        ("one-line-user-errors",
         ["--user-dir", "{notpackage}"], 2, "--user-dir {notpackage}: not a Python package (no __init__.py in it)"),
        ("one-line-user-errors", ["--user-dir", "{refs}"], 2, "--user-dir {refs}: a file, not a folder"),
        ("one-line-user-errors", ["--no-such-option"], 2, "unrecognized arguments: --no-such-option"),
    ],
    "fairseq-speaker-serve": [
        ("numbers-checked", [*SERVE, "--port", "0"], 2, "--port must be between 1 and 65535, got 0"),
        ("numbers-checked", [*SERVE, "--max-sentences", "0"], 2, "--max-sentences must be at least 1, got 0"),
        ("numbers-checked", [*SERVE, "--max-speaker-pairs", "-2"], 2, "--max-speaker-pairs must be at least 1, got -2"),
        ("numbers-checked", [*SERVE, "--max-speaker-pairs", "5", "--max-pairs", "10"], 2,
         "--max-speaker-pairs (5) must be at least --max-pairs (10), or the largest onboarding could never be kept"),
        ("store-url-checked", [*SERVE, "--store", "sqlite:///s.db?mode=memory"], 2,
         "--store sqlite:///s.db?mode=memory: an SQLite store URL takes no parameters (?...) or fragment (#...)"),
        ("one-line-user-errors", [*SERVE, "--host", "999.1.1.1"], 2,
         "--host 999.1.1.1 --port 8000: cannot listen there ("),
        ("numbers-checked", [*SERVE, "--request-timeout", "1e-9"], 2,
         "--request-timeout must be at least 0.1 s (the time a request's body has to arrive and its translation to be "
         "made), got 1e-09"),
        ("numbers-checked",
         [*SERVE, "--max-batch-tokens", "0"], 2, "--max-batch-tokens must be at least 1 (or not given: no cap), got 0"),
        ("numbers-checked",
         [*SERVE, "--max-batch-tokens", "-64"], 2, "--max-batch-tokens must be at least 1 (or not given: no cap), "
                                                   "got -64"),
        ("one-line-user-errors",
         [*SERVE, "--max-batch-tokens", "many"], 2, "--max-batch-tokens: invalid int value: 'many'"),
        ("numbers-checked", [*SERVE, "--max-gap-ms", "-1"], 2, "--max-gap-ms must be between 0 and 1000, got -1.0"),
        ("numbers-checked", [*SERVE, "--beam", "0"], 2, "--beam must be at least 1, got 0"),
        ("search-options-checked", [*SERVE, "--beam-stop", "never"], 2, "--beam-stop: invalid choice: 'never'"),
        ("ignored-options-refused",
         [*SERVE, "--token-file", "token", "--token-env", "TOKEN", "--store", "s.db"], 2, "not both"),
        ("ignored-options-refused",
         [*SERVE, "--token-env", "TOKEN"], 2, "a token enables onboarding: give --store FILE too"),
        ("one-line-user-errors",
         [*SERVE, "--bpe", "subword_nmt"], 2, "--bpe-codes is required with this --tokenizer/--bpe"),
        ("one-line-user-errors",
         [*SERVE, "--store", "s.db", "--token-file", "no/such/token"], 2, "--token-file no/such/token: cannot be read"),
        ("one-line-user-errors",
         [*SERVE, "--store", "s.db", "--token-env", "FAIRSEQ_SPEAKER_UNSET_VARIABLE"], 2,
         "the token is empty (is the variable set?)"),
        ("one-line-user-errors", ["model.pt", "--data", "no/such/data"], 2, "data directory not found: no/such/data"),
        ("dictionaries-compared",
         ["{ckpt}", "--data", "{other}"], 2, "{ckpt} was trained with the dictionaries of another data folder than "
                                             "{other}"),
        ("dictionaries-compared", ["{ckpt}", "--data", "{swapped}"], 2, SWAPPED),
        ("data-folder-has-dictionaries", ["{ckpt}", "--data", "{emptydir}"], 2, NO_DICTIONARIES),
        ("data-folder-has-dictionaries",
         ["--model", "v1={ckpt}:{ckptdir}"], 2, "{ckptdir}: no binarized split (SPLIT.SRC-TGT.SRC.bin) to read the "
                                                "languages from, and no dict.SRC.txt and dict.TGT.txt"),
        ("one-line-user-errors",
         ["{lostbpe}", "--data", "{data}"], 2, "{lostbpe}: the text preprocessing saved with the model needs the file "
                                               "codes.txt (--bpe subword_nmt --bpe-codes), which is missing"),
        ("one-line-user-errors",
         [*SERVE, "--preprocessing", "raw"], 2, "argument --preprocessing: invalid choice: 'raw'"),
    ],
    "fairseq-train": [
        ("not-a-topic-model",
         [*TRAIN, "--speaker-bias", "topic", "--topic-model", "{topics_text}"], 2,
         "{topics_text}: not a topic model written by fairseq-speaker-topics (a pickle or a text file); fit it again "
         "with fairseq-speaker-topics DATA_DIR --topics K --out FILE"),
        ("not-a-topic-model",
         [*TRAIN, "--speaker-bias", "topic", "--topic-model", "{topics_empty}"], 2,
         "{topics_empty}: an empty or cut-short file, not a whole topic model"),
        ("not-a-topic-model",
         [*TRAIN, "--speaker-bias", "topic", "--topic-model", "{topics_nan}"], 2,
         "{topics_nan}: exp_topic_word holds values that are not finite, non-negative numbers (NaN, inf or < 0)"),
        ("not-a-topic-model",
         [*TRAIN, "--speaker-bias", "topic", "--topic-model", "{topics_fields}"], 2,
         "{topics_fields}: not a topic model written by fairseq-speaker-topics (no exp_topic_word, doc_topic_prior, "
         "max_doc_update_iter, mean_change_tol, nspecial, dictionary_hash)"),
        ("not-a-topic-model",
         [*TRAIN, "--speaker-bias", "topic", "--topic-model", "{topics_shape}"], 2,
         "{topics_shape}: exp_topic_word has shape [64], not [topics, source words]"),
        ("not-a-topic-model",
         [*TRAIN, "--speaker-bias", "topic", "--topic-model", "{tmp}"], 2,
         "{tmp} is a directory: give the topic model file fairseq-speaker-topics wrote"),
        ("one-line-user-errors",
         [a for a in TRAIN if a != "1000" and a != "--max-tokens"], 2,
         "Must specify batch size either with --max-tokens or --batch-size: give --max-tokens N or --batch-size N"),
        ("not-utf8", ["{latin1spk}", *TRAIN[1:]], 2, "{latin1spk}/train.spk:3: not valid UTF-8"),
        ("data-folder-has-dictionaries", ["{emptydir}", *TRAIN[1:]], 2, NO_DICTIONARIES),
        ("speaker-file-fits-split",
         [*TRAIN, "--speaker-file", "{data}/train.spk"], 2, "--speaker-file {data}/train.spk is the speaker file of "
                                                             "the 'train' split of {data}, and the 'valid' split is "
                                                             "read"),
        ("one-line-user-errors",
         [*TRAIN, "--optimizer", "adam", "--lr", "0.001", "--restore-file", "{tmp}/chekpoint_best.pt"], 2,
         "--restore-file {tmp}/chekpoint_best.pt: no such checkpoint; fairseq would train from scratch and write over "
         "--save-dir's checkpoints"),
        ("one-line-user-errors",
         [*TRAIN, "--optimizer", "adam", "--lr", "0.001", "--finetune-from-model", "{tmp}/chekpoint_best.pt"], 2,
         "--finetune-from-model {tmp}/chekpoint_best.pt: no such file"),
        ("ignored-options-refused",
         [*TRAIN, "--optimizer", "adam", "--lr", "0.001", "--finetune-from-model", "{tmp}"], 2,
         "--finetune-from-model {tmp}: a folder: give the checkpoint file in it"),
        ("one-line-user-errors",
         [*TRAIN, "--optimizer", "adam", "--lr", "0.001", "--finetune-from-model", "{tmp}/x.pt", "--reset-optimizer"],
         2, "--finetune-from-model resets the optimizer, the learning rate scheduler, the meters and the data loader "
            "itself: leave out --reset-optimizer"),
        ("speaker-file-fits-split",
         ["{nospkdata}", *TRAIN[1:]], 2, "speaker file not found: expected {nospkdata}/train.spk; put one speaker "
                                         "label per sentence of the train split there"),
        ("numbers-checked",
         [*TRAIN, "--speaker-bias", "full", "--speaker-l2", "-1"], 2, "--speaker-l2 must be a number >= 0, got -1.0"),
        ("numbers-checked",
         [*TRAIN, "--speaker-bias", "fact", "--criterion", "speaker_label_smoothed_cross_entropy", "--speaker-unigram",
          "-1"], 2, "--speaker-unigram must be a number >= 0, got -1.0"),
        ("numbers-checked",
         [*TRAIN, "--criterion", "speaker_label_smoothed_cross_entropy", "--label-smoothing", "1.5"], 2,
         "--label-smoothing must be a number from 0 to below 1 (the share of the probability spread over the "
         "vocabulary), got 1.5"),
        ("numbers-checked",
         [*TRAIN, "--criterion", "speaker_label_smoothed_cross_entropy", "--label-smoothing", "nan"], 2,
         "--label-smoothing must be a number from 0 to below 1"),
        ("ignored-options-refused",
         [*TRAIN, "--speaker-bias", "lhuc", "--criterion", "speaker_label_smoothed_cross_entropy", "--speaker-unigram",
          "0.5", "--optimizer", "adam", "--lr", "0.001"], 2, "--speaker-unigram 0.5 trains the speakers' bias on the logits, and this model has none (speaker "
                     "bias variant: lhuc)"),
        ("speaker-file-fits-split",
         [*TRAIN, "--valid-subset", "nosuch"], 2, "Dataset not found: nosuch ({data}): no binarized split 'nosuch'"),
        ("one-line-user-errors",
         ["{prepnotjson}", *TRAIN[1:]], 2, "{prepnotjson}/preprocessing.json:1: not JSON (Expecting value); correct it "
                                           "(docs/sated.md describes preprocessing.json) or remove it to record no "
                                           "preprocessing"),
        ("one-line-user-errors",
         ["{prepunknown}", *TRAIN[1:]], 2, "{prepunknown}/preprocessing.json: no tokenizer called 'mosses' (the "
                                           "choices of --tokenizer: "),
        ("one-line-user-errors",
         ["{prepnofile}", *TRAIN[1:]], 2, "{prepnofile}/preprocessing.json: bpe subword_nmt: bpe_codes 'codes.txt': "
                                          "no such file {prepnofile}/codes.txt"),
        ("one-line-user-errors",
         ["{prepnotruecase}", *TRAIN[1:]], 2, "{prepnotruecase}/preprocessing.json: tokenizer moses_lowercase: "
                                              "truecase_model 'truecase.fr': no such file {prepnotruecase}/truecase.fr"),
        ("one-line-user-errors",
         [*TRAIN, "--preprocessing", "moses"], 2, "argument --preprocessing: invalid choice: 'moses'"),
        ("one-line-user-errors",
         [*TRAIN, "--dropout", "1.5"], 2, "--dropout 1.5: a dropout is a probability, from 0 to below 1"),
        ("speaker-file-fits-split",  # spk001 kept an untrained row, listed as trained on its old count
         ["{stalespkdict}", *TRAIN[1:], "--optimizer", "adam", "--lr", "0.001"], 2,
         "{stalespkdict}/dict.spk.txt was written from other training labels than "
         "{stalespkdict}/train.spk: it gives speaker 'spk001' "),
        ("speaker-file-fits-split",  # sharded data: checked for one folder only, the stale file trained
         ["{stalespkdict}:{data}", *TRAIN[1:], "--optimizer", "adam", "--lr", "0.001"], 2,
         "{stalespkdict}/dict.spk.txt was written from other training labels than {stalespkdict}/train.spk and "
         "{data}/train.spk: it gives speaker "),
        ("speaker-file-fits-split",  # told to delete the folder's correct dict.spk.txt
         ["{trainspkdict}", *TRAIN[1:], "--optimizer", "adam", "--lr", "0.001", "--train-subset", "valid"], 2,
         "{trainspkdict}/dict.spk.txt holds the speakers of the train split with their counts, and --train-subset "
         "valid trains on {trainspkdict}/valid.spk: the speaker dictionary must be the training split's; train on a "
         "copy of the data folder without dict.spk.txt"),
        ("speaker-file-fits-split",  # the test split was validated with the valid split's speakers, without a word
         [*TRAIN, "--valid-subset", "valid,test", "--speaker-file", "{data}/valid.spk"], 2,
         "--speaker-file {data}/valid.spk gives the speakers of one split, read for 'valid' and now asked for 'test' "
         "too"),
        ("one-line-user-errors",  # accepted, then the first update ended in NaN gradients (a traceback)
         [*TRAIN, "--lstm-dropout", "1.0"], 2, "--lstm-dropout 1.0: a dropout is a probability, from 0 to below 1"),
        ("one-line-user-errors",  # refused with the reason of a dropout of units (NaN gradients)
         [*TRAIN, "--target-word-dropout", "1.0"], 2, "--target-word-dropout 1.0: a dropout is a probability, from 0 "
                                                      "to below 1 (1 replaces every target word the decoder reads by "
                                                      "<unk>"),
        ("one-line-user-errors",  # an unset "$BIAS": the preset's variant, without a word
         [*TRAIN, "--speaker-bias", ""], 2, "--speaker-bias '' names no variant: give one ("),
        ("one-line-user-errors",  # the bare model trained without speakers, and saved speaker_bias ''
         [*[("speaker_lstm" if a == "lstm_base" else a) for a in TRAIN], "--speaker-bias", ""], 2,
         "--speaker-bias '' names no variant: give one ("),
        ("one-line-user-errors",  # told to write '', the empty value
         [*TRAIN, "--speaker-bias", " "], 2, "--speaker-bias ' ' names no variant: give one ("),
        ("ignored-options-refused",  # the topic model was read by nothing
         [*TRAIN, "--topic-model", "{tmp}/topics.npz"], 2, "--topic-model {tmp}/topics.npz is read by the topic "
                                                           "variant only, and --speaker-bias is 'none': add topic"),
        ("one-line-user-errors",  # a KeyError: ' fact' passed the check stripped and was looked up unstripped
         [*TRAIN, "--speaker-bias", " fact"], 2, "--speaker-bias ' fact': a variant's name holds no spaces: write "
                                                 "'fact'"),
        ("one-line-user-errors",  # the message named --speaker-bias, which was 'sum'
         [*TRAIN, "--speaker-bias", "sum", "--sum-parts", "fact+nope"], 2, "unknown --sum-parts 'fact+nope'"),
        ("one-line-user-errors",
         [*TRAIN, "--lstm-dropout", "-0.1"], 2, "--lstm-dropout -0.1: a dropout is a probability"),
        ("one-line-user-errors",
         [*TRAIN, "--speaker-suffix", ""], 2, "--speaker-suffix '': the extension of the speaker files"),
        ("one-line-user-errors",
         [*TRAIN, "--encoder-hidden-size", "-4"], 2, "--encoder-hidden-size -4: a size of the network must be at least 1"),
        ("one-line-user-errors",
         [*TRAIN, "--attention-dim", "0"], 2, "--attention-dim 0: a size of the network must be at least 1"),
        ("ignored-options-refused",
         [*TRAIN, "--speaker", "spk003"], 2, "--speaker spk003: fairseq-interactive's speakers of its input lines; the "
                                             "valid split's speakers are read from its speaker file ({data}/valid.spk, "
                                             "or --speaker-file): leave it out"),
    ],
    "fairseq-generate": [
        ("data-folder-has-dictionaries",  # "data directory not found: .../d": fairseq splits the path at ':'
         ["{colondata}", "--path", "{ckpt}", *GENERATE], 2,
         "data directory {colondata}: fairseq reads a path holding ':' as several data folders (shards)"),
        ("dictionaries-compared",
         ["{other}", "--path", "{ckpt}", *GENERATE], 2,
         "{ckpt} was trained with the dictionaries of another data folder than {other}: its source dictionary has "
         "64 symbols, {other}/dict.en.txt has 56"),
        ("dictionaries-compared", ["{swapped}", "--path", "{ckpt}", *GENERATE], 2, SWAPPED),
        ("data-folder-has-dictionaries", ["{emptydir}", "--path", "{ckpt}", *GENERATE], 2, NO_DICTIONARIES),
        ("one-line-user-errors",  # fairseq's own option: os.makedirs's traceback
         ["{data}", "--path", "{ckpt}", *GENERATE, "--results-path", "{afile}"], 2,
         "--results-path {afile}: File exists: give a folder that can be made and written, where fairseq-generate "
         "writes generate-SUBSET.txt"),
        ("one-line-user-errors",
         ["{data}", "--path", "{ckpt}", *GENERATE, "--results-path", "{afile}/under"], 2,
         "--results-path {afile}/under: Not a directory: give a folder"),
        ("data-folder-has-dictionaries",
         ["{srconly}", "--path", "{ckpt}", *GENERATE], 2, "{srconly}: no dict.fr.txt there: give the data folder the "
                                                           "model was trained on"),
        ("data-folder-has-dictionaries",
         ["{tmp}/nowhere", "--path", "{ckpt}", *GENERATE], 2, "data directory not found: {tmp}/nowhere"),
        ("dictionaries-compared",
         ["{swappedsrc}", "--path", "{ckpt}", *GENERATE], 2,
         "{ckpt} was trained with the dictionaries of another data folder than {swappedsrc}: line 5 of "
         "{swappedsrc}/dict.en.txt is '{en6}', the model's source dictionary has '{en5}' there"),
        ("not-a-checkpoint",
         ["{data}", "--path", "{garbage}", *GENERATE], 2, "{garbage}: not a readable fairseq checkpoint"),
        ("not-a-checkpoint", ["{data}", "--path", "{fifo}", *GENERATE], 2, "{fifo}: not a regular file"),
        ("not-a-checkpoint",
         ["{data}", "--path", "{tmp}/none.pt", *GENERATE], 2,
         "checkpoint not found: {tmp}/none.pt; give --path the checkpoint file that fairseq-train wrote"),
        ("not-a-checkpoint", ["{data}", "--path", "{notckpt}", *GENERATE], 2, "{notckpt}: not a fairseq checkpoint"),
        ("not-a-checkpoint",
         ["{data}", "--path", "{stock}", *GENERATE], 2,
         "--arch lstm: LSTMModel is a model without speakers (fairseq's own), which the speaker task cannot feed"),
        ("not-a-checkpoint",
         ["{data}", "--path", "{badwords}", *GENERATE], 2,
         "{badwords}: its speakers' words (decoder.speaker_words._extra_state) are damaged"),
        ("memory-in-every-search",
         ["{data}", "--path", "{withwords}", *GENERATE, "--print-alignment"], 2,
         "this model remembers its speakers' words (fairseq-speaker-words), which only fairseq's beam search adds to "
         "its steps: leave out --print-alignment"),
        # the search options of decoding (with the speakers' words: SEARCHES below for those that work)
        ("memory-in-every-search",
         ["{data}", "--path", "{withwords}", *GENERATE, "--score-reference"], 2,
         "this model remembers its speakers' words (fairseq-speaker-words), and --score-reference scores the "
         "references with the network alone: leave out --score-reference"),
        ("ensemble-memories-alike",
         ["{data}", "--path", "{ckpt}:{withwords}", *GENERATE], 2,
         "--path: the 2nd model of the ensemble remembers its speakers' words and the 1st does not"),
        ("ensemble-memories-alike",
         ["{data}", "--path", "{withwords}:{ckpt}", *GENERATE], 2,
         "--path: the 1st model of the ensemble remembers its speakers' words and the 2nd does not"),
        ("dictionaries-compared",
         ["{data}", "--path", "{ckpt}", *GENERATE, "--speaker-token"], 2,
         "{ckpt} was trained without --speaker-token (its sentences start with no token naming their speaker): leave "
         "--speaker-token out"),
        ("one-line-user-errors",
         ["{data}", "--path", "{ckpt}", *GENERATE, "--skip-invalid-size-inputs-valid-test", "--max-source-positions",
          "3"], 2, "no sentence of the split is left to translate or train on: every one was skipped as longer than "
                   "the model's positions"),
        ("one-line-user-errors",
         ["{data}", "--path", "{ckpt}", *GENERATE, "--max-source-positions", "3"], 2,
         "Size of sample #5 is invalid (=(5, 5)) since max_positions=(3, 1024), skip this example with "
         "--skip-invalid-size-inputs-valid-test"),
        ("search-options-checked",
         ["{data}", "--path", "{ckpt}", *GENERATE, "--beam", "0"], 2,
         "--beam must be at least 1 (the hypotheses the search keeps), got 0"),
        ("search-options-checked",
         ["{data}", "--path", "{ckpt}", *GENERATE, "--nbest", "0"], 2,
         "--nbest must be at least 1 (the translations given of each sentence), got 0"),
        ("ignored-options-refused",
         ["{data}", "--path", "{ckpt}", *GENERATE, "--speaker", "spk003", "--speaker-per-line"], 2,
         "--speaker spk003 and --speaker-per-line: fairseq-interactive's speakers of its input lines; the test split's "
         "speakers are read from its speaker file ({data}/test.spk, or --speaker-file): leave them out"),
        ("search-options-checked",
         ["{data}", "--path", "{ckpt}", *GENERATE, "--nbest", "3"], 2,
         "--nbest 3 asks for more translations of each sentence than the beam keeps (--beam 2): fairseq gives 2"),
        ("search-options-checked",
         ["{data}", "--path", "{ckpt}", *GENERATE, "--constraints"], 2,
         "--constraints: these sentences carry no constraints (fairseq-interactive reads them from each input line"),
        ("search-options-checked",
         ["{data}", "--path", "{withwords}", *GENERATE, "--sampling"], 2,
         "--sampling requires --nbest to be equal to --beam: give --nbest N with --beam N"),
        ("search-options-checked",
         ["{data}", "--path", "{ckpt}", *GENERATE, "--sampling-topk", "5"], 2,
         "--sampling-topk 5 chooses among the words a sampling search draws from: give --sampling too"),
        ("search-options-checked",
         ["{data}", "--path", "{ckpt}", *GENERATE, "--sampling", "--nbest", "2", "--match-source-len"], 2,
         "--sampling and --match-source-len each choose fairseq's search, which is one: give one of them"),
        ("search-options-checked",
         ["{data}", "--path", "{withwords}", *GENERATE, "--diverse-beam-groups", "3"], 2,
         "--diverse-beam-groups 3 splits the beam into groups of one size: give a --beam that is a multiple of 3, "
         "got --beam 2"),
        ("search-options-checked",
         ["{data}", "--path", "{ckpt}", *GENERATE, "--temperature", "0"], 2, "--temperature must be at least 0.001"),
        ("search-options-checked",
         ["{data}", "--path", "{ckpt}", *GENERATE, "--sampling", "--beam", "1", "--nbest", "1", "--temperature",
          "1e-300"], 2, "--temperature must be at least 0.001 (1: the model's own probabilities; the likeliest word "
                        "every step is --beam 1 without --sampling), got 1e-300"),
        ("search-options-checked",
         ["{data}", "--path", "{ckpt}", *GENERATE, "--beam-stop", "never"], 2,
         "--beam-stop: invalid choice: 'never'"),
        ("search-options-checked",
         ["{data}", "--path", "{ckpt}", *GENERATE, "--beam-stop", "unbeaten", "--print-alignment"], 2,
         "--beam-stop unbeaten changes fairseq's beam search, and this generator is another (--print-alignment's)"),
        ("search-options-checked",
         ["{data}", "--path", "{ckpt}", *GENERATE, "--beam-stop", "unbeaten", "--sampling", "--sampling-topp", "0.5",
          "--nbest", "2"], 2,
         "--beam-stop unbeaten searches on for better hypotheses, and --sampling draws them"),
        ("search-options-checked",
         ["{data}", "--path", "{ckpt}", *GENERATE, "--beam-stop", "unbeaten", "--score-reference"], 2,
         "--beam-stop unbeaten says when a beam search ends a sentence, and --score-reference runs none"),
        ("search-options-checked",
         ["{data}", "--path", "{ckpt}", *GENERATE, "--min-len", "30"], 2,
         "--min-len 30 (min_len) asks for translations longer than the search allows these sentences: at most 4 "
         "tokens"),
        ("search-options-checked",
         ["{data}", "--path", "{ckpt}", *GENERATE, "--max-len-b", "0", "--beam-stop", "unbeaten"], 2,
         "--min-len 1 (min_len) asks for translations longer than the search allows these sentences: at most 0 tokens"),
        ("empty-split",
         ["{emptyvalid}", "--path", "{ckpt}", *GENERATE[:-1], "valid"], 2,
         "{emptyvalid}/valid.en-fr.en.bin is empty: the 'valid' split of {emptyvalid} holds no sentences"),
        ("not-a-checkpoint",  # "the checkpoint", named no file
         ["{data}", "--path", "{badaddto}", *GENERATE], 2,
         "{badaddto}: its speakers' words (decoder.speaker_words._extra_state) have bad options (speaker words: add_to "
         "must be one of log_probs, logits"),
        ("not-a-checkpoint",
         ["{data}", "--path", "{badrank}", *GENERATE], 2,
         "its speakers' words (decoder.speaker_words._extra_state) have bad options (speaker words: rank_choices must "
         "be one of posterior, rates, got 'votes'; kinds_prior must be a number >= 0, got -1.0)"),
        ("not-a-checkpoint",
         ["{data}", "--path", "{badkinds}", *GENERATE], 2,
         "its speakers' words (decoder.speaker_words._extra_state) are damaged (their kinds of speaker are not "
         "distributions over the words of the model)"),
        ("not-a-checkpoint",
         ["{data}", "--path", "{otherwords}", *GENERATE], 2,
         "{otherwords}: its speakers' words (decoder.speaker_words._extra_state) are over 99 target words, and "
         "the model has"),
        ("not-utf8",
         ["{data}", "--path", "{ckpt}", *GENERATE, "--speaker-file", "{latin1}.spk"], 2,
         "{latin1}.spk:1: not valid UTF-8"),
        ("speaker-file-fits-split",
         ["{data}", "--path", "{ckpt}", *GENERATE, "--speaker-file", "{tmp}/none.spk"], 2,
         "--speaker-file {tmp}/none.spk: no such file; put one speaker label per sentence of the test split there"),
        ("speaker-file-fits-split",
         ["{data}", "--path", "{ckpt}", *GENERATE, "--speaker-file", "{adapt}.spk"], 2,
         "{adapt}.spk: 3 speaker labels but the test split's text has 37 sentences; the speaker file needs exactly "
         "one label per sentence, in the same order"),
        ("one-line-user-errors",  # fairseq's AssertionError, with its traceback
         ["{data}", "--path", "{ckpt}", *GENERATE, "--replace-unk"], 2,
         "--replace-unk requires a raw text dataset (--dataset-impl=raw): fairseq-generate copies the aligned source "
         "word of an <unk> from raw text only"),
        ("speaker-file-fits-split",  # another split's file of as many lines: scored (BLEU 89.7 -> 69.6) without a word
         ["{data}", "--path", "{ckpt}", *GENERATE, "--speaker-file", "{data}/valid.spk"], 2,
         "--speaker-file {data}/valid.spk is the speaker file of the 'valid' split of {data}, and the 'test' split is "
         "read: give the test split's speakers (or leave the option out: {data}/test.spk is read)"),
        ("speaker-file-fits-split",  # ignored for the training split: scored with train.spk, without a word
         ["{data}", "--path", "{ckpt}", *GENERATE, "--gen-subset", "train", "--speaker-file", "{adapt}.spk"], 2,
         "{adapt}.spk: 3 speaker labels but the train split's text has 160 sentences"),
        ("speaker-file-fits-split",
         ["{data}", "--path", "{ckpt}", *GENERATE, "--gen-subset", "train", "--speaker-file", "{tmp}/none.spk"], 2,
         "--speaker-file {tmp}/none.spk: no such file; put one speaker label per sentence of the train split there"),
        ("one-line-user-errors",
         ["{data}", "--path", "{ckpt}", *GENERATE, "--speaker-file", "{tmp}"], 2, "{tmp} is a directory, not a file"),
        ("one-line-user-errors",  # open() waited for a writer for ever
         ["{data}", "--path", "{ckpt}", *GENERATE, "--speaker-file", "{fifo}"], 2,
         "--speaker-file {fifo} is a named pipe (or a socket): reading it waits for a program to write it, for ever if "
         "none does"),
        ("one-line-user-errors",  # the split's own speaker file was read without a word
         ["{data}", "--path", "{ckpt}", *GENERATE, "--speaker-file", ""], 2,
         "--speaker-file is empty: give the speaker file of the test split, or leave the option out"),
        ("speaker-file-fits-split",  # told to binarize it, though the command read raw text
         ["{data}", "--path", "{ckpt}", *GENERATE, "--dataset-impl", "raw"], 2,
         "Dataset not found: test ({data}): no raw text of the split 'test' there (--dataset-impl raw reads "
         "test.en-fr.en and test.en-fr.fr, one sentence a line)"),
        ("speaker-file-fits-split",
         ["{data}", "--path", "{ckpt}", *GENERATE, "--gen-subset", "nosuch"], 2,
         "Dataset not found: nosuch ({data}): no binarized split 'nosuch' there (fairseq-preprocess writes train, "
         "valid and test); give the split's name (--gen-subset, --valid-subset, --train-subset) or the data folder "
         "that has it"),
        ("one-line-user-errors",
         ["{data}", "--path", "{lostbpe}", *GENERATE], 2,
         "{lostbpe}: the text preprocessing saved with the model needs the file codes.txt (--bpe subword_nmt "
         "--bpe-codes), which is missing: not at {tmp}/gone/codes.txt, where it was at training, nor in {data}. Put "
         "that file back in one of these places, or give --bpe yourself (it wins over the checkpoint's), or "
         "--preprocessing none (preprocessing=\"none\") for input already in the model's tokens"),
        ("one-line-user-errors",
         ["{data}", "--path", "{alienprep}", *GENERATE], 2,
         "{alienprep}: the text preprocessing saved with the model needs a tokenizer this installation does not "
         "have: no tokenizer called 'someone_elses' (the choices of --tokenizer: "),
        ("one-line-user-errors",
         ["{data}", "--path", "{badtruecase}", *GENERATE], 2,
         "{badtruecase}: the text preprocessing saved with the model: moses_lowercase: truecase_model "
         "{tmp}/truecase.fr is not a truecasing model ("),
        # a language model to fuse (--lm-path): fairseq reads its dictionary as the data folder's dict.txt
        ("language-model-dictionary", ["{data}", "--path", "{ckpt}", *GENERATE, "--lm-path", "{tmp}/none.pt"], 2,
         "--lm-path {tmp}/none.pt: no such file; give the checkpoint of a language model of the target language"),
        ("language-model-dictionary", ["{data}", "--path", "{ckpt}", *GENERATE, "--lm-path", "{lm}"], 2,
         "--lm-path {lm}: fairseq reads the language model's dictionary as {data}/dict.txt, which is not there; the "
         "language model must have been trained with the target dictionary {data}/dict.fr.txt: copy it there (cp "
         "{data}/dict.fr.txt {data}/dict.txt)"),
        ("language-model-dictionary", ["{lmswapped}", "--path", "{ckpt}", *GENERATE, "--lm-path", "{lm}"], 2,
         "--lm-path {lm}: the language model's dictionary is not the target dictionary (line 5 of {lmswapped}/dict.txt "
         "is '{fr6}', {lmswapped}/dict.fr.txt has '{fr5}' there), and its scores are added to the translations' word "
         "by word id"),
        ("language-model-dictionary", ["{lmsource}", "--path", "{ckpt}", *GENERATE, "--lm-path", "{lm}"], 2,
         "the language model's dictionary is not the target dictionary ({lmsource}/dict.txt has 64 symbols, "
         "{lmsource}/dict.fr.txt 88)"),
        ("language-model-dictionary", ["{lmdata}", "--path", "{spktoken}", *GENERATE, "--lm-path", "{lm}"], 2,
         "--lm-path {lm}: a --speaker-token model's target words include its speakers' tokens, which a language model "
         "does not have"),
        ("language-model-dictionary", ["{lmbadformat}", "--path", "{ckpt}", *GENERATE, "--lm-path", "{lm}"], 2,
         "--lm-path {lm}: {lmbadformat}/dict.txt, the language model's dictionary, cannot be read (Incorrect "
         "dictionary format"),
        ("language-model-dictionary", ["{lmdata}", "--path", "{ckpt}", *GENERATE, "--lm-path", "{ckpt}"], 2,
         "--lm-path {ckpt}: a checkpoint of the task speaker_translation, not a language model"),
        ("numbers-checked", ["{lmdata}", "--path", "{ckpt}", *GENERATE, "--lm-path", "{lm}", "--lm-weight", "inf"], 2,
         "--lm-weight must be a finite number, got inf"),
        ("numbers-checked", ["{data}", "--path", "{ckpt}", *GENERATE, "--lenpen", "nan"], 2,
         "--lenpen must be a finite number, got nan"),
        ("numbers-checked", ["{data}", "--path", "{ckpt}", *GENERATE, "--lenpen", "1e308"], 2,
         "--lenpen must be from -10 to 10 (1: the score per token, 0: the sentence's score), got 1e+308"),
    ],
}


# -- the files the rows name ------------------------------------------------------------------------------

LATIN1 = "caf\xe9".encode("latin-1")


class Places:
    """The ``{name}`` of a row's arguments: a path made on first use (:meth:`make_NAME`), in the test's folder
    unless it is shared (the toy data, the trained model)."""

    def __init__(self, tmp_path, request):
        self.tmp, self.request, self.made = str(tmp_path), request, {}

    def __getitem__(self, name: str) -> str:
        if name not in self.made:
            self.made[name] = getattr(self, "make_" + name)()
        return self.made[name]

    def fill(self, text: str) -> str:
        return re.sub(r"\{(\w+)\}", lambda m: self[m.group(1)], text)

    def path(self, name: str) -> str:
        return os.path.join(self.tmp, name)

    def write(self, name: str, data) -> str:
        path = self.path(name)
        with open(path, "wb") as f:
            f.write(data if isinstance(data, bytes) else data.encode("utf-8"))
        return path

    def prefix(self, name: str, en: List[bytes], fr: List[bytes], spk: List[str]) -> str:
        for ext, lines in (("en", en), ("fr", fr), ("spk", spk and [s.encode() for s in spk])):
            if lines is not None:
                self.write(f"{name}.{ext}", b"".join(line + b"\n" for line in lines))
        return self.path(name)

    # shared
    def make_tmp(self):
        return self.tmp

    def make_data(self):
        return self.request.getfixturevalue("toy")["bin"]

    def make_ckpt(self):
        return self.request.getfixturevalue("trained")("lstm_fact_bias")

    def make_other(self):
        """The toy data folder with smaller dictionaries (8 words fewer each side): another data folder."""
        dest = self.path("other")
        shutil.copytree(self["data"], dest)
        for lang in ("en", "fr"):
            dictionary = os.path.join(dest, f"dict.{lang}.txt")
            lines = open(dictionary, encoding="utf-8").read().splitlines(keepends=True)
            open(dictionary, "w", encoding="utf-8").writelines(lines[:-8])
        return dest

    def _swapped(self, name: str, lang: str) -> str:
        """The toy data folder with lines 5 and 6 of ``dict.LANG.txt`` swapped: the same size, other words."""
        dest = self.path(name)
        shutil.copytree(self["data"], dest)
        dictionary = os.path.join(dest, f"dict.{lang}.txt")
        lines = open(dictionary, encoding="utf-8").read().splitlines(keepends=True)
        lines[4], lines[5] = lines[5], lines[4]
        open(dictionary, "w", encoding="utf-8").writelines(lines)
        return dest

    def make_swapped(self):
        return self._swapped("swapped", "fr")

    def make_notpackage(self):
        """A folder without __init__.py, a module of its name beside it (fairseq would import that one)."""
        os.makedirs(self.path("ud/pkgx"))
        self.write("ud/pkgx.py", "raise SystemExit('pkgx.py ran')\n")
        return self.path("ud/pkgx")

    def make_srconly(self):
        """The toy data folder without its target dictionary."""
        dest = self.path("srconly")
        shutil.copytree(self["data"], dest)
        os.remove(os.path.join(dest, "dict.fr.txt"))
        return dest

    def make_stock(self):
        """A checkpoint of fairseq's own translation task and LSTM: no speakers."""
        return self.request.getfixturevalue("stock_trained")

    def make_ckptdir(self):
        """The folder of the trained checkpoint: given where the data folder goes."""
        return os.path.dirname(self["ckpt"])

    def make_swappedsrc(self):
        return self._swapped("swappedsrc", "en")

    def _word(self, lang: str, line: int) -> str:
        """The word on ``line`` (from 1) of the toy data's ``dict.LANG.txt``."""
        with open(os.path.join(self["data"], f"dict.{lang}.txt"), encoding="utf-8") as f:
            return f.read().splitlines()[line - 1].rsplit(" ", 1)[0]

    def make_fr5(self):
        return self._word("fr", 5)

    def make_fr6(self):
        return self._word("fr", 6)

    def make_en5(self):
        return self._word("en", 5)

    def make_en6(self):
        return self._word("en", 6)

    # text
    @property
    def sources(self) -> List[str]:
        """One sentence of the toy test set, and its translation (:attr:`targets`): words the model knows."""
        return [self._toy_lines("en", 1)[0].decode("utf-8")]

    @property
    def targets(self) -> List[str]:
        return [self._toy_lines("fr", 1)[0].decode("utf-8")]

    def _toy_lines(self, lang: str, n: int) -> List[bytes]:
        raw = self.request.getfixturevalue("toy")["raw"]
        return open(os.path.join(raw, f"test.{lang}"), "rb").read().splitlines()[:n]

    def make_adapt(self):
        return self.prefix("adapt", self._toy_lines("en", 3), self._toy_lines("fr", 3), ["newbie"] * 3)

    def make_adaptlinks(self):
        """The files of :meth:`make_adapt` under another prefix, each a symbolic link to its own."""
        for ext in ("en", "fr", "spk"):
            os.symlink(f"{self['adapt']}.{ext}", self.path(f"adaptlinks.{ext}"))
        return self.path("adaptlinks")

    def make_traited(self):
        """Three toy sentence pairs with their traits (the speaker words scored)."""
        prefix = self.prefix("traited", self._toy_lines("en", 3), self._toy_lines("fr", 3), ["newbie"] * 3)
        raw = self.request.getfixturevalue("toy")["raw"]
        self.write("traited.traits", b"".join(open(os.path.join(raw, "test.traits"), "rb").readlines()[:3]))
        return prefix

    def make_notstyles(self):
        return self.write("notstyles.json", '{"speakers": {}}\n')

    def make_latin1(self):
        """Three sentence pairs whose second line (and every speaker label) is Latin-1, not UTF-8."""
        en, fr = self._toy_lines("en", 3), self._toy_lines("fr", 3)
        en[1] = fr[1] = LATIN1 + b" ."
        prefix = self.prefix("latin1", en, fr, None)
        self.write("latin1.spk", (LATIN1 + b"\n") * 3)
        return prefix

    def make_short(self):
        return self.prefix("short", self._toy_lines("en", 3), self._toy_lines("fr", 2), ["newbie"] * 3)

    def make_nospk(self):
        return self.prefix("nospk", self._toy_lines("en", 3), self._toy_lines("fr", 3), None)

    def make_stranger(self):
        return self.prefix("stranger", self._toy_lines("en", 1), self._toy_lines("fr", 1), ["stranger"])

    def make_untokenized(self):
        words = [b"Zebras Quickly Jumped Over Lazy Dogs!"] * 2
        return self.prefix("untokenized", words, words, ["newbie"] * 2)

    def make_nfd(self):
        """Three sentence pairs whose targets are accented words of the model, written in Unicode NFD."""
        with open(os.path.join(self["data"], "dict.fr.txt"), encoding="utf-8") as f:
            accented = [w for w in (line.rsplit(" ", 1)[0] for line in f) if not w.isascii()][:3]
        assert len(accented) == 3 and all(unicodedata.normalize("NFD", w) != w for w in accented)
        target = unicodedata.normalize("NFD", " ".join(accented)).encode("utf-8")
        return self.prefix("nfd", self._toy_lines("en", 3), [target] * 3, ["newbie"] * 3)

    def make_badtraits(self):
        prefix = self.prefix("badtraits", self._toy_lines("en", 3), self._toy_lines("fr", 3), ["newbie"] * 3)
        self.write("badtraits.traits", b'[{"trait": "' + LATIN1 + b'"}]\n' * 3)
        return prefix

    def make_refs(self):
        return self.write("refs.txt", b"a b .\nc d .\ne f .\n")

    def make_reportmd(self):
        """The references of :meth:`make_refs` under the name of the report's own file, in the test's folder."""
        return self.write("report.md", b"a b .\nc d .\ne f .\n")

    def make_appended(self):
        """Two fairseq-generate outputs of :meth:`make_refs` appended (``>>``), the second run's sentence 1 another."""
        run = "S-{i}\tx .\nH-{i}\t-0.5\t{h}\nD-{i}\t-0.5\t{h}\n"
        first = "".join(run.format(i=i, h=h) for i, h in ((2, "e f ."), (0, "a b ."), (1, "c d .")))
        second = "".join(run.format(i=i, h=h) for i, h in ((1, "x y ."), (0, "a b ."), (2, "e f .")))
        return self.write("appended.txt", first + second)

    def make_othersplit(self):
        """A fairseq-generate output of three other sentences than :meth:`make_refs`' (its T- lines), as many."""
        run = "S-{i}\tx .\nT-{i}\t{t}\nH-{i}\t-0.5\t{h}\nD-{i}\t-0.5\t{h}\n"
        return self.write("othersplit.txt", "".join(run.format(i=i, t=t, h=t) for i, t in
                                                    ((2, "k l ."), (0, "g h ."), (1, "i j ."))))

    def make_samesplit(self):
        """A fairseq-generate output of :meth:`make_refs`' sentences, its T- lines written otherwise (BPE, case,
        spaces), one of them with an unknown word."""
        run = "S-{i}\tx .\nT-{i}\t{t}\nH-{i}\t-0.5\t{h}\nD-{i}\t-0.5\t{h}\n"
        return self.write("samesplit.txt", "".join(run.format(i=i, t=t, h="a b .") for i, t in
                                                   ((2, "E f."), (0, "a@@ b ."), (1, "c <unk> ."))))

    def make_blanktail(self):
        """The references of :meth:`make_refs` with a blank line at the end (an editor's extra newline)."""
        return self.write("blanktail.txt", b"a b .\nc d .\ne f .\n\n")

    def make_empty(self):
        return self.write("empty.txt", b"")

    def make_afile(self):
        return self.write("afile", b"not a folder\n")

    def make_full(self):
        os.makedirs(self.path("full"))
        self.write("full/onboarding.md", "an earlier run\n")
        return self.path("full")

    def make_emptydir(self):
        os.makedirs(self.path("emptydir"))
        return self.path("emptydir")

    # checkpoints, topic models
    def make_garbage(self):
        return self.write("garbage.pt", b"this is not a checkpoint\n")

    def make_twinadapt(self):  # two new speakers whose names differ by a space only
        return self.prefix("twinadapt", self._toy_lines("en", 4), self._toy_lines("fr", 4),
                           ["dr lee", "dr lee", "dr  lee", "dr  lee"])

    def make_fifoadapt(self):  # adaptation files whose speaker file is a named pipe
        prefix = self.prefix("fifoadapt", [b"i am tired ."], [b"je suis fatigu\xc3\xa9e ."], None)
        os.mkfifo(prefix + ".spk")
        return prefix

    def make_blankadapt(self):  # adaptation files whose second source line is empty
        return self.prefix("blankadapt", [b"i am tired .", b""], [b"je suis fatigu\xc3\xa9e .", b"je suis pr\xc3\xaat ."],
                           ["newbie"] * 2)

    def make_raisingpkg(self):  # a --user-dir package whose import fails
        folder = self.path("raisingpkg")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "__init__.py"), "w") as f:
            f.write("x = 1\nraise RuntimeError('registration failed')\n")
        return folder

    def make_fifo(self):  # a named pipe: reading it waits for a writer for ever
        path = self.path("fifo.pt")
        os.mkfifo(path)
        return path

    def make_notckpt(self):
        torch.save({"weights": torch.zeros(2)}, self.path("weights.pt"))
        return self.path("weights.pt")

    def make_topics_text(self):
        return self.write("topics_text.npz", b"topics: 20\n")

    def make_topics_empty(self):
        return self.write("topics_empty.npz", b"")

    def _topics(self, name, **fields):
        values = dict(format_version=np.int64(1), exp_topic_word=np.ones((3, 64), np.float32),
                      doc_topic_prior=np.float64(0.3), max_doc_update_iter=np.int64(100),
                      mean_change_tol=np.float64(1e-3), nspecial=np.int64(4), dictionary_hash=np.array("a" * 40))
        values.update(fields)
        values = {k: v for k, v in values.items() if v is not None}
        np.savez(self.path(name), **values)
        return self.path(name)

    def make_topics_nan(self):
        return self._topics("topics_nan.npz", exp_topic_word=np.full((3, 64), np.nan, np.float32))

    def make_topics_fields(self):
        return self._topics("topics_fields.npz", exp_topic_word=None, doc_topic_prior=None, max_doc_update_iter=None,
                            mean_change_tol=None, nspecial=None, dictionary_hash=None)

    def make_topics_shape(self):
        return self._topics("topics_shape.npz", exp_topic_word=np.ones(64, np.float32))

    # data folders with a broken speaker file
    # files a command may be told to write over: copies, so that a write that is not refused spoils no other test
    def make_ownckpt(self):
        return shutil.copy(self["ckpt"], self.path("own.pt"))

    def make_ownlink(self):
        link = self.path("own-link.pt")
        os.symlink(self["ownckpt"], link)
        return link

    def make_owndata(self):
        return self._data_copy("owndata")

    def make_ownvecs(self):
        return shutil.copy(self["garbage"], self.path("own.npz"))

    def _data_copy(self, name: str) -> str:
        dest = self.path(name)
        shutil.copytree(self["data"], dest, ignore=shutil.ignore_patterns("dict.spk.txt"))
        return dest

    def make_latin1spk(self):
        dest = self._data_copy("latin1spk")
        path = os.path.join(dest, "train.spk")
        lines = open(path, "rb").read().splitlines(keepends=True)
        lines[2] = LATIN1 + b"\n"
        open(path, "wb").writelines(lines)
        return dest

    def _spk_lines(self, name: str, change) -> str:
        """A copy of the toy data whose train.spk lines are ``change(lines)``."""
        dest = self._data_copy(name)
        path = os.path.join(dest, "train.spk")
        lines = open(path, "rb").read().splitlines(keepends=True)
        open(path, "wb").writelines(change(lines))
        return dest

    def make_shortspk(self):
        """train.spk 5 lines short of the sentences."""
        return self._spk_lines("shortspk", lambda lines: lines[:-5])

    def make_strangerspk(self):
        """train.spk naming on its line 7 a speaker the model was not trained with."""
        return self._spk_lines("strangerspk", lambda lines: lines[:6] + [b"stranger\n"] + lines[7:])

    def make_stalespkdict(self):
        """train.spk whose spk001 lines are spk002's, dict.spk.txt written before: spk001 listed, with no sentence."""
        from fairseq_speaker.data import SpeakerDictionary

        def change(lines):
            SpeakerDictionary.from_labels([line.decode().strip() for line in lines]).save(
                os.path.join(self.path("stalespkdict"), "dict.spk.txt"))
            return [b"spk002\n" if line == b"spk001\n" else line for line in lines]
        return self._spk_lines("stalespkdict", change)

    def make_trainspkdict(self):
        """A copy of the toy data with the dict.spk.txt of its train split."""
        from fairseq_speaker.data import SpeakerDictionary

        def change(lines):
            SpeakerDictionary.from_labels([line.decode().strip() for line in lines]).save(
                os.path.join(self.path("trainspkdict"), "dict.spk.txt"))
            return lines
        return self._spk_lines("trainspkdict", change)

    def make_nospkdata(self):
        dest = self._data_copy("nospkdata")
        os.remove(os.path.join(dest, "train.spk"))
        return dest

    def _binarized(self, name: str, split: str, keep: Callable[[List[str]], List[int]]) -> str:
        """A copy of the toy data whose ``split`` holds only the sentences ``keep(labels)`` names (their indices; none:
        an empty split, as fairseq-preprocess binarizes empty text), its speaker file with them."""
        from fairseq.data import indexed_dataset

        dest = self._data_copy(name)
        speaker_file = os.path.join(dest, f"{split}.spk")
        labels = open(speaker_file, encoding="utf-8").read().splitlines()
        kept = keep(labels)
        for lang in ("en", "fr"):
            prefix = os.path.join(dest, f"{split}.en-fr.{lang}")
            data = indexed_dataset.MMapIndexedDataset(prefix)
            items = [data[i].clone() for i in kept]
            del data
            builder = indexed_dataset.make_builder(prefix + ".new.bin", impl="mmap")
            for item in items:
                builder.add_item(item)
            builder.finalize(prefix + ".new.idx")
            for ext in ("bin", "idx"):
                os.replace(f"{prefix}.new.{ext}", f"{prefix}.{ext}")
        with open(speaker_file, "w", encoding="utf-8") as f:
            f.writelines(labels[i] + "\n" for i in kept)
        return dest

    def make_emptyvalid(self):
        """The toy data with a valid split of no sentences."""
        return self._binarized("emptyvalid", "valid", lambda labels: [])

    def make_onesentence(self):
        """The toy data whose training split holds one sentence of each speaker."""
        return self._binarized("onesentence", "train", lambda labels: sorted(labels.index(label)
                                                                             for label in set(labels)))

    # data folders with a preprocessing.json fairseq-train refuses, checkpoints whose record cannot be rebuilt
    def _prep_data(self, name: str, content: str) -> str:
        dest = self._data_copy(name)
        with open(os.path.join(dest, "preprocessing.json"), "w", encoding="utf-8") as f:
            f.write(content)
        return dest

    def make_prepnotjson(self):
        return self._prep_data("prepnotjson", "tokenizer: moses_lowercase\n")

    def make_prepunknown(self):
        return self._prep_data("prepunknown", '{"tokenizer": {"name": "mosses"}}')

    def make_prepnofile(self):
        return self._prep_data("prepnofile", '{"bpe": {"name": "subword_nmt", "bpe_codes": "codes.txt"}}')

    def make_prepnotruecase(self):
        return self._prep_data("prepnotruecase", '{"tokenizer": {"name": "moses_lowercase", "recase": true, '
                                                 '"truecase_model": "truecase.fr"}}')

    def _recorded(self, name: str, record: dict) -> str:
        state = torch.load(self["ckpt"], weights_only=True)
        state["task_state"]["preprocessing"] = record
        torch.save(state, self.path(name))
        return self.path(name)

    def make_lostbpe(self):
        """The shared model, as if trained on data whose BPE codes file is gone since."""
        return self._recorded("lostbpe.pt", {"source": self.path("gone/preprocessing.json"), "tokenizer": None, "bpe": {
            "name": "subword_nmt", "options": {"bpe_codes": self.path("gone/codes.txt"), "bpe_separator": "@@"},
            "sha256": {"bpe_codes": "0" * 64}}})

    def make_badtruecase(self):
        """The shared model, as if trained on data whose truecasing model is not one (a truncated or foreign file)."""
        path = self.path("truecase.fr")
        with open(path, "w", encoding="utf-8") as f:
            f.write("paris (3/4) Paris\n")
        return self._recorded("badtruecase.pt", {"source": self.path("preprocessing.json"), "bpe": None, "tokenizer": {
            "name": "moses_lowercase", "options": {"source_lang": "en", "target_lang": "fr", "recase": True,
                                                   "truecase_model": path},
            "sha256": {"truecase_model": preprocessing.sha256(path)}}})

    def _words(self, name: str, change) -> str:
        """The shared model with its speakers' words (fairseq-speaker-words), the record changed by ``change``."""
        with_words = self.path("words.pt")
        if not os.path.exists(with_words):
            words.main([self["data"], "--path", self["ckpt"], "--save", with_words, "--threads", "1",
                        "--calibrate", "off"])
        state = torch.load(with_words, weights_only=False)
        change(state["model"]["decoder.speaker_words._extra_state"])
        path = self.path(name)
        torch.save(state, path)
        return path

    def make_badwords(self):
        """A damaged record of the speakers' words: one id fewer than its speakers' counts say."""
        return self._words("badwords.pt", lambda record: record.update(words=record["words"][:-1]))

    def make_badaddto(self):
        """A record of the speakers' words whose bias is added to something that is not a step's scores."""
        return self._words("badaddto.pt", lambda record: record["options"].update(add_to="probs"))

    def make_withwords(self):
        """The shared model with its speakers' words as fairseq-speaker-words writes them (weight 6)."""
        return self._words("withwords.pt", lambda record: None)

    def make_zerowords(self):
        """The shared model with its speakers' words at weight 0 (as fairseq-speaker-words writes a memory that beats
        nothing): decoding is the network's."""
        return self._words("zerowords.pt", lambda record: record["options"].update(weight=0.0))

    def make_badweight(self):
        """A record of the speakers' words whose weight would turn every output into one repeated word."""
        return self._words("badweight.pt", lambda record: record["options"].update(weight=1e30))

    def make_badwindow(self):
        """A record of the speakers' words whose window puts the bias on nearly every word."""
        return self._words("badwindow.pt", lambda record: record["options"].update(window=30.0))

    def make_badbuilt(self):
        """A record of the speakers' words whose build names a speaker row beyond its build."""
        return self._words("badbuilt.pt", lambda record: record["built"].update(rows=torch.tensor([10 ** 6]),
                                                                                lengths=torch.tensor([0])))

    def make_badrank(self):
        """A record of the speakers' words whose choices are ranked by no known rule, with a negative prior."""
        return self._words("badrank.pt", lambda record: record["options"].update(rank_choices="votes", kinds_prior=-1.0))

    def make_badkinds(self):
        """A record of the speakers' words whose kinds of speaker name a word beyond the vocabulary."""
        trait = {"choices": [torch.tensor([4, 10 ** 6])], "prior": torch.tensor([1.0], dtype=torch.float64),
                 "tables": [torch.tensor([[0.5, 0.5]], dtype=torch.float64)]}
        return self._words("badkinds.pt", lambda record: record.update(kinds=[trait]))

    def make_otherwords(self):
        """A record of the speakers' words over another vocabulary than the model's."""
        return self._words("otherwords.pt", lambda record: record.update(vocab=99))

    def make_badwordsnpz(self):
        """A speaker vectors file of the shared model with its speakers' words, one word id beyond its vocabulary."""
        out = self.path("words.npz")
        vectors.main(["export", self["data"], "--path", self._words("sound.pt", lambda record: None), "--out", out])
        with np.load(out) as loaded:
            arrays = {key: loaded[key] for key in loaded.files}
        arrays["words/ids"][-1] = 10 ** 6
        np.savez(out, **arrays)
        return out

    def make_bytesnames(self):
        """A speaker vectors file of the shared model whose names are stored as bytes."""
        out = self.path("bytesnames.npz")
        vectors.main(["export", self["data"], "--path", self["ckpt"], "--out", out, "--speakers", "spk000"])
        with np.load(out) as loaded:
            arrays = {key: loaded[key] for key in loaded.files}
        arrays["names"] = np.array([b"lee"], dtype="S")
        np.savez(out, **arrays)
        return out

    def make_lstmbase(self):
        return self.request.getfixturevalue("trained")("lstm_base")

    def make_spktoken(self):
        return self.request.getfixturevalue("trained")("lstm_base+spk_token")

    # fairseq-generate's --lm-path: a language model of the toy target text, data folders with its dict.txt
    def make_lm(self):
        """A language model (fairseq's transformer_lm, one update) of the toy target text, trained with the toy target
        dictionary."""
        from fairseq_cli import preprocess

        raw, lm_data = self.request.getfixturevalue("toy")["raw"], self.path("lm-data")
        preprocess.main(preprocess.options.get_preprocessing_parser().parse_args([
            "--only-source", "--trainpref", f"{raw}/train.fr", "--validpref", f"{raw}/valid.fr", "--srcdict",
            os.path.join(self["data"], "dict.fr.txt"), "--destdir", lm_data, "--workers", "1"]))
        fairseq_train([lm_data, "--task", "language_modeling", "--arch", "transformer_lm", "--decoder-layers", "1",
                       "--decoder-embed-dim", "8", "--decoder-ffn-embed-dim", "8", "--decoder-attention-heads", "1",
                       "--tokens-per-sample", "16", "--sample-break-mode", "none", "--batch-size", "4",
                       "--max-update", "1", "--optimizer", "adam", "--lr", "1e-3", "--save-dir", self.path("lm"),
                       "--no-epoch-checkpoints", "--no-progress-bar", "--num-workers", "0"])
        return self.path("lm/checkpoint_last.pt")

    def _lm_data(self, name: str, dictionary: List[str]) -> str:
        """A copy of the toy data whose dict.txt (the language model's dictionary) holds ``dictionary``."""
        dest = self._data_copy(name)
        with open(os.path.join(dest, "dict.txt"), "w", encoding="utf-8") as f:
            f.writelines(dictionary)
        return dest

    def make_lmdata(self):
        return self._lm_data("lmdata", open(os.path.join(self["data"], "dict.fr.txt"), encoding="utf-8").readlines())

    def make_colonckpt(self):
        return shutil.copy(self["ckpt"], self.path("model:v2.pt"))

    def make_colondata(self):  # the toy's data folder under a folder whose name holds ':'
        return shutil.copytree(self["data"], self.path("d:2024/bin"))

    def make_lmbadformat(self):
        return self._lm_data("lmbadformat", ["je\n", "suis 3\n"])

    def make_lmswapped(self):
        lines = open(os.path.join(self["data"], "dict.fr.txt"), encoding="utf-8").readlines()
        lines[4], lines[5] = lines[5], lines[4]
        return self._lm_data("lmswapped", lines)

    def make_lmsource(self):
        return self._lm_data("lmsource", open(os.path.join(self["data"], "dict.en.txt"), encoding="utf-8").readlines())

    def make_alienprep(self):
        """The shared model, as if its data were tokenized by a tokenizer of a package not installed here."""
        return self._recorded("alienprep.pt", {"source": "preprocessing.json", "bpe": None, "tokenizer": {
            "name": "someone_elses", "options": {}, "sha256": {}}})


@pytest.fixture
def places(tmp_path, request):
    return Places(tmp_path, request)


# -- the command lines ------------------------------------------------------------------------------------


def _cases():
    cases = []
    for command, rows in COMMAND_PROBES.items():
        for row in rows:
            values, marks = (row.values, row.marks) if hasattr(row, "values") else (row, ())
            promise, args, status, message = values
            cases.append(pytest.param(command, args, status, message, marks=marks,
                                      id=f"{command} {' '.join(args)}"[:150] + f" [{promise}]"))
    return cases


def run_in_process(main: Callable, argv: List[str], capsys):
    """``main(argv)`` as its command line would end: (exit status, standard error). A user error escaping it is
    what the package's exception hook ends with status 2 in a real process; any other exception fails the test
    (it would be a traceback)."""
    code = 0
    try:
        main(argv)
    except SystemExit as e:
        code = e.code
    except Exception as e:  # noqa: BLE001  (re-raised unless it is a user error)
        error = user_error_in(e)
        if error is None:
            raise
        print(f"error: {error}", file=sys.stderr)
        code = USER_ERROR_STATUS
    err = capsys.readouterr().err
    if isinstance(code, str):  # sys.exit("message"): printed by Python, status 1
        err, code = err + code, 1
    return code, err


@pytest.mark.parametrize("command,args,status,message", _cases())
def test_a_bad_command_line_ends_in_one_message(command, args, status, message, places, capsys, monkeypatch):
    monkeypatch.chdir(places.tmp)
    argv = [places.fill(a) for a in args]
    code, err = run_in_process(MAINS[command], argv, capsys)
    assert code == status, err[-2000:]
    assert err.strip(), "no message"
    assert places.fill(message) in err.strip().splitlines()[-1], err[-2000:]


def _first_row(command):
    """The arguments, exit status and message of the first row of ``command``."""
    row = COMMAND_PROBES[command][0]
    return (row.values if hasattr(row, "values") else row)[1:]


@pytest.mark.parametrize("command", sorted(COMMAND_PROBES))
def test_the_real_command_line_ends_likewise(command, places):
    args, status, message = _first_row(command)
    name = command if command.startswith("fairseq-speaker-") else command[len("fairseq-"):]
    proc = run(name, [places.fill(a) for a in args], check=False, cwd=places.tmp)
    assert proc.returncode == status and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert places.fill(message) in proc.stderr.strip().splitlines()[-1]


def test_a_full_disk_during_a_save_ends_in_one_message(places, capsys, monkeypatch):
    """fairseq-speaker-words --save over an earlier file, on a disk that fills up half way through the write."""
    save = places.write("o.pt", b"the earlier checkpoint")

    def full_disk(obj, f, *args, **kwargs):
        with open(f, "wb") as out:
            out.write(b"half a checkpoint")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(torch, "save", full_disk)
    code, err = run_in_process(words.main, [places["data"], "--path", places["ckpt"], "--save", save, "--threads",
                                            "1"], capsys)
    assert code == 2 and "Traceback" not in err, err[-2000:]
    assert f"no space left on device writing {save}; the earlier file is kept" in err.strip().splitlines()[-1]
    assert open(save, "rb").read() == b"the earlier checkpoint"
    assert os.listdir(places.tmp) == ["o.pt"]  # no temporary file left


# -- decoding with the speakers' words under fairseq's search options ------------------------------------------------

#: fairseq-generate's search options beyond GENERATE's beam of 2: a memory of weight 0 decodes as the network alone
#: under each, and one that acts decodes under each but the two that would leave it out (rows of COMMAND_PROBES)
SEARCHES = {
    "nbest": ["--nbest", "2"],
    "greedy": ["--beam", "1"],
    "sampling": ["--sampling", "--nbest", "2", "--seed", "3"],
    "top-k sampling": ["--sampling", "--nbest", "2", "--sampling-topk", "3", "--seed", "3"],
    "nucleus sampling": ["--sampling", "--nbest", "2", "--sampling-topp", "0.6", "--seed", "3"],
    "prefix": ["--prefix-size", "1"],
    "diverse beam": ["--diverse-beam-groups", "2"],
    "diverse siblings": ["--diversity-rate", "0.5"],
    "source length": ["--match-source-len"],
    "temperature": ["--temperature", "0.5"],
    "alignment": ["--print-alignment"],
    "reference scores": ["--score-reference"],
}
#: the searches refused for a memory that acts (it would be left out)
LEAVE_THE_MEMORY_OUT = ("alignment", "reference scores")


def _generated(places, capsys, model: str, *options: str) -> List[str]:
    """fairseq-generate's hypotheses of the toy test split, with their scores (and alignments), in sentence order."""
    capsys.readouterr()
    fairseq_generate([places["data"], "--path", model, *GENERATE, *options])
    return sorted(line for line in capsys.readouterr().out.splitlines() if line[:2] in ("H-", "P-", "A-"))


#: the searches of the default run (one of each kind: the beam's, sampling, a forced prefix, one that leaves the memory
#: out); the others in the slow tier, each a run of fairseq-generate three times
DEFAULT_SEARCHES = ("nbest", "sampling", "prefix", "alignment")


@pytest.mark.parametrize("search", [s if s in DEFAULT_SEARCHES else pytest.param(s, marks=pytest.mark.slow)
                                    for s in SEARCHES])
def test_a_memory_of_weight_0_decodes_as_the_network_under_every_search(places, capsys, search):
    network = _generated(places, capsys, places["ckpt"], *SEARCHES[search])
    assert sum(line.startswith("H-") for line in network) >= 37, network[:3]
    assert _generated(places, capsys, places["zerowords"], *SEARCHES[search]) == network
    if search not in LEAVE_THE_MEMORY_OUT:
        remembered = _generated(places, capsys, places["withwords"], *SEARCHES[search])
        assert sum(line.startswith("H-") for line in remembered) == sum(line.startswith("H-") for line in network)


#: what a search returns, against another run of the toy test split: (the promise of docs/reliability.md, what, the
#: model, its options, the other run's options, "same" (the same hypotheses and scores) or "no-lower" (each sentence's
#: best score no lower than the other run's))
SEARCH_PROBES = [
    ("prefix-keeps-the-speaker", "--prefix-size 1 on a --speaker-token model is its speaker token alone", "{spktoken}",
     ["--prefix-size", "1"], [], "same"),
    ("prefix-keeps-the-speaker", "--prefix-size 1 with --beam-stop unbeaten on a --speaker-token model", "{spktoken}",
     ["--prefix-size", "1", "--beam-stop", "unbeaten"], ["--beam-stop", "unbeaten"], "same"),
    ("unbeaten-never-worse", "--prefix-size longer than the references", "{ckpt}",
     ["--prefix-size", "50", "--beam-stop", "unbeaten"], ["--prefix-size", "50"], "no-lower"),
    ("unbeaten-never-worse", "--prefix-size longer than the references of a --speaker-token model", "{spktoken}",
     ["--prefix-size", "50", "--beam-stop", "unbeaten"], ["--prefix-size", "50"], "no-lower"),
    ("unbeaten-never-worse", "--nbest 2 --lenpen 0 --max-len-b 12", "{ckpt}",
     ["--nbest", "2", "--lenpen", "0", "--max-len-b", "12", "--beam-stop", "unbeaten"],
     ["--nbest", "2", "--lenpen", "0", "--max-len-b", "12"], "no-lower"),
    ("unbeaten-never-worse", "--diverse-beam-groups 2 --unnormalized", "{ckpt}",
     ["--diverse-beam-groups", "2", "--unnormalized", "--beam-stop", "unbeaten"],
     ["--diverse-beam-groups", "2", "--unnormalized"], "no-lower"),
]


@pytest.mark.parametrize("model,options,other,relation", [row[2:] for row in SEARCH_PROBES],
                         ids=[row[1] for row in SEARCH_PROBES])
def test_a_search_returns_what_its_options_promise(places, capsys, model, options, other, relation):
    def best(lines: List[str]) -> Dict[str, float]:
        scores: Dict[str, float] = {}
        for line in lines:
            if line.startswith("H-"):
                sentence, score, _ = line.split("\t")
                scores[sentence] = max(scores.get(sentence, -float("inf")), float(score))
        return scores

    path = places.fill(model)
    mine, theirs = _generated(places, capsys, path, *options), _generated(places, capsys, path, *other)
    assert len(best(mine)) == 37, mine[:3]
    if relation == "same":
        assert mine == theirs
    else:
        lower = {s: (score, best(theirs)[s]) for s, score in best(mine).items() if score < best(theirs)[s] - 1e-4}
        assert not lower, lower


def test_a_callers_prefix_on_a_speaker_token_model_follows_the_speaker_token(places):
    """The hub's prefix_tokens are words: the task puts the sentence's speaker token before them (they took its place,
    and the sentence was translated as no speaker)."""
    from fairseq_speaker.serving import SpeakerTranslator

    translator = SpeakerTranslator.from_pretrained(places["spktoken"], data=places["data"], max_len_b=4)
    for sentence, speaker in (("i am tired .", "spk000"), ("you want the drugs .", "spk001")):
        best = translator.translate(sentence, speaker)
        # forcing the first word the search chose anyway changes nothing (one sentence a call: the hub gives the
        # same prefix to every batch, in its own order)
        first = torch.tensor([[translator.task.target_dictionary.index(best.split()[0])]])
        assert translator.translate(sentence, speaker, inference_step_args={"prefix_tokens": first}) == best


def test_diverse_beam_search_gives_a_sentence_the_same_hypotheses_in_any_batch(places, capsys):
    """fairseq's diverse beam search looked a sentence's groups' overlap up by its id in the split, where it keeps it by
    position in the batch: an IndexError past the first batch, another sentence's overlap within it."""
    def texts(batch_size):
        lines = _generated(places, capsys, places["withwords"], "--diverse-beam-groups", "2", "--nbest", "2",
                           "--batch-size", batch_size)
        return [(line.split("\t")[0], line.split("\t")[2]) for line in lines if line.startswith("H-")]

    alone = texts("1")
    assert len(alone) == 2 * 37
    assert texts("37") == alone


def test_sampling_draws_from_the_fused_step_normalized(places, monkeypatch):
    """fairseq's nucleus (--sampling-topp) sums a step's probabilities, which the memory's bias no longer keeps at 1; a
    beam sums the fused scores as they are (shallow fusion)."""
    from fairseq_speaker.sequence_generator import SpeakerWordsEnsemble
    from fairseq_speaker.serving import SpeakerTranslator

    sums: List[torch.Tensor] = []
    forward = SpeakerWordsEnsemble.forward_decoder

    def spy(self, *args, **kwargs):
        log_probs, attn = forward(self, *args, **kwargs)
        sums.append(torch.logsumexp(log_probs.float(), dim=-1))
        return log_probs, attn

    monkeypatch.setattr(SpeakerWordsEnsemble, "forward_decoder", spy)
    translator = SpeakerTranslator.from_pretrained(places["withwords"], data=places["data"], max_len_b=4)
    translator.translate_nbest(places.sources, "spk000", beam=2, nbest=2, sampling=True, sampling_topp=0.6)
    sampled = torch.cat(sums)
    sums.clear()
    translator.translate(places.sources, "spk000", beam=2)
    searched = torch.cat(sums)
    assert torch.allclose(sampled, torch.zeros_like(sampled), atol=1e-5), sampled
    assert not torch.allclose(searched, torch.zeros_like(searched), atol=1e-3)  # the memory acts on the beam's steps


def test_a_language_model_trained_with_the_target_dictionary_is_fused(places, capsys):
    """--lm-path with the target dictionary as the data folder's dict.txt (what the refusals of COMMAND_PROBES say to
    do): fairseq adds the language model's scores to each step's."""
    def generated(*options: str) -> List[str]:
        capsys.readouterr()
        fairseq_generate([places["lmdata"], "--path", places["ckpt"], *GENERATE, *options])
        return sorted(line for line in capsys.readouterr().out.splitlines() if line[:2] in ("H-", "P-"))

    alone = generated()
    fused = generated("--lm-path", places["lm"], "--lm-weight", "0.5")
    assert sum(line.startswith("H-") for line in fused) == sum(line.startswith("H-") for line in alone) == 37
    assert fused != alone


def test_a_corpus_written_where_another_was_leaves_none_of_its_held_out_speakers(tmp_path, capsys):
    """The held-out split of the earlier corpus was left beside the new one's (onboarding-eval would read another
    corpus's speakers)."""
    toy_corpus, out = MAINS["fairseq-speaker-toy-corpus"], str(tmp_path / "raw")
    sizes = ["--train", "48", "--valid", "24", "--test", "24"]
    toy_corpus(["--out", out, *sizes, "--heldout", "--heldout-speakers", "2", "--heldout-sentences", "3"])
    assert os.path.exists(os.path.join(out, "heldout.spk"))
    toy_corpus(["--out", out, *sizes, "--speakers", "6"])
    assert [name for name in os.listdir(out) if name.startswith("heldout.")] == []
    assert open(os.path.join(out, "train.spk")).read().count("\n") == 48


@pytest.mark.parametrize("heldout,change,args,message", [
    (True, None, ["--shots", "-1"], "--shots: numbers of sentences must be 0 or more, got -1"),  # a traceback
    (True, None, ["--shots", "1", "1"], "--shots: 1 given twice: give each number once"),  # the row printed twice
    (False, None, ["--shots", "1"], "has no held-out speakers (heldout.spk), whose first n sentences it counts"),
    (False, ("test.spk", lambda lines: lines[:30]), [],  # a ValueError that named no file
     "test.spk has 30 speaker labels but {raw}/test.traits 60 lines: one of each a sentence"),
    (False, ("test.spk", lambda lines: ["ghost"] + lines[1:]), [],  # scored as a speaker of no sentence, silently
     "test.spk:1: speaker 'ghost' has no training sentence (train.spk)"),
    (True, ("heldout.traits", lambda lines: None), [],  # a FileNotFoundError's traceback
     "{raw}/heldout.traits: No such file or directory: the oracle reads each split's speakers (heldout.spk) and "
     "traits (heldout.traits)"),
    (False, ("speakers.json", lambda lines: ["{"]), [],  # a JSONDecodeError's traceback
     "{raw}/speakers.json: not the speakers.json of a corpus (JSONDecodeError: "),
])
def test_the_oracle_refuses_what_it_cannot_score_in_one_line(tmp_path, capsys, heldout, change, args, message):
    from fairseq_speaker.toy import oracle

    raw = str(tmp_path / "raw")
    extra = ["--heldout", "--heldout-speakers", "2", "--heldout-sentences", "12"] if heldout else []
    MAINS["fairseq-speaker-toy-corpus"](["--out", raw, "--styles", "2", "--speakers", "6", "--train", "60",
                                         "--valid", "12", "--test", "60", *extra])
    if change is not None:
        path = os.path.join(raw, change[0])
        changed = change[1](open(path, encoding="utf-8").read().splitlines())
        if changed is None:
            os.remove(path)
        else:
            open(path, "w", encoding="utf-8").write("\n".join(changed) + "\n")
    capsys.readouterr()
    code, err = run_in_process(oracle.main, [raw, *args], capsys)
    assert code == 2 and "Traceback" not in err, err
    assert message.format(raw=raw) in err.strip().splitlines()[-1], err


def test_params_counts_speakers_by_arithmetic(capsys):
    """A hundred million speakers are counted, not listed (the table is never built)."""
    parameter_accounting.main(["--tgt-vocab", "40000", "--speakers", "100000000"])
    assert "1,051,768,512 parameters" in capsys.readouterr().out  # 51,768,512 + 10^8 x 10 weights (fact, r = 10)


def test_onboarding_eval_with_force_replaces_the_earlier_results(places, capsys):
    """--force: the earlier run's files are gone, the new ones are there (nothing of two runs mixed)."""
    out = places["full"]
    stale = os.path.join(out, "hypotheses.n7.txt")
    open(stale, "w").write("an earlier run\n")
    code, err = run_in_process(evaluate.main, [places.fill(a) for a in EVAL_ON] + [
        "--heldout-prefix", places["adapt"], "--shots", "0", "1", "--out", out, "--force"], capsys)
    assert code is None or code == 0, err[-2000:]
    assert not os.path.exists(stale)
    assert sorted(os.listdir(out)) == ["hypotheses.n0.txt", "hypotheses.n1.txt", "onboarding.json", "onboarding.md",
                                       "onboarding.png"]
    assert "an earlier run" not in open(os.path.join(out, "onboarding.md")).read()


@pytest.mark.parametrize("value", ["0", "fast"])  # every other refused value: tests/unit/test_speaker_rows.py
def test_fairseq_train_refuses_a_bad_speaker_lr_scale(toy, tmp_path, value):
    proc = run("train", train_args(toy["bin"], str(tmp_path / "ckpt"), "lstm_fact_bias", "--speaker-lr-scale", value),
               check=False)
    assert proc.returncode == 2
    assert_user_error(proc)
    assert f"--speaker-lr-scale {value!r}: give 'auto'" in proc.stderr
    assert not os.path.exists(tmp_path / "ckpt" / "checkpoint_last.pt")


#: fairseq-interactive's input and options: (the promise of docs/reliability.md, standard input, options, text of the
#: refusal)
INTERACTIVE_PROBES = [
    ("search-options-checked", "spk000\ti am tired .\n", ["--speaker-per-line", "--constraints"],
     "--speaker-per-line and --constraints both read tab-separated fields"),
    ("ignored-options-refused", "spk000\ti am tired .\n", ["--speaker-per-line", "--speaker", "spk005"],
     "--speaker spk005 and --speaker-per-line both give the input's speakers"),
    ("lookalike-speaker-refused", "i am tired .\n", ["--speaker", " spk000"],
     "--speaker: speaker ' spk000' looks like 'spk000', a speaker of the model, but is not it"),
    ("lookalike-speaker-refused", "i am tired .\n", ["--speaker", "spk000\u200b"],
     "looks like 'spk000', a speaker of the model"),
    ("lookalike-speaker-refused", "i am tired .\n", ["--speaker", ""], "--speaker: an empty speaker name"),
    ("ignored-options-refused", "i am tired .\n", ["--speaker", "spk000", "--speaker-file", "test.spk"],
     "--speaker-file test.spk gives the speakers of a binarized split (fairseq-generate); fairseq-interactive's input "
     "lines take --speaker NAME or --speaker-per-line: leave it out"),
    ("search-options-checked", "i am tired .\n", ["--speaker", "spk000", "--nbest", "-1"],
     "--nbest must be at least 1 (the translations given of each sentence), got -1"),
    ("one-line-user-errors", "i am tired .\n", [], "pass --speaker NAME, or --speaker-per-line"),
    ("one-line-user-errors", "nobody\ti am tired .\n", ["--speaker-per-line", "--unknown-speaker", "fail"],
     "<input>:1: speaker 'nobody' is not among the model's 8 speakers"),
    ("one-line-user-errors",
     "spk000\ti am tired .\n", ["--speaker-per-line", "--source-lang", "en", "--target-lang", "fr", "--tokenizer",
                                 "moses_lowercase", "--recase", "--truecase-model", "no/such/truecase.fr"],
     "moses_lowercase: truecase_model no/such/truecase.fr: no such file"),
    ("ignored-options-refused",
     "spk000\ti am tired .\n", ["--speaker-per-line", "--source-lang", "en", "--target-lang", "fr", "--tokenizer",
                                 "moses_lowercase", "--truecase-model", "no/such/truecase.fr"],
     "truecase_model no/such/truecase.fr is only used with recase: give recase true (--recase)"),
    # fairseq's own checks of its options, which ended in a traceback
    ("search-options-checked", "i am tired .\n", ["--speaker", "spk000", "--score-reference"],
     "--score-reference scores the reference translations of a binarized split (fairseq-generate), and these sentences "
     "have none: leave out --score-reference"),
    ("one-line-user-errors", "i am tired .\n", ["--speaker", "spk000", "--batch-size", "4", "--buffer-size", "2"],
     "--batch-size cannot be larger than --buffer-size: give a --buffer-size of at least --batch-size"),
    ("one-line-user-errors", "i am tired .\n", ["--speaker", "spk000", "--seed", "-1"],
     "Seed must be between 0 and 2**32 - 1: give --seed a whole number from 0 to 4294967295"),
    # UTF-16 (NUL bytes in every other place): every line read as words holding NULs, one line more than written
    ("not-utf8", "i am tired .\nyou are nice .\n".encode("utf-16-le").decode("ascii"), ["--speaker", "spk000"],
     "standard input: the text looks like UTF-16 (a byte-order mark or NUL bytes in its first line), not UTF-8: "
     "convert it (iconv -f utf-16 -t utf-8)"),
    ("not-utf8", "spk000\ti am tired .\n".encode("utf-16-be").decode("ascii"), ["--speaker-per-line"],
     "standard input: the text looks like UTF-16"),
    ("one-line-user-errors", "", ["--speaker", "spk000", "--input", "no/such/input.txt"],
     "--input no/such/input.txt: No such file or directory: give a readable text file, or leave out --input"),
    ("one-line-user-errors", "i am tired .\n", ["--speaker", "spk000", "--replace-unk"],
     "--replace-unk @@ : No such file or directory: give it the alignment dictionary file"),
    # fairseq-interactive's own options that it took and read as something else without a word
    ("ignored-options-refused", "i am tired .\n", ["--speaker", "spk000", "--prefix-size", "100"],
     "fairseq-interactive does not read --prefix-size 100: it forces the first words of a reference translation"),
    ("numbers-checked", "i am tired .\n", ["--speaker", "spk000", "--buffer-size", "-1"],
     "--buffer-size must be at least 1 (the lines read before they are translated; fairseq took it for 1), got -1"),
    ("numbers-checked", "i am tired .\n", ["--speaker", "spk000", "--max-tokens", "0"],
     "--max-tokens must be at least 1 (tokens a batch; fairseq took 0 for no limit), got 0"),
    ("numbers-checked", "i am tired .\n", ["--speaker", "spk000", "--batch-size", "0"],
     "--batch-size must be at least 1 (sentences a batch), got 0"),
]


def test_fairseq_interactive_skips_a_bad_line_of_its_own_and_goes_on(toy, trained):
    """docs/usage.md: with --speaker-per-line, a line that cannot be read is reported by its number and skipped, and the
    session goes on. A buffer whose every line was skipped (one line, by default) had ended the session with a message
    about --skip-invalid-size-inputs-valid-test, and the next lines were lost."""
    stdin = "\uff53pk000\ti am tired .\n\nspk001\tyou are free .\n"
    proc = run("interactive", [toy["bin"], "--user-dir", USER_DIR, "--task", "speaker_translation",
                               "--path", trained("lstm_fact_bias"), "--speaker-per-line"], stdin=stdin, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "<input>:1: speaker '\uff53pk000' looks like 'spk000'" in proc.stderr
    assert "<input>:2: expected 'SPEAKER<TAB>sentence'" in proc.stderr
    assert "skip-invalid-size-inputs" not in proc.stderr
    assert re.search(r"^H-2\t", proc.stdout, re.M), proc.stdout  # the third line, translated


def test_fairseq_validate_says_what_its_loss_leaves_out_and_what_it_lacks(places):
    """Without --task it ended in fairseq's ``KeyError: None``; a model with its speakers' words was scored without
    them (the same loss as without), without a word."""
    options = ["--user-dir", USER_DIR, "--valid-subset", "valid", "--max-tokens", "1000", "--cpu"]
    proc = run("validate", [places["data"], "--path", places["ckpt"], *options], check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "error: no --task given: give --task speaker_translation" in proc.stderr, proc.stderr
    words = run("validate", [places["data"], "--path", places["withwords"], "--task", "speaker_translation", *options])
    plain = run("validate", [places["data"], "--path", places["ckpt"], "--task", "speaker_translation", *options])
    said = "remembers its speakers' words (fairseq-speaker-words), which act in decoding only: the loss is the network's"
    assert said in words.stdout + words.stderr and said not in plain.stdout + plain.stderr, words.stdout


@pytest.mark.parametrize("buffer", ["1", "4"])
def test_fairseq_interactive_numbers_each_translation_by_its_line_whatever_the_buffer(toy, trained, buffer):
    """With --speaker-per-line and a buffer of 4, the lines kept were numbered among themselves and fairseq added the
    buffer's start: the translation of line 3 came out as H-1, line 7's as H-4, both ids of skipped lines."""
    stdin = "spk000\ti am tired .\nno tab here\nspk001\tyou are free .\n\nspk002\t\n\ti am tired .\nspk003\tyou are free .\n"
    proc = run("interactive", [toy["bin"], "--user-dir", USER_DIR, "--task", "speaker_translation", "--path",
                               trained("lstm_fact_bias"), "--speaker-per-line", "--buffer-size", buffer,
                               "--batch-size", buffer], stdin=stdin, check=False)
    assert proc.returncode == 0, proc.stderr
    assert sorted(int(line.split("\t")[0][2:]) for line in proc.stdout.splitlines() if line.startswith("H-")) == \
        [0, 2, 6], proc.stdout  # lines 1, 3 and 7, counted from 0 (2, 4, 5 and 6 skipped, each with a warning)
    sources = {line.split("\t")[0][2:]: line.split("\t")[1] for line in proc.stdout.splitlines()
               if line.startswith("S-")}
    assert sources["2"] == sources["6"] == "you are free .", proc.stdout


@pytest.mark.parametrize("stdin,extra,message", [row[1:] for row in INTERACTIVE_PROBES])
def test_fairseq_interactive_refuses_bad_speakers(toy, trained, stdin, extra, message):
    """Both read the tab-separated fields of a line: fairseq would translate the speaker's label. (And the
    tokenizer of SATED's recipe, named on the command line, with a truecasing model it cannot use.)"""
    proc = run("interactive", [toy["bin"], "--user-dir", USER_DIR, "--task", "speaker_translation",
                               "--path", trained("lstm_fact_bias"), *extra], stdin=stdin, check=False)
    assert proc.returncode == 2
    assert_user_error(proc)
    assert message in proc.stderr


#: fairseq-interactive given a data folder it cannot read the dictionaries from: (the promise of docs/reliability.md,
#: the folder, more options, text of the refusal)
INTERACTIVE_DATA_PROBES = [
    ("data-folder-has-dictionaries", "{emptydir}", [], NO_DICTIONARIES),
    ("data-folder-has-dictionaries", "{emptydir}", ["--source-lang", "en", "--target-lang", "fr"],
     "{emptydir}: no dict.en.txt and no dict.fr.txt there: give the data folder the model was trained on"),
    ("data-folder-has-dictionaries", "{ckptdir}", ["--source-lang", "en", "--target-lang", "fr"],
     "{ckptdir}: no dict.en.txt and no dict.fr.txt there"),
]


@pytest.mark.parametrize("folder,extra,message", [row[1:] for row in INTERACTIVE_DATA_PROBES])
def test_fairseq_interactive_refuses_a_data_folder_without_dictionaries(places, folder, extra, message):
    """fairseq's setup ended in "Could not infer language pair" or a FileNotFoundError, with a traceback."""
    proc = run("interactive", [places.fill(folder), "--user-dir", USER_DIR, "--task", "speaker_translation",
                               "--path", places["ckpt"], "--speaker", "spk000", *extra], stdin="i am tired .\n",
               check=False)
    assert proc.returncode == 2
    assert_user_error(proc)
    assert places.fill(message) in proc.stderr


#: empty input lines of fairseq-interactive: (the promise of docs/reliability.md, standard input, options, the line
#: numbers (from 0) that are empty)
EMPTY_INPUT_PROBES = [
    ("empty-line-empty-translation", "i am tired .\n\nyou are happy .\n", ["--speaker", "spk000"], [1]),
    ("empty-line-empty-translation", "   \ni am tired .\n", ["--speaker", "spk000", "--nbest", "2"], [0]),
    ("empty-line-empty-translation", "\n\n", ["--speaker", "spk000", "--beam-stop", "unbeaten"], [0, 1]),
]


def _interactive_hypotheses(args: List[str], stdin: str):
    """fairseq-interactive's output for ``stdin`` and its hypotheses by line (from 0), one output line for each line
    in checked."""
    out = run_here("interactive", args, stdin=stdin)
    hypotheses: Dict[int, List[str]] = {}
    for line in out.stdout.splitlines():
        if line.startswith("H-"):
            number, _, text = line[2:].split("\t")
            hypotheses.setdefault(int(number), []).append(text)
    assert sorted(hypotheses) == list(range(len(stdin.splitlines()))), out.stdout
    return out, hypotheses


def _the_others_as_alone(args: List[str], stdin: str, left: List[int], hypotheses: Dict[int, List[str]]):
    """The lines of ``stdin`` but ``left`` translated alone give the hypotheses they had among them; the run's output."""
    others = [line for number, line in enumerate(stdin.splitlines()) if number not in left]
    alone = run_here("interactive", args, stdin="".join(line + "\n" for line in others))
    assert [line.split("\t")[2] for line in alone.stdout.splitlines() if line.startswith("H-")] == [
        text for number in sorted(hypotheses) if number not in left for text in hypotheses[number]]
    return alone


def _interactive_args(toy, trained, extra: List[str]) -> List[str]:
    return [toy["bin"], "--user-dir", USER_DIR, "--task", "speaker_translation", "--path", trained("lstm_fact_bias"),
            "--beam", "5", "--max-len-b", "6", *extra]


@pytest.mark.parametrize("stdin,extra,empty", [row[1:] for row in EMPTY_INPUT_PROBES])
def test_fairseq_interactive_answers_an_empty_line_with_an_empty_one(toy, trained, stdin, extra, empty):
    """Each empty line gets one empty hypothesis (its H- line's text empty) and a warning; the other lines are
    translated as they are without it, one line out for one line in."""
    args = _interactive_args(toy, trained, extra)
    out, hypotheses = _interactive_hypotheses(args, stdin)
    for number in empty:
        assert hypotheses[number] == [""], out.stdout
    assert "translated as an empty sentence" in out.log and "sentence id" not in out.log  # no position for an id
    if len(empty) < len(stdin.splitlines()):
        assert "empty sentence" not in _the_others_as_alone(args, stdin, empty, hypotheses).log


#: input lines fairseq-interactive cannot translate as written: (the promise of docs/reliability.md, standard input as
#: Python reads it (a byte that is not UTF-8 is a lone surrogate, U+DC80 to U+DCFF), options, the lines (from 0)
#: answered by an empty translation, text of the warning)
LONG_LINE = " ".join(["i am tired ."] * 300)  # 1,201 tokens with its end: fairseq-interactive's 1,024 positions
UNTRANSLATABLE_LINE_PROBES = [
    ("untranslatable-line-empty", f"{LONG_LINE}\ni am sorry .\n", ["--speaker", "spk000"], [0],
     "<input>:1: translated as an empty sentence: 1201 tokens (with the end of sentence), more than the 1024 source "
     "positions the model takes: split the line into sentences"),
    ("untranslatable-line-empty", "i am tired .\ni am \udce9t\udce9 tired .\n", ["--speaker", "spk000"], [1],
     "<input>:2: translated as an empty sentence: not valid UTF-8 (byte 0xe9 at character 6): give UTF-8 text"),
    ("untranslatable-line-empty", "i am tired .\n</s>\n", ["--speaker", "spk000"], [1],
     "<input>:2: translated as an empty sentence: holding '</s>' (word 1), a symbol of fairseq's dictionaries that the "
     "model reads as a control code, not a word: give a sentence"),
    ("untranslatable-line-empty", "i am tired .\n\u200b\ufeff\n", ["--speaker", "spk000"], [1],
     "<input>:2: translated as an empty sentence: only characters that show nothing (U+200B, U+FEFF): give a sentence"),
    ("untranslatable-line-empty",
     f"spk001\ti am tired .\nspk002\t{LONG_LINE}\nspk003\ti am sorry .\n",
     ["--speaker-per-line", "--buffer-size", "4", "--batch-size", "4"], [1], "<input>:2: translated as an empty sentence"),
]


@pytest.mark.parametrize("stdin,extra,emptied,warning", [row[1:] for row in UNTRANSLATABLE_LINE_PROBES])
def test_fairseq_interactive_answers_a_line_it_cannot_translate_with_an_empty_one(toy, trained, stdin, extra, emptied,
                                                                                  warning):
    """fairseq's size check ended the session in a traceback at a long line (the lines after it never translated);
    a byte that is not UTF-8 made its word <unk> without a word. Each such line gets one empty hypothesis and a
    warning naming its line; the others are translated as without it."""
    args = _interactive_args(toy, trained, extra)
    out, hypotheses = _interactive_hypotheses(args, stdin)
    lines = stdin.splitlines()
    assert [n for n in hypotheses if hypotheses[n] == [""] and lines[n].strip()] == emptied, out.stdout
    assert warning in out.log, out.log
    assert out.log.count("translated as an empty sentence") == len(emptied) + sum(not line.strip() for line in lines)
    _the_others_as_alone(args, stdin, emptied, hypotheses)


#: fairseq-interactive's --input FILE read as written: (the promise of docs/reliability.md, the file's bytes, options,
#: the lines (from 0) answered by an empty translation, text of the warning). A Latin-1 or UTF-16 file ended the
#: session in a UnicodeDecodeError, and a lone carriage return split a line in two (later ids shifted)
INPUT_FILE_PROBES = [
    ("untranslatable-line-empty", b"caf\xe9 i am tired .\nyou are nice .\n", ["--speaker", "spk001"], [0],
     "<input>:1: translated as an empty sentence: not valid UTF-8 (byte 0xe9 at character 4)"),
    ("untranslatable-line-empty", b"i am tired .\n\xff\xfe\n", ["--speaker", "spk001"], [1],
     "<input>:2: translated as an empty sentence: not valid UTF-8 (byte 0xff at character 1)"),
    # a lone carriage return: two sentences in one line, split (ids shifted), or read as one (a speaker read as a word)
    ("untranslatable-line-empty", b"i am tired .\ryou are nice .\ni went to the beach .\n", ["--speaker", "spk001"],
     [0], "<input>:1: translated as an empty sentence: a carriage return at character 13, which ends a line in some "
     "files: the line holds two sentences or more; give one a line"),
    ("untranslatable-line-empty", b"spk001\ti am tired .\rspk002\tyou are nice .\nspk003\ti am sorry .\n",
     ["--speaker-per-line"], [0], "<input>:1: translated as an empty sentence: a carriage return at character 13"),
    ("empty-line-empty-translation", b"spk001\ti am tired .\r\nspk002\tyou are nice .\r\n", ["--speaker-per-line"],
     [], ""),
]


@pytest.mark.parametrize("data,extra,emptied,warning", [row[1:] for row in INPUT_FILE_PROBES])
def test_fairseq_interactive_reads_its_input_file_line_by_line_as_standard_input(toy, trained, tmp_path, data, extra,
                                                                                 emptied, warning):
    """One translation for each line of the file (a line ends at a line feed), those that are not UTF-8 answered by
    an empty one and a warning; the others as the same lines on standard input."""
    path = tmp_path / "input.txt"
    path.write_bytes(data)
    args = _interactive_args(toy, trained, extra)
    out = run_here("interactive", [*args, "--input", str(path)])
    lines = data.split(b"\n")[:-1] if data.endswith(b"\n") else data.split(b"\n")
    hypotheses = [line.split("\t") for line in out.stdout.splitlines() if line.startswith("H-")]
    assert [int(h[0][2:]) for h in hypotheses] == list(range(len(lines))), out.stdout
    assert [int(h[0][2:]) for h in hypotheses if h[2] == ""] == emptied, out.stdout
    assert warning in out.log and "Traceback" not in out.log
    readable = [line for number, line in enumerate(lines) if number not in emptied]
    alone = run_here("interactive", args, stdin="".join(line.decode("utf-8") + "\n" for line in readable))
    assert [line.split("\t")[2] for line in alone.stdout.splitlines() if line.startswith("H-")] == [
        h[2] for h in hypotheses if int(h[0][2:]) not in emptied]


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be", "utf-32"])
def test_fairseq_interactive_refuses_an_input_file_in_utf16_naming_it(toy, trained, tmp_path, encoding):
    """A UTF-16 file (with or without its byte-order mark) got one empty translation more than it has lines, each
    warned of as holding U+0000, and with --speaker-per-line every line was skipped and the command said it went
    well: one line naming the file and how to convert it."""
    path = tmp_path / "u16.txt"
    path.write_bytes("i am tired .\nyou are nice .\n".encode(encoding))
    proc = run("interactive", [*_interactive_args(toy, trained, ["--speaker", "spk000"]), "--input", str(path)],
               check=False)
    assert proc.returncode == 2 and not re.search(r"^H-", proc.stdout, re.M), proc.stdout
    assert_user_error(proc)
    name = "UTF-32" if encoding == "utf-32" else "UTF-16"
    assert (f"--input {path}: the text looks like {name} (a byte-order mark or NUL bytes in its first line), not "
            f"UTF-8: convert it (iconv -f {name.lower()} -t utf-8 {path} > {path}.utf8)") in proc.stderr


#: a byte-order mark at the start of fairseq-interactive's input: (the promise of docs/reliability.md, standard input,
#: options); it was read as part of the first word (translated as <unk>), or of the first line's speaker (line skipped)
BOM_INPUT_PROBES = [
    ("empty-sentences-refused", "\ufeffi am tired .\nyou are nice .\n", ["--speaker", "spk001"]),
    ("empty-sentences-refused", "\ufeffspk001\ti am tired .\nspk002\tyou are nice .\n", ["--speaker-per-line"]),
]


@pytest.mark.parametrize("stdin,extra", [row[1:] for row in BOM_INPUT_PROBES])
def test_fairseq_interactive_reads_no_byte_order_mark_as_a_word(toy, trained, stdin, extra):
    """The input with a byte-order mark is translated as the same input without it: the same sources, the same
    hypotheses and scores, no line skipped."""
    args = _interactive_args(toy, trained, extra)
    marked = run_here("interactive", args, stdin=stdin)
    plain = run_here("interactive", args, stdin=stdin.replace("\ufeff", ""))
    answers = [line for line in marked.stdout.splitlines() if line[:2] in ("S-", "H-")]
    assert len(answers) == 4 and "<unk>" not in marked.stdout and "skipped" not in marked.log, marked.stdout
    assert answers == [line for line in plain.stdout.splitlines() if line[:2] in ("S-", "H-")]


#: fairseq-interactive given a data folder and a checkpoint: (the promise of docs/reliability.md, the data folder, the
#: checkpoint, text of the refusal)
PAIRING_PROBES = [
    # the same size, two words swapped: every id would be read as another word
    ("dictionaries-compared", "{swapped}", "{ckpt}", SWAPPED),
    ("not-a-checkpoint", "{data}", "{tmp}/none.pt",
     "checkpoint not found: {tmp}/none.pt; give --path the checkpoint file"),
]


@pytest.mark.parametrize("data,path,message", [row[1:] for row in PAIRING_PROBES],
                         ids=["a data folder of other dictionaries", "no such checkpoint"])
def test_fairseq_interactive_refuses_what_it_cannot_pair(places, data, path, message):
    proc = run("interactive", [places.fill(data), "--user-dir", USER_DIR, "--task", "speaker_translation", "--path",
                               places.fill(path), "--speaker", "spk000"], stdin="i am tired .\n", check=False)
    assert proc.returncode == 2
    assert_user_error(proc)
    assert places.fill(message) in proc.stderr


@pytest.mark.parametrize("flag", ["--restore-file", "--finetune-from-model"])
def test_continued_training_refuses_a_data_folder_of_other_dictionaries(places, capsys, flag):
    """fairseq-train loads a checkpoint's model but not its task state: the model's reader compares them."""
    argv = train_args(places["swapped"], places.path("continued"), "lstm_fact_bias", flag, places["ckpt"],
                      "--max-epoch", "3")
    code, err = run_in_process(fairseq_train, argv, capsys)
    assert code == 2
    assert places.fill(SWAPPED) in err.strip().splitlines()[-1]
    assert not os.path.exists(places.path("continued/checkpoint_last.pt"))


@pytest.mark.parametrize("flag", ["--fp16", "--bf16", "--memory-efficient-fp16"])
def test_half_precision_without_a_gpu_is_refused(toy, tmp_path, flag, capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU: half precision is allowed there")
    argv = train_args(toy["bin"], str(tmp_path / "ckpt"), "lstm_fact_bias", flag)
    code, err = run_in_process(fairseq_train, argv, capsys)
    assert code == 2
    assert "fairseq trains in half precision on a CUDA GPU only" in err.strip().splitlines()[-1]


def test_resuming_a_save_dir_with_another_arch_says_so(toy, trained, tmp_path):
    save = tmp_path / "ckpt"
    save.mkdir()
    shutil.copy(trained("lstm_full_bias"), save / "checkpoint_last.pt")
    proc = run("train", train_args(toy["bin"], str(save), "lstm_fact_bias", "--max-epoch", "3"), check=False)
    assert proc.returncode == 2
    assert_user_error(proc)
    # the file named (it was "the checkpoint"), torch's message not cut inside a word
    assert f"{save / 'checkpoint_last.pt'}: its parameters do not fit this model" in proc.stderr, proc.stderr
    assert "--save-dir" in proc.stderr


def test_resuming_with_speaker_token_a_checkpoint_trained_without_says_so(toy, trained, tmp_path):
    """The message blamed --arch, sizes or --speaker-bias, and never named --speaker-token."""
    proc = run("train", train_args(toy["bin"], str(tmp_path / "ckpt"), "lstm_fact_bias", "--speaker-token",
                                   "--finetune-from-model", trained("lstm_fact_bias")), check=False)
    assert proc.returncode == 2
    assert_user_error(proc)
    assert f"{trained('lstm_fact_bias')} was trained without --speaker-token" in proc.stderr, proc.stderr


def test_resuming_without_speaker_token_a_checkpoint_trained_with_it_says_so(toy, trained, tmp_path):
    """The reverse case: the message blamed --arch, sizes or --speaker-bias, and quoted torch's size mismatches."""
    proc = run("train", train_args(toy["bin"], str(tmp_path / "ckpt"), "lstm_base", "--finetune-from-model",
                                   trained("lstm_base+spk_token")), check=False)
    assert proc.returncode == 2
    assert_user_error(proc)
    assert f"{trained('lstm_base+spk_token')} was trained with --speaker-token" in proc.stderr, proc.stderr
    assert "give --speaker-token" in proc.stderr and "size mismatch" not in proc.stderr, proc.stderr


# -- the Python API ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def translator(toy, trained):
    from fairseq_speaker.serving import SpeakerTranslator

    return SpeakerTranslator.from_pretrained(trained("lstm_fact_bias"), data=toy["bin"], max_len_b=4)



#: SpeakerTranslator method calls: (the promise of docs/reliability.md, what, the call (``t``: the translator, ``p``:
#: :class:`Places`), text of the refusal)
API_PROBES = [
    ("refused-call-changes-nothing",
     "translate speakers=None", lambda t, p: t.translate("i am tired .", speakers=None),
     "speakers: give a string or a list of strings, got NoneType None"),
    ("refused-call-changes-nothing",
     "translate 3 speakers for 2", lambda t, p: t.translate(["a .", "b ."], speakers=["x", "y", "z"]),
     "3 speakers for 2 sentences: give one speaker for all, or one per sentence"),
    ("refused-call-changes-nothing",
     "translate a number", lambda t, p: t.translate([3], speakers="spk000"),
     "sentences: give a string or a list of strings, got list [3]"),
    ("refused-call-changes-nothing",
     "translate beam=0", lambda t, p: t.translate("i am tired .", speakers="spk000", beam=0),
     "beam must be a whole number of at least 1, got 0"),
    ("refused-call-changes-nothing",
     "translate beam=2.5", lambda t, p: t.translate("i am tired .", speakers="spk000", beam=2.5),
     "beam must be a whole number of at least 1, got 2.5"),
    ("label-policy",
     "add_speaker tab", lambda t, p: t.add_speaker("dr\tlee", p.sources, p.targets),
     "cannot add a speaker: speaker label 'dr\\tlee' contains '\\t'"),
    ("label-policy",
     "add_speaker empty", lambda t, p: t.add_speaker("", p.sources, p.targets),
     "cannot add a speaker: empty speaker label"),
    ("label-policy",
     "add_speaker trailing space", lambda t, p: t.add_speaker("lee ", p.sources, p.targets),
     "cannot add a speaker: speaker label 'lee ' with surrounding whitespace"),
    ("label-policy",
     "add_speaker BOM", lambda t, p: t.add_speaker("\ufefflee", p.sources, p.targets),
     "cannot add a speaker: speaker label '\\ufefflee' contains '\\ufeff'"),
    ("label-policy",
     "add_speaker number", lambda t, p: t.add_speaker(7, p.sources, p.targets),
     "cannot add a speaker: a speaker label must be a string, got int 7"),
    ("refused-call-changes-nothing",
     "add_speaker no sentences", lambda t, p: t.add_speaker("lee", [], []), "no sentences to adapt on for 'lee'"),
    ("refused-call-changes-nothing",
     "add_speaker uneven", lambda t, p: t.add_speaker("lee", p.sources * 2, p.targets),
     "2 sources but 1 targets: give one target sentence for each source sentence"),
    ("refused-call-changes-nothing",
     "add_speaker known", lambda t, p: t.add_speaker("spk000", p.sources, p.targets),
     "speaker(s) 'spk000' already in the model: pass --replace (replace=True)"),
    ("lookalike-speaker-refused",
     "translate ' spk000'", lambda t, p: t.translate("i am tired .", " spk000"),
     "speakers[0]: ' spk000' looks like 'spk000', a speaker of the model, but is not it"),
    ("lookalike-speaker-refused",
     "translate no-break space", lambda t, p: t.translate("i am tired .", "spk000\u00a0"),
     "looks like 'spk000', a speaker of the model"),
    ("lookalike-speaker-refused",
     "translate_nbest empty speaker", lambda t, p: t.translate_nbest(["i am tired ."], ""),
     "speakers[0] is empty: give a speaker's name"),
    ("refused-call-changes-nothing",
     "add_speaker replace='no'", lambda t, p: t.add_speaker("lee", p.sources, p.targets, replace="no"),
     "replace must be True or False, got 'no'"),
    ("refused-call-changes-nothing",
     "add_speaker held-out targets alone",
     lambda t, p: t.add_speaker("lee", p.sources, p.targets, heldout_targets=p.targets),
     "0 heldout_sources but 1 heldout_targets"),
    ("empty-sentences-refused",
     "add_speaker an empty held-out target",
     lambda t, p: t.add_speaker("lee", p.sources, p.targets, heldout_sources=p.sources, heldout_targets=[""]),
     "heldout_targets[0] is empty: give a sentence (or leave it out)"),
    ("refused-call-changes-nothing",
     "fit_speaker held-out targets alone",
     lambda t, p: t.fit_speaker("lee", p.sources, p.targets, heldout_targets=p.targets),
     "0 heldout_sources but 1 heldout_targets"),
    ("refused-call-changes-nothing",
     "update_speaker no sentences", lambda t, p: t.update_speaker("spk000", [], []),
     "no sentences to update speaker 'spk000' with"),
    ("empty-sentences-refused",  # translated as if it were a word (the service refused it)
     "translate a lone surrogate", lambda t, p: t.translate("i am \ud800 tired .", "spk000"),
     "sentences[0] is holding a lone surrogate U+D800 at character 6, which is not text (UTF-8 cannot hold it)"),
    ("refused-before-writing",
     "export_speakers to a folder", lambda t, p: t.export_speakers(p.tmp, ["spk000"]),
     "{tmp} is a directory: give the path of a file to write"),
    ("refused-before-writing",
     "export_speakers missing folder", lambda t, p: t.export_speakers(p.path("no/v.npz"), ["spk000"]),
     "cannot write {tmp}/no/v.npz: the folder {tmp}/no does not exist"),
    ("vectors-of-another-model",  # "speaker vectors not found: ."
     "import_speakers a folder", lambda t, p: t.import_speakers(p.tmp),
     "{tmp} is a directory: give a speaker vectors file (.npz, written by fairseq-speaker-vectors export)"),
    ("vectors-of-another-model",
     "import_speakers missing file", lambda t, p: t.import_speakers(p.path("none.npz")),
     "speaker vectors not found: {tmp}/none.npz (fairseq-speaker-vectors export writes them)"),
    ("vectors-of-another-model",
     "import_speakers not vectors", lambda t, p: t.import_speakers(p["garbage"]),
     "{garbage}: not a .npz archive, so not a speaker vectors file"),
    ("refused-before-writing",
     "save to a folder", lambda t, p: t.save(p.tmp), "{tmp} is a directory: give the path of a file to write"),
    ("refused-before-writing",
     "save missing folder", lambda t, p: t.save(p.path("no/m.pt")),
     "cannot write {tmp}/no/m.pt: the folder {tmp}/no does not exist"),
    # generation options: a misspelt one (or one that is not fairseq's generation's) was ignored without a word
    ("generation-keywords-checked",
     "translate beem=3", lambda t, p: t.translate("i am tired .", "spk000", beem=3),
     "'beem' is not an option of fairseq's generation"),
    ("generation-keywords-checked",
     "translate seed=1", lambda t, p: t.translate("i am tired .", "spk000", sampling=True, seed=1),
     "'seed' is not an option of fairseq's generation"),
    ("generation-keywords-checked",
     "translate beam_stop=never", lambda t, p: t.translate("i am tired .", "spk000", beam_stop="never"),
     "beam_stop must be one of fairseq, unbeaten, got 'never'"),
    ("search-options-checked",
     "translate sampling=True beam_stop=unbeaten",
     lambda t, p: t.translate_nbest(["i am tired ."], "spk000", sampling=True, beam=2, nbest=2, beam_stop="unbeaten"),
     "--beam-stop unbeaten searches on for better hypotheses, and --sampling draws them"),
    ("search-options-checked",
     "translate min_len=9 over max_len_b=4", lambda t, p: t.translate("i am tired .", "spk000", min_len=9),
     "--min-len 9 (min_len) asks for translations longer than the search allows these sentences: at most 4 tokens"),
    ("generation-keywords-checked",
     "translate_nbest nbest=0", lambda t, p: t.translate_nbest(["i am tired ."], "spk000", beam=2, nbest=0),
     "nbest must be a whole number from 1 to the beam (2), got 0"),
    ("search-options-checked",
     "translate_nbest beam above the vocabulary",
     lambda t, p: t.translate_nbest(["i am tired ."], "spk000", beam=200, nbest=200),
     "--beam 200 is more hypotheses than the target dictionary's"),
    ("generation-keywords-checked",
     "translate_nbest nbest above the beam",
     lambda t, p: t.translate_nbest(["i am tired ."], "spk000", beam=2, nbest=3),
     "nbest must be a whole number from 1 to the beam (2), got 3"),
    ("search-options-checked",
     "translate print_alignment=True", lambda t, p: t.translate("i am tired .", "spk000", print_alignment=True),
     "print_alignment must be 'hard' or 'soft' (or left out), got True"),
    ("search-options-checked",
     "translate score_reference", lambda t, p: t.translate("i am tired .", "spk000", score_reference=True),
     "'score_reference' is refused here: the hub does not read it (it scores reference translations, which these "
     "sentences do not have)"),
    ("search-options-checked",
     "translate constraints", lambda t, p: t.translate("i am tired .", "spk000", constraints="ordered"),
     "'constraints' is refused here: the hub passes no constraints to the search"),
    ("search-options-checked",
     "translate diverse groups", lambda t, p: t.translate("i am tired .", "spk000", beam=3, diverse_beam_groups=2),
     "--diverse-beam-groups 2 splits the beam into groups of one size"),
    # the hub's prefix_allowed_tokens_fn(batch_id, tokens): fairseq's search ended in an IndexError on each of these
    ("allowed-tokens-checked", "translate prefix_allowed_tokens_fn of an id outside the dictionary",
     lambda t, p: t.translate("i am tired .", "spk000", prefix_allowed_tokens_fn=lambda i, tokens: [10 ** 6]),
     "prefix_allowed_tokens_fn(0, [2]) returned the id 1000000, outside the target dictionary (ids 0 to 87)"),
    ("allowed-tokens-checked", "translate prefix_allowed_tokens_fn of words",
     lambda t, p: t.translate("i am tired .", "spk000", prefix_allowed_tokens_fn=lambda i, tokens: ["je"]),
     "prefix_allowed_tokens_fn(0, [2]) returned ['je']: it must return the ids of the target words allowed next"),
    ("allowed-tokens-checked", "translate prefix_allowed_tokens_fn that lets nothing end",
     lambda t, p: t.translate(["i am tired .", "you ."], "spk000", prefix_allowed_tokens_fn=lambda i, tokens: [4]),
     "prefix_allowed_tokens_fn let no translation of sentence 0 (its batch_id) end, nor of 1 more sentence(s) of the "
     "batch: allow the end of the sentence (id 2, target_dictionary.eos())"),
    ("allowed-tokens-checked", "translate_nbest prefix_allowed_tokens_fn that lets nothing end",  # gave no translation
     lambda t, p: t.translate_nbest(["i am tired ."], "spk000", prefix_allowed_tokens_fn=lambda i, tokens: [4]),
     "prefix_allowed_tokens_fn let no translation of sentence 0 (its batch_id) end"),
    ("allowed-tokens-checked", "translate prefix_allowed_tokens_fn not a function",
     lambda t, p: t.translate("i am tired .", "spk000", prefix_allowed_tokens_fn=3),
     "prefix_allowed_tokens_fn must be a function (batch_id, tokens) -> the ids of the target words allowed next, got "
     "int 3"),
    # fairseq-generate refuses --sampling with an --nbest other than --beam: the best of the draws is no sample
    ("search-options-checked", "translate sampling with a beam of 5",
     lambda t, p: t.translate("i am tired .", "spk000", sampling=True, beam=5),
     "sampling draws one translation for each of the beam's 5 hypotheses, and 1 of them is asked for"),
    ("allowed-tokens-checked", "translate prefix_allowed_tokens_fn with sampling",  # fairseq's sampling ignored it
     lambda t, p: t.translate("i am tired .", "spk000", sampling=True, prefix_allowed_tokens_fn=lambda i, tokens: [2]),
     "prefix_allowed_tokens_fn restricts fairseq's beam search, and sampling chooses another search, which would "
     "ignore it"),
]



def test_a_speaker_onboarded_in_this_session_is_not_refitted_without_replace(toy, trained):
    """A second add_speaker of a name onboarded a moment ago refitted it on the new pairs alone, the first ones
    dropped without a word (only trained names were refused): it is refused as a trained name is, and changes
    nothing; replace=True refits it."""
    from fairseq_speaker.errors import UserError
    from fairseq_speaker.serving import SpeakerTranslator

    translator = SpeakerTranslator.from_pretrained(trained("lstm_fact_bias"), data=toy["bin"], max_len_b=6)
    translator.add_speaker("zz", ["i am tired .", "you are happy ."], ["je suis fatiguée .", "tu es heureuse ."])
    row = translator.speaker_vectors(["zz"])
    with pytest.raises(UserError, match="speaker\\(s\\) 'zz' already in the model: pass --replace"):
        translator.add_speaker("zz", ["i am sorry ."], ["je suis désolé ."])
    assert len(translator.adapter.sentences["zz"]) == 2
    after = translator.speaker_vectors(["zz"]).rows
    assert row.rows.keys() == after.keys() and all(np.array_equal(row.rows[k], after[k]) for k in after)
    translator.add_speaker("zz", ["i am sorry ."], ["je suis désolé ."], replace=True)
    assert len(translator.adapter.sentences["zz"]) == 1


@pytest.mark.parametrize("name,call,message", [row[1:] for row in API_PROBES],
                         ids=[row[1] for row in API_PROBES])
def test_a_bad_api_call_is_refused_with_one_message(translator, places, name, call, message):
    from fairseq_speaker.errors import UserError

    before = translator.speakers
    with pytest.raises(UserError) as refused:
        call(translator, places)
    assert places.fill(message) in str(refused.value)
    assert translator.speakers == before  # nothing half-added


#: a translator's writes over a file it reads (``{ckpt}``: the checkpoint it was loaded from, ``{bin}``: its data
#: folder; both copies in the test's folder, which a broken check would destroy): (the promise of docs/reliability.md,
#: what, the call, text of the refusal). They were written whole, an .npz archive in place of the checkpoint.
OWN_FILES_PROBES = [
    ("refused-before-writing", "export_speakers over its checkpoint",
     lambda t, ckpt, data: t.export_speakers(ckpt, ["spk000"]),
     "export_speakers: path {ckpt} is the checkpoint this translator was loaded from, which the command reads"),
    ("refused-before-writing", "export_speakers over its target dictionary",
     lambda t, ckpt, data: t.export_speakers(os.path.join(data, "dict.fr.txt"), ["spk000"]),
     "export_speakers: path {bin}/dict.fr.txt is a file of the data folder ({bin}), which the command reads"),
    ("refused-before-writing", "export_speakers over its speaker dictionary by another spelling",
     lambda t, ckpt, data: t.export_speakers(os.path.join(data, ".", "dict.spk.txt"), ["spk000"]),
     "is a file of the data folder ({bin})"),
    ("refused-before-writing", "save over its checkpoint", lambda t, ckpt, data: t.save(ckpt),
     "save: the file {ckpt} is the checkpoint this translator was loaded from"),
    ("refused-before-writing", "save over its source dictionary",
     lambda t, ckpt, data: t.save(os.path.join(data, "dict.en.txt")),
     "save: the file {bin}/dict.en.txt is a file of the data folder ({bin})"),
]


@pytest.mark.parametrize("name,call,message", [row[1:] for row in OWN_FILES_PROBES],
                         ids=[row[1] for row in OWN_FILES_PROBES])
def test_a_translator_refuses_to_write_over_a_file_it_reads(toy, trained, tmp_path, name, call, message):
    import filecmp
    import shutil

    from fairseq_speaker.errors import UserError
    from fairseq_speaker.serving import SpeakerTranslator

    ckpt, data = str(tmp_path / "ck.pt"), str(tmp_path / "bin")
    shutil.copyfile(trained("lstm_fact_bias"), ckpt)
    shutil.copytree(toy["bin"], data)
    translator = SpeakerTranslator.from_pretrained(ckpt, data=data, max_len_b=4)
    with pytest.raises(UserError) as refused:
        call(translator, ckpt, data)
    assert message.format(ckpt=ckpt, bin=data) in str(refused.value)
    assert filecmp.cmp(ckpt, trained("lstm_fact_bias"), shallow=False)
    assert not filecmp.dircmp(data, toy["bin"]).diff_files
    assert translator.translate("i am tired .", "spk000")  # the translator reads its files as before


def test_a_translator_loaded_by_a_relative_path_knows_its_checkpoint_after_a_change_of_folder(toy, trained, tmp_path,
                                                                                               monkeypatch):
    """The path as given was compared where the process then was: after a chdir, export_speakers('../ck.pt') replaced
    the checkpoint with the vectors."""
    import filecmp
    import shutil

    from fairseq_speaker.errors import UserError
    from fairseq_speaker.serving import SpeakerTranslator

    shutil.copyfile(trained("lstm_fact_bias"), tmp_path / "ck.pt")
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path)
    translator = SpeakerTranslator.from_pretrained("ck.pt", data=toy["bin"], max_len_b=4)
    monkeypatch.chdir(tmp_path / "sub")
    for call in (lambda: translator.export_speakers("../ck.pt", ["spk000"]), lambda: translator.save("../ck.pt"),
                 lambda: translator.export_speakers(str(tmp_path / "ck.pt"), ["spk000"])):
        with pytest.raises(UserError, match="is the checkpoint this translator was loaded from"):
            call()
    assert filecmp.cmp(tmp_path / "ck.pt", trained("lstm_fact_bias"), shallow=False)
    translator.export_speakers("ck.pt", ["spk000"])  # sub/ck.pt: another file
    assert os.path.getsize(tmp_path / "sub" / "ck.pt") < os.path.getsize(tmp_path / "ck.pt")


#: the n-best of a search restricted by prefix_allowed_tokens_fn: (the promise of docs/reliability.md, what, the words
#: allowed, beam and --beam-stop)
ALLOWED_NBEST_PROBES = [
    ("allowed-tokens-checked", "three words and the end, beam 3", ["je", "suis", "."], 3, "fairseq"),
    ("allowed-tokens-checked", "three words and the end, beam 5, unbeaten", ["je", "suis", "."], 5, "unbeaten"),
    ("allowed-tokens-checked", "one word and the end, beam 4", ["suis"], 4, "fairseq"),
]


@pytest.mark.parametrize("allowed,beam,stop", [row[2:] for row in ALLOWED_NBEST_PROBES],
                         ids=[row[1] for row in ALLOWED_NBEST_PROBES])
def test_an_allowed_tokens_search_gives_each_translation_once_scored_as_it_is(translator, allowed, beam, stop):
    """fairseq's restricted search took `beam` candidates, where its beam search takes twice as many: ended hypotheses
    went on in the beam ("suis", "suis </s>", "suis </s> </s>": one translation three times, each longer one scored
    better by the length normalization), and --beam-stop unbeaten ended in fairseq's assertion."""
    words = translator.task.target_dictionary
    ids = [words.index(word) for word in allowed] + [words.eos()]
    nbest = translator.translate_nbest(["i am tired ."], "spk000", beam=beam, nbest=beam, beam_stop=stop,
                                       prefix_allowed_tokens_fn=lambda i, tokens: ids)[0]
    texts = [text for text, _ in nbest]
    assert len(texts) == len(set(texts)), nbest
    assert all(text.split() and set(text.split()) <= set(allowed) for text in texts), nbest


#: SpeakerTranslator.from_pretrained: (the promise of docs/reliability.md, what, the data folder, text of the refusal)
FROM_PRETRAINED_PROBES = [
    ("dictionaries-compared", "another dictionary", "{ckpt}", "{other}",
     "{ckpt} was trained with the dictionaries of another data folder than {other}: its source dictionary has 64 "
     "symbols, {other}/dict.en.txt has 56; its target dictionary has 88 symbols, {other}/dict.fr.txt has 80"),
    ("dictionaries-compared", "a dictionary of the same size", "{ckpt}", "{swapped}", SWAPPED),
    ("data-folder-has-dictionaries", "a folder without dictionaries", "{ckpt}", "{emptydir}", NO_DICTIONARIES),
    ("data-folder-has-dictionaries", "no target dictionary", "{ckpt}", "{srconly}",
     "{srconly}: no dict.fr.txt there"),
    ("not-a-checkpoint", "no such checkpoint", "{tmp}/none.pt", "{data}", "checkpoint not found: {tmp}/none.pt"),
    ("not-a-checkpoint", "a directory", "{tmp}", "{data}",
     "checkpoint {tmp} is a directory: give the checkpoint file in it (e.g. {tmp}/checkpoint_best.pt)"),
    # fairseq's hub read it as the checkpoints 'model' and 'v2.pt', and said that 'model' was not there
    ("not-a-checkpoint", "a file name holding ':'", "{colonckpt}", "{data}",
     "checkpoint {colonckpt}: fairseq reads a file name holding ':' as several checkpoints (an ensemble): rename the "
     "file"),
    # fairseq read it as the folders 'd' and '2024/bin', and said that 'd' was not found
    ("data-folder-has-dictionaries", "a data folder under a name holding ':'", "{ckpt}", "{colondata}",
     "from_pretrained: data {colondata}: fairseq reads a path holding ':' as several data folders (shards), and the "
     "model is read with one: give a folder whose path holds no ':'"),
    # a TypeError of fairseq's split_paths
    ("data-folder-has-dictionaries", "two data folders", "{ckpt}", "{data}:{data}",
     "from_pretrained: data {data}:{data}: fairseq reads a path holding ':' as several data folders"),
    # fairseq's hub loaded it with its own task, and translate ended in an AttributeError
    ("not-a-checkpoint", "a checkpoint of fairseq's own translation task", "{stock}", "{data}",
     "{stock}: not a fairseq-speaker checkpoint (trained with fairseq's TranslationTask, without speakers): give a "
     "checkpoint trained with --task speaker_translation"),
]

#: from_pretrained given a path that is not text: (the promise, the checkpoint, the data folder, text of the refusal);
#: a TypeError deep in os.path before
FROM_PRETRAINED_TYPE_PROBES = [
    ("not-a-checkpoint", b"model.pt", "{data}",
     "from_pretrained: checkpoint must be a path (str or os.PathLike), got bytes b'model.pt'"),
    ("data-folder-has-dictionaries", "{ckpt}", None,
     "from_pretrained: data must be a path (str or os.PathLike), got NoneType None"),
]


@pytest.mark.parametrize("checkpoint,data,message", [row[1:] for row in FROM_PRETRAINED_TYPE_PROBES],
                         ids=["bytes", "None"])
def test_from_pretrained_refuses_a_path_that_is_not_text(places, checkpoint, data, message):
    from fairseq_speaker.errors import UserError
    from fairseq_speaker.serving import SpeakerTranslator

    fill = lambda value: places.fill(value) if isinstance(value, str) else value  # noqa: E731
    with pytest.raises(UserError) as refused:
        SpeakerTranslator.from_pretrained(fill(checkpoint), data=fill(data))
    assert message in str(refused.value)


@pytest.mark.parametrize("checkpoint,data,message", [row[2:] for row in FROM_PRETRAINED_PROBES],
                         ids=[row[1] for row in FROM_PRETRAINED_PROBES])
def test_from_pretrained_refuses_what_it_cannot_load(places, checkpoint, data, message):
    from fairseq_speaker.errors import UserError
    from fairseq_speaker.serving import SpeakerTranslator

    with pytest.raises(UserError) as refused:
        SpeakerTranslator.from_pretrained(places.fill(checkpoint), data=places.fill(data))
    assert places.fill(message) in str(refused.value)


def test_from_pretrained_refuses_a_preprocessing_it_cannot_rebuild(places):
    from fairseq_speaker.errors import UserError
    from fairseq_speaker.serving import SpeakerTranslator

    with pytest.raises(UserError) as refused:
        SpeakerTranslator.from_pretrained(places["lostbpe"], data=places["data"])
    assert places.fill("{lostbpe}: the text preprocessing saved with the model needs the file codes.txt (--bpe "
                       "subword_nmt --bpe-codes), which is missing") in str(refused.value)
    # what the message says to do: input already in the model's tokens
    translator = SpeakerTranslator.from_pretrained(places["lostbpe"], data=places["data"], preprocessing="none",
                                                   max_len_b=4)
    assert translator.hub.bpe is None and isinstance(translator.translate(places.sources[0], "spk000"), str)


def test_every_command_has_probes():
    """A command of the package without rows here is a surface nobody probed; rows of no command probe nothing."""
    assert set(COMMANDS) - set(COMMAND_PROBES) == set(), "commands without probe rows"
    assert set(COMMAND_PROBES) - set(MAINS) == set(), "rows of commands that do not exist"
    rows = sum(len(rows) for rows in COMMAND_PROBES.values()) + len(API_PROBES)
    assert rows >= 100, rows



#: from_pretrained's overrides: (the promise of docs/reliability.md, the overrides, text of the refusal)
OVERRIDE_PROBES = [
    ("generation-keywords-checked", {"max_len_bb": 3}, "from_pretrained: 'max_len_bb' is no option of"),
    ("generation-keywords-checked", {"unknown_speakers": "fail"}, "'unknown_speakers' is no option of"),
    # omegaconf's ValidationError, with its traceback
    ("generation-keywords-checked", {"unknown_speaker": "bogus"},
     "from_pretrained: unknown_speaker: Invalid value 'bogus', expected one of [mean, none, fail]"),
    ("dictionaries-compared", {"speaker_token": True}, "was trained without --speaker-token (its sentences start "
                                                      "with no token naming their speaker): leave --speaker-token out"),
    ("ignored-options-refused", {"speaker": "spk003"}, "from_pretrained: 'speaker' are fairseq-interactive's "
                                                       "speakers of its input lines; translate(sentences, speakers)"),
    # taken and read as something else: every sentence refused as longer than -5 tokens, 'no' as true, ignored
    ("numbers-checked", {"max_tokens": -5}, "from_pretrained: max_tokens must be at least 1 (or None: no limit)"),
    ("numbers-checked", {"batch_size": 0}, "from_pretrained: batch_size must be at least 1"),
    ("generation-keywords-checked", {"cpu": "no"}, "from_pretrained: cpu must be True or False, got str 'no'"),
    ("ignored-options-refused", {"nbest": 3}, "from_pretrained: nbest is not read here: translate gives each "
                                              "sentence's best translation"),
    ("ignored-options-refused", {"speaker_file": "{tmp}/none.spk"},  # taken without a word, a missing file too
     "from_pretrained: speaker_file is not read here: a translator reads no binarized split nor its speaker file"),
    ("ignored-options-refused", {"gen_subset": "train"}, "from_pretrained: gen_subset is not read here"),
    ("ignored-options-refused", {"speaker_suffix": "usr"}, "from_pretrained: speaker_suffix is not read here"),
]


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA GPU computes in half precision: fp16 is read there")
def test_from_pretrained_refuses_half_precision_without_a_gpu(places):
    """fairseq's hub took fp16=True on a CPU and translated in float32 without a word."""
    from fairseq_speaker.errors import UserError
    from fairseq_speaker.serving import SpeakerTranslator

    with pytest.raises(UserError, match="from_pretrained: fp16 asks for half precision"):
        SpeakerTranslator.from_pretrained(places["ckpt"], data=places["data"], fp16=True)


@pytest.mark.parametrize("overrides,message", [row[1:] for row in OVERRIDE_PROBES])
def test_from_pretrained_refuses_an_override_that_is_no_option(places, overrides, message):
    """fairseq set a misspelt override aside without a word."""
    from fairseq_speaker.errors import UserError
    from fairseq_speaker.serving import SpeakerTranslator

    overrides = {name: places.fill(value) if isinstance(value, str) else value for name, value in overrides.items()}
    with pytest.raises(UserError) as refused:
        SpeakerTranslator.from_pretrained(places["ckpt"], data=places["data"], **overrides)
    assert places.fill(message) in str(refused.value)


def test_a_checkpoint_whose_training_command_line_named_input_speakers_still_translates(places, tmp_path):
    """fairseq-train now refuses fairseq-interactive's --speaker and --speaker-per-line, which a checkpoint written
    before may hold in its saved options (both at once were refused by the generator the translator builds)."""
    from fairseq_speaker.serving import SpeakerTranslator

    state = torch.load(places["ckpt"], weights_only=False)
    state["cfg"]["task"]["speaker"], state["cfg"]["task"]["speaker_per_line"] = "spk003", True
    stray = str(tmp_path / "stray.pt")
    torch.save(state, stray)
    options = {"data": places["data"], "beam": 2, "max_len_b": 4}
    clean = SpeakerTranslator.from_pretrained(places["ckpt"], **options)
    assert SpeakerTranslator.from_pretrained(stray, **options).translate(["i am tired ."] * 2, ["spk000", "spk005"]) \
        == clean.translate(["i am tired ."] * 2, ["spk000", "spk005"])


def test_from_pretrained_beam_is_the_beam_of_a_translation_that_names_none(places):
    """translate() passed its own beam of 5 whatever from_pretrained's beam said."""
    from fairseq_speaker.errors import UserError
    from fairseq_speaker.serving import SpeakerTranslator

    translator = SpeakerTranslator.from_pretrained(places["ckpt"], data=places["data"], beam=2, max_len_b=4)
    assert len(translator.translate_nbest(["i am tired ."], "spk000", nbest=2)[0]) == 2
    with pytest.raises(UserError, match=r"nbest must be a whole number from 1 to the beam \(2\), got 3"):
        translator.translate_nbest(["i am tired ."], "spk000", nbest=3)
    assert len(translator.translate_nbest(["i am tired ."], "spk000", beam=3, nbest=3)[0]) == 3


def test_the_service_refuses_a_port_in_use_before_it_loads_a_model(tmp_path, capsys):
    """uvicorn found the port taken after the models had loaded, logged it and exited with status 3."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, err = run_in_process(MAINS["fairseq-speaker-serve"], [str(tmp_path / "none.pt"), "--data", str(tmp_path),
                                                               "--port", str(port)], capsys)
    assert code == 2, err
    assert err.strip().splitlines()[-1].endswith(f"--host 127.0.0.1 --port {port}: cannot listen there (Address "
                                                  f"already in use): give a free port (--port) or an address of this "
                                                  f"machine (--host; 127.0.0.1 or 0.0.0.0)")
