"""fairseq-speaker-words: a checkpoint that remembers its speakers' words, decoded by fairseq's commands with each
hypothesis's speaker, and kept up to date by onboarding. The commands run in this process (their mains: what their
processes do themselves is checked in test_quiet.py and test_probes.py)."""

import dataclasses
import os
from collections import defaultdict

import numpy as np

import pytest
import torch

from fairseq_speaker.modules.speaker_words import CHECKPOINT_KEY, SpeakerWords, from_state
from fairseq_speaker.onboarding.translator import SpeakerTranslator
from fairseq_speaker.modules.speaker_words import speaker_words_of
from fairseq_speaker.modules.words_options import WordOptions
from tests.cli import call_main, generate_args, run_here


@pytest.fixture(scope="module")
def remembered(trained, toy, tmp_path_factory):
    checkpoint = trained("lstm_fact_bias")
    out = str(tmp_path_factory.mktemp("words") / "words.pt")
    proc = call_main("fairseq-speaker-words", [toy["bin"], "--path", checkpoint, "--save", out, "--threads", "1",
                                                 "--calibrate", "off"])
    return checkpoint, out, proc


def _dictionary(path):
    """The target dictionary's ids by word, read from its file (fairseq's 4 special symbols first)."""
    ids = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    with open(path, encoding="utf-8") as f:
        for line in f:
            ids[line.split()[0]] = len(ids)
    return ids


def test_the_checkpoint_keeps_every_training_speakers_words_and_nothing_else_changes(remembered, toy):
    checkpoint, out, proc = remembered
    assert "the words of 8 speakers" in proc.stdout and f"saved to {out}" in proc.stdout
    before, after = torch.load(checkpoint, weights_only=False), torch.load(out, weights_only=False)
    assert set(after["model"]) == set(before["model"]) | {CHECKPOINT_KEY}
    for key, value in before["model"].items():
        assert torch.equal(after["model"][key], value) if torch.is_tensor(value) else after["model"][key] == value
    # the words each speaker said, from the raw text and the dictionary file (not from the binarized data)
    ids = _dictionary(os.path.join(toy["bin"], "dict.fr.txt"))
    said = defaultdict(set)
    with open(os.path.join(toy["raw"], "train.spk"), encoding="utf-8") as spk, \
            open(os.path.join(toy["raw"], "train.fr"), encoding="utf-8") as fr:
        for label, line in zip(spk, fr):
            said[label.strip()] |= {ids[w] for w in line.split()} | {ids["</s>"]}
    names = after["model"]["decoder.speaker_bias._extra_state"]["speakers"]
    memory = from_state(after["model"][CHECKPOINT_KEY], len(ids), out)
    assert memory.num_speakers == len(names) == 8
    for row, name in enumerate(names):
        assert set(memory.words_of(row).tolist()) == said[name], name
    listed = call_main("fairseq-speaker-speakers", [out]).stdout.splitlines()[0]
    assert listed.endswith("; the words of 8 speakers remembered (fairseq-speaker-words)")
    assert "remembered" not in call_main("fairseq-speaker-speakers", [checkpoint]).stdout


def test_generation_with_zero_weight_is_the_checkpoints_own(remembered, toy, tmp_path):
    checkpoint, out, _ = remembered
    silent = str(tmp_path / "silent.pt")
    call_main("fairseq-speaker-words", [toy["bin"], "--path", checkpoint, "--save", silent, "--weight", "0",
                                        "--threads", "1"])
    plain = run_here("generate", generate_args(toy["bin"], checkpoint, "--gen-subset", "test")).stdout
    assert run_here("generate", generate_args(toy["bin"], silent, "--gen-subset", "test")).stdout == plain
    assert "H-" in plain


def _doctored(checkpoint: str, path: str, favourite: dict, vocab: int) -> str:
    """``checkpoint`` with a memory in which speaker row r said only the word ``favourite[r]``, weighted so that it
    wins every step and the other speakers' favourites lose."""
    state = torch.load(checkpoint, weights_only=False)
    words = SpeakerWords(vocab, WordOptions(weight=40.0, window=1e6, own=1.0, neighbours=0.0, evidence=0.0))
    words.resize(8)
    for row, word in favourite.items():
        words.set_words(row, [[word]])
    state["model"][CHECKPOINT_KEY] = words.get_extra_state()
    torch.save(state, path)
    return path


