"""``fairseq-speaker-serve``: the HTTP service of speaker models (docs/serving.md).

:mod:`~fairseq_speaker.service.app` is the FastAPI application and the command (its parts: the endpoints in
:mod:`~fairseq_speaker.service.translate_routes`, :mod:`~fairseq_speaker.service.speaker_routes`,
:mod:`~fairseq_speaker.service.model_routes` and :mod:`~fairseq_speaker.service.service_routes`, their checks in
:mod:`~fairseq_speaker.service.routing` and :mod:`~fairseq_speaker.service.bodies`,
:mod:`~fairseq_speaker.service.middleware`, :mod:`~fairseq_speaker.service.http_errors`, the command line in
:mod:`~fairseq_speaker.service.options`),
:mod:`~fairseq_speaker.service.served_models` the models of a process by id (loaded, reloaded, added, removed),
:mod:`~fairseq_speaker.service.speaker_service` what the endpoints do with one model, the limits (its parts:
:mod:`~fairseq_speaker.service.store_sync` the translator kept in step with the store,
:mod:`~fairseq_speaker.service.translating`, :mod:`~fairseq_speaker.service.speaker_onboarding`,
:mod:`~fairseq_speaker.service.request_checks`, :mod:`~fairseq_speaker.service.service_errors`),
:mod:`~fairseq_speaker.service.store` the speaker store (SQLite; its parts :mod:`~fairseq_speaker.service.store_schema`,
:mod:`~fairseq_speaker.service.store_statements`, :mod:`~fairseq_speaker.service.store_errors`,
:mod:`~fairseq_speaker.service.store_location`, :mod:`~fairseq_speaker.service.store_copy`;
:mod:`~fairseq_speaker.service.store_postgres` PostgreSQL, :mod:`~fairseq_speaker.service.stores` either by its
URL), :mod:`~fairseq_speaker.service.schema` the request and response bodies, :mod:`~fairseq_speaker.service.metrics`
the Prometheus metrics.
"""
