"""The operations docs' Grafana dashboard and Prometheus alert rules
(`docs/ops/grafana-dashboard.json`, `docs/ops/prometheus-alerts.yml`) name only
series that `/metrics` exports, with labels those series carry.

What is exported is read from the product, never listed here: the registry the
HTTP app builds (`HttpMetrics`, infra/http/metrics.py) with its Redis collector
(`StoreCollector`) refreshed over a stand-in reading in which every family has a
sample (the Redis readers the module imports are replaced; the families, their
names, types and labels are the module's own), plus one observed recall and one
refusal so the process's own labelled series show theirs. The exposition names
are the samples' names, so a counter is accepted only as `_total` / `_created`, a
histogram only as `_bucket` / `_sum` / `_count` / `_created`, a gauge only bare.

The PromQL reader below is a small tokenizer, not a parser: it finds the series
selectors (an identifier that is not a function, aggregation, keyword or number,
with its `{...}` matchers) and the labels of `by` / `without` / `on` / `ignoring` /
`group_left` / `group_right` lists, and skips strings, `[...]` ranges, numbers,
durations and Grafana `$variables`. It is tested on its own first.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

import pytest
import yaml

from grimoire.infra.http import metrics as metrics_module
from grimoire.infra.http.metrics import HttpMetrics, StoreCollector
from grimoire.infra.settings import Settings
from grimoire.tables.memory.counters import DEAD_LETTER_FIELD
from grimoire.tables.memory.inspect import CognitiveReading, MaintenanceRun
from tests.support.paths import ROOT

DASHBOARD: Final = ROOT / "docs" / "ops" / "grafana-dashboard.json"
ALERTS: Final = ROOT / "docs" / "ops" / "prometheus-alerts.yml"
MONITORING: Final = ROOT / "docs" / "monitoring.md"

#: Series Prometheus makes itself for every target (not the service's), with their labels.
PROMETHEUS_SERIES: Final = {"up": frozenset({"job", "instance"})}
#: Labels Prometheus attaches to every scraped series.
TARGET_LABELS: Final = frozenset({"job", "instance"})

# ---- the PromQL reader ---------------------------------------------------------------

AGGREGATIONS: Final = frozenset(
    {
        "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
        "bottomk", "topk", "quantile", "limitk", "limit_ratio",
    }
)  # fmt: skip
FUNCTIONS: Final = frozenset(
    {
        "abs", "absent", "absent_over_time", "acos", "acosh", "asin", "asinh", "atan",
        "atanh", "avg_over_time", "ceil", "changes", "clamp", "clamp_max", "clamp_min",
        "cos", "cosh", "count_over_time", "day_of_month", "day_of_week", "day_of_year",
        "days_in_month", "deg", "delta", "deriv", "double_exponential_smoothing", "end",
        "exp", "floor", "histogram_avg", "histogram_count", "histogram_fraction",
        "histogram_quantile", "histogram_stddev", "histogram_stdvar", "histogram_sum",
        "holt_winters", "hour", "idelta", "increase", "info", "irate", "label_join",
        "label_replace", "last_over_time", "ln", "log10", "log2", "mad_over_time",
        "max_over_time", "min_over_time", "minute", "month", "pi", "predict_linear",
        "present_over_time", "quantile_over_time", "rad", "rate", "resets", "round",
        "scalar", "sgn", "sin", "sinh", "sort", "sort_by_label", "sort_by_label_desc",
        "sort_desc", "sqrt", "start", "stddev_over_time", "stdvar_over_time",
        "sum_over_time", "tan", "tanh", "time", "timestamp", "vector", "year",
    }
)  # fmt: skip
GROUPING: Final = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
#: Words that are never series (PromQL keywords are case-insensitive).
KEYWORDS: Final = frozenset({"and", "or", "unless", "bool", "offset", "inf", "nan", "atan2"})
OPERATORS: Final = frozenset("+-*/%^=!<>,@:")
_IDENT: Final = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_LABEL: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NUMBER: Final = re.compile(r"(?:0[xX][0-9a-fA-F]+|[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?[a-z0-9]*)")
_MATCH_OPS: Final = ("=~", "!~", "!=", "=")


@dataclass(frozen=True)
class Selector:
    """One series selector: the metric name and the label names its matchers use."""

    name: str
    labels: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Parsed:
    selectors: tuple[Selector, ...]
    grouping: frozenset[str]  # labels named in by/without/on/ignoring/group_* lists

    @property
    def names(self) -> set[str]:
        return {s.name for s in self.selectors}


class PromQLError(ValueError):
    pass


def _skip_space(expr: str, i: int) -> int:
    while i < len(expr) and expr[i].isspace():
        i += 1
    return i


def _string_end(expr: str, i: int) -> int:
    """Index just past the string literal opening at `i`."""
    quote = expr[i]
    j = i + 1
    while j < len(expr):
        if expr[j] == "\\" and quote != "`":
            j += 2
            continue
        if expr[j] == quote:
            return j + 1
        j += 1
    raise PromQLError(f"unterminated string at {i}: {expr!r}")


def _matchers(expr: str, i: int) -> tuple[dict[str, tuple[str, str]], int]:
    """The `{...}` opening at `i`: {label: (operator, value)} and the index past `}`."""
    found: dict[str, tuple[str, str]] = {}
    j = i + 1
    while True:
        j = _skip_space(expr, j)
        if j < len(expr) and expr[j] == ",":
            j += 1
            continue
        if j < len(expr) and expr[j] == "}":
            return found, j + 1
        label = _LABEL.match(expr, j)
        if label is None:
            raise PromQLError(f"expected a label name at {j}: {expr!r}")
        j = _skip_space(expr, label.end())
        op = next((o for o in _MATCH_OPS if expr.startswith(o, j)), None)
        if op is None:
            raise PromQLError(f"expected a matcher operator at {j}: {expr!r}")
        j = _skip_space(expr, j + len(op))
        if j >= len(expr) or expr[j] not in "\"'`":
            raise PromQLError(f"expected a quoted label value at {j}: {expr!r}")
        end = _string_end(expr, j)
        found[label.group()] = (op, expr[j + 1 : end - 1])
        j = end


def _label_list(expr: str, i: int) -> tuple[list[str], int]:
    """The `( a, b )` opening at `i`: its labels and the index past `)`."""
    if i >= len(expr) or expr[i] != "(":
        raise PromQLError(f"expected a label list at {i}: {expr!r}")
    close = expr.find(")", i)
    if close < 0:
        raise PromQLError(f"unclosed label list at {i}: {expr!r}")
    labels = [part.strip() for part in expr[i + 1 : close].split(",") if part.strip()]
    for label in labels:
        if not _LABEL.fullmatch(label):
            raise PromQLError(f"not a label name: {label!r} in {expr!r}")
    return labels, close + 1


def _not_a_series(word: str, expr: str, after: int) -> bool:
    """Whether `word` (lower case), followed by what starts at `after`, is a keyword,
    a function or aggregation call, or an aggregation with `by` / `without` first."""
    if word in KEYWORDS:
        return True
    if expr.startswith("(", after):
        return word in FUNCTIONS or word in AGGREGATIONS
    following = _IDENT.match(expr, after)
    grouped = following is not None and following.group().lower() in ("by", "without")
    return word in AGGREGATIONS and grouped


def extract(expr: str) -> Parsed:
    """The series selectors and grouping labels of one PromQL expression."""
    selectors: list[Selector] = []
    grouping: set[str] = set()
    parens = 0
    i = 0
    n = len(expr)
    while i < n:
        c = expr[i]
        if c.isspace():
            i += 1
        elif c == "#":  # a comment runs to the end of the line
            newline = expr.find("\n", i)
            i = n if newline < 0 else newline
        elif c in "\"'`":
            i = _string_end(expr, i)
        elif c == "$":  # a Grafana variable: $name, ${name}, ${name:format}
            if expr.startswith("${", i):
                close = expr.find("}", i)
                if close < 0:
                    raise PromQLError(f"unclosed variable at {i}: {expr!r}")
                i = close + 1
            else:
                name = _LABEL.match(expr, i + 1)
                if name is None:
                    raise PromQLError(f"a lone '$' at {i}: {expr!r}")
                i = name.end()
        elif c == "[":  # a range or subquery: durations, steps, variables
            close = expr.find("]", i)
            if close < 0:
                raise PromQLError(f"unclosed range at {i}: {expr!r}")
            i = close + 1
        elif c == "]":
            raise PromQLError(f"unopened ']' at {i}: {expr!r}")
        elif c == "{":  # a selector without a name before it: {__name__="..."}
            found, i = _matchers(expr, i)
            named = found.get("__name__")
            if named is None or named[0] != "=":
                raise PromQLError(f"a selector without a fixed metric name: {expr!r}")
            selectors.append(Selector(named[1], frozenset(found) - {"__name__"}))
        elif c == "}":
            raise PromQLError(f"unopened '}}' at {i}: {expr!r}")
        elif c == "(":
            parens += 1
            i += 1
        elif c == ")":
            parens -= 1
            if parens < 0:
                raise PromQLError(f"unopened ')' at {i}: {expr!r}")
            i += 1
        elif c.isdigit() or (c == "." and i + 1 < n and expr[i + 1].isdigit()):
            number = _NUMBER.match(expr, i)
            assert number is not None
            i = number.end()
        elif c in OPERATORS:
            i += 1
        elif (ident := _IDENT.match(expr, i)) is not None:
            word = ident.group()
            lower = word.lower()
            j = _skip_space(expr, ident.end())
            after = expr[j] if j < n else ""
            if lower in GROUPING:
                labels, i = _label_list(expr, j)
                grouping.update(labels)
            elif _not_a_series(lower, expr, j):
                i = ident.end()
            elif after == "{":
                found, i = _matchers(expr, j)
                if "__name__" in found:
                    raise PromQLError(f"a metric name given twice: {expr!r}")
                selectors.append(Selector(word, frozenset(found)))
            else:
                selectors.append(Selector(word))
                i = ident.end()
        else:
            raise PromQLError(f"unexpected {c!r} at {i}: {expr!r}")
    if parens:
        raise PromQLError(f"unbalanced parentheses: {expr!r}")
    return Parsed(tuple(selectors), frozenset(grouping))


def problems(expr: str, exported: dict[str, frozenset[str]]) -> list[str]:
    """What in `expr` names a series or a label that `exported` does not have."""
    parsed = extract(expr)
    if not parsed.selectors:
        return [f"names no series: {expr!r}"]
    found: list[str] = []
    reachable = set(TARGET_LABELS)
    for selector in parsed.selectors:
        labels = exported.get(selector.name)
        if labels is None:
            found.append(f"{selector.name} is not exported")
            continue
        reachable |= labels
        for label in sorted(selector.labels - labels - TARGET_LABELS):
            found.append(f"{selector.name} has no label {label!r}")
    if not found:
        for label in sorted(parsed.grouping - reachable):
            found.append(f"no series of the expression has the label {label!r}")
    return found


# ---- the reader, on its own ------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "names", "grouping"),
    [
        ("up", {"up"}, set()),
        ('up{job="grimoire-api"} == 0', {"up"}, set()),
        (
            "sum by (reason) (rate(grimoire_dead_letters_total[5m])) > 0.1",
            {"grimoire_dead_letters_total"},
            {"reason"},
        ),
        (
            "histogram_quantile(0.99, sum by (le) "
            '(rate(grimoire_recall_stage_seconds_bucket{stage="total"}[$__rate_interval])))',
            {"grimoire_recall_stage_seconds_bucket"},
            {"le"},
        ),
        (
            "max(rate(a_total[5m])) / (max(rate(a_total[5m])) + max(rate(b_total[1h:1m])))",
            {"a_total", "b_total"},
            set(),
        ),
        (
            "deriv(lag[15m]) > 0 and on (partition) lag offset 1h > 1e3",
            {"lag"},
            {"partition"},
        ),
        (
            'label_replace(x{a=~"b|c", d!="e,f}"}, "dst", "$1", "src", "(.*)") '
            "> ignoring (dst) group_left (g) y",
            {"x", "y"},
            {"dst", "g"},
        ),
        ("sum(max without (instance) (rate(z[5m]))) by (k)", {"z"}, {"instance", "k"}),
        ('{__name__="named_series", job="j"}', {"named_series"}, set()),
        ('topk(5, count_values("v", w)) * 100 unless Inf < NaN', {"w"}, set()),
        ("absent(grimoire_journal_lag) # nothing read", {"grimoire_journal_lag"}, set()),
        ("rate(m[${interval}]) @ end() > bool .5", {"m"}, set()),
        ("metric:recorded:rate5m", {"metric:recorded:rate5m"}, set()),
        ("SUM BY (a) (s) OR s2", {"s", "s2"}, {"a"}),
    ],
)
def test_the_reader_finds_series_and_grouping_labels(
    expr: str, names: set[str], grouping: set[str]
) -> None:
    parsed = extract(expr)
    assert parsed.names == names
    assert parsed.grouping == grouping


def test_the_reader_keeps_each_selectors_matcher_labels() -> None:
    parsed = extract('rate(x{a="1", b=~"2"}[5m]) / y{c!~"3"} + z')
    assert parsed.selectors == (
        Selector("x", frozenset({"a", "b"})),
        Selector("y", frozenset({"c"})),
        Selector("z"),
    )


@pytest.mark.parametrize(
    "expr",
    [
        "rate(x[5m]",
        "rate(x[5m]))",
        'x{a="1"',
        "x{a=1}",
        "x[5m",
        'x{a="open}',
        '{job="no name"}',
        "sum by (a b) (x)",
        "x ; y",
    ],
)
def test_the_reader_refuses_what_it_cannot_read(expr: str) -> None:
    with pytest.raises(PromQLError):
        extract(expr)


def test_a_misspelled_function_reads_as_a_series_and_is_flagged() -> None:
    exported = {"x_total": frozenset({"reason"})}
    assert problems("rat(x_total[5m])", exported) == ["rat is not exported"]


def test_unknown_series_and_labels_are_flagged() -> None:
    exported = {"x_total": frozenset({"reason"}), "y": frozenset({"partition"})}
    assert problems("sum by (reason) (rate(x_total[5m]))", exported) == []
    assert problems("rate(x[5m])", exported) == ["x is not exported"]
    assert problems('x_total{topic="j"}', exported) == ["x_total has no label 'topic'"]
    assert problems("max by (topic) (y)", exported) == [
        "no series of the expression has the label 'topic'"
    ]
    assert problems('max by (instance) (y{job="api"})', exported) == []
    assert problems("1 + 1", exported) == ["names no series: '1 + 1'"]


# ---- what the service exports, read from the product -----------------------------------


def _reading() -> CognitiveReading:
    """A reading in which every cognitive value exists (so each family has a sample)."""
    return CognitiveReading(
        candidates=10,
        stored=5,
        window_ms=3_600_000,
        window_end_ms=1_790_000_000_000,
        window_memories=4,
        window_quality=0.6,
        live=5,
        recalled=4,
        hits=2,
    )


async def _registry_samples(mp: pytest.MonkeyPatch) -> dict[str, frozenset[str]]:
    agent = "golem-1"

    async def counters(_redis: object, _prefix: str) -> dict[str, float]:
        return {f"{DEAD_LETTER_FIELD}invalid_json": 1.0}  # dead letters show once counted

    async def watermarks(_redis: object, _prefix: str) -> AsyncIterator[tuple[str, int]]:
        yield agent, 1

    async def per_agent(
        _redis: object, _prefix: str, agents: Sequence[str]
    ) -> dict[str, dict[str, float]]:
        return {a: {} for a in agents}

    async def cognitive(_redis: object, _prefix: str, _agent: str, **_: Any) -> CognitiveReading:
        return _reading()

    async def runs(_redis: object, _prefix: str, _agent: str, **_: Any) -> list[MaintenanceRun]:
        return [MaintenanceRun(task="decay", tick=1, elapsed_ms=10.0)]

    async def lag() -> dict[int, int]:
        return {0: 3}

    mp.setattr(metrics_module, "deployment_counters", counters)
    mp.setattr(metrics_module, "agent_watermarks", watermarks)
    mp.setattr(metrics_module, "agent_counters", per_agent)
    mp.setattr(metrics_module, "cognitive_reading", cognitive)
    mp.setattr(metrics_module, "maintenance_runs", runs)
    settings = Settings(topic_prefix="gm", _env_file=None)
    collector = StoreCollector(object(), "gm", settings, journal_lag=lag)  # type: ignore[arg-type]
    http = HttpMetrics(collector)
    await collector.refresh()
    http.observe_recall("recall", 0.01, {"total": 5.0})
    http.auth_refused.labels("http", "forbidden").inc()
    labels: dict[str, set[str]] = {}
    for family in http.registry.collect():
        assert family.samples, f"{family.name} has no sample: the stand-in reading misses it"
        for sample in family.samples:
            labels.setdefault(sample.name, set()).update(sample.labels)
    return {name: frozenset(found) for name, found in labels.items()}


@pytest.fixture(scope="module")
def exported() -> dict[str, frozenset[str]]:
    """Every series name `/metrics` can show, with its labels (service series plus the
    few Prometheus makes itself)."""
    with pytest.MonkeyPatch.context() as mp:
        series = asyncio.run(_registry_samples(mp))
    return {**series, **PROMETHEUS_SERIES}


def test_the_exported_names_follow_each_familys_type(exported: dict[str, frozenset[str]]) -> None:
    service = {name for name in exported if name not in PROMETHEUS_SERIES}
    assert all(name.startswith("grimoire_") for name in service)
    # Counters only as _total (and _created), histograms only by their parts.
    assert "grimoire_dead_letters_total" in service
    assert "grimoire_dead_letters" not in service
    assert "grimoire_decisions_total" in service
    assert {
        "grimoire_recall_stage_seconds_bucket",
        "grimoire_recall_stage_seconds_sum",
        "grimoire_recall_stage_seconds_count",
    } <= service
    assert "grimoire_recall_stage_seconds" not in service
    assert "grimoire_journal_lag" in service
    assert "grimoire_journal_lag_total" not in service
    assert exported["grimoire_journal_lag"] == {"partition"}
    assert exported["grimoire_dead_letters_total"] == {"reason"}
    assert exported["grimoire_recall_stage_seconds_bucket"] == {"stage", "le"}
    assert exported["grimoire_recall_stage_seconds_count"] == {"stage"}


# ---- the dashboard and the rules -------------------------------------------------------


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Every panel, those inside collapsed rows included."""
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))


