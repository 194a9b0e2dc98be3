from .speaker_lstm import SpeakerLSTMConfig, SpeakerLSTMDecoder, SpeakerLSTMEncoder, SpeakerLSTMModel

__all__ = ["SpeakerLSTMConfig", "SpeakerLSTMDecoder", "SpeakerLSTMEncoder", "SpeakerLSTMModel"]
