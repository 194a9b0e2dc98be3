"""The service's log: one line a record on standard error, as text for a person or as JSON for a log collector.

``fairseq-speaker-serve --log-format json`` writes each record as one JSON object a line: ``time`` (ISO 8601, UTC),
``level``, ``logger``, ``message``, the record's own fields where it has them (a refused request's ``method``,
``path``, ``status`` and ``code``; an access line's ``client``, ``method``, ``path``, ``http_version`` and
``status``), and ``exception`` (the traceback, as one string) for a failure. uvicorn's records go through the
same handler, so a collector reads every line alike. ``--access-log`` adds one line a request (uvicorn's).
"""

import datetime
import json
import logging
import sys
from typing import Dict

#: what ``--log-format`` takes
LOG_FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

#: the attributes every log record has: the others are the fields a call gave it (``extra=``)
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}
#: the arguments of uvicorn's access line ('%s - "%s %s HTTP/%s" %d'), as fields
_ACCESS_FIELDS = ("client", "method", "path", "http_version", "status")
#: fields some records carry that say nothing more (uvicorn's message with terminal colours)
_LEFT_OUT = {"color_message"}


class JsonFormatter(logging.Formatter):
    """A record as one line of JSON (see the module documentation)."""

    def format(self, record: logging.LogRecord) -> str:
        fields: Dict[str, object] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.timezone.utc).isoformat(
                timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.name == "uvicorn.access" and isinstance(record.args, tuple) and len(record.args) == 5:
            fields.update(zip(_ACCESS_FIELDS, record.args))
        fields.update((key, value) for key, value in vars(record).items()
                      if key not in _STANDARD and key not in _LEFT_OUT)
        if record.exc_info:
            fields["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            fields["exception"] = record.exc_text
        return json.dumps(fields, ensure_ascii=False, default=str)


def configure_logging(log_format: str = "text", level: int = logging.INFO) -> None:
    """Every logger (the service's, uvicorn's, fairseq's) to one handler on standard error, in ``log_format``."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"--log-format must be one of {', '.join(LOG_FORMATS)}, got {log_format!r}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=level, handlers=[handler], force=True)


class LogLines:
    """A stream whose lines go to ``logger`` at INFO (what a command prints as it starts, such as its threads, in the
    log's format)."""

    def __init__(self, logger: logging.Logger):
        self.logger = logger

    def write(self, text: str) -> int:
        for line in text.splitlines():
            if line.strip():
                self.logger.info(line)
        return len(text)

    def flush(self) -> None:
        pass
