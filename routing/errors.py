"""OpenAI-shaped errors, raised anywhere in the gateway and rendered at the edge."""

from __future__ import annotations


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict[str, object]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def bad_request(message: str, *, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, param=param, code=code)


def unauthorized(message: str) -> ApiError:
    return ApiError(401, message, type="authentication_error", code="invalid_api_key")


# How backends word a request longer than their context window (vLLM, OpenAI, Anthropic, litellm).
TOO_LONG = (
    "maximum context length",
    "max_model_len",
    "context window",
    "context_length_exceeded",
    "prompt is too long",
)


def too_long(status: int | None, reason: str) -> bool:
    """Whether a backend's refusal says the request does not fit its context window."""
    return status == 400 and any(phrase in reason.lower() for phrase in TOO_LONG)


class UpstreamError(ApiError):
    """A backend failed: 502 for errors, 504 for timeouts; 400 ``context_length_exceeded`` when it
    refused the request as longer than its context window (the caller's to shorten, not to retry)."""

    def __init__(self, message: str, *, timeout: bool = False, refused: bool = False) -> None:
        if refused:
            super().__init__(400, message, code="context_length_exceeded")
            return
        super().__init__(
            504 if timeout else 502,
            message,
            type="upstream_error",
            code="upstream_timeout" if timeout else "upstream_error",
        )

    @classmethod
    def of_leg(cls, message: str, status: int | None) -> UpstreamError:
        """The failure a call answers with from its last failed leg's error and status."""
        return cls(message, timeout=status == 504, refused=status == 400)
