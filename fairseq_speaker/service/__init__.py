"""``fairseq-speaker-serve``: the HTTP service of a speaker model (docs/serving.md).

:mod:`~fairseq_speaker.service.app` is the FastAPI application and the command,
:mod:`~fairseq_speaker.service.speaker_service` what the endpoints do (the translator kept in step with the
store, the limits), :mod:`~fairseq_speaker.service.store` the SQLite speaker store,
:mod:`~fairseq_speaker.service.schema` the request and response bodies, :mod:`~fairseq_speaker.service.metrics`
the Prometheus metrics.
"""
