from .speaker_label_smoothed_cross_entropy import (
    SpeakerLabelSmoothedCrossEntropyConfig,
    SpeakerLabelSmoothedCrossEntropyCriterion,
)

__all__ = ["SpeakerLabelSmoothedCrossEntropyConfig", "SpeakerLabelSmoothedCrossEntropyCriterion"]
