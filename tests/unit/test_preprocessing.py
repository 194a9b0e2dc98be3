"""The training data's preprocessing, recorded (preprocessing.json), kept in the task state, rebuilt to translate."""

import json
import os
from argparse import Namespace

import pytest
from omegaconf import OmegaConf
from sacremoses import MosesDetokenizer

from fairseq.data import Dictionary
from fairseq.data.encoders.space_tokenizer import SpaceTokenizer

from fairseq_speaker.data import preprocessing
from fairseq_speaker.data.preprocessing import MosesLowercase, MosesLowercaseConfig, PreprocessingError
from fairseq_speaker.errors import UserError
from fairseq_speaker.tasks.speaker_translation import SpeakerTranslationConfig, SpeakerTranslationTask

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "sated", "en-fr")
#: the fixture's dev sentences as a user would type them (dev.en holds them tokenized and lowercased)
RAW_DEV = ["I am happy.", "Thank you.", "It's my idea."]


def lines(path):
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def write(folder, name, content) -> str:
    path = os.path.join(str(folder), name)
    with open(path, "w", encoding="utf-8") as f:
        f.write(content if isinstance(content, str) else json.dumps(content))
    return path


def gpt2_files(folder, vocab="#version: 0.2\n") -> dict:
    """The two files of a (tiny) gpt2 BPE: a BPE with files that fairseq builds without another package."""
    write(folder, "encoder.json", {c: i for i, c in enumerate("abcdefghijklmnopqrstuvwxyz")})
    write(folder, "vocab.bpe", vocab)
    return {"name": "gpt2", "gpt2_encoder_json": "encoder.json", "gpt2_vocab_bpe": "vocab.bpe"}


# -- the tokenizer of SATED -------------------------------------------------------------------------------------


def test_moses_lowercase_turns_raw_dev_sentences_into_the_fixtures_tokens():
    tokenizer = MosesLowercase(MosesLowercaseConfig(source_lang="en", target_lang="fr"))
    assert [tokenizer.encode(s) for s in RAW_DEV] == lines(os.path.join(FIXTURE, "dev.en"))


def test_moses_lowercase_decodes_to_detokenized_unescaped_text():
    tokenizer = MosesLowercase(MosesLowercaseConfig(source_lang="en", target_lang="fr"))
    for line in lines(os.path.join(FIXTURE, "dev.fr")) + lines(os.path.join(FIXTURE, "test.fr")):
        decoded = tokenizer.decode(line)
        assert "&apos;" not in decoded and decoded == MosesDetokenizer(lang="fr").detokenize(line.split())
    assert tokenizer.decode("c&apos; est mon idée .") == "c'est mon idée."


def test_moses_lowercase_restores_the_case_when_asked(tmp_path):
    """recase: each sentence's first word capitalized (also after an opening quote or a sentence's end), and with a
    truecasing model learnt from cased text every word in its most frequent casing (sentence starts are not learnt
    from); without it, lowercase as before."""
    from sacremoses import MosesTruecaser

    recase = MosesLowercase(MosesLowercaseConfig(source_lang="fr", target_lang="fr", recase=True))
    assert recase.decode("c&apos; est vrai , je suis rentrée .") == "C'est vrai, je suis rentrée."
    assert recase.decode("« oui » . et toi ?") == "« Oui ». Et toi ?"
    assert recase.decode("") == ""
    assert MosesLowercase(MosesLowercaseConfig(source_lang="fr", target_lang="fr")).decode("je vais à paris .") == \
        "je vais à paris."
    model = str(tmp_path / "truecase.fr")
    MosesTruecaser().train([["Je", "vais", "à", "Paris", "."], ["Louvre", "est", "là", "."],
                            ["Elle", "a", "vu", "Marie", "."]], save_to=model)
    cased = MosesLowercase(MosesLowercaseConfig(source_lang="fr", target_lang="fr", recase=True, truecase_model=model))
    assert cased.decode("je vais à paris avec marie .") == "Je vais à Paris avec Marie."
    assert cased.decode("le louvre et paris") == "Le louvre et Paris"  # "Louvre" was only seen starting a sentence


