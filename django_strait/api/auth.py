"""API keys (``Authorization: Api-Key <key>``) and the scope-or-permission check.

A key reads ``<prefix>.<secret>``. Only its SHA-256 is stored; the prefix finds
the row, and the digests are compared in constant time. A request made with a key
is allowed by the key's scopes; a request made by a user (token or session) by
the user's Django permissions.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import logging
import re
import secrets
import string
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from django.db.models import Q
from django.utils import timezone
from rest_framework import exceptions
from rest_framework.authentication import (
    BaseAuthentication,
    TokenAuthentication,
    get_authorization_header,
)
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from django_strait.models import SCOPES, ApiKey

logger = logging.getLogger(__name__)

KEYWORD = "Api-Key"
PREFIX_LENGTH = 12
#: ``last_used_at`` is written at most this often per key: not one UPDATE per request.
LAST_USED_PRECISION = dt.timedelta(minutes=1)


class ScopeError(ValueError):
    """A scope that does not exist, or a queue name a key cannot be limited to."""


def hash_key(key: str) -> str:
    """Return the stored form of ``key``."""
    return hashlib.sha256(key.encode()).hexdigest()


def check_scopes(scopes: Iterable[str]) -> list[str]:
    """Return ``scopes`` without repeats, or raise naming the first unknown one."""
    checked: list[str] = []
    for scope in scopes:
        if scope not in SCOPES:
            raise ScopeError(f"unknown scope {scope!r}; allowed: {', '.join(SCOPES)}")
        if scope not in checked:
            checked.append(scope)
    if not checked:
        raise ScopeError(f"give at least one scope; allowed: {', '.join(SCOPES)}")
    return checked


#: Most queues one key may be limited to, and the longest name (a run's ``queue`` column).
MAX_KEY_QUEUES = 100
QUEUE_NAME_MAX_LENGTH = 100


def check_queues(queues: Iterable[Any]) -> list[str]:
    """Return the queue names a key is limited to, without repeats, or raise naming the first bad one.

    Empty: every queue. Each name is what a run's queue can be: printable text of 1
    to 100 characters.
    """
    checked: list[str] = []
    for queue in queues:
        if (
            not isinstance(queue, str)
            or not 1 <= len(queue) <= QUEUE_NAME_MAX_LENGTH
            or not queue.isprintable()
        ):
            shown = repr(queue)[:60]
            raise ScopeError(
                f"queue {shown} is not a queue name; allowed: printable text of 1 to "
                f"{QUEUE_NAME_MAX_LENGTH} characters"
            )
        if queue not in checked:
            checked.append(queue)
    if len(checked) > MAX_KEY_QUEUES:
        raise ScopeError(f"{len(checked)} queues; a key may be limited to at most {MAX_KEY_QUEUES}")
    return checked


PREFIX_ALPHABET = string.ascii_letters + string.digits


def issue_key(
    name: str,
    scopes: Iterable[str],
    *,
    queues: Iterable[str] = (),
    expires_at: dt.datetime | None = None,
    created_by=None,
) -> tuple[ApiKey, str]:
    """Create a key; return its row and the key itself (shown once, never stored)."""
    # Letters and digits only: a prefix starting with "-" would read as an option
    # on the command line (`strait_api_key revoke -Xy...`).
    prefix = "".join(secrets.choice(PREFIX_ALPHABET) for _ in range(PREFIX_LENGTH))
    key = f"{prefix}.{secrets.token_urlsafe(32)}"
    row = ApiKey.objects.create(
        name=name,
        prefix=prefix,
        hashed_key=hash_key(key),
        scopes=check_scopes(scopes),
        queues=check_queues(queues),
        expires_at=expires_at,
        created_by=created_by,
    )
    logger.info(
        "api key %s (%s) created with scopes %s, queues %s",
        name, prefix, ", ".join(row.scopes), ", ".join(row.queues) or "all",
    )  # fmt: skip
    return row, key


def revoke_key(prefix: str) -> ApiKey:
    """Revoke the key whose prefix is ``prefix``; raise ``ApiKey.DoesNotExist`` if none."""
    key = ApiKey.objects.get(prefix=prefix)
    if key.revoked_at is None:
        key.revoked_at = timezone.now()
        key.save(update_fields=["revoked_at"])
    return key


def key_state(key: ApiKey, now: dt.datetime) -> str:
    """Return ``active``, ``revoked`` or ``expired``."""
    if key.revoked_at is not None:
        return "revoked"
    if key.expires_at is not None and key.expires_at <= now:
        return "expired"
    return "active"


@dataclass(frozen=True, slots=True)
class KeyHolder:
    """``request.user`` for a request made with an API key: authenticated, no model permissions."""

    key: ApiKey
    is_authenticated: bool = True
    is_anonymous: bool = False
    is_active: bool = True

    @property
    def pk(self) -> str:
        return f"api-key:{self.key.pk}"

    def get_username(self) -> str:
        return f"api-key:{self.key.name}"

    def has_perm(self, perm: str, obj: Any = None) -> bool:
        return False  # a key is allowed by its scopes, never by model permissions


def credential(request: Request, keyword: str) -> str | None:
    """Return what follows ``keyword`` in the Authorization header (None for another scheme).

    Refused unless it is printable ASCII: no key or token is anything else, and a
    NUL would reach the database in the lookup (PostgreSQL refuses it with an error).
    """
    parts = get_authorization_header(request).split()
    if not parts or parts[0].lower() != keyword.lower().encode():
        return None
    if len(parts) != 2:
        raise exceptions.AuthenticationFailed(
            f"the Authorization header must be '{keyword} <credential>', one credential"
        )
    if not _PRINTABLE.fullmatch(parts[1]):
        raise exceptions.AuthenticationFailed(
            f"the Authorization header's {keyword} must be printable ASCII (letters, digits, "
            "punctuation); it holds control characters or other bytes"
        )
    return parts[1].decode("ascii")


_PRINTABLE = re.compile(rb"[\x21-\x7e]+")
#: The form of a key's prefix (``issue_key``): what a failed attempt may be counted by.
_PREFIX = re.compile(rb"[A-Za-z0-9]{%d}" % PREFIX_LENGTH)
#: The schemes that carry an API key (the OJS binding reads keys as ``Bearer``).
_KEY_SCHEMES = (KEYWORD.lower().encode(), b"bearer")


def presented_prefix(request: Request) -> str | None:
    """Return the key prefix an ``Api-Key`` or ``Bearer`` credential names, if it has a
    prefix's form (whether or not such a key exists); None for anything else."""
    parts = get_authorization_header(request).split()
    if len(parts) != 2 or parts[0].lower() not in _KEY_SCHEMES:
        return None
    prefix = parts[1].partition(b".")[0]
    return prefix.decode("ascii") if _PREFIX.fullmatch(prefix) else None