def test_beam_hypotheses_keep_their_speakers_words_in_fairseq_interactive(remembered, toy, tmp_path, monkeypatch):
    from fairseq_speaker.modules import words_options

    # a memory that wins every step (a window no record may hold since it was bounded): each hypothesis's words then
    # show which speaker's bias row it was given, through the beam's reorderings
    monkeypatch.setattr(words_options, "MAX_WINDOW", 1e7)
    checkpoint, _, _ = remembered
    ids = _dictionary(os.path.join(toy["bin"], "dict.fr.txt"))
    state = torch.load(checkpoint, weights_only=False)
    names = state["model"]["decoder.speaker_bias._extra_state"]["speakers"]
    favourite_words = {0: "médicaments", 1: "drogues"}
    path = _doctored(checkpoint, str(tmp_path / "doctored.pt"), {r: ids[w] for r, w in favourite_words.items()},
                     len(ids))
    sentences = ["i am tired .", "you want the drugs .", "i saw the dog .", "you are happy ."] * 2
    speakers = [names[i % 2] for i in range(len(sentences))]
    (tmp_path / "in.txt").write_text("".join(f"{speaker}\t{sentence}\n" for speaker, sentence in zip(speakers, sentences)),
                                     encoding="utf-8")
    out = run_here("interactive", [toy["bin"], "--path", path, "--user-dir", "fairseq_speaker", "--task",
                              "speaker_translation", "--beam", "4", "--nbest", "4", "--max-len-b", "3",
                              "--input", str(tmp_path / "in.txt"), "--speaker-per-line",
                              "--batch-size", "8", "--buffer-size", "8"]).stdout
    hypotheses = defaultdict(list)
    for line in out.splitlines():
        if line.startswith("H-"):
            hypotheses[int(line.split("\t")[0][2:])].append(line.split("\t")[2].split())
    assert sorted(hypotheses) == list(range(len(sentences)))
    for i, nbest in hypotheses.items():
        mine, theirs = favourite_words[i % 2], favourite_words[1 - i % 2]
        assert len(nbest) == 4
        for words in nbest:
            assert mine in words and theirs not in words, (i, speakers[i], words)


@pytest.mark.parametrize("add_to", ["log_probs", "logits"])
def test_a_hypothesiss_score_is_the_networks_log_probability_plus_its_speakers_bias_at_each_word(remembered, toy,
                                                                                               add_to):
    """The scores fairseq's beam search gave each word of each hypothesis, against the same words scored by a plain
    teacher-forced pass (which the memory never touches) and the speaker's bias row: with ``log_probs`` the bias is
    added to the word's log-probability and kept (a noun's bias counts against its article's), with ``logits`` the step
    is renormalized after it (0.6.0)."""
    _, out, _ = remembered
    translator = SpeakerTranslator.from_pretrained(out, data=toy["bin"], max_len_b=8)
    model, memory = translator.model, speaker_words_of(translator.model)
    memory.options = dataclasses.replace(memory.options, weight=4 * memory.options.weight, add_to=add_to)
    window = memory.options.window
    sentences = ["i am tired .", "you want the drugs .", "i saw the dog yesterday .", "you are happy ."]
    names = translator.speakers[:4]
    translator.task.set_inference_speakers(names)
    nbests = translator.hub.generate([translator.hub.encode(s) for s in sentences], 3)
    biased = 0
    for sentence, name, nbest in zip(sentences, names, nbests):
        row = translator.task.speaker_dictionary.index(name)
        bias = memory.bias_row(row)
        source = translator.hub.encode(sentence).unsqueeze(0)
        for h in nbest:
            target = h["tokens"]
            previous = torch.cat([target.new_tensor([translator.task.target_dictionary.eos()]), target[:-1]])
            with torch.no_grad():
                logits = model(source, torch.tensor([source.size(1)]), previous.unsqueeze(0),
                               speakers=torch.tensor([row]))[0][0].float()
            lp = torch.log_softmax(logits, -1)
            near = lp >= lp.max(-1, keepdim=True).values - window
            added = torch.where(near, bias.unsqueeze(0), torch.zeros(()))
            # the floor: a near word lowered stays at the window's edge
            scored = lp if add_to == "log_probs" else logits
            kept = torch.where(near, torch.maximum(scored + added, scored.max(-1, keepdim=True).values - window),
                               scored + added)
            if add_to == "log_probs":
                expected = kept.gather(1, target.unsqueeze(1)).squeeze(1)
            else:
                expected = torch.log_softmax(kept, -1).gather(1, target.unsqueeze(1)).squeeze(1)
            assert torch.allclose(h["positional_scores"].float(), expected, atol=1e-4), (add_to, sentence, name)
            biased += int((added.gather(1, target.unsqueeze(1)).abs() > 0.1).sum())
    assert biased > 0  # the bias was there to be counted