def test_recase_options_that_cannot_be_followed_are_refused(tmp_path):
    path = write(tmp_path, "preprocessing.json", {"tokenizer": {"name": "moses_lowercase", "recase": "false"}})
    with pytest.raises(PreprocessingError, match="option 'recase' must be true or false, got \"false\""):
        preprocessing.read_record(path, "en", "fr")
    with pytest.raises(PreprocessingError, match="truecase_model t.fr is only used with recase"):
        MosesLowercase(MosesLowercaseConfig(truecase_model="t.fr"))
    with pytest.raises(PreprocessingError, match=f"truecase_model {tmp_path}/none.fr: no such file"):
        MosesLowercase(MosesLowercaseConfig(recase=True, truecase_model=str(tmp_path / "none.fr")))
    (tmp_path / "bad.fr").write_text("paris (3/4) Paris\n", encoding="utf-8")
    with pytest.raises(PreprocessingError, match=f"truecase_model {tmp_path}/bad.fr is not a truecasing model"):
        MosesLowercase(MosesLowercaseConfig(recase=True, truecase_model=str(tmp_path / "bad.fr")))


def test_the_target_side_tokenizer_of_onboarding_does_not_read_the_truecasing_model_again(tmp_path):
    from sacremoses import MosesTruecaser

    model = str(tmp_path / "truecase.fr")
    MosesTruecaser().train([["Elle", "a", "vu", "Paris", "."]], save_to=model)
    tokenizer = MosesLowercase(MosesLowercaseConfig(source_lang="en", target_lang="fr", recase=True,
                                                    truecase_model=model))
    os.remove(model)  # moved since the model was loaded: onboarding still encodes
    target = preprocessing.for_target(tokenizer)
    assert target.cfg.source_lang == "fr" and target.encode("C'est Paris.") == "c&apos; est paris ."
    assert tokenizer.decode("c&apos; est paris .") == "C'est Paris."


def test_a_record_without_recase_builds_the_tokenizer_of_before():
    old = {"tokenizer": {"name": "moses_lowercase", "options": {"source_lang": "en", "target_lang": "fr"},
                         "sha256": {}}}
    tokenizer = preprocessing.build("tokenizer", old)
    assert tokenizer.decode("je suis rentrée .") == "je suis rentrée."


def test_moses_lowercase_is_a_fairseq_tokenizer():
    built = preprocessing.encoders.build_tokenizer(Namespace(tokenizer="moses_lowercase", source_lang="en",
                                                             target_lang="fr"))
    assert isinstance(built, MosesLowercase) and built.encode("It's") == "it &apos;s"


# -- reading a record -------------------------------------------------------------------------------------------


def test_a_record_has_every_option_with_the_tasks_languages_and_absolute_files(tmp_path):
    bpe = gpt2_files(tmp_path)
    path = write(tmp_path, "preprocessing.json", {"tokenizer": {"name": "moses_lowercase"}, "bpe": bpe})
    record = preprocessing.read_record(path, source_lang="en", target_lang="de")
    assert record["tokenizer"] == {"name": "moses_lowercase", "options": {"source_lang": "en", "target_lang": "de",
                                                                          "recase": False, "truecase_model": None},
                                   "sha256": {}}
    assert record["bpe"]["options"] == {"gpt2_encoder_json": str(tmp_path / "encoder.json"),
                                        "gpt2_vocab_bpe": str(tmp_path / "vocab.bpe")}
    assert record["bpe"]["sha256"]["gpt2_vocab_bpe"] == preprocessing.sha256(str(tmp_path / "vocab.bpe"))
    assert preprocessing.describe(record).startswith("tokenizer moses_lowercase (source_lang en, target_lang de), "
                                                      "bpe gpt2 (")


def test_what_the_file_says_wins_over_the_tasks_languages(tmp_path):
    path = write(tmp_path, "preprocessing.json",
                 {"tokenizer": {"name": "moses", "source_lang": "fr", "moses_no_escape": True}, "bpe": None})
    record = preprocessing.read_record(path, source_lang="en", target_lang="de")
    assert record["tokenizer"]["options"] == {"source_lang": "fr", "target_lang": "de", "moses_no_dash_splits": False,
                                              "moses_no_escape": True}
    assert record["bpe"] is None and preprocessing.describe(record).endswith(", no BPE")


