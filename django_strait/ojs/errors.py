"""The OJS error shape: ``{"error": {"code", "message", "retryable", "details", "request_id"}}``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: Where a client reads what the codes mean.
DOCS_URL = "https://openjobspec.org/spec/ojs-http-binding#errors"


@dataclass
class OjsError(Exception):
    """An answer other than success, with its OJS code and HTTP status."""

    status: int
    code: str
    message: str
    retryable: bool = False
    details: dict[str, Any] = field(default_factory=dict)
    hint: str = ""
    headers: dict[str, str] = field(default_factory=dict)

    def body(self, request_id: str) -> dict[str, Any]:
        """Return the error object of the answer."""
        error: dict[str, Any] = {
            "code": self.code,
            "type": self.code,
            "message": self.message,
            "retryable": self.retryable,
            "details": self.details,
            "request_id": request_id,
            "docs_url": DOCS_URL,
        }
        if self.hint:
            error["hint"] = self.hint
        return {"error": error}


def invalid_payload(message: str, **details: Any) -> OjsError:
    """A body that is not a JSON object (also an empty body): 400."""
    return OjsError(400, "invalid_payload", message, details=details)


def invalid_request(field_name: str, message: str) -> OjsError:
    """A field the request may not carry as it is: 400, naming the field."""
    return OjsError(
        400, "invalid_request", f"{field_name}: {message}", details={"field": field_name}
    )


def validation_error(field_name: str, message: str) -> OjsError:
    """A well-formed value the binding refuses (a bad retry policy): 422, naming the field."""
    return OjsError(
        422, "validation_error", f"{field_name}: {message}", details={"field": field_name}
    )


def forbidden(field_name: str, message: str) -> OjsError:
    """A request this credential may not make as it is (a queue outside its scope): 403."""
    return OjsError(403, "forbidden", f"{field_name}: {message}", details={"field": field_name})


def not_found(what: str, ident: str) -> OjsError:
    """No such job (or cron, or dead letter): 404."""
    return OjsError(
        404,
        "not_found",
        f"{what} {ident!r} not found",
        details={"id": ident},
        hint=f"Check the {what}'s id; ids are lowercase UUIDv7 strings.",
    )


def conflict(message: str, **details: Any) -> OjsError:
    """A change the job's state does not allow (ack of a job that is not active): 409."""
    return OjsError(409, "conflict", message, details=details)


def duplicate(ident: str) -> OjsError:
    """A client id already used: 409."""
    return OjsError(
        409, "duplicate", f"a job with id {ident!r} already exists", details={"id": ident}
    )