class ApiKeyAuthentication(BaseAuthentication):
    """``Authorization: Api-Key <prefix>.<secret>``."""

    #: The scheme's name (the OJS binding also reads the same keys as ``Bearer``).
    keyword = KEYWORD

    def authenticate(self, request: Request) -> tuple[KeyHolder, ApiKey] | None:
        text = credential(request, self.keyword)
        if text is None:
            return None
        key = _verified(text)
        _touch(key, timezone.now())
        return KeyHolder(key), key

    def authenticate_header(self, request: Request) -> str:
        return self.keyword


class StraitTokenAuthentication(TokenAuthentication):
    """DRF's ``Authorization: Token <key>``, refusing what no token is before looking it up."""

    def authenticate(self, request: Request) -> Any:
        text = credential(request, self.keyword)
        return None if text is None else self.authenticate_credentials(text)


def _verified(text: str) -> ApiKey:
    prefix, dot, _ = text.partition(".")
    found = ApiKey.objects.filter(prefix=prefix).first() if dot else None
    # Hash even when no row matched, so that a wrong prefix costs what a wrong secret does.
    digest = hash_key(text)
    if found is None or not hmac.compare_digest(digest, found.hashed_key):
        raise exceptions.AuthenticationFailed("invalid API key")
    state = key_state(found, timezone.now())
    if state != "active":
        raise exceptions.AuthenticationFailed(f"this API key is {state}")
    return found