@pytest.mark.parametrize("content,message", [
    ("{\n  \"tokenizer\": moses\n}", "preprocessing.json:2: not JSON (Expecting value)"),
    ([], "expected an object with \"tokenizer\" and/or \"bpe\", got []"),
    ({"tokeniser": None}, "unknown key(s) 'tokeniser': expected \"tokenizer\" and/or \"bpe\""),
    ({"tokenizer": "moses"}, "tokenizer must be null or an object with a \"name\""),
    ({"tokenizer": {"name": "nosuch"}}, "no tokenizer called 'nosuch' (the choices of --tokenizer: "),
    ({"bpe": {"name": "nosuch"}}, "no bpe called 'nosuch' (the choices of --bpe: "),
    ({"tokenizer": {"name": "moses", "lowercase": True}}, "tokenizer moses: no option 'lowercase' (its options: "
                                                           "moses_no_dash_splits, moses_no_escape, source_lang, "
                                                           "target_lang)"),
    ({"tokenizer": {"name": "moses", "source_lang": ["en"]}}, "option 'source_lang' must be a string, a number or "
                                                               "true/false"),
    ({"bpe": {"name": "subword_nmt"}}, "bpe subword_nmt: option 'bpe_codes' is required (fairseq's --bpe-codes)"),
    ({"bpe": {"name": "subword_nmt", "bpe_codes": "codes.txt"}}, "bpe subword_nmt: bpe_codes 'codes.txt': no such "
                                                                  "file {tmp}/codes.txt"),
])
def test_a_bad_record_is_refused_naming_the_file_and_what_to_do(tmp_path, content, message):
    path = write(tmp_path, "preprocessing.json", content)
    with pytest.raises(PreprocessingError) as refused:
        preprocessing.read_record(path, "en", "fr")
    text = str(refused.value)
    assert isinstance(refused.value, UserError) and "\n" not in text
    assert text.startswith(f"{path}") and message.format(tmp=tmp_path) in text, text
    assert text.endswith("correct it (docs/sated.md describes preprocessing.json) or remove it to record no "
                         "preprocessing")


# -- rebuilding it ----------------------------------------------------------------------------------------------


def test_a_recorded_file_is_found_where_it_was_then_in_the_data_directory(tmp_path):
    (tmp_path / "train").mkdir()
    (tmp_path / "moved").mkdir()
    record = preprocessing.read_record(write(tmp_path / "train", "preprocessing.json", {"bpe": gpt2_files(
        tmp_path / "train")}))
    bpe = preprocessing.build("bpe", record, data_dirs=[str(tmp_path / "moved")])
    assert bpe.encode("abc") == "0 1 2" and bpe.decode("0 1 2") == "abc"
    for name in ("encoder.json", "vocab.bpe"):
        os.replace(tmp_path / "train" / name, tmp_path / "moved" / name)
    assert preprocessing.build("bpe", record, data_dirs=[str(tmp_path / "moved")]).encode("cab") == "2 0 1"


def test_a_missing_file_stops_with_one_message_saying_what_to_do(tmp_path):
    record = preprocessing.read_record(write(tmp_path, "preprocessing.json", {"bpe": gpt2_files(tmp_path)}))
    os.remove(tmp_path / "vocab.bpe")
    with pytest.raises(PreprocessingError) as refused:
        preprocessing.build("bpe", record, data_dirs=["data-bin"], checkpoint="ckpt/model.pt")
    assert str(refused.value) == (
        f"ckpt/model.pt: the text preprocessing saved with the model needs the file vocab.bpe (--bpe gpt2 "
        f"--gpt2-vocab-bpe), which is missing: not at {tmp_path}/vocab.bpe, where it was at training, nor "
        f"in data-bin. Put that file back in one of these places, or give --bpe yourself (it wins over the "
        f"checkpoint's), or --preprocessing none (preprocessing=\"none\") for input already in the model's tokens")


def test_another_file_under_the_same_name_is_refused(tmp_path):
    record = preprocessing.read_record(write(tmp_path, "preprocessing.json", {"bpe": gpt2_files(tmp_path)}))
    gpt2_files(tmp_path, vocab="#version: 0.2\na b\n")  # other merges: another BPE
    with pytest.raises(PreprocessingError) as refused:
        preprocessing.build("bpe", record)
    assert f"{tmp_path}/vocab.bpe is not the file vocab.bpe (--bpe gpt2 --gpt2-vocab-bpe) the model was trained " \
           f"with (its sha256 differs)" in str(refused.value)


@pytest.mark.parametrize("record,message", [
    ({"tokenizer": {"name": "someone_elses", "options": {}, "sha256": {}}},
     "needs a tokenizer this installation does not have: no tokenizer called 'someone_elses'"),
    ({"tokenizer": ["moses"]}, "the text preprocessing saved with the model is not readable (TypeError"),
    ({"tokenizer": {"name": "moses"}}, "the text preprocessing saved with the model is not readable (KeyError"),
    ({"tokenizer": {"name": "moses", "options": {"source_lang": "en"}, "sha256": {"source_lang": "0" * 64}}},
     "needs the file en (--tokenizer moses --source-lang), which is missing"),
    ({"tokenizer": {"name": "moses", "options": {}, "sha256": {"bpe_codes": "0" * 64}}},
     "is not readable (the tokenizer's bpe_codes is not a file name)"),
])
def test_a_record_that_cannot_be_rebuilt_is_refused(record, message):
    with pytest.raises(PreprocessingError) as refused:
        preprocessing.build("tokenizer", record, checkpoint="model.pt")
    assert str(refused.value).startswith("model.pt: ") and message in str(refused.value), str(refused.value)
    assert "--preprocessing none" in str(refused.value)


