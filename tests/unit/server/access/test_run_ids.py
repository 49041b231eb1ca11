"""The one spelling of a run id (issue 64): what the access check and the routes both read."""

from __future__ import annotations

import pytest

from rl_insight.server.access.run_ids import parse_run_id, parse_run_id_list, strict_run_id


@pytest.mark.parametrize("text", ["+2", "2.0", "2_0", " 2", "2 ", "\t2", "02", "0x2", "2e0", "\uff12", "\u0662",
                                  "\u00b2", "0", "-1", "", "9223372036854775808", "1" * 40])
def test_other_spellings_are_not_run_ids(text: str) -> None:
    assert parse_run_id(text) is None
    with pytest.raises(ValueError, match="plain decimal"):
        strict_run_id(text)


def test_plain_decimal_is_the_run_id() -> None:
    assert parse_run_id("2") == 2 and parse_run_id("9223372036854775807") == 2**63 - 1
    assert strict_run_id(7) == 7 and strict_run_id("7") == 7
    for value in (True, 2.0, None, [2], 0, 2**63):
        with pytest.raises(ValueError):
            strict_run_id(value)


def test_lists_take_plain_ids_only() -> None:
    assert parse_run_id_list("1,2,30") == [1, 2, 30]
    for text in ("1, 2", "1,,2", "1,+2", ",".join(["1"] * 21), ""):
        assert parse_run_id_list(text) is None
