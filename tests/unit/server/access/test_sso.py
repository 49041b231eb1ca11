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
    def __init__(self, peer: str, headers: dict[str, str]) -> None:
        self.client = type("Client", (), {"host": peer})()
        self.headers = {k.lower(): v for k, v in headers.items()}


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
