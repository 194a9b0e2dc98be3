"""The Python serving API: the README's snippet runs as written, and what it saves fairseq loads."""

import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

from fairseq_speaker.data import SpeakerDataError
from fairseq_speaker.onboarding.checkpoint import OnboardingError
from fairseq_speaker.serving import SpeakerTranslator
from tests.cli import generate_args, run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def readme_serving_snippet() -> str:
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    blocks = [b for b in re.findall(r"```python\n(.*?)```", text, re.DOTALL) if "SpeakerTranslator" in b]
    assert len(blocks) == 1
    return blocks[0]


def _workdir(toy, trained, tmp_path):
    """The README's layout: ckpt/checkpoint_best.pt and bin/."""
    os.makedirs(tmp_path / "ckpt")
    shutil.copy(trained("lstm_fact_bias"), tmp_path / "ckpt" / "checkpoint_best.pt")
    os.symlink(toy["bin"], tmp_path / "bin")
    return tmp_path


def test_the_readme_snippet_runs(toy, trained, tmp_path):
    work = _workdir(toy, trained, tmp_path)
    proc = subprocess.run([sys.executable, "-c", readme_serving_snippet()], cwd=work, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "fitted in" in proc.stdout
    saved = work / "ckpt" / "checkpoint_with_dr_lee.pt"
    state = torch.load(saved, weights_only=True)
    assert state["task_state"]["speaker_dictionary"]["names"][-1] == "dr-lee"
    assert os.path.exists(work / "dr-lee.npz")
    out = run("interactive", generate_args(str(work / "bin"), str(saved), "--speaker", "dr-lee",
                                           "--unknown-speaker", "fail"), stdin="i am tired .\n")
    assert "H-0" in out.stdout


def test_translate_matches_fairseq_interactive_and_speakers_change_output(toy, trained, tmp_path):
    checkpoint = trained("lstm_full_bias")
    translator = SpeakerTranslator.from_pretrained(checkpoint, data=toy["bin"], beam=5, max_len_b=6)
    sentences = ["i am tired .", "you want the drugs ."]
    for speaker in translator.speakers[:2] + ["someone-new"]:
        ours = translator.translate(sentences, speakers=speaker, max_len_b=6)
        out = run("interactive", generate_args(toy["bin"], checkpoint, "--speaker", speaker, "--max-len-b", "6",
                                               "--beam", "5"), stdin="\n".join(sentences) + "\n")
        theirs = [line.split("\t")[2] for line in out.stdout.splitlines() if line.startswith("H-")]
        assert ours == theirs, speaker
    # one speaker per sentence, in the input order
    mixed = translator.translate(sentences, speakers=[translator.speakers[0], translator.speakers[1]], max_len_b=6)
    assert mixed[0] == translator.translate(sentences[0], speakers=translator.speakers[0], max_len_b=6)
    assert mixed[1] == translator.translate(sentences[1], speakers=translator.speakers[1], max_len_b=6)


def test_a_sentence_mostly_of_unknown_words_is_translated_with_a_warning_and_counted_by_the_service(toy, trained):
    """Full-width text (an input method's), or text in another preprocessing, is all <unk>: the model answered a
    fluent invented sentence without a word. translate warns where more than half of a sentence's words are unknown;
    the service counts them in each answer."""
    import warnings

    from fastapi.testclient import TestClient

    from fairseq_speaker.service.app import create_app
    from fairseq_speaker.serving import UnknownWordsWarning

    translator = SpeakerTranslator.from_pretrained(trained("lstm_fact_bias"), data=toy["bin"], max_len_b=6)
    sentences = ["\uff49 \uff41\uff4d \uff54\uff49\uff52\uff45\uff44 .", "i am qwerty uiop .", "i am tired .",
                 "zzz ."]
    assert translator.unknown_words(sentences) == [3, 2, 0, 1]  # the full stop is a known word
    with pytest.warns(UnknownWordsWarning) as caught:
        translated = translator.translate(sentences, "spk000")
    caught = [w for w in caught if w.category is UnknownWordsWarning]
    assert [str(w.message).split(":")[0] for w in caught] == ["sentences[0]", "sentences[3]"]
    assert str(caught[0].message).startswith("sentences[0]: 3 of its 4 words are not in the model's source dictionary")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnknownWordsWarning)
        assert translator.translate(sentences[1:3], "spk000") == translated[1:3]  # 2 of 5 unknown: no warning
        nbest, _ = translator.translate_nbest_known(sentences, "spk000")  # the service's search says it otherwise
    assert [best[0][0] for best in nbest] == translated
    with TestClient(create_app(translator)) as client:
        answer = client.post("/translate", json={"sentences": sentences, "speaker": "spk000"}).json()
    assert [t["unknown_words"] for t in answer["translations"]] == [3, 2, 0, 1]
    assert [t["text"] for t in answer["translations"]] == translated


