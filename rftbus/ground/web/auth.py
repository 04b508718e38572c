"""Bearer tokens with four scopes: inference (call the model), feedback (grade it), read (the studio's
dashboard, experience browser and SQL) and weights (load LoRA adapters, when this serve is another's upstream).

Separate scopes so an agent holding an inference token cannot reward itself, and a grader cannot read
what the run is doing beyond the answers it grades. Tokens are kept only
as SHA-256 digests and compared in constant time; no message here ever repeats what was presented.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import ipaddress

from pydantic import SecretStr

from rftbus.ground.errors import RftbusError
from rftbus.ground.web.errors import Forbidden, Unauthorized


class Scope(str, enum.Enum):
    inference = "inference"
    feedback = "feedback"
    read = "read"
    weights = "weights"  # load LoRA adapters (serve.accept_lora_pushes)


class OpenScopeRefused(RftbusError):
    """A scope without tokens on a non-loopback address (anyone on the network could use it)."""


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class TokenAuth:
    def __init__(self, inference: list[SecretStr], feedback: list[SecretStr], read: list[SecretStr] | None = None,
                 weights: list[SecretStr] | None = None):
        given = {Scope.inference: inference, Scope.feedback: feedback, Scope.read: read or [], Scope.weights: weights or []}
        self._digests = {s: [_digest(t.get_secret_value()) for t in ts if t.get_secret_value()]
                         for s, ts in given.items()}

    @classmethod
    def from_config(cls, serve) -> TokenAuth:
        """From the `serve:` section (ServeConfig), which holds every scope's tokens."""
        return cls(serve.inference_tokens, serve.feedback_tokens, serve.read_tokens, serve.weights_tokens)

    def open_scopes(self) -> list[Scope]:
        return [s for s, d in self._digests.items() if not d]

    def check_exposure(self, host: str, allow_open: bool, used: set[Scope] | None = None) -> None:
        """Refuse to start with an open scope (of those `used` by the server) on an address others can reach,
        unless told to."""
        open_ = [s for s in self.open_scopes() if used is None or s in used]
        if open_ and not is_loopback(host) and not allow_open:
            vals = [s.value for s in open_]
            names = vals[0] if len(vals) == 1 else ", ".join(vals[:-1]) + " and " + vals[-1]
            raise OpenScopeRefused(
                f"serve.host is {host} but the {names} scope{'s have' if len(open_) > 1 else ' has'} no tokens: "
                f"set serve.{open_[0].value}_tokens "
                f"(env RFTBUS_SERVE__{open_[0].value.upper()}_TOKENS, comma-separated) or serve.allow_open: true")

    def _scopes_of(self, token: str) -> set[Scope]:
        d = _digest(token)
        # compare_digest against every entry (no early exit): timing does not tell which scope matched.
        return {scope for scope, ds in self._digests.items() if any([hmac.compare_digest(d, x) for x in ds])}

    def allowed(self, authorization: str | None) -> set[Scope]:
        """The scopes a request may use: the open ones, plus those of its token (if it is a known one)."""
        out = set(self.open_scopes())
        kind, _, token = (authorization or "").partition(" ")
        if kind.lower() == "bearer" and token.strip():
            out |= self._scopes_of(token.strip())
        return out

    @staticmethod
    def token_of(authorization: str | None) -> str | None:
        """The token a `Bearer <token>` header presents (the scheme in any case, spaces around it ignored)."""
        kind, _, token = (authorization or "").strip().partition(" ")
        token = token.strip()
        return token if kind.lower() == "bearer" and token else None

    def identity(self, authorization: str | None, address: str | None) -> str:
        """Who a request is, for rate limits and session ownership: a digest of a known token (however the header
        is spelt: one token is one client), else the peer's address (an open scope, or no known token)."""
        token = self.token_of(authorization)
        if token is not None and self._scopes_of(token):
            return "t:" + hashlib.sha256(token.encode()).hexdigest()[:24]
        return f"a:{address or '?'}"

    def check(self, authorization: str | None, scope: Scope) -> None:
        """Raise Unauthorized (no or unknown token) or Forbidden (a token of the other scope)."""
        if not self._digests[scope]:
            return
        if not authorization:
            raise Unauthorized("missing bearer token: send `Authorization: Bearer <token>`", code="missing_token")
        kind, _, token = authorization.partition(" ")
        if kind.lower() != "bearer" or not token.strip():
            raise Unauthorized("the Authorization header must be `Bearer <token>`", code="invalid_authorization")
        scopes = self._scopes_of(token.strip())
        if not scopes:
            raise Unauthorized("invalid bearer token", code="invalid_token")
        if scope not in scopes:
            raise Forbidden(f"this token is not allowed the {scope.value} scope", code="wrong_scope")