def _touch(key: ApiKey, now: dt.datetime) -> None:
    stale = now - LAST_USED_PRECISION
    if key.last_used_at is not None and key.last_used_at > stale:
        return
    # Conditional, so simultaneous requests write it once.
    ApiKey.objects.filter(
        Q(last_used_at__isnull=True) | Q(last_used_at__lte=stale), pk=key.pk
    ).update(last_used_at=now)


@dataclass(frozen=True, slots=True)
class QueueScope:
    """The queues a request may fetch, ack, enqueue and read; ``names`` None is every queue.

    A key limited to queues (``ApiKey.queues``) sees only their runs: a run of
    another queue answers 404, as if it did not exist; naming another queue to
    fetch from or enqueue into is 403. A user (session, token) is allowed by
    Django permissions, on every queue; so is a key without queues.
    """

    names: frozenset[str] | None = None

    @classmethod
    def of(cls, request: Request) -> QueueScope:
        """Return the scope of the request's credential."""
        key = getattr(request, "auth", None)
        return cls(key_queues(key)) if isinstance(key, ApiKey) else cls()

    @property
    def limited(self) -> bool:
        return self.names is not None

    def allows(self, queue: str) -> bool:
        """Whether a run of ``queue`` is within the scope."""
        return self.names is None or queue in self.names

    def only(self, queryset: Any, field: str = "queue") -> Any:
        """Return ``queryset`` narrowed to rows whose ``field`` is a queue in the scope."""
        if self.names is None:
            return queryset
        return queryset.filter(**{f"{field}__in": sorted(self.names)})

    def refusal(self, queue: str) -> str:
        """Say why ``queue`` is refused, naming what this key may use."""
        allowed = ", ".join(repr(q) for q in sorted(self.names or ()))
        return f"this API key is limited to the queues {allowed}; {queue!r} is not one of them"


def key_queues(key: ApiKey) -> frozenset[str] | None:
    """Return the queues ``key`` is limited to (None: every queue).

    A stored value that is not a list of names (a row written around the checks)
    limits the key to no queue at all: it fails closed, and says so in the log.
    """
    stored = key.queues
    if isinstance(stored, list) and all(isinstance(q, str) for q in stored):
        return frozenset(stored) or None
    logger.error(
        "api key %s (%s): its queues column is not a list of names (%.200r); it may use no queue",
        key.name, key.prefix, stored, extra={"api_key": key.prefix},
    )  # fmt: skip
    return frozenset()


@dataclass(frozen=True, slots=True)
class Rule:
    """What one method of a view needs: a key scope, or a user's Django permission."""

    scope: str
    permission: str


class ScopeOrPermission(BasePermission):
    """Allow a key by its scopes (``*`` is all) and a user by Django permissions.

    The view names a :class:`Rule` per HTTP method in ``rules``.
    """

    def has_permission(self, request: Request, view: Any) -> bool:
        rules: Mapping[str, Rule] = view.rules
        method = "GET" if request.method == "HEAD" else request.method or ""
        rule = rules.get(method)
        if rule is None:  # OPTIONS, or a method not served (the view answers 405)
            return True
        if isinstance(request.auth, ApiKey):
            if rule.scope in request.auth.scopes or "*" in request.auth.scopes:
                return True
            self.message = f"this API key lacks the {rule.scope} scope"
            return False
        if request.user.has_perm(rule.permission):
            return True
        self.message = f"this needs the {rule.permission} permission"
        return False