@pytest.mark.parametrize("sentence,described", [
    ("i am ti\u200bred .", "'\\u200b' (U+200B ZERO WIDTH SPACE) at character 8"),
    ("i am tired\xad .", "'\\xad' (U+00AD SOFT HYPHEN) at character 11"),
    ("i\u2060 am tired .", "'\\u2060' (U+2060 WORD JOINER) at character 2"),
])
def test_a_word_made_unknown_by_an_invisible_character_is_warned_about(toy, trained, sentence, described):
    """"i am ti\u200bred ." was translated as "je suis contente ." without a word: the word holding the character is
    <unk>, one of four words (no warning of a sentence mostly unknown). translate names the character and its place;
    the sentence without it is translated without a warning."""
    import warnings

    from fairseq_speaker.serving import UnknownWordsWarning

    translator = SpeakerTranslator.from_pretrained(trained("lstm_fact_bias"), data=toy["bin"], max_len_b=6)
    assert translator.unknown_words([sentence]) == [1]
    with pytest.warns(UnknownWordsWarning) as caught:
        translator.translate([sentence], "spk000")
    messages = [str(w.message) for w in caught if w.category is UnknownWordsWarning]
    assert messages == [f"sentences[0] holds {described}, which shows nothing, and 1 of its words are not in the "
                        f"model's source dictionary (<unk>): the word holding it is read as an unknown word; remove "
                        f"the character"], messages
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnknownWordsWarning)
        translator.translate(["i am tired ."], "spk000")


def test_beam_stop_reaches_the_translators_search_as_it_reaches_fairseq_interactives(toy, trained):
    """beam_stop="unbeaten" (from_pretrained's default for every call, or one call's) decodes as fairseq-interactive
    --beam-stop unbeaten does (a call's None: the translator's default, as from_pretrained's None), also for a checkpoint whose saved options predate it; a value that is no rule is
    refused before anything is loaded or decoded."""
    from fairseq_speaker.sequence_generator import UnbeatenStopGenerator

    checkpoint = trained("lstm_full_bias")
    translator = SpeakerTranslator.from_pretrained(checkpoint, data=toy["bin"], beam_stop="unbeaten", max_len_b=6)
    generator = translator.task.build_generator(translator.hub.models, translator.hub.cfg.generation)
    assert type(generator) is UnbeatenStopGenerator
    sentences = ["i am tired .", "you want the drugs ."]
    speaker = translator.speakers[0]
    out = run("interactive", generate_args(toy["bin"], checkpoint, "--speaker", speaker, "--beam", "5", "--max-len-b",
                                           "6", "--beam-stop", "unbeaten"), stdin="\n".join(sentences) + "\n")
    theirs = [line.split("\t")[2] for line in out.stdout.splitlines() if line.startswith("H-")]
    assert translator.translate(sentences, speaker) == theirs
    assert translator.translate(sentences, speaker, beam_stop=None) == theirs  # None: the translator's own, as there
    plain = SpeakerTranslator.from_pretrained(checkpoint, data=toy["bin"], max_len_b=6)
    assert plain.translate(sentences, speaker, beam_stop="unbeaten") == theirs
    assert plain.translate(sentences, speaker, beam_stop=None) == plain.translate(sentences, speaker)
    with pytest.raises(OnboardingError, match="beam_stop must be one of fairseq, unbeaten, got 'never'"):
        plain.translate(sentences, speaker, beam_stop="never")
    with pytest.raises(OnboardingError, match="got 'sometimes'"):
        SpeakerTranslator.from_pretrained(checkpoint, data=toy["bin"], beam_stop="sometimes")


