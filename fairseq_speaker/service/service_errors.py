"""How the service refuses a request, without HTTP: :class:`ServiceError` (an HTTP status, a stable code and a message
saying what to do), :class:`Retired` (a request that reached a model's service once it was reloaded or removed) and
:func:`timed_out` (past ``--request-timeout``). :mod:`~fairseq_speaker.service.http_errors` answers them as JSON.
"""

from typing import Dict, Optional


class ServiceError(Exception):
    """A refused request: HTTP ``status``, a stable ``code`` and a ``message`` saying what to do."""

    def __init__(self, status: int, code: str, message: str, headers: Optional[Dict[str, str]] = None):
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers


class Retired(ServiceError):
    """A request that reached a service once its model was reloaded or removed (:meth:`SpeakerService.retiring`): the
    caller sends it to the model's new service (HTTP: 503 ``model_reloaded`` if it cannot)."""

    def __init__(self, model: str):
        super().__init__(503, "model_reloaded", f"model {model!r} was reloaded or removed while this request waited: "
                         f"send it again", {"Retry-After": "0"})


def timed_out(what: str, seconds: float) -> ServiceError:
    return ServiceError(504, "timeout", f"{what} took longer than the service's {seconds:g} s (fairseq-speaker-serve "
                        f"--request-timeout): retry later, or send fewer sentences")
