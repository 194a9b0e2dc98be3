"""The parts of :class:`~fairseq_speaker.modules.speaker_bias.base.SpeakerBias`, one concern a module.

``base.py`` puts the class together; a variant subclasses that class and imports from there. Read from the
bottom up:

- :mod:`.options`: the options every variant has (``SpeakerBiasConfig``, ``RowSparseConfig``);
- :mod:`.state`: where a speaker state acts in a decoder (``StateSites``) and what it is (``SpeakerState``);
- :mod:`.variant`: what a variant declares and may implement, with the defaults: the one module a variant
  author needs;
- :mod:`.parameters`: which parameters are a speaker's and which are shared, and how a batch reads its rows;
- :mod:`.lookup`: what the decoder asks once per batch: the bias, the state, unseen speakers, the regularizers;
- :mod:`.table`: the speaker table over time: growing it for new speakers, and its names in the checkpoint;
- :mod:`.export`: speakers' rows out and in, and what inspection reads (speaker and vocabulary vectors).
"""