def test_export_then_import_into_a_fresh_model(toy, trained, tmp_path):
    checkpoint = trained("lstm_fact_bias")
    first = SpeakerTranslator.from_pretrained(checkpoint, data=toy["bin"], max_len_b=6)
    first.add_speaker("dr-lee", ["i am tired .", "you want the drugs ."],
                      ["je suis fatiguée .", "vous voulez les médicaments ."])
    first.export_speakers(str(tmp_path / "lee.npz"), ["dr-lee"])
    second = SpeakerTranslator.from_pretrained(checkpoint, data=toy["bin"], max_len_b=6)
    assert "dr-lee" not in second.speakers
    assert second.import_speakers(str(tmp_path / "lee.npz")) == ["dr-lee"]
    sentences = ["i am tired .", "you want the drugs ."]
    assert second.translate(sentences, "dr-lee") == first.translate(sentences, "dr-lee")
    row = lambda t: t.model.decoder.speaker_bias.speaker_weights[t.speakers.index("dr-lee")]  # noqa: E731
    assert torch.equal(row(first), row(second))


def test_many_threads_translate_each_sentence_as_its_own_speaker(toy, trained):
    """8 threads x 12 requests of mixed speakers, with a speaker added meanwhile, equal the results of the same
    requests made one by one (a doctored model makes each speaker's output differ)."""
    from concurrent.futures import ThreadPoolExecutor

    translator = SpeakerTranslator.from_pretrained(trained("lstm_full_bias"), data=toy["bin"], beam=2, max_len_b=6)
    speakers = translator.speakers
    sentences = ["i am tired .", "you want the drugs .", "i went to the station .", "you are kind ."]
    requests = [([sentences[(i + j) % 4] for j in range(1 + i % 3)],
                 [speakers[(i * 5 + j) % len(speakers)] for j in range(1 + i % 3)]) for i in range(96)]
    expected = [translator.translate(s, speakers=spk) for s, spk in requests]
    assert len({tuple(e) for e in expected}) > 1

    def onboard():
        return translator.add_speaker("newcomer", sources=sentences, targets=["je suis fatiguée ."] * 4)

    with ThreadPoolExecutor(max_workers=8) as pool:
        futures = [pool.submit(translator.translate, s, speakers=spk) for s, spk in requests]
        added = pool.submit(onboard)
        got = [f.result() for f in futures]
    assert got == expected
    assert added.result().tokens > 0 and "newcomer" in translator.speakers


def test_save_writes_the_model_in_memory_even_if_its_file_was_replaced(toy, trained, tmp_path):
    checkpoint = str(tmp_path / "model.pt")
    shutil.copy(trained("lstm_full_bias"), checkpoint)
    translator = SpeakerTranslator.from_pretrained(checkpoint, data=toy["bin"])
    shutil.copy(trained("lstm_fact_bias"), checkpoint)  # another model in its place
    translator.save(str(tmp_path / "saved.pt"))
    saved = torch.load(tmp_path / "saved.pt", weights_only=True)
    assert saved["cfg"]["model"]["_name"] == "lstm_full_bias"
    assert "decoder.speaker_bias.weight" in saved["model"]


def test_bad_arguments_to_the_api_are_refused_with_a_message(toy, trained):
    import pytest

    from fairseq_speaker.onboarding.checkpoint import OnboardingError

    translator = SpeakerTranslator.from_pretrained(trained("lstm_full_bias"), data=toy["bin"], max_len_b=4)
    with pytest.raises(OnboardingError, match="speakers: give a string or a list of strings, got NoneType"):
        translator.translate(["i am tired ."], speakers=None)
    with pytest.raises(OnboardingError, match="2 speakers for 3 sentences"):
        translator.translate(["a .", "b .", "c ."], speakers=["x", "y"])
    for name, problem in ((" dr lee", "surrounding whitespace"), ("", "empty speaker label"),
                          ("a\tb", "contains '\\\\t'")):
        with pytest.raises(OnboardingError, match=problem):
            translator.add_speaker(name, sources=["i am tired ."], targets=["je suis fatigué ."])
    assert translator.speakers == SpeakerTranslator.from_pretrained(trained("lstm_full_bias"), data=toy["bin"]).speakers


def test_an_unknown_speaker_is_warned_about_once_per_call_with_their_lines(toy, trained, caplog):
    translator = SpeakerTranslator.from_pretrained(trained("lstm_fact_bias"), data=toy["bin"])
    sources = [line.strip() for line in open(os.path.join(toy["raw"], "test.en"), encoding="utf-8")][:6]
    with caplog.at_level("WARNING", logger="fairseq_speaker.tasks.speaker_translation"):
        translator.translate(sources, ["ghost"] * 5 + [translator.speakers[0]], beam=1, max_len_b=4)
    warned = [r.getMessage() for r in caplog.records if "is not among the model's" in r.getMessage()]
    assert warned == ["speakers[0], speakers[1], speakers[2] and 2 more: speaker 'ghost' is not among the model's 8 "
                      "speakers: translated with unknown_speaker='mean'"]