def test_kinds_are_learned_from_the_sentence_pairs_and_decoded_with(remembered, toy, tmp_path):
    """The kinds of speaker (the default) on the toy corpus: its professions' words (médicaments / drogues, ...) and
    its gender agreements are choices, found from the binarized pairs; generation reads the record back.
    ``--no-kinds`` remembers the same words without them."""
    checkpoint, out, proc = remembered
    assert "kinds of speaker: trait 1:" in proc.stdout
    ids = _dictionary(os.path.join(toy["bin"], "dict.fr.txt"))
    names = {i: w for w, i in ids.items()}
    memory = from_state(torch.load(out, weights_only=False)["model"][CHECKPOINT_KEY], len(ids), out)
    found = {tuple(sorted(names[int(i)] for i in w)) for t in memory.kinds for w in t.choices}
    assert ("fatigué", "fatiguée") in found and ("drogues", "médicaments") in found, found
    plain = str(tmp_path / "no-kinds.pt")
    no_kinds = call_main("fairseq-speaker-words", [toy["bin"], "--path", checkpoint, "--save", plain, "--no-kinds",
                                                   "--threads", "1"])
    assert "kinds of speaker" not in no_kinds.stdout
    without = from_state(torch.load(plain, weights_only=False)["model"][CHECKPOINT_KEY], len(ids), plain)
    assert without.kinds == [] and [w.tolist() for w in without.words] == [w.tolist() for w in memory.words]
    assert "H-" in run_here("generate", generate_args(toy["bin"], out, "--gen-subset", "test")).stdout


def test_a_record_written_before_its_options_existed_decodes_as_it_did(remembered):
    _, out, _ = remembered
    record = dict(torch.load(out, weights_only=False)["model"][CHECKPOINT_KEY])
    # what fairseq-speaker-words writes now
    assert (record["options"]["add_to"], record["options"]["rank_choices"]) == ("log_probs", "posterior")
    before = {"add_to": "logits", "rank_choices": "rates"}  # 0.6.0 wrote neither; 0.7.0 no rank_choices
    for option, then in before.items():
        old = dict(record, options={k: v for k, v in record["options"].items() if k != option})
        assert getattr(from_state(old, record["vocab"], out).options, option) == then