def dashboard_exprs(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, PromQL) for every panel target and every query variable."""
    found = [
        (f"panel {panel.get('title')!r}", target["expr"])
        for panel in _panels(dashboard.get("panels", []))
        for target in panel.get("targets", [])
        if "expr" in target
    ]
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") != "query":
            continue
        query = variable["query"]
        text = query["query"] if isinstance(query, dict) else query
        found.append((f"variable {variable['name']!r}", text))
    return found


def alert_rules(rules_file: dict[str, Any]) -> list[dict[str, Any]]:
    return [rule for group in rules_file["groups"] for rule in group["rules"]]


_LABEL_VALUES: Final = re.compile(r"\s*label_values\((?P<expr>.*),\s*(?P<label>\w+)\s*\)\s*")


def query_problems(expr: str, exported: dict[str, frozenset[str]]) -> list[str]:
    """`problems`, reading Grafana's `label_values(selector, label)` too."""
    variable = _LABEL_VALUES.fullmatch(expr)
    if variable is None:
        return problems(expr, exported)
    inner = variable["expr"]
    found = problems(inner, exported)
    names = extract(inner).names
    carried = set().union(*(exported.get(name, frozenset()) for name in names)) | TARGET_LABELS
    if variable["label"] not in carried:
        found.append(f"no series of {inner!r} has the label {variable['label']!r}")
    return found


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def rules_file() -> dict[str, Any]:
    return yaml.safe_load(ALERTS.read_text(encoding="utf-8"))


