"""The Python API of a speaker model in a service: :class:`SpeakerTranslator`.

It lives with the rest of a speaker table's life in :mod:`fairseq_speaker.onboarding.translator`
(loading, translating as each speaker, onboarding, saving); this module is its public address::

    from fairseq_speaker.serving import SpeakerTranslator
"""

from fairseq_speaker.onboarding.translator import SpeakerTranslator
from fairseq_speaker.onboarding.translator_search import UnknownWordsWarning

__all__ = ["SpeakerTranslator", "UnknownWordsWarning"]
