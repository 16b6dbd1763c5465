"""Who may open the server's websockets and fetch its TwiML — checked on the request's head,
before the websocket handshake, so a refused client never reaches a call.

Three checks, each off unless configured (docs/security.md):

* **a shared secret** (``server.auth_token_env``) for the signaling and Twilio websockets,
  presented as ``Authorization: Bearer …`` or a ``token`` query parameter (a page cannot set
  headers on a websocket, so it forwards the ``?token=…`` it was opened with); compared in
  constant time;
* **Twilio's request signature** (``telephony.twilio_auth_token_env``): Twilio signs each
  request it makes — the Media Stream's handshake and the TwiML webhook — with the account's
  auth token; ``X-Twilio-Signature`` is the base64 HMAC-SHA1 of the full URL (a POST's
  parameters appended, sorted by name). Twilio cannot send our token, so the stream takes
  either;
* **the Origin** of a browser page: only the server's own pages (or ``server.allowed_origins``)
  may open a websocket, so a page elsewhere cannot call through a visitor's browser. A client
  that sends no ``Origin`` is not a browser, and could send any; the token is what stops it.

A refusal is 401 (no valid credential) or 403 (a browser page of another origin). Its reason
is logged and sent, and never contains the credential presented.

The AudioSocket protocol has no credentials at all; ``peer_allowed`` checks the peer address
against ``telephony.audiosocket_allow``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from ipaddress import IPv6Address, ip_address, ip_network
from urllib.parse import parse_qs, urlsplit

from websockets.http11 import Request

from cadence.pipeline.config import CadenceConfig
from cadence.pipeline.config.server import DEFAULT_PORTS, public_origin

SIGNATURE_HEADER = "X-Twilio-Signature"
TOKEN_PARAMETER = "token"

TOKEN = re.compile(r"[\x21-\x7e]{16,}")
"""A usable shared secret: at least 16 visible ASCII characters (it travels in a header)."""


class AccessConfigError(ValueError):
    """A secret the configuration names is missing or unusable; the server does not start."""


@dataclass(frozen=True)
class Secrets:
    """The credentials the configuration names, read from the environment once, at start.
    Never shown: not in ``repr``, so not in a traceback's locals or a log line either."""

    token: str | None = field(default=None, repr=False)
    twilio_auth_token: str | None = field(default=None, repr=False)

    @classmethod
    def from_environment(
        cls, config: CadenceConfig, environ: Mapping[str, str] = os.environ
    ) -> Secrets:
        token = _read(environ, "server.auth_token_env", config.server.auth_token_env)
        if token is not None and not TOKEN.fullmatch(token):
            raise AccessConfigError(
                f"the token in ${config.server.auth_token_env} (server.auth_token_env) must be "
                "at least 16 visible ASCII characters, e.g. from "
                "`python -c 'import secrets; print(secrets.token_urlsafe(32))'`"
            )
        twilio = _read(
            environ, "telephony.twilio_auth_token_env", config.telephony.twilio_auth_token_env
        )
        return cls(token=token, twilio_auth_token=twilio)


def _read(environ: Mapping[str, str], key: str, name: str | None) -> str | None:
    if name is None:
        return None
    value = environ.get(name, "")
    if not value:
        raise AccessConfigError(f"{key} names ${name}, which is not set")
    return value


@dataclass(frozen=True)
class Refusal:
    """Why a request is turned away; ``reason`` is safe to log and to send."""

    status: HTTPStatus
    reason: str


