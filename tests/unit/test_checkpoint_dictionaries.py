"""A checkpoint's record of its dictionaries (fairseq_speaker/checkpoint_dictionaries.py) and how a data folder's are
compared with it: by content where the checkpoint records them, by size where it does not."""

from fairseq.data import Dictionary

from fairseq_speaker.checkpoint_dictionaries import dictionaries_record, dictionary_problems
from fairseq_speaker.checkpoints import DICTIONARIES_KEY, recorded_dictionaries


def _dictionary(*words: str) -> Dictionary:
    d = Dictionary()
    for word in words:
        d.add_symbol(word)
    return d


def _side(d: Dictionary) -> dict:
    return dict(dictionaries_record(None, d)["target"], size=len(d))


FILES = {"source": "data/dict.en.txt", "target": "data/dict.fr.txt"}


def test_two_lines_swapped_are_found_at_the_first_line_that_differs():
    model, data = _dictionary("le", "chat", "dort"), _dictionary("le", "dort", "chat")
    assert dictionary_problems({"target": _side(model)}, {"target": _side(data)}, FILES) == [
        "line 2 of data/dict.fr.txt is 'dort', the model's target dictionary has 'chat' there"]
    assert dictionary_problems({"target": _side(model)}, {"target": _side(_dictionary("le", "chat", "dort"))},
                               FILES) == []


def test_sizes_are_compared_first_and_alone_without_a_record():
    model, data = _dictionary("le", "chat", "dort"), _dictionary("le", "chat")
    assert dictionary_problems({"target": _side(model)}, {"target": _side(data)}, FILES) == [
        "its target dictionary has 7 symbols, data/dict.fr.txt has 6"]
    # a checkpoint of an earlier release: its embedding rows only, so a swap of the same size is not seen
    assert dictionary_problems({"target": {"size": 7}}, {"target": _side(_dictionary("le", "dort", "chat"))},
                               FILES) == []


def test_a_damaged_record_is_compared_by_size_as_an_earlier_release_s():
    whole = dictionaries_record(_dictionary("a"), _dictionary("b"))
    assert set(recorded_dictionaries({DICTIONARIES_KEY: whole})) == {"source", "target"}
    damaged = {"source": dict(whole["source"], symbols="not a list"), "target": dict(whole["target"], sha1=7),
               "elsewhere": whole["target"]}
    assert recorded_dictionaries({DICTIONARIES_KEY: damaged}) == {}
    assert recorded_dictionaries({DICTIONARIES_KEY: ["nonsense"]}) == {} and recorded_dictionaries({}) == {}
