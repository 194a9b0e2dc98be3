#!/usr/bin/env python
"""Prepare SATED (or any parallel corpus with a speaker file) the way the paper did.

Reads ``{train,dev,test}.{src,tgt,usr}`` (SATED's layout: ``sated-release-0.9.0/en-fr``),
then:

1. with ``--raw``, Moses-tokenizes (sacremoses, with Moses escapes such as
   ``&apos;``, as in the release) and lowercases the text; the SATED release is
   already tokenized and lowercased, so by default the text is kept as it is;
2. drops training pairs with more than 60 words on either side, with their
   speaker labels (dev and test are kept whole, so that BLEU stays comparable);
3. binarizes with ``fairseq-preprocess``, keeping the 40k most frequent words
   seen at least twice in training;
4. writes the speaker files beside the binarized data (``{split}.spk``);
5. records that preprocessing (Moses tokenization with escapes, lowercasing: the
   registered tokenizer ``moses_lowercase``, whose decoding restores the case: each
   sentence's start, and with ``--raw`` text every word's most frequent casing in the
   training translations, learnt into ``OUT/bin/truecase.TGT``) in ``OUT/bin/preprocessing.json``:
   models trained on ``OUT/bin`` keep it in their checkpoints and take raw text
   in ``fairseq-interactive``, ``SpeakerTranslator`` and ``fairseq-speaker-serve``
   (docs/sated.md, "Raw text in, raw text out"). ``--preprocessing none`` records
   nothing, for input tokenized some other way.

Output: ``OUT/text/{train,valid,test}.{src,tgt,spk}`` (the text the models see,
and the references for BLEU), ``OUT/bin/`` (for fairseq) and ``OUT/prepare.json``
(counts, including speakers with fewer than 10 training sentences).

Usage::

    python examples/sated/prepare.py --input sated-release-0.9.0/en-fr --src en --tgt fr --out data/en-fr
    python examples/sated/prepare.py --input my-corpus --src en --tgt de --speaker-ext spk --raw --out data/mine
"""

import argparse
import json
import os
import shutil
import sys
from collections import Counter
from typing import Dict, List, Optional, Tuple

from fairseq.data import Dictionary

from fairseq_speaker.commands import run_fairseq
from fairseq_speaker.data import SpeakerDataError, read_lines, read_speaker_file
from fairseq_speaker.data.preprocessing import (
    PREPROCESSING_FILE,
    MosesLowercase,
    MosesLowercaseConfig,
    sentence_openers,
)

# input split name -> fairseq split name
SPLITS = {"train": "train", "dev": "valid", "test": "test"}


def read_split(directory: str, split: str, src: str, tgt: str, speaker_ext: str) -> Tuple[List[str], List[str], List[str]]:
    source = read_lines(os.path.join(directory, f"{split}.{src}"))
    target = read_lines(os.path.join(directory, f"{split}.{tgt}"))
    if len(source) != len(target):
        raise SpeakerDataError(
            f"{directory}/{split}.{src} has {len(source)} lines but {split}.{tgt} has {len(target)}; "
            f"the two sides must be aligned line by line"
        )
    speakers = read_speaker_file(os.path.join(directory, f"{split}.{speaker_ext}"), num_sentences=len(source))
    return source, target, speakers


def moses_cased(lines: List[str], lang: str) -> List[str]:
    """Moses tokenization with escapes (&apos; &quot; ...), as in the SATED release, before its lowercasing: the
    tokenizer the recorded preprocessing names (``moses_lowercase``), which translating applies to raw input."""
    tokenizer = MosesLowercase(MosesLowercaseConfig(source_lang=lang, target_lang=lang)).tok
    return [tokenizer.tokenize(line, escape=True, return_str=True) for line in lines]


def train_truecaser(tokenized: List[str], path: str) -> bool:
    """Learn each word's most frequent casing from the cased, Moses-tokenized lines ``tokenized`` (sacremoses's
    MosesTruecaser; a sentence's first word is not learnt from, with the sentence openers that decoding knows) and
    save it to ``path``; False, and nothing written, when the text has no capital letter to learn from."""
    from sacremoses import MosesTruecaser

    if not any(line != line.lower() for line in tokenized):
        return False
    truecaser = MosesTruecaser()
    sentence_openers(truecaser)
    truecaser.train([line.split() for line in tokenized], save_to=path)
    return True


def preprocessing_record(args, truecase_model: Optional[str] = None) -> Dict:
    """What ``bin/preprocessing.json`` says: the tokenizer of ``--raw`` and of the SATED release, which restores the
    case when decoding (with the truecasing model learnt from ``--raw`` text's cased translations, if there is one)."""
    if args.preprocessing == "none":
        return {"tokenizer": None, "bpe": None}
    tokenizer = {"name": "moses_lowercase", "source_lang": args.src, "target_lang": args.tgt, "recase": True}
    if truecase_model:
        tokenizer["truecase_model"] = truecase_model
    return {"tokenizer": tokenizer, "bpe": None}


