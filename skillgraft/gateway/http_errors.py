"""The HTTP form of every error the gateway raises while serving a request: the one owner of
which status and OpenAI-style code a :class:`~skillgraft.errors.SkillgraftError` leaves as."""

from __future__ import annotations

import logging

from ..errors import (
    BlockNotFoundError,
    ConflictError,
    ContextOverflowError,
    DeadlineError,
    DuplicateBlockError,
    EncoderNotChosenError,
    FingerprintMismatchError,
    FormatError,
    InputError,
    NameTakenError,
    RouterError,
    ServerError,
    SharedBaseError,
    SkillgraftError,
    StoreError,
    VerificationError,
)
from ..verify.verifiers import withheld_refusal
from .access import ApiError
from .pool import NoSlotError

__all__ = ["api_error"]

logger = logging.getLogger("skillgraft.gateway")

# (error types, status, code, the param it names): the first that matches decides.
_CLIENT_ERRORS = (
    (ContextOverflowError, 400, "context_length_exceeded", lambda exc: "messages"),
    (FormatError, 400, "unsupported_format", lambda exc: exc.field),
    (InputError, 400, None, lambda exc: None),
    (BlockNotFoundError, 404, "skill_not_found", lambda exc: None),
    ((NameTakenError, DuplicateBlockError, ConflictError), 409, "conflict", lambda exc: None),
    (SharedBaseError, 403, "read_only_base", lambda exc: None),
    (FingerprintMismatchError, 409, "fingerprint_mismatch", lambda exc: None),
)


def api_error(exc: BaseException) -> ApiError:
    """The HTTP form of an error raised while serving a request."""
    if isinstance(exc, ApiError):
        return exc
    message = str(exc)
    for kinds, status, code, param in _CLIENT_ERRORS:
        if isinstance(exc, kinds):
            return ApiError(status, message, code=code, param=param(exc))
    if isinstance(exc, VerificationError):
        # What a refused method printed is withheld: beyond the verdict, nothing leaves the sandbox.
        return ApiError(422, withheld_refusal(), code="verification_failed")
    return _server_error(exc, message)


def _server_error(exc: BaseException, message: str) -> ApiError:
    """The 5xx an error the client cannot fix leaves as, with one log line saying why."""
    if isinstance(exc, EncoderNotChosenError):
        return ApiError(503, message, kind="server_error", code="encoder_not_chosen")
    if isinstance(exc, DeadlineError):
        logger.warning("504: %s", message)
        return ApiError(504, message, kind="server_error", code="timeout")
    if isinstance(exc, NoSlotError):
        logger.warning("503 busy: %s", message)  # one line: a full gateway is no bug
        return ApiError(503, message, kind="server_error", code="busy")
    if isinstance(exc, (ServerError, StoreError, RouterError)):
        logger.warning("503 unavailable (%s): %s", type(exc).__name__, message)  # why, in one line
        return ApiError(503, message, kind="server_error", code="unavailable")
    if isinstance(exc, SkillgraftError):
        return ApiError(500, message, kind="server_error")
    logger.exception("unexpected error", exc_info=exc)
    return ApiError(500, "internal error (see the gateway's log)", kind="server_error")
