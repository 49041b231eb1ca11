"""What a test process would build again and again, built once: FastAPI's route validators and httpx's TLS context.

1. One pydantic validator per distinct route parameter for the whole process, instead of one per app. FastAPI
compiles a pydantic `TypeAdapter` for every parameter of every route each time an app is built (`ModelField` in
`fastapi._compat.v2`): about 0.3 s of the 0.57 s an app took to build (2026-12-08, this project's machine), and the
tests build an app for nearly every server they start (51 in the fast lane). A server process builds one app, so
this is a test-process matter and lives here. Invariant: two parameters share an adapter only when their
declarations print the same — the same annotation object (a class by identity), the same metadata and `Field`
attributes by `repr` (a function or a validator prints with its address, so two different ones never match) and the
same config; anything unhashable is compiled as before. An adapter is immutable once built, so sharing it changes no
answer. Where FastAPI's internals are not the ones this was written for, nothing is patched (`install()` says False)
and apps build as before.

2. One TLS context per verification setting. Every `httpx.get(...)` builds a client, and every client loads the CA
bundle again (46 ms of CPU each: 21 of the route matrix's 50 s, 2026-12-08) though nearly every test talks plain
HTTP on the loopback. The server's and the CLI's own clients share theirs (`rl_insight/tls.py`); a test's passes
through here. Invariant: only the default verification (no client certificate) is shared, per setting and per
`SSL_CERT_FILE` / `SSL_CERT_DIR`; anything else is built as httpx builds it.
"""

from __future__ import annotations

from typing import Any

_adapters: dict[tuple[Any, ...], Any] = {}
_installed = False


def install() -> bool:
    """Both caches (once; idempotent). False where FastAPI's internals differ (the TLS cache is installed anyway)."""
    global _installed
    if _installed:
        return True
    _share_tls_contexts()
    try:
        from fastapi._compat import v2
    except ImportError:
        return False
    model_field = getattr(v2, "ModelField", None)
    as_dict = getattr(v2, "asdict", None)
    compile_adapter = getattr(model_field, "__post_init__", None)
    if model_field is None or as_dict is None or compile_adapter is None:
        return False

    def shared(self: Any) -> None:
        try:
            declared = as_dict(self.field_info)
            key = (declared["annotation"], tuple(repr(m) for m in declared["metadata"]),
                   repr(sorted(declared["attributes"].items())), repr(self.config))
            hash(key)
        except (TypeError, KeyError):
            compile_adapter(self)
            return
        found = _adapters.get(key)
        if found is None:
            compile_adapter(self)
            _adapters[key] = self._type_adapter
        else:
            self._type_adapter = found

    model_field.__post_init__ = shared
    _installed = True
    return True


def installed() -> bool:
    return _installed


def _share_tls_contexts() -> None:
    import os

    from httpx._transports import default

    build = default.create_ssl_context
    if getattr(build, "shared", False):
        return
    contexts: dict[tuple[Any, ...], Any] = {}

    def shared(verify: Any = True, cert: Any = None, trust_env: bool = True) -> Any:
        if not isinstance(verify, bool) or cert is not None:
            return build(verify=verify, cert=cert, trust_env=trust_env)
        key = (verify, trust_env, os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
        if key not in contexts:
            contexts[key] = build(verify=verify, cert=cert, trust_env=trust_env)
        return contexts[key]

    shared.shared = True  # type: ignore[attr-defined]
    default.create_ssl_context = shared  # type: ignore[assignment]