def twilio_signature(auth_token: str, url: str, params: Mapping[str, Sequence[str]]) -> str:
    """Twilio's ``X-Twilio-Signature`` of a request to ``url`` (query string included) with
    the POST ``params`` (none for a GET or a websocket handshake): each name in sorted order,
    followed by each of its values in sorted order, is appended to the URL; the HMAC-SHA1 of
    that text keyed with the auth token, base64."""
    signed = url + "".join(
        name + value for name in sorted(params) for value in sorted(params[name])
    )
    digest = hmac.new(auth_token.encode(), signed.encode(), hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


def _with_and_without_port(url: str) -> tuple[str, str]:
    """``url`` without and with its scheme's default port: Twilio's signing is known to be
    inconsistent about it, and its own validators accept either."""
    parts = urlsplit(url)
    default = DEFAULT_PORTS[parts.scheme]
    host = parts.netloc.rpartition(":")[0] if parts.port is not None else parts.netloc
    if parts.port not in (None, default):
        return url, url
    bare = parts._replace(netloc=host).geturl()
    return bare, parts._replace(netloc=f"{host}:{default}").geturl()


class AccessPolicy:
    """The checks of one server's configuration, with its secrets."""

    def __init__(self, config: CadenceConfig, secrets: Secrets) -> None:
        self._secrets = secrets
        self._public_url = config.telephony.public_url
        origins = config.server.allowed_origins
        self._origins = None if origins is None else frozenset(map(public_origin, origins))

    def websocket(self, request: Request, *, twilio: bool) -> Refusal | None:
        """Whether ``request`` may open the signaling websocket or (``twilio``) the Media
        Stream one."""
        token, signing = self._secrets.token, self._secrets.twilio_auth_token
        if twilio and signing is not None:
            signed = self._signed(request, signing, scheme="wss")
            if not (signed or (token is not None and self._token_presented(request, token))):
                what = "an `X-Twilio-Signature`" + (" or a token" if token is not None else "")
                return Refusal(HTTPStatus.UNAUTHORIZED, f"{what} valid for this URL is required")
        elif token is not None and not self._token_presented(request, token):
            return Refusal(HTTPStatus.UNAUTHORIZED, "a valid token is required")
        return self._origin(request)

    def twiml(
        self, request: Request, form: Mapping[str, Sequence[str]] | None = None
    ) -> Refusal | None:
        """Whether ``request`` may fetch the TwiML: when Twilio's auth token is configured, only
        with Twilio's signature (Twilio cannot send our token) — of the URL and, for a
        ``POST``, of its ``form`` parameters."""
        signing = self._secrets.twilio_auth_token
        if signing is not None and not self._signed(request, signing, scheme="https", form=form):
            return Refusal(
                HTTPStatus.UNAUTHORIZED, "an `X-Twilio-Signature` valid for this URL is required"
            )
        return None

    def public_url(self, request: Request, *, scheme: str) -> str | None:
        """Where Twilio reaches this server: ``telephony.public_url`` (``https`` → ``wss`` for a
        websocket ``scheme``), or else the host the request names, over TLS. ``None`` if the
        request names none that could be."""
        if self._public_url is not None:
            base = urlsplit(self._public_url)
            secure = base.scheme == "https"
            return f"{scheme if secure else scheme.removesuffix('s')}://{base.netloc}"
        try:
            return public_origin(f"https://{request.headers.get('Host', '')}").replace(
                "https", scheme, 1
            )
        except ValueError:
            return None

    # --- the checks ---------------------------------------------------------------------------

    def _signed(
        self,
        request: Request,
        auth_token: str,
        *,
        scheme: str,
        form: Mapping[str, Sequence[str]] | None = None,
    ) -> bool:
        base = self.public_url(request, scheme=scheme)
        presented = request.headers.get(SIGNATURE_HEADER)
        if base is None or presented is None:
            return False
        matches = [
            hmac.compare_digest(
                twilio_signature(auth_token, url, form or {}).encode(),
                presented.encode("utf-8", "replace"),
            )
            for url in _with_and_without_port(base + request.path)
        ]
        return any(matches)

    def _token_presented(self, request: Request, token: str) -> bool:
        scheme, _, credential = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer":
            query = parse_qs(urlsplit(request.path).query)
            credential = next(iter(query.get(TOKEN_PARAMETER, [])), "")
        return hmac.compare_digest(credential.strip().encode(), token.encode())

    def _origin(self, request: Request) -> Refusal | None:
        origin = request.headers.get("Origin")
        if origin is None:
            return None  # not a browser (see the module docstring)
        try:
            page = public_origin(origin)
            if self._origins is not None:
                allowed = page in self._origins
            else:  # the server's own pages: the host the request was sent to
                host = request.headers.get("Host", "")
                own = public_origin(f"{urlsplit(page).scheme}://{host}")
                allowed = page == own
        except ValueError:  # `null` (a sandboxed page or a file), or no usable Host
            allowed = False
        if allowed:
            return None
        return Refusal(HTTPStatus.FORBIDDEN, "pages of this origin may not connect")


def peer_allowed(host: str, allow: Sequence[str] | None) -> bool:
    """Whether an AudioSocket peer at ``host`` may connect, by ``telephony.audiosocket_allow``
    (``None``: any). An IPv4 peer on a dual-stack socket (``::ffff:10.0.0.5``) counts as its
    IPv4 address."""
    if allow is None:
        return True
    try:
        address = ip_address(host.partition("%")[0])
    except ValueError:
        return False
    if isinstance(address, IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address in ip_network(network, strict=False) for network in allow)


class CredentialFilter(logging.Filter):
    """Masks credentials in log records: a ``token`` query parameter, and the values of the
    ``Authorization`` and ``X-Twilio-Signature`` headers — which websockets logs, with the
    request line, at debug level."""

    _PATTERN = re.compile(
        rf"(?i)((?:[?&]|%3f|%26){TOKEN_PARAMETER}=)[^&\s'\"]*"
        rf"|((?:authorization|{SIGNATURE_HEADER})['\"]?\s*[:,]\s*['\"]?)[^'\"\r\n]*"
    )

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = self._PATTERN.sub(lambda m: f"{m.group(1) or m.group(2)}***", message)
        if masked != message:
            record.msg, record.args = masked, None
        return True


def without_credentials(logger: logging.Logger) -> logging.Logger:
    """``logger`` with a ``CredentialFilter`` (added once)."""
    if not any(isinstance(f, CredentialFilter) for f in logger.filters):
        logger.addFilter(CredentialFilter())
    return logger