def test_the_python_apis_unknown_and_retired_speakers_are_told_in_its_own_terms(toy, trained, caplog):
    """They were told as fairseq-interactive's (``<input>:2``, ``--unknown-speaker mean``), a retired speaker as one
    never known, among a count of speakers that held the retired rows."""
    translator = SpeakerTranslator.from_pretrained(trained("lstm_fact_bias"), data=toy["bin"], max_len_b=4)
    retired = translator.speakers[0]
    translator.retire_speakers([retired])
    with caplog.at_level("WARNING", logger="fairseq_speaker.tasks.speaker_translation"):
        translator.translate(["i am tired ."], [retired], beam=1)
    warned = [r.getMessage() for r in caplog.records if "is not among the model's" in r.getMessage()]
    assert warned == [f"speakers[0]: speaker {retired!r} is not among the model's 7 speakers: translated with "
                      f"unknown_speaker='mean'; {retired!r} was a speaker of this model, since retired "
                      f"(SpeakerTranslator.retire_speakers; restore_speakers gives the rows back)"], warned
    strict = SpeakerTranslator.from_pretrained(trained("lstm_fact_bias"), data=toy["bin"], max_len_b=4,
                                               unknown_speaker="fail")
    with pytest.raises(SpeakerDataError) as refused:
        strict.translate(["i am tired .", "you are free ."], [strict.speakers[0], "nobody"], beam=1)
    assert str(refused.value) == ("speakers[1]: speaker 'nobody' is not among the model's 8 speakers; give "
                                  "from_pretrained unknown_speaker='mean' (the mean speaker) or 'none' (no bias) to "
                                  "translate unseen speakers")


def test_an_update_counts_its_sentences_and_the_counts_follow_their_names(toy, trained, tmp_path):
    """An onboarded speaker updated and saved was listed with "?" sentences (the record lost its count); the
    service's counts were zipped with the dictionary's, so that after a retired row every speaker took its
    neighbour's."""
    from fairseq_speaker.onboarding.checkpoint import onboarded_speakers, speaker_counts

    translator = SpeakerTranslator.from_pretrained(trained("lstm_fact_bias"), data=toy["bin"], max_len_b=4)
    translator.add_speaker("dr-lee", ["i am tired .", "you are free ."], ["je suis fatiguée .", "tu es libre ."])
    translator.update_speaker("dr-lee", ["i am ready ."], ["je suis prête ."])
    trained_count = speaker_counts(translator.task)["spk001"]
    translator.update_speaker("spk001", ["i am ready ."], ["je suis prêt ."])
    saved = str(tmp_path / "updated.pt")
    translator.save(saved)
    assert onboarded_speakers(torch.load(saved, weights_only=False))["dr-lee"] == 3
    counts = speaker_counts(translator.task)
    assert counts["dr-lee"] == 3 and counts["spk001"] == trained_count  # a trained speaker's: its training sentences
    dictionary = translator.task.speaker_dictionary
    expected = {name: dictionary.counts[dictionary.index(name)] for name in translator.speakers if name != "dr-lee"}
    translator.retire_speakers(["spk000"])
    after = speaker_counts(translator.task)
    assert "spk000" not in after and all(after[name] == expected[name] for name in expected if name != "spk000")


@pytest.mark.parametrize("sampling", [False, True], ids=["beam", "sampling"])
def test_the_dictionarys_fillers_are_never_written(toy, trained, monkeypatch, sampling):
    """The words fairseq pads a dictionary with (madeupword0000, ...) are never a translation's: a tiny model
    sampled at temperature 1 wrote one. Here the network is made to want them most at every step."""
    from fairseq_speaker.sequence_generator import filler_symbols

    translator = SpeakerTranslator.from_pretrained(trained("lstm_fact_bias"), data=toy["bin"], max_len_b=6)
    dictionary = translator.task.target_dictionary
    fillers = filler_symbols(dictionary)
    assert fillers, "the toy's target dictionary is padded to a multiple of 8"
    ids = [dictionary.index(symbol) for symbol in fillers]
    model = translator.model
    original = model.get_normalized_probs

    def wanting_fillers(net_output, log_probs, sample=None):
        logits = net_output[0].clone()
        logits[..., ids] += 50.0
        return original((logits, *net_output[1:]), log_probs, sample)

    monkeypatch.setattr(model, "get_normalized_probs", wanting_fillers)
    options = dict(sampling=True, beam=1) if sampling else {}
    out = translator.translate(["i am tired .", "you want the drugs ."], "spk000", **options)
    assert out and all(out)
    assert not any(symbol in sentence.split() for sentence in out for symbol in fillers), out


