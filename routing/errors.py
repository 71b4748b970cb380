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


class UpstreamError(ApiError):
    """A backend failed: 502 for errors, 504 for timeouts."""

    def __init__(self, message: str, *, timeout: bool = False) -> None:
        super().__init__(
            504 if timeout else 502,
            message,
            type="upstream_error",
            code="upstream_timeout" if timeout else "upstream_error",
        )
