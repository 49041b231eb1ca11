"""The live metric store's resolution of series definitions (server/live/metric_store.py): a definition seen before
resolves to the SeriesRef it had (MetricStore._known), but never past what resolving it afresh would refuse or
change: a full family, a family dropped and made again, another kind under the same name."""

from __future__ import annotations

from rl_insight.protocol import ItemError, SeriesDef
from rl_insight.server.live.metric_store import MetricStore


def gauge(name: str, **labels: str) -> SeriesDef:
    return SeriesDef("gauge", name, dict(labels), "", None, None)


def test_a_definition_seen_before_resolves_to_the_same_ref_and_updates_the_same_series() -> None:
    store = MetricStore()
    d = gauge("actor/loss", rank="0")
    first, = store.resolve_many([d], "c1", None)
    again, = store.resolve_many([d], "c1", None)
    assert again is first
    store.apply_many([(first, 1.0, 0.5)], "c1")
    store.apply_many([(again, 2.0, 0.25)], "c1")
    assert store.series_count() == 1
    other, = store.resolve_many([d], "c1", "myjob")  # another namespace is another family
    assert other is not first and other.family.name != first.family.name


def test_a_remembered_definition_is_refused_once_its_family_is_full() -> None:
    store = MetricStore(max_series_per_metric=2)
    late = gauge("actor/loss", rank="9")
    ref, = store.resolve_many([late], "c1", None)  # resolved (and remembered) before any sample made its series
    assert not isinstance(ref, ItemError)
    for rank in ("0", "1"):
        r, = store.resolve_many([gauge("actor/loss", rank=rank)], "c1", None)
        store.apply_many([(r, 1.0, 1.0)], "c1")
    refused, = store.resolve_many([late], "c1", None)
    assert isinstance(refused, ItemError) and refused.reason == "series_cap"


def test_a_remembered_definition_follows_its_family_when_it_was_dropped_and_made_again() -> None:
    store = MetricStore()
    d = gauge("actor/loss")
    ref, = store.resolve_many([d], "c1", None)
    store.apply_many([(ref, 1.0, 1.0)], "c1")
    assert store.forget_client("c1") == 1  # the family is gone from /metrics
    again, = store.resolve_many([d], "c2", None)
    assert not isinstance(again, ItemError) and again.family is not ref.family
    store.apply_many([(again, 2.0, 3.0)], "c2")
    assert store.series_count() == 1


def test_a_remembered_definition_is_refused_when_its_name_now_holds_another_kind() -> None:
    store = MetricStore()
    d = gauge("actor/steps")
    ref, = store.resolve_many([d], "c1", None)
    store.apply_many([(ref, 1.0, 1.0)], "c1")
    store.forget_client("c1")
    counter, = store.resolve_many([SeriesDef("counter", "actor/steps", {}, "", None, None)], "c2", None)
    store.apply_many([(counter, 1.0, 5.0)], "c2")
    conflict, = store.resolve_many([d], "c1", None)
    assert isinstance(conflict, ItemError) and conflict.reason == "type_conflict"