def test_a_retired_speaker_is_unknown_its_name_free_and_its_rows_restored(toy, trained):
    translator = SpeakerTranslator.from_pretrained(trained("lstm_fact_bias"), data=toy["bin"], max_len_b=6)
    sources, targets = ["i am tired ."], ["je suis fatiguée ."]
    translator.add_speaker("dr-lee", sources, targets)
    rows = translator.speaker_vectors(["dr-lee"]).rows
    mean = translator.translate_nbest_known(sources, ["nobody"], beam=2)
    translator.retire_speakers(["dr-lee"])
    assert "dr-lee" not in translator.speakers and len(translator.speakers) == 8
    assert translator.translate_nbest_known(sources, ["dr-lee"], beam=2) == mean  # the mean speaker, not known
    translator.add_speaker("\uff44r-lee", sources, targets)  # "ｄr-lee" looked like the retired speaker
    with pytest.raises(OnboardingError, match="'dr-lee' looks like '\uff44r-lee', a speaker of the model since it was"):
        translator.restore_speakers(["dr-lee"])
    translator.retire_speakers(["\uff44r-lee"])
    assert translator.restore_speakers(["dr-lee", "nobody"]) == ["dr-lee"]
    assert translator.task.speaker_dictionary.index("dr-lee") == 8  # its row, not a new one
    assert translator.model.decoder.speaker_bias.num_speakers == 10
    for key, value in translator.speaker_vectors(["dr-lee"]).rows.items():
        np.testing.assert_array_equal(value, rows[key])


def test_a_speaker_added_again_after_a_retire_can_be_retired_again(toy, trained):
    """add, retire, add again: a second retire was refused ("cannot rename speakers: ' y (deleted) ' already in the
    model"), and the speaker could never be retired again. The earlier retired rows are kept apart; a restore gives
    the name the rows of the latest retire."""
    translator = SpeakerTranslator.from_pretrained(trained("lstm_fact_bias"), data=toy["bin"], max_len_b=6)
    translator.add_speaker("y", ["i am tired ."], ["je suis fatiguée ."])
    translator.retire_speakers(["y"])
    translator.add_speaker("y", ["i am tired ."], ["je suis fatigué ."])
    with pytest.raises(OnboardingError, match="restore_speakers: 'y' is a speaker of the model again, added after it "
                                              "was retired: retire it first"):
        translator.restore_speakers(["y"])  # it returned [] without a word
    latest = translator.speaker_vectors(["y"]).rows
    translator.retire_speakers(["y"])
    assert "y" not in translator.speakers
    translator.add_speaker("y", ["you are nice ."], ["tu es sympathique ."])
    translator.retire_speakers(["y"])  # a third time
    assert translator.restore_speakers(["y"]) == ["y"]
    restored = translator.speaker_vectors(["y"]).rows
    for key in ("speaker_weights",) if "speaker_weights" in restored else restored:
        assert not np.array_equal(restored[key], latest[key])  # the third's rows, not the second's
    assert translator.translate_nbest_known(["you are nice ."], ["y"], beam=2)[1] == [True]


