"""The access map of single sign-on (server/access/sso.py): users and groups to a role and projects, the strongest
grant holding without a weaker one widening it, a person nowhere in the map refused unless a default is given, bad
maps named by what is wrong, and the trusted networks."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rl_insight.errors import ConfigError, ForbiddenError
from rl_insight.server.access.sso import AccessMap, Grant, ProxySignOn

MAP = {
    "users": {"root@corp": {"role": "admin"}},
    "groups": {"math-ops": {"role": "operator", "projects": ["math"]},
               "code-ops": {"role": "operator", "projects": ["code"]},
               "all-viewers": {"role": "viewer"},
               "pipelines": {"role": "ingest", "projects": ["math"]}},
}


def test_a_user_entry_wins_then_the_strongest_groups_over_their_projects_only() -> None:
    m = AccessMap.parse(MAP)
    assert m.grant("root@corp", ["math-ops"]) == Grant("admin", None)
    assert m.grant("ann", ["math-ops", "code-ops"]) == Grant("operator", frozenset({"math", "code"}))
    # operator of math and viewer of everything: operator of math only (the weaker grant never widens the stronger)
    assert m.grant("bo", ["math-ops", "all-viewers"]) == Grant("operator", frozenset({"math"}))
    assert m.grant("cy", ["all-viewers", "pipelines"]) == Grant("viewer", None)  # a person reads rather than sends
    assert m.grant("dee", ["nobody-knows"]) is None
    assert AccessMap.parse({**MAP, "default": {"role": "viewer", "projects": ["demo"]}}).grant("dee", []) == \
        Grant("viewer", frozenset({"demo"}))


@pytest.mark.parametrize("doc, says", [
    ({"user": {}}, "expected the keys"),
    ({"groups": {"g": {"role": "chief"}}}, "groups.g: role must be one of"),
    ({"groups": {"g": {"role": "viewer", "projects": []}}}, "projects must be a non-empty list"),
    ({"groups": {"g": {"role": "viewer", "project": ["a"]}}}, "groups.g must be {role"),
    ({"groups": ["g"]}, "groups must map names to grants"),
    ({"groups_separator": ""}, "groups_separator"),
    ({"users": {"ann": {"role": "admin", "projects": ["a"]}}}, "users.ann: an admin is of every project"),
])
def test_a_bad_map_is_refused_naming_what_is_wrong(doc: dict, says: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(says)):
        AccessMap.parse(doc)


class _Request:
    """What the server sees: the peer, and headers as bytes on the wire (UTF-8 text read back as latin-1, repeats
    kept)."""

    def __init__(self, peer: str, headers: dict[str, str] | list[tuple[str, str]]) -> None:
        from starlette.datastructures import Headers

        self.client = type("Client", (), {"host": peer})()
        pairs = headers.items() if isinstance(headers, dict) else headers
        self.headers = Headers(raw=[(k.lower().encode("latin-1"), v.encode("utf-8")) for k, v in pairs])


def test_the_header_is_believed_from_a_trusted_network_only(tmp_path: Path) -> None:
    path = tmp_path / "access.yml"
    path.write_text("groups:\n  math-ops: {role: operator, projects: [math]}\ngroups_separator: '|'\n")
    sso = ProxySignOn(["10.1.0.0/16", "::1/128"], "X-Forwarded-User", "X-Forwarded-Groups", str(path))
    came = _Request("10.1.2.3", {"X-Forwarded-User": "ann", "X-Forwarded-Groups": "x|math-ops"})
    who = sso.principal(came)
    assert who is not None and (who.name, who.role, who.projects) == ("ann (sso)", "operator", frozenset({"math"}))
    assert sso.principal(_Request("10.2.0.1", {"X-Forwarded-User": "ann", "X-Forwarded-Groups": "math-ops"})) is None
    assert sso.principal(_Request("10.1.2.3", {})) is None
    with pytest.raises(ForbiddenError, match="gives them no role"):
        sso.principal(_Request("::1", {"X-Forwarded-User": "stranger"}))
    with pytest.raises(ConfigError, match="--trusted-proxy"):
        ProxySignOn(["not-a-network"], "X-Forwarded-User", None, None)
    with pytest.raises(ConfigError, match="does not exist"):
        ProxySignOn(["10.0.0.0/8"], "X-Forwarded-User", None, str(tmp_path / "missing.yml"))


def test_two_identity_headers_utf8_names_and_ipv4_mapped_proxies(tmp_path: Path) -> None:
    """Issue 64: with two user (or groups) headers the first won — refused now; UTF-8 names never matched the map
    (read as latin-1); a server on `::` saw its IPv4 proxy as ::ffff:a.b.c.d and signed nobody in."""
    path = tmp_path / "access.yml"
    path.write_text("users:\n  zoë@corp: {role: operator, projects: [math]}\ngroups:\n  数学: {role: viewer}\n",
                    encoding="utf-8")
    sso = ProxySignOn(["127.0.0.2/32"], "X-Forwarded-User", "X-Forwarded-Groups", str(path))
    who = sso.principal(_Request("127.0.0.2", {"X-Forwarded-User": "zoë@corp"}))
    assert who is not None and (who.name, who.role) == ("zoë@corp (sso)", "operator")
    who = sso.principal(_Request("::ffff:127.0.0.2", {"X-Forwarded-User": "li", "X-Forwarded-Groups": "数学"}))
    assert who is not None and who.role == "viewer"
    for twice in ([("X-Forwarded-User", "ann"), ("X-Forwarded-User", "zoë@corp")],
                  [("X-Forwarded-User", "li"), ("X-Forwarded-Groups", "x"), ("X-Forwarded-Groups", "数学")]):
        with pytest.raises(ForbiddenError, match="carries 2 x-forwarded-"):
            sso.principal(_Request("127.0.0.2", twice))
    # wrong sign-ins behind the proxy count per person (or forwarded client), not for everyone behind it
    assert sso.limiter_key(_Request("127.0.0.2", {"X-Forwarded-User": "ann"})) != \
        sso.limiter_key(_Request("127.0.0.2", {"X-Forwarded-User": "bob"}))
    assert sso.limiter_key(_Request("127.0.0.2", {"X-Forwarded-For": "10.9.9.9, 10.0.0.1"})) == \
        "127.0.0.2 for 10.0.0.1"
    assert sso.limiter_key(_Request("10.5.5.5", {"X-Forwarded-User": "ann"})) == "10.5.5.5"  # not the proxy