def test_onboarding_gives_a_new_speaker_their_words_and_an_update_adds_its_own(remembered, toy, tmp_path):
    _, out, _ = remembered
    translator = SpeakerTranslator.from_pretrained(out, data=toy["bin"], max_len_b=6)
    memory = speaker_words_of(translator.model)
    dictionary = translator.task.target_dictionary
    trained_words = [memory.words_of(row).tolist() for row in range(8)]
    translator.add_speaker("dr-lee", ["i am tired .", "you want the drugs ."],
                           ["je suis fatiguée .", "vous voulez les médicaments ."])
    row = translator.task.speaker_dictionary.index("dr-lee")
    expected = {dictionary.index(w) for w in "je suis fatiguée . vous voulez les médicaments".split()}
    assert set(memory.words_of(row).tolist()) == expected | {dictionary.eos()}
    assert [memory.words_of(r).tolist() for r in range(8)] == trained_words  # the others are untouched
    translator.update_speaker("dr-lee", ["i am happy ."], ["je suis contente ."])
    assert set(memory.words_of(row).tolist()) == expected | {dictionary.eos(), dictionary.index("contente")}
    trained = translator.speakers[0]
    translator.update_speaker(trained, ["i am happy ."], ["je suis contente ."])
    assert set(memory.words_of(0).tolist()) == set(trained_words[0]) | {dictionary.index("contente")}
    lee = set(memory.words_of(row).tolist())
    # remembering the training split's words again keeps those of the speakers onboarded since
    onboarded = str(tmp_path / "onboarded-lee.pt")
    translator.save(onboarded)
    again = str(tmp_path / "again.pt")
    said = call_main("fairseq-speaker-words", [toy["bin"], "--path", onboarded, "--save", again, "--weight",
                                               "3"]).stdout
    assert f"those of 1 more kept from {onboarded}" in said
    record = torch.load(again, weights_only=False)["model"][CHECKPOINT_KEY]
    assert set(from_state(record, len(dictionary), again).words_of(row).tolist()) == lee
    assert record["options"]["weight"] == 3.0
    # a vectors file carries the words with the rows; rows replaced from a file without words lose theirs
    translator.export_speakers(str(tmp_path / "lee.npz"), ["dr-lee"])
    with np.load(str(tmp_path / "lee.npz")) as exported:
        assert set(exported["words/ids"].tolist()) == lee and exported["words/lengths"].tolist() == [len(lee)]
    memory.forget([row])
    translator.import_speakers(str(tmp_path / "lee.npz"), replace=True)
    assert set(memory.words_of(row).tolist()) == lee
    translator.import_speakers(dataclasses.replace(translator.speaker_vectors(["dr-lee"]), words=None), replace=True)
    assert memory.words_of(row).tolist() == []
    saved = str(tmp_path / "onboarded.pt")
    translator.save(saved)
    back = from_state(torch.load(saved, weights_only=False)["model"][CHECKPOINT_KEY], len(dictionary), saved)
    assert back.num_speakers == 9 and set(back.words_of(0).tolist()) == set(memory.words_of(0).tolist())


def test_a_model_that_remembers_words_loads_its_own_state_and_keeps_them_in_a_partial_load(remembered, toy):
    """fairseq's EMA loads a model's state into a copy of it, and copies parameters with strict=False."""
    _, out, _ = remembered
    model = SpeakerTranslator.from_pretrained(out, data=toy["bin"]).model
    memory = speaker_words_of(model)
    before = [memory.words_of(row).tolist() for row in range(8)]
    state = model.state_dict()
    model.load_state_dict(state)  # strict: the record is read again
    assert [speaker_words_of(model).words_of(row).tolist() for row in range(8)] == before
    kept = speaker_words_of(model)
    model.load_state_dict({k: v for k, v in state.items() if k != CHECKPOINT_KEY}, strict=False)
    assert speaker_words_of(model) is kept
    model.load_state_dict({k: v for k, v in state.items() if k != CHECKPOINT_KEY})  # a model without words
    assert speaker_words_of(model) is None


def test_onboarding_eval_forgets_each_ns_speakers_before_the_next_n(remembered, toy):
    """Speakers adapted on their first n sentences are the same people at every n: left in the memory, a speaker's
    copy of the last n would be their nearest neighbour at the next."""
    from fairseq_speaker.onboarding.evaluate import evaluate

    _, out, _ = remembered
    translator = SpeakerTranslator.from_pretrained(out, data=toy["bin"], max_len_b=4)
    memory = speaker_words_of(translator.model)
    seen = []
    remember = memory.set_words

    def spy(row, sentences):
        remember(row, sentences)
        seen.append((translator.task.speaker_dictionary.names[row], [len(memory.words_of(r)) > 0
                                                                    for r in range(8, memory.num_speakers)]))

    memory.set_words = spy
    raw = lambda ext: open(os.path.join(toy["raw"], f"test.{ext}"), encoding="utf-8").read().splitlines()  # noqa: E731
    evaluate(translator, raw("en"), raw("fr"), raw("spk"), None, [0, 1, 2])
    adapted = [name for name, _ in seen]
    assert adapted and all(name.endswith(("@1", "@2")) for name in adapted)
    for name, remembered_rows in seen:
        if name.endswith("@2"):  # every @1 speaker was forgotten before the first @2 was remembered
            ones = [r - 8 for r in range(8, memory.num_speakers)
                    if translator.task.speaker_dictionary.names[r].endswith("@1")]
            assert not any(remembered_rows[i] for i in ones if i < len(remembered_rows)), name
    assert all(len(memory.words_of(r)) == 0 for r in range(8, memory.num_speakers))