def test_every_dashboard_query_names_exported_series(
    dashboard: dict[str, Any], exported: dict[str, frozenset[str]]
) -> None:
    exprs = dashboard_exprs(dashboard)
    assert len(exprs) > 20
    wrong = {f"{where}: {expr}": query_problems(expr, exported) for where, expr in exprs}
    assert {k: v for k, v in wrong.items() if v} == {}


def test_every_alert_names_exported_series_and_labels(
    rules_file: dict[str, Any], exported: dict[str, frozenset[str]]
) -> None:
    rules = alert_rules(rules_file)
    assert rules
    wrong = {rule["alert"]: problems(rule["expr"], exported) for rule in rules}
    assert {k: v for k, v in wrong.items() if v} == {}
    # An annotation's $labels.x is a label the expression's result can carry.
    for rule in rules:
        parsed = extract(rule["expr"])
        carried = set().union(*(exported[s.name] for s in parsed.selectors)) | TARGET_LABELS
        text = " ".join(str(v) for v in rule["annotations"].values())
        for label in re.findall(r"\$labels\.(\w+)", text):
            assert label in carried, f"{rule['alert']} annotates with {label!r}"


def test_a_planted_wrong_name_fails_the_check(
    dashboard: dict[str, Any], rules_file: dict[str, Any], exported: dict[str, frozenset[str]]
) -> None:
    planted = json.loads(json.dumps(dashboard))
    planted["panels"][-1].setdefault("panels", []).append(
        {
            "type": "timeseries",
            "title": "planted",
            "targets": [{"expr": "sum(rate(grimoire_dead_letter_total[5m]))"}],
        }
    )
    wrong = [problems(expr, exported) for _, expr in dashboard_exprs(planted)]
    assert ["grimoire_dead_letter_total is not exported"] in wrong
    rule = {**alert_rules(rules_file)[0], "expr": "grimoire_journal_lag_total > 5"}
    assert problems(rule["expr"], exported) == ["grimoire_journal_lag_total is not exported"]
    # A right name with a label it does not carry fails too.
    assert problems('max by (topic) (grimoire_journal_lag{topic="j"})', exported) == [
        "grimoire_journal_lag has no label 'topic'"
    ]


