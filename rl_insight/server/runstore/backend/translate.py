"""The run store's statements in PostgreSQL's dialect.

The store's SQL is written once, in SQLite's dialect with `?` placeholders (the embedded default, and what every
query module reads). On PostgreSQL each distinct statement is translated once by sqlglot (a well-kept SQL
transpiler: GREATEST/LEAST for two-argument max/min, COALESCE, STRING_AGG, POSITION, NULLIF-guarded division as
SQLite's divide-by-zero is NULL) and cached. What no transpiler can know is
fixed at the source instead: upserts name their conflict target (`ON CONFLICT (...) DO ...`, which both engines
read), casts to 64-bit say BIGINT, and the few expressions with no common spelling (a JSON attribute's lookup)
are the connection's `Dialect`'s (dialect.py).

Invariants: translation is a pure function of the text (safe to cache, never of the values); placeholders become
psycopg's `%s` and every other `%` is escaped, so a modulo or a LIKE pattern in the text is never read as one.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

# transaction control is passed through by hand: sqlglot reads SQLite's savepoint grammar differently
_TRANSACTION = {
    "BEGIN IMMEDIATE": "BEGIN",
    "BEGIN": "BEGIN",
    "COMMIT": "COMMIT",
    "ROLLBACK": "ROLLBACK",
}
_SAVEPOINT = re.compile(r"^(SAVEPOINT|RELEASE|ROLLBACK TO) \w+$", re.IGNORECASE)
_PERCENT = re.compile(r"%(?!s|\(\w+\)s)")  # not a placeholder: %s or %(name)s


# SQLite's named (`:name`) and numbered (`?2`) parameters, renamed before parsing so that a parameter called like a
# keyword (`:from`) parses, and back to psycopg's `%(name)s` after
_NAMED = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")
_NUMBERED = re.compile(r"\?(\d+)")
# SQLite's planner hints (PostgreSQL plans by itself)
_INDEX_HINT = re.compile(r"\s+(INDEXED BY \w+|NOT INDEXED)\b", re.IGNORECASE)


def _boolean_types() -> tuple[type[Any], ...]:
    from sqlglot import exp

    return (exp.Predicate, exp.Connector, exp.Not)


@lru_cache(maxsize=4096)
def to_postgres(sql: str) -> tuple[str, bool]:
    """`sql` (SQLite's dialect, `?` placeholders) as PostgreSQL with psycopg placeholders; and whether its parameters
    are numbered (`?1`: the caller's sequence is then passed by name, see numbered_params)."""
    stripped = sql.strip()
    if stripped.upper() in _TRANSACTION:
        return _TRANSACTION[stripped.upper()], False
    if _SAVEPOINT.match(stripped):
        return stripped, False
    import sqlglot
    from sqlglot import exp

    boolean = _boolean_types()
    numbered = bool(_NUMBERED.search(sql))
    text = _INDEX_HINT.sub("", _NUMBERED.sub(r":rli_p\1", _NAMED.sub(r":rli_\1", sql)))
    tree = sqlglot.parse_one(text, read="sqlite")
    # SQLite sorts NULL first, PostgreSQL last; sqlglot keeps SQLite's order with NULLS FIRST, which no index
    # serves (every ORDER BY would sort). The store's orderings are over NOT NULL columns or put NULLs where they
    # want them explicitly (`col IS NULL, col`, or NULLS FIRST/LAST in the text, then kept), so PostgreSQL's own
    # default is used unless the statement says
    if "NULLS" not in sql.upper():
        for ordered in tree.find_all(exp.Ordered):
            ordered.set("nulls_first", bool(ordered.args.get("desc")))
    # a conflict target is a column list, not an ordering (sqlglot would add NULLS FIRST to it)
    for conflict in tree.find_all(exp.OnConflict):
        for ordered in list(conflict.find_all(exp.Ordered)):
            ordered.replace(ordered.this)
    # a subquery in FROM needs a name on PostgreSQL
    for i, sub in enumerate(list(tree.find_all(exp.Subquery))):
        if not sub.alias and isinstance(sub.parent, (exp.From, exp.Join)):
            sub.set("alias", exp.TableAlias(this=exp.to_identifier(f"rli_q{i}")))
    # SQLite's comparisons are 0/1 integers (`sum(kind = 'tool')` counts, a selected `a > b` is 1); PostgreSQL's are
    # booleans: cast them where they are values
    for agg in list(tree.find_all(exp.Sum, exp.Avg, exp.Max, exp.Min)):
        if isinstance(agg.this, boolean):
            agg.this.replace(exp.cast(agg.this.copy(), "INT"))
    for select in list(tree.find_all(exp.Select)):
        for column in select.expressions:
            value = column.this if isinstance(column, exp.Alias) else column
            while isinstance(value, exp.Paren):
                value = value.this
            if isinstance(value, boolean):
                value.replace(exp.cast(value.copy(), "INT"))
    out = _PERCENT.sub("%%", tree.sql(dialect="postgres"))
    return out.replace("%(rli_", "%("), numbered


def numbered_params(params: Any) -> dict[str, Any]:
    """A sequence bound to `?1`, `?2`, ... as the names to_postgres gave them."""
    return {f"p{i}": v for i, v in enumerate(params, start=1)}