@pytest.mark.slow  # the default run's time; its neighbours cover the same path
def test_the_demo_remembers_the_words_of_systems_whose_speakers_have_parameters_only(trained, toy, tmp_path):
    """fairseq-speaker-demo --words (its whole run: tests/integration/test_demo.py, slow tier)."""
    import shutil

    from fairseq_speaker.toy.demo import remember_words

    for system, remembers in (("lstm_base", False), ("lstm_base+spk_token", False), ("lstm_fact_bias", True)):
        folder = tmp_path / system
        folder.mkdir()
        checkpoint = str(folder / "checkpoint_best.pt")
        shutil.copy(trained(system), checkpoint)
        written = remember_words(toy["bin"], checkpoint, 1)
        assert (written is not None) == remembers and (folder / "words.pt").exists() == remembers, system
        if remembers:
            assert written == str(folder / "words.pt") and CHECKPOINT_KEY in torch.load(written, weights_only=False)["model"]


@pytest.mark.parametrize("change", ["onboard", "replace"])
def test_onboarding_or_replacing_a_speaker_leaves_the_other_speakers_rows_and_translations_as_they_were(remembered, toy,
                                                                                                       change):
    """docs/onboarding.md: the known speakers translate bit-identically after a new speaker is onboarded, their
    speakers' words included (the memory keeps the build their rows were estimated from); and after a known speaker
    is added again with ``replace`` (as a vectors file imported with ``--replace``), which had changed every other
    speaker's translations, its old words taken out of their neighbours."""
    _, out, _ = remembered
    translator = SpeakerTranslator.from_pretrained(out, data=toy["bin"], max_len_b=6)
    memory = speaker_words_of(translator.model)
    names = translator.speakers[:8]
    others = names if change == "onboard" else names[1:]
    sentences = ["i am tired .", "you want the drugs .", "i saw the dog yesterday .", "you are happy ."] * 2
    speakers = [others[i % len(others)] for i in range(len(sentences))]
    index = translator.task.speaker_dictionary.index
    rows = {name: memory.bias_row(index(name)).clone() for name in others}
    before = translator.translate(sentences, speakers)
    if change == "onboard":
        translator.add_speaker("dr-new", ["i am tired .", "you want the drugs ."],
                               ["je suis fatiguée .", "vous voulez les médicaments ."])
    else:
        translator.add_speaker(names[0], ["i am tired ."], ["je suis fatigué ."], replace=True)
    assert all(torch.equal(memory.bias_row(index(name)), row) for name, row in rows.items())
    assert translator.translate(sentences, speakers) == before


def test_a_memory_that_beats_nothing_is_written_with_weight_0_and_says_so(remembered, toy, tmp_path):
    """With its defaults the command chooses its settings on held-out sentences (the toy's valid split is too small:
    each speaker's every fifth sentence, cross-fitted). On the toy's model, trained for one epoch, no setting beats
    the network on them: the memory is written with weight 0, the command warns, and decoding is the network's own."""
    checkpoint, _, _ = remembered
    out = str(tmp_path / "chosen.pt")
    proc = call_main("fairseq-speaker-words", [toy["bin"], "--path", checkpoint, "--save", out, "--threads", "1"])
    assert "(cross-fitted)" in proc.stdout and "chosen: the network alone (weight 0)" in proc.stdout
    assert "| on | 2 |" in proc.stdout or "| off | 2 |" in proc.stdout  # every candidate's figures are printed
    assert "no setting of the memory beat the network alone" in proc.stderr
    assert torch.load(out, weights_only=False)["model"][CHECKPOINT_KEY]["options"]["weight"] == 0.0
    plain = run_here("generate", generate_args(toy["bin"], checkpoint, "--gen-subset", "test")).stdout
    assert run_here("generate", generate_args(toy["bin"], out, "--gen-subset", "test")).stdout == plain