_DURATION: Final = re.compile(r"(?:[0-9]+(?:ms|s|m|h|d|w|y))+")


def test_the_alert_rules_are_complete(rules_file: dict[str, Any]) -> None:
    names = [rule["alert"] for rule in alert_rules(rules_file)]
    assert len(names) == len(set(names))
    for group in rules_file["groups"]:
        assert group["name"] and group["rules"]
    for rule in alert_rules(rules_file):
        assert set(rule) <= {"alert", "expr", "for", "keep_firing_for", "labels", "annotations"}
        assert _DURATION.fullmatch(rule["for"]), rule["alert"]
        assert rule["labels"]["severity"] in {"info", "warning", "critical"}
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]


def test_the_alerts_cover_the_issue(rules_file: dict[str, Any]) -> None:
    by_series: dict[str, list[dict[str, Any]]] = {}
    for rule in alert_rules(rules_file):
        for name in extract(rule["expr"]).names:
            by_series.setdefault(name, []).append(rule)
    assert any("deriv(" in r["expr"] for r in by_series["grimoire_journal_lag"])  # growing
    assert any(
        "reason" in extract(r["expr"]).grouping for r in by_series["grimoire_dead_letters_total"]
    )
    assert any(
        "histogram_quantile(0.99" in r["expr"]
        for r in by_series["grimoire_recall_stage_seconds_bucket"]
    )