def test_a_package_a_bpe_needs_is_named_when_it_cannot_be_imported(monkeypatch):
    from fairseq.data.encoders import BPE_REGISTRY

    class Unavailable:
        def __init__(self, cfg):
            raise ImportError("Please install subword_nmt with: pip install subword-nmt")

    monkeypatch.setitem(BPE_REGISTRY, "subword_nmt", Unavailable)
    record = {"bpe": {"name": "subword_nmt", "options": {"bpe_codes": None, "bpe_separator": "@@"}, "sha256": {}}}
    with pytest.raises(PreprocessingError) as refused:
        preprocessing.build("bpe", record, checkpoint="model.pt")
    assert "uses the bpe subword_nmt, which cannot be built here (ImportError: Please install subword_nmt with: pip " \
           "install subword-nmt)" in str(refused.value)


@pytest.mark.parametrize("args,kind,expected", [
    (None, "tokenizer", False),
    (OmegaConf.create({"_name": None}), "tokenizer", False),
    (OmegaConf.create({"_name": "moses", "source_lang": "en"}), "tokenizer", True),
    (Namespace(bpe="subword_nmt"), "bpe", True),
    (Namespace(bpe=None), "bpe", False),
    ("space", "tokenizer", True),
])
def test_an_explicit_tokenizer_or_bpe_is_seen_in_every_form_fairseq_passes(args, kind, expected):
    assert preprocessing.chosen(args, kind) is expected


# -- the task -------------------------------------------------------------------------------------------------


def make_task(data, **options) -> SpeakerTranslationTask:
    words = Dictionary()
    cfg = SpeakerTranslationConfig(data=str(data), source_lang="en", target_lang="fr", **options)
    return SpeakerTranslationTask(cfg, words, words)


def test_the_task_records_the_data_directorys_file_and_builds_it(tmp_path):
    write(tmp_path, "preprocessing.json", {"tokenizer": {"name": "moses_lowercase"}})
    task = make_task(tmp_path)
    task._record_preprocessing(str(tmp_path))
    assert task.state_dict()["preprocessing"]["tokenizer"]["options"] == {"source_lang": "en", "target_lang": "fr",
                                                                          "recase": False, "truecase_model": None}
    assert isinstance(task.build_tokenizer(None), MosesLowercase) and task.build_bpe(None) is None
    # an explicit --tokenizer wins
    assert isinstance(task.build_tokenizer(Namespace(tokenizer="space")), SpaceTokenizer)


def test_a_task_that_loaded_a_checkpoint_keeps_its_record_or_its_lack_of_one(tmp_path):
    """A checkpoint without a record (an older one) is not given the data directory's: it reads as before."""
    write(tmp_path, "preprocessing.json", {"tokenizer": {"name": "moses_lowercase"}})
    task = make_task(tmp_path)
    task.load_state_dict({"speaker_dictionary": {"names": ["a"], "counts": [1]}})
    task._record_preprocessing(str(tmp_path))
    assert "preprocessing" not in task.state_dict()
    assert task.build_tokenizer(None) is None and task.build_bpe(None) is None


def test_preprocessing_none_records_nothing_and_applies_nothing(tmp_path):
    write(tmp_path, "preprocessing.json", {"tokenizer": {"name": "moses_lowercase"}})
    task = make_task(tmp_path, preprocessing="none")
    task._record_preprocessing(str(tmp_path))
    assert "preprocessing" not in task.state_dict()
    recorded = make_task(tmp_path)
    recorded._record_preprocessing(str(tmp_path))
    task.load_state_dict(dict(recorded.state_dict()))
    assert task.build_tokenizer(None) is None


def test_target_sentences_are_tokenized_with_the_target_languages_rules():
    tokenizer = MosesLowercase(MosesLowercaseConfig(source_lang="en", target_lang="fr"))
    assert tokenizer.encode("C'est mon idée.") == "c &apos;est mon idée ."  # English rules
    target = preprocessing.for_target(tokenizer)
    assert target.encode("C'est mon idée.") == "c&apos; est mon idée ."  # French rules, as prepare.py --raw
    assert target.decode("c&apos; est mon idée .") == "c'est mon idée."
    assert preprocessing.for_target(None) is None
    space = SpaceTokenizer()
    assert preprocessing.for_target(space) is space
