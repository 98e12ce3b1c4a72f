"""One connection's state and the statements it answers itself: `SET`/`SHOW` (dp.* and ordinary settings),
`BEGIN`/`COMMIT`/`ROLLBACK` as no-ops, catalog queries (proxy/wire/catalog.py), and everything else as a
data query of the pipeline (proxy/wire/answers.py) or a refusal.

Privacy parameters: `SET dp.epsilon = 0.2` (and `dp.delta`, `dp.mechanism`, `dp.confidence`) for the session,
or a leading comment `/* dp: epsilon=0.2, delta=1e-7 */` for one statement; unset, the dataset's defaults.
`SHOW dp.budget` is the remaining budget as rows; `SHOW dp.last_answer` the charge and noise of the last answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from proxy.http.views.budget import budget_now
from proxy.pipeline import Env
from proxy.policy.load import AnalystPolicy
from proxy.query.errors import SqlSyntaxError
from proxy.query.wire_sql import statement_count, without_schema
from proxy.schemas import QueryRequest
from proxy.wire import answers, pgtypes
from proxy.wire.catalog import SETTINGS_SHOWN, CatalogAnswers
from proxy.wire.messages import Column

DP_SETTINGS = ("epsilon", "delta", "mechanism", "confidence")
_DP_COMMENT = re.compile(r"^\s*/\*\s*dp\s*:(?P<body>.*?)\*/", re.DOTALL | re.IGNORECASE)
_LEADING = re.compile(r"^(\s+|--[^\n]*\n?|/\*.*?\*/)+", re.DOTALL)
_SET = re.compile(r"^SET\s+(?:(?:SESSION|LOCAL)\s+)?(?P<name>[A-Za-z_][\w.]*)\s*(?:=|\s+TO\s+)\s*"
                  r"(?P<value>.+?)\s*;?\s*$", re.IGNORECASE | re.DOTALL)
_SHOW = re.compile(r"^SHOW\s+(?P<name>[A-Za-z_][\w.]*(?:\s+[A-Za-z_]+)*)\s*;?\s*$", re.IGNORECASE)
_SHOW_ALIASES = {"transaction isolation level": "transaction_isolation", "time zone": "timezone",
                 "session authorization": "session_authorization"}
_RESET = re.compile(r"^RESET\s+(?P<name>[A-Za-z_][\w.]*|ALL)\s*;?\s*$", re.IGNORECASE)
_NO_OPS = {"BEGIN": "BEGIN", "START": "START TRANSACTION", "COMMIT": "COMMIT", "END": "COMMIT",
           "ROLLBACK": "ROLLBACK", "ABORT": "ROLLBACK", "DISCARD": "DISCARD ALL", "LISTEN": "LISTEN",
           "UNLISTEN": "UNLISTEN", "SAVEPOINT": "SAVEPOINT", "RELEASE": "RELEASE", "CHECKPOINT": "CHECKPOINT"}
_WRITES = {"INSERT", "UPDATE", "DELETE", "MERGE", "CREATE", "DROP", "ALTER", "TRUNCATE", "GRANT", "REVOKE",
           "VACUUM", "ANALYZE", "CALL", "DO", "LOCK", "COMMENT", "REINDEX", "CLUSTER", "REFRESH", "SECURITY",
           "IMPORT", "NOTIFY", "REASSIGN", "UPSERT", "REPLACE", "ATTACH", "DETACH", "INSTALL", "LOAD", "PRAGMA",
           "EXPORT", "USE", "CHECKPOINT_FORCE"}
_QUERIES = {"SELECT", "WITH", "VALUES", "TABLE", "("}


class WireError(Exception):
    """A statement refused by the front-end itself, with its SQLSTATE and the product's error code."""

    def __init__(self, sqlstate: str, code: str, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.sqlstate, self.code, self.message, self.hint = sqlstate, code, message, hint


@dataclass(frozen=True, slots=True)
class Command:
    """A statement answered without rows: its CommandComplete tag."""

    tag: str


@dataclass(slots=True)
class Session:
    env: Env
    analyst: AnalystPolicy
    dataset: str
    catalog: CatalogAnswers
    dp: dict[str, Any] = field(default_factory=dict)  # the session's SET dp.* values
    settings: dict[str, str] = field(default_factory=dict)  # ordinary settings SET in this session
    last_answer: dict[str, Any] | None = None
    in_transaction: bool = False

    # statements ------------------------------------------------------------------------------------------------

    def kind(self, sql: str) -> tuple[str, str, dict[str, Any]]:
        """("empty" | "command" | "catalog" | "query" | "explain", the statement without its dp comment (and
        without EXPLAIN), its dp options).
        Raises WireError for a statement refused before anything runs."""
        options, rest = dp_comment(sql)
        count = statement_count(rest)
        if count == 0:
            return "empty", rest, options
        if count > 1:
            raise WireError("0A000", "unsupported", "one statement at a time: this message holds several",
                            "send each statement on its own (psql does: end each with ;)")
        word = first_word(rest)
        if word in ("SET", "SHOW", "RESET") or word in _NO_OPS or word == "DEALLOCATE":
            return "command", rest, options
        if word == "EXPLAIN":  # the plan and its charge, free: EXPLAIN ANALYZE would run the query
            inner = re.sub(r"^\s*EXPLAIN\s+(VERBOSE\s+)?", "", _LEADING.sub("", rest, count=1), flags=re.I)
            if first_word(inner) in ("ANALYZE", "ANALYSE") or inner.lstrip().startswith("("):
                raise WireError("0A000", "unsupported", "EXPLAIN takes no options here (ANALYZE would run the query)",
                                "EXPLAIN SELECT … shows what the query would charge and the SQL that would run")
            if first_word(inner) not in _QUERIES:
                raise WireError("0A000", "unsupported", "EXPLAIN takes one SELECT")
            return "explain", inner, options
        if word == "COPY":
            raise WireError("0A000", "unsupported", "COPY is not supported: answers are released by SELECT only")
        if word in _WRITES:
            raise WireError("25006", "unsupported", f"cannot execute {word} in a read-only transaction",
                            "this server answers SELECT queries with differentially private releases")
        if word not in _QUERIES:
            raise WireError("0A000", "unsupported", f"{word or 'this statement'} is not supported",
                            "send one SELECT statement")
        try:
            catalog = self.catalog.sql_of(rest)
        except SqlSyntaxError:  # the pipeline's parser says what is wrong, where
            catalog = None
        return ("query" if catalog is None else "catalog"), rest, options

    def request(self, sql: str, options: dict[str, Any]) -> QueryRequest:
        """The QueryRequest of a data query: the session's dp settings under the statement's own."""
        chosen = {**self.dp, **options}
        try:
            return QueryRequest(sql=without_schema(sql), dataset=self.dataset, dialect="postgres", **chosen)
        except ValueError as err:  # pydantic's ValidationError: which parameter, and what it must be
            first = err.errors()[0] if hasattr(err, "errors") else {}  # type: ignore[union-attr]
            where = ".".join(str(p) for p in first.get("loc", ())) or "dp"
            raise WireError("22023", "invalid_parameter", f"dp.{where}: {first.get('msg', str(err))}") from err

    def command(self, sql: str) -> Command | answers.Result:
        """SET, SHOW, RESET, BEGIN/COMMIT/ROLLBACK and the other statements answered here."""
        word = first_word(sql)
        if word == "SET":
            return self._set(sql)
        if word == "SHOW":
            return self._show(sql)
        if word == "RESET":
            found = _RESET.match(sql.strip())
            if found is None:
                raise WireError("42601", "sql_syntax", "RESET takes one setting name, or ALL")
            name = found["name"].lower()
            if name == "all":
                self.dp.clear()
                self.settings.clear()
            elif name.startswith("dp."):
                self.dp.pop(_dp_name(name), None)
            else:
                self.settings.pop(name, None)
            return Command("RESET")
        if word == "DEALLOCATE":
            return Command("DEALLOCATE")
        tag = _NO_OPS[word]
        if tag in ("BEGIN", "START TRANSACTION"):
            self.in_transaction = True
        elif tag in ("COMMIT", "ROLLBACK"):
            self.in_transaction = False
        return Command(tag)

    def _set(self, sql: str) -> Command:
        found = _SET.match(sql.strip())
        if found is None:  # SET SESSION CHARACTERISTICS ..., SET TIME ZONE ...: accepted, changes nothing
            if re.match(r"^SET\s+(SESSION\s+CHARACTERISTICS|TIME\s+ZONE|TRANSACTION|NAMES)\b", sql.strip(), re.I):
                return Command("SET")
            raise WireError("42601", "sql_syntax", "SET takes a name and a value: SET name = value")
        name, value = found["name"].lower(), _unquote(found["value"])
        if name.startswith("dp."):
            key = _dp_name(name)
            if value.lower() == "default":
                self.dp.pop(key, None)
            else:
                chosen = dp_value(key, value)
                self.request("SELECT 1", {key: chosen})  # checked now as a request would be (e.g. epsilon > 0)
                self.dp[key] = chosen
            return Command("SET")
        self.settings[name] = value
        return Command("SET")

    def _show(self, sql: str) -> answers.Result:
        found = _SHOW.match(sql.strip())
        if found is None:
            raise WireError("42601", "sql_syntax", "SHOW takes one setting name")
        name = " ".join(found["name"].lower().split())
        name = _SHOW_ALIASES.get(name, name)
        if name == "dp.budget":
            return self._budget()
        if name == "dp.last_answer":
            return self._last_answer()
        if name.startswith("dp."):
            return _one_text(name, self.dp_setting(_dp_name(name)))
        if name == "all":
            shown = {**SETTINGS_SHOWN, **self.settings}
            rows: list[tuple[object, ...]] = [(k, v, "") for k, v in sorted(shown.items())]
            columns = tuple(Column(c, pgtypes.TEXT) for c in ("name", "setting", "description"))
            return answers.Result(columns, rows, "SHOW")
        if name in self.settings:
            return _one_text(name, self.settings[name])
        if name in SETTINGS_SHOWN:
            return _one_text(name, SETTINGS_SHOWN[name])
        raise WireError("42704", "invalid_parameter", f'unrecognized configuration parameter "{name}"')

    def dp_setting(self, key: str) -> str:
        """A dp setting as SHOW and current_setting() say it: the session's, else the dataset's default."""
        dataset = self.env.policy.dataset(self.dataset)
        default = {"epsilon": getattr(dataset, "epsilon", None), "delta": getattr(dataset, "delta", None),
                   "mechanism": getattr(dataset, "mechanism", None), "confidence": 0.95}[key]
        value = self.dp.get(key, default)
        if isinstance(value, float):  # the policy's: the largest float at or below the digits written (0.1)
            return format(value, ".15g")
        return "" if value is None else str(value)

    def catalog_sql(self, sql: str) -> str:
        """The DuckDB SQL of a catalog query with `current_setting(name)` of a dp setting, or of a setting SET
        in this session, as this session's value (the emulated catalog is shared by an analyst's sessions, and
        its macro knows only the server's values). An unknown dp setting is an error, as PostgreSQL's unknown
        setting, unless `missing_ok` is true (then NULL). Raises ValueError if `sql` is not a catalog query."""
        duck = self.catalog.sql_of(sql)
        if duck is None:
            raise ValueError("not a catalog query")

        def value(found: re.Match[str]) -> str:
            name = found["name"].replace("''", "'").lower()
            if name.startswith("dp."):
                if name.split(".", 1)[1] not in DP_SETTINGS and (found["missing"] or "").upper() == "TRUE":
                    return "NULL::VARCHAR"
                return _literal(self.dp_setting(_dp_name(name)))
            return _literal(self.settings[name]) if name in self.settings else found[0]

        return _CURRENT_SETTING.sub(value, duck)

    def _budget(self) -> answers.Result:
        dataset = self.env.policy.dataset(self.dataset)
        allowed = self.analyst.budget(self.dataset)
        assert dataset is not None and allowed is not None  # checked when the connection started
        now = budget_now(self.env, self.analyst.name, dataset, allowed)
        names = ("dataset", "accounting", "epsilon", "delta", "epsilon_spent", "delta_spent", "epsilon_remaining",
                 "delta_remaining")
        row = (now.dataset, now.accounting, now.epsilon, now.delta, now.epsilon_spent, now.delta_spent,
               now.epsilon_remaining, now.delta_remaining)
        return answers.Result(answers.columns_of(names, (None,) * len(names), [row]), [row], "SHOW")

    def _last_answer(self) -> answers.Result:
        names = ("charge_id", "repeat", "epsilon", "delta", "mechanism", "noise")
        last = self.last_answer
        columns = tuple(Column(n, pgtypes.TEXT) for n in names)
        if last is None:
            return answers.Result(columns, [], "SHOW")
        return answers.Result(columns, [tuple(str(last.get(n, "")) for n in names)], "SHOW")

    def remember(self, result: answers.Result) -> None:
        """The last DP answer, for SHOW dp.last_answer."""
        body = result.answer
        charge = body.get("charge", {})
        self.last_answer = {
            "charge_id": charge.get("id"), "repeat": "nothing charged" in (result.notices or ("",))[0],
            "epsilon": charge.get("epsilon"), "delta": charge.get("delta"), "mechanism": charge.get("mechanism"),
            "noise": "; ".join(f"{n.get('column')}: scale {n.get('scale')}, ±{n.get('ci') or n.get('ci95')}"
                               for n in body.get("noise", [])),
        }


# current_setting('name'[, missing_ok]) as the catalog's translation prints it (proxy/query/wire_sql.py)
_CURRENT_SETTING = re.compile(r"WIRE_CURRENT_SETTING\('(?P<name>(?:[^']|'')*)'(?:\s*,\s*(?P<missing>TRUE|FALSE))?\)",
                              re.IGNORECASE)


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _one_text(name: str, value: str) -> answers.Result:
    return answers.Result((Column(name.split(".")[-1] if not name.startswith("dp.") else name, pgtypes.TEXT),),
                          [(value,)], "SHOW")


def _dp_name(name: str) -> str:
    key = name.split(".", 1)[1]
    if key not in DP_SETTINGS:
        raise WireError("42704", "invalid_parameter", f'unrecognized configuration parameter "{name}"',
                        "the dp settings are " + ", ".join(f"dp.{k}" for k in DP_SETTINGS))
    return key


def dp_value(key: str, text: str) -> Any:
    """A dp setting's value from its text: a number for epsilon, delta and confidence (exact decimal for the
    charged ones, as JSON numbers are read over HTTP), a name for mechanism.

    Example:
        >>> dp_value("epsilon", "0.2"), dp_value("mechanism", "Gaussian")
        (Decimal('0.2'), 'gaussian')
    """
    if key == "mechanism":
        return text.lower()
    try:
        number = Decimal(text)
    except InvalidOperation:
        raise WireError("22023", "invalid_parameter", f"dp.{key} must be a number, got {text!r}") from None
    return float(number) if key == "confidence" else number


def dp_comment(sql: str) -> tuple[dict[str, Any], str]:
    """The options of a leading `/* dp: k=v, ... */` comment, and the statement after it.

    Example:
        >>> dp_comment("/* dp: epsilon=0.2, mechanism=gaussian */ SELECT 1")
        ({'epsilon': Decimal('0.2'), 'mechanism': 'gaussian'}, ' SELECT 1')
    """
    found = _DP_COMMENT.match(sql)
    if found is None:
        return {}, sql
    options: dict[str, Any] = {}
    for item in re.split(r"[,\s]+", found["body"].strip()):
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep:
            raise WireError("42601", "sql_syntax", f"a dp comment holds key=value pairs, got {item!r}")
        options[_dp_name(f"dp.{key.strip().lower()}")] = dp_value(key.strip().lower(), value.strip())
    return options, sql[found.end():]


def first_word(sql: str) -> str:
    """The statement's first keyword, upper-cased, after comments ("(" for a parenthesised query).

    Example:
        >>> first_word("-- hi\\n /* x */ select 1"), first_word("(SELECT 1)")
        ('SELECT', '(')
    """
    rest = _LEADING.sub("", sql, count=1)
    if rest.startswith("("):
        return "("
    found = re.match(r"[A-Za-z_]+", rest)
    return found.group(0).upper() if found else ""


def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1].replace(value[0] * 2, value[0])
    return value