def test_the_dashboard_is_an_importable_grafana_dashboard(dashboard: dict[str, Any]) -> None:
    assert dashboard["schemaVersion"] >= 36
    assert dashboard["uid"] and dashboard["title"]
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    panels = list(_panels(dashboard["panels"]))
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids))
    for panel in panels:
        assert panel["type"] in {"row", "timeseries", "stat"}, panel["title"]
        assert set(panel["gridPos"]) == {"h", "w", "x", "y"}
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"], panel["title"]
        refs = [target["refId"] for target in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]
    used = {name for _, expr in dashboard_exprs(dashboard) for name in extract(expr).names}
    for needed in (
        "grimoire_decisions_total",
        "grimoire_journal_lag",
        "grimoire_dead_letters_total",
        "grimoire_recall_stage_seconds_bucket",
        "grimoire_http_recall_seconds_bucket",
        "grimoire_auth_refusals_total",
        "grimoire_embed_cache_hits_total",
        "grimoire_embed_model_seconds_total",
        "grimoire_maintenance_recent_seconds",
    ):
        assert needed in used, needed


def test_the_monitoring_doc_lists_every_exported_family(
    exported: dict[str, frozenset[str]],
) -> None:
    text = MONITORING.read_text(encoding="utf-8")
    for name in exported:
        if name in PROMETHEUS_SERIES or name.endswith(("_sum", "_count", "_created")):
            continue
        listed = name.removesuffix("_bucket")  # a histogram is listed by its family name
        assert f"`{listed}" in text, f"docs/monitoring.md does not list {listed}"
