"""The checks of a sentence given to translate or to onboard a speaker on (:func:`sentence_problem`): not blank
(:func:`blank_problem`: nothing that shows), no symbol of fairseq's dictionaries that the model reads as a control
code (:data:`CONTROL_SYMBOLS`), no placeholder (``<unk>``, the :data:`FILLER` words), no control character. Its
sibling :mod:`~fairseq_speaker.data.speaker_labels` holds the rules of speaker labels.
"""

import re
import unicodedata
from typing import Optional

from fairseq_speaker.data.speaker_labels import visible_form

#: the symbols of fairseq's dictionaries that are no words (beginning and end of sentence, padding): written in a
#: sentence they are read as control codes (``<pad>`` is dropped, ``</s>`` ends the sentence where it stands)
CONTROL_SYMBOLS = ("<s>", "<pad>", "</s>")


#: the words fairseq pads a dictionary with to a multiple of 8 (``madeupword0000``, ...)
FILLER = re.compile(r"madeupword\d{4}")


def sentence_problem(sentence: str) -> Optional[str]:
    """Why ``sentence`` cannot be read as a sentence, or None: :func:`blank_problem`, or a word that is one of
    fairseq's :data:`CONTROL_SYMBOLS` (a source of ``<pad>`` was translated as nothing, ``</s>`` as an invented
    sentence, and a target of ``<pad> <pad>`` onboarded a speaker on the end of sentence alone)."""
    blank = blank_problem(sentence)
    if blank:
        return blank
    words = sentence.split()
    control = next((w for w in words if w in CONTROL_SYMBOLS), None)
    if control is not None:
        return (f"holding {control!r} (word {words.index(control) + 1}), a symbol of fairseq's dictionaries that the "
                f"model reads as a control code, not a word")
    filler = next((w for w in words if w == "<unk>" or FILLER.fullmatch(w)), None)
    if filler is not None:  # a speaker onboarded on them learns fairseq's placeholders
        return (f"holding {filler!r} (word {words.index(filler) + 1}), a placeholder of fairseq's dictionaries (the "
                f"unknown word, or a filler that pads the dictionary), not a word")
    surrogate = next((c for c in sentence if unicodedata.category(c) == "Cs"), None)
    if surrogate is not None:  # translated as if it were a word; a service refused it (422)
        return (f"holding a lone surrogate U+{ord(surrogate):04X} at character {sentence.index(surrogate) + 1}, which "
                f"is not text (UTF-8 cannot hold it): remove it, or decode the text that held it")
    hidden = next((c for c in sentence if unicodedata.category(c) == "Cc" and not c.isspace()), None)
    if hidden is not None:  # the word it touches would be read as unknown, without a word
        return (f"holding the control character U+{ord(hidden):04X} at character {sentence.index(hidden) + 1}, "
                f"which no word of a model holds: remove it")
    return None


def blank_problem(sentence: str) -> Optional[str]:
    """Why ``sentence`` shows nothing, or None: empty, only whitespace, or only characters that show nothing
    (zero-width and format characters, controls such as NUL, invisible letters): a model answers a sentence of nothing
    with an invented one."""
    if not sentence:
        return "empty"
    if not sentence.strip():
        return "only whitespace"
    if not visible_form(sentence):
        shown_chars = ", ".join(f"U+{ord(c):04X}" for c in dict.fromkeys(sentence))
        return f"only characters that show nothing ({shown_chars[:60]})"
    return None