def test_a_label_shaped_like_a_retired_speakers_rows_is_a_label_and_those_rows_no_speaker(toy, trained, tmp_path):
    """After two retires of 'y', the label 'y (deleted 2)' was refused as looking like ' y (deleted 2) ' (a message
    that showed the internal name), while the internal name itself could be retired, restored and was "already in
    the model" to add_speaker; fairseq-generate called a retired speaker of a saved model "unseen in training"."""
    translator = SpeakerTranslator.from_pretrained(trained("lstm_fact_bias"), data=toy["bin"], max_len_b=6)
    for target in ("je suis fatiguée .", "je suis fatigué ."):
        translator.add_speaker("y", ["i am tired ."], [target])
        translator.retire_speakers(["y"])
    assert " y (deleted 2) " in translator.task.speaker_dictionary  # the earlier retire's rows
    for label in ("y (deleted 2)", "y (deleted)"):
        translator.add_speaker(label, ["i am tired ."], ["je suis fatiguée ."])
        assert label in translator.speakers
    for internal in (" y (deleted 2) ", " y (deleted) "):
        with pytest.raises(OnboardingError, match="retire_speakers: no speaker"):
            translator.retire_speakers([internal])
        with pytest.raises(OnboardingError, match="with surrounding whitespace"):
            translator.add_speaker(internal, ["i am tired ."], ["je suis fatiguée ."])
        assert translator.restore_speakers([internal]) == []
    assert " y (deleted 2) " in translator.task.speaker_dictionary and "y" not in translator.speakers

    from tests.cli import SIZES, run_here
    retired = translator.speakers[1]
    translator.retire_speakers([retired])
    saved = str(tmp_path / "retired.pt")
    translator.save(saved)
    speaker_file = tmp_path / "retired.spk"
    speaker_file.write_text(f"{retired}\n" * SIZES["test"])
    proc = run_here("generate", generate_args(toy["bin"], saved, "--speaker-file", str(speaker_file)))
    assert (f"37 of 37 sentences have speakers unseen in training (--unknown-speaker mean); '{retired}' was a "
            f"speaker of this model, since retired (SpeakerTranslator.retire_speakers" in proc.log), proc.log
    # the commands that read its training split, or name a speaker: the advice "give the data folder it was trained
    # on" could not work, and an internal name exported the retired rows
    from tests.cli import run
    words = run("fairseq-speaker-words", [toy["bin"], "--path", saved, "--save", str(tmp_path / "w.pt")], check=False)
    assert words.returncode == 2 and f"speaker '{retired}' was a speaker of this model, since retired" in \
        words.stderr, words.stderr
    for name, retired_said in ((retired, True), (f" {retired} (deleted) ", False)):
        export = run("fairseq-speaker-vectors", ["export", toy["bin"], "--path", saved, "--speakers", name,
                                                 "--out", str(tmp_path / "v.npz")], check=False)
        assert export.returncode == 2 and f"no speaker(s) {name!r} (it has {len(translator.speakers)} speakers" \
            in export.stderr, export.stderr
        assert ("was a speaker of this model, since retired" in export.stderr) == retired_said, export.stderr


def test_a_retired_speakers_rows_saved_with_the_model_are_no_speakers_of_it(toy, trained, tmp_path):
    """save() after retire_speakers wrote the retired rows under their names (' spk001 (deleted) '):
    fairseq-speaker-speakers listed them, vectors export exported them (and its import then refused the file), and
    fairseq-interactive --speaker ' spk001 (deleted) ' translated as the retired speaker."""
    from fairseq_speaker.data import SpeakerDataError
    from fairseq_speaker.onboarding.speakers import list_speakers
    from fairseq_speaker.onboarding.vectors_file import load_speaker_vectors
    from tests.cli import call_main, run_here

    translator = SpeakerTranslator.from_pretrained(trained("lstm_fact_bias"), data=toy["bin"], max_len_b=6)
    retired = translator.speakers[1]
    translator.add_speaker("y", ["i am tired ."], ["je suis fatiguée ."])
    translator.retire_speakers(["y", retired])
    saved = str(tmp_path / "retired.pt")
    translator.save(saved)
    listed = [s.name for s in list_speakers(saved).speakers]
    assert listed == translator.speakers and retired not in listed, listed
    call_main("fairseq-speaker-vectors", ["export", toy["bin"], "--path", saved, "--out", str(tmp_path / "all.npz")])
    assert load_speaker_vectors(str(tmp_path / "all.npz")).names == translator.speakers
    call_main("fairseq-speaker-vectors", ["import", toy["bin"], "--path", trained("lstm_fact_bias"), "--vectors",
                                          str(tmp_path / "all.npz"), "--save", str(tmp_path / "back.pt"),
                                          "--replace"])
    args = [toy["bin"], "--user-dir", os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "fairseq_speaker"), "--task", "speaker_translation", "--path", saved, "--speaker",
        f" {retired} (deleted) "]
    with pytest.raises(SpeakerDataError, match="names the rows of a retired speaker, not a speaker"):
        run_here("interactive", args, stdin="i am tired .\n")