def prepare(args) -> Dict:
    text_dir, bin_dir = os.path.join(args.out, "text"), os.path.join(args.out, "bin")
    stats: Dict = {"splits": {}}
    data, cased_train_targets = {}, []
    for split, name in SPLITS.items():
        source, target, speakers = read_split(args.input, split, args.src, args.tgt, args.speaker_ext)
        if args.raw:
            source, target = moses_cased(source, args.src), moses_cased(target, args.tgt)
            if name == "train":
                cased_train_targets = target
            source, target = [line.lower() for line in source], [line.lower() for line in target]
        kept = list(zip(source, target, speakers))
        if name == "train":
            kept = [row for row in kept
                    if len(row[0].split()) <= args.max_len and len(row[1].split()) <= args.max_len]
        stats["splits"][name] = {"sentences": len(source), "kept": len(kept), "speakers": len(set(speakers))}
        data[name] = kept

    train_speakers = Counter(row[2] for row in data["train"])
    rare = sorted(s for s, n in train_speakers.items() if n < 10)
    stats["speakers"] = len(train_speakers)
    stats["speakers_under_10_sentences"] = rare
    unseen = sorted({row[2] for split in ("valid", "test") for row in data[split]} - set(train_speakers))
    stats["speakers_unseen_in_training"] = unseen

    if os.path.isdir(args.out) and os.listdir(args.out):
        if not os.path.exists(os.path.join(args.out, "prepare.json")):
            raise SpeakerDataError(f"{args.out} exists and is not an earlier output of prepare.py; choose another --out")
        shutil.rmtree(args.out)  # an earlier output: replaced only now that the input has been read whole
    os.makedirs(text_dir)
    for name, rows in data.items():
        for index, ext in enumerate((args.src, args.tgt, "spk")):
            with open(os.path.join(text_dir, f"{name}.{ext}"), "w", encoding="utf-8") as f:
                f.writelines(row[index] + "\n" for row in rows)

    run_fairseq("preprocess", [
        "--source-lang", args.src, "--target-lang", args.tgt,
        "--trainpref", f"{text_dir}/train", "--validpref", f"{text_dir}/valid", "--testpref", f"{text_dir}/test",
        "--destdir", bin_dir, "--workers", str(args.workers),
        "--thresholdsrc", str(args.min_count), "--thresholdtgt", str(args.min_count),
        "--nwordssrc", str(args.vocab_size), "--nwordstgt", str(args.vocab_size),
    ], os.path.join(args.out, "preprocess.log"))
    for name in data:
        shutil.copy(os.path.join(text_dir, f"{name}.spk"), bin_dir)
    truecase_model = f"truecase.{args.tgt}"  # learnt from --raw text's cased translations (none from lowercase text)
    if args.preprocessing == "none" or not train_truecaser(cased_train_targets, os.path.join(bin_dir, truecase_model)):
        truecase_model = None
    stats["preprocessing"] = preprocessing_record(args, truecase_model)
    with open(os.path.join(bin_dir, PREPROCESSING_FILE), "w", encoding="utf-8") as f:
        json.dump(stats["preprocessing"], f, indent=2)
        f.write("\n")
    stats["vocabulary"] = {
        lang: len(Dictionary.load(os.path.join(bin_dir, f"dict.{lang}.txt"))) for lang in (args.src, args.tgt)
    }
    with open(os.path.join(args.out, "prepare.json"), "w", encoding="utf-8") as f:
        json.dump(stats, f, indent=2, ensure_ascii=False)
    return stats


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--input", required=True, help="folder with {train,dev,test}.{src,tgt,usr}")
    parser.add_argument("--src", required=True, help="source language suffix (en)")
    parser.add_argument("--tgt", required=True, help="target language suffix (fr, es, de)")
    parser.add_argument("--out", required=True, help="output folder (replaced)")
    parser.add_argument("--speaker-ext", default="usr", help="speaker file suffix (SATED: usr)")
    parser.add_argument("--raw", action="store_true",
                        help="the input is raw text: Moses-tokenize and lowercase it (not for the SATED release)")
    parser.add_argument("--preprocessing", choices=["moses_lowercase", "none"], default="moses_lowercase",
                        help="what bin/preprocessing.json records, the preprocessing that models trained on this data "
                        "apply to raw text when translating: moses_lowercase (default), the Moses tokenization with "
                        "escapes and the lowercasing of --raw and of the SATED release; none, for text tokenized some "
                        "other way (then write bin/preprocessing.json yourself: docs/sated.md)")
    parser.add_argument("--max-len", type=int, default=60, help="drop training pairs longer than this (words)")
    parser.add_argument("--vocab-size", type=int, default=40000,
                        help="vocabulary size per language, fairseq's 4 special symbols included")
    parser.add_argument("--min-count", type=int, default=2, help="keep words seen at least this often")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    if args.raw and args.preprocessing == "none":
        parser.error("--raw tokenizes the text with moses_lowercase: --preprocessing none would not record it "
                     "(leave out --preprocessing)")
    try:
        stats = prepare(args)
    except SpeakerDataError as e:
        sys.exit(f"prepare.py: {e}")
    train = stats["splits"]["train"]
    print(f"train: kept {train['kept']} of {train['sentences']} pairs (at most {args.max_len} words); "
          f"{stats['speakers']} speakers, {len(stats['speakers_under_10_sentences'])} with fewer than "
          f"10 training sentences; vocabulary {stats['vocabulary']}; data in {args.out}/bin")
    if args.preprocessing != "none":
        tokenizer = stats["preprocessing"]["tokenizer"]
        casing = (f"each word's most frequent casing in the training translations ({args.out}/bin/"
                  f"{tokenizer['truecase_model']}) and capitalized sentence starts"
                  if tokenizer.get("truecase_model") else "capitalized sentence starts")
        print(f"raw text: models trained on {args.out}/bin tokenize it with moses_lowercase (lowercased, Moses "
              f"tokens with escapes) when translating, and give translations with {casing}; recorded in "
              f"{args.out}/bin/{PREPROCESSING_FILE}")
    if stats["speakers_unseen_in_training"]:
        print(f"note: {len(stats['speakers_unseen_in_training'])} dev/test speakers are not in training "
              f"(they get the mean speaker bias by default)")


if __name__ == "__main__":
    main()
