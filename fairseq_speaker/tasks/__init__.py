from .speaker_translation import SpeakerTranslationConfig, SpeakerTranslationTask

__all__ = ["SpeakerTranslationConfig", "SpeakerTranslationTask"]
