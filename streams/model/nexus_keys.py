"""Typed nexus keys (docs/design.md §4 step 2): the deterministic edges of the memory graph.

A key is `<type>:<value>` with no whitespace in it. Conventions:

* Values are lowercased, except `path:` (filesystems are case-sensitive) and the
  opaque identifiers `run:` / `session:` (two ids that differ only in case are
  different ids). Whitespace inside a value becomes `_`.
* `err:<family>` is a closed vocabulary (`timeout`, `connection_refused`, `dns`,
  `oom`, …) plus `err:http_<status>` with its class `err:http_4xx|5xx`,
  `err:exit_<code>` (1-255) and `err:exc/<exceptionclass>`. A free-form message
  never becomes a family, so line numbers, pids and addresses cannot leak in.
  The `error` field is always parsed; `text` only when it shows error evidence,
  so "I set the timeout to 30 s" makes no key. An error that matches no family
  makes no `err:` key (the bare word "error" is not a family).
* `path:` strips `:line[:col]`, a leading `./`, trailing `/` and punctuation and
  collapses `//`. Paths in text need a `/`; a single absolute segment (`/tmp`,
  `/help`) needs a file extension. Windows paths are not recognised.
* `url:<host[:port]><path>`: no scheme, userinfo, query or fragment (they may
  carry secrets), no default port, no trailing slash.
* `tag:<ns>/<value>` from tags; a tag without a namespace is `tag:<value>`.
  Hashtags in text are topics: `#deploy` → `tag:topic/deploy`, `#ops/x` → `tag:ops/x`.
  Channels come only from the `channel` field, never from `#` in text.
* `entity:` from the `entities` field and, conservatively, from text: tickers
  (`ETH`, `$ETH`; a pair `ETH/USDC` gives the pair and both legs), and — only in
  text without error evidence — @mentions and capitalized names that do not
  open a sentence (multi-word names may), joined with `_` (`entity:new_york`);
  numbers with a unit are things too (`40 points` → `entity:40_points`, `$5` →
  `entity:5_usd`, `30 ms` → `entity:30_ms`), calendar spans ("3 years") are not.
* Keys longer than `MAX_KEY_LENGTH` characters are dropped.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from grimoire.streams.model.text import STOPWORDS

KeyType = Literal[
    "err", "path", "url", "tool", "tag:ops", "tag:topic", "tag:src", "tag",
    "chan", "regime", "entity", "run", "session",
]  # fmt: skip


@dataclass(frozen=True, slots=True)
class KeyWeights:
    """Gravity of each key type in walks and truncation (docs/design.md §4.2 defaults)."""

    err: float = 3.0
    path: float = 2.5
    url: float = 2.5
    tool: float = 2.0
    tag_ops: float = 2.0
    tag_topic: float = 1.7
    chan: float = 1.3
    tag_src: float = 1.0
    tag_other: float = 1.0
    regime: float = 1.5
    entity: float = 1.5
    run: float = 1.2
    session: float = 1.0


DEFAULT_WEIGHTS = KeyWeights()
# A longer key is unique to one blob anyway; it would only bloat the nexus index.
MAX_KEY_LENGTH = 200


@dataclass(frozen=True, slots=True)
class KeySource:
    """The parts of one event that keys are drawn from."""

    text: str = ""
    tool: str = ""
    error: str = ""
    paths: tuple[str, ...] = ()
    urls: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    channel: str = ""
    regime: str = ""
    entities: tuple[str, ...] = ()
    run_id: str = ""
    session_id: str = ""


_PLAIN_TYPES: dict[str, KeyType] = {
    t: t for t in ("err", "path", "url", "tool", "chan", "regime", "entity", "run", "session")
}
_TAG_TYPES: dict[str, KeyType] = {"ops": "tag:ops", "topic": "tag:topic", "src": "tag:src"}


def key_type(key: str) -> KeyType:
    """The type of a key made by `extract_keys`; anything else is a caller bug."""
    prefix, sep, value = key.partition(":")
    if sep and value:
        if prefix == "tag":
            namespace, slash, _ = value.partition("/")
            return _TAG_TYPES.get(namespace, "tag") if slash else "tag"
        if prefix in _PLAIN_TYPES:
            return _PLAIN_TYPES[prefix]
    raise ValueError(f"not a nexus key: {key!r}")


def type_weight(key: str, weights: KeyWeights = DEFAULT_WEIGHTS) -> float:
    return _weight_table(weights)[key_type(key)]


@functools.lru_cache(maxsize=16)
def _weight_table(weights: KeyWeights) -> dict[KeyType, float]:
    # Built once per weights: a recall walk ranks keys thousands of times.
    return {
        "err": weights.err, "path": weights.path, "url": weights.url, "tool": weights.tool,
        "tag:ops": weights.tag_ops, "tag:topic": weights.tag_topic, "tag:src": weights.tag_src,
        "tag": weights.tag_other, "chan": weights.chan, "regime": weights.regime,
        "entity": weights.entity, "run": weights.run, "session": weights.session,
    }  # fmt: skip


def commonness_penalty(degree: int) -> float:
    """1/sqrt(1 + ln(1 + degree)): keys touching many memories pull less."""
    if degree < 0:
        raise ValueError(f"degree must be >= 0, got {degree}")
    return 1.0 / math.sqrt(1.0 + math.log1p(degree))


def extract_keys(
    source: KeySource, *, max_keys: int = 32, weights: KeyWeights = DEFAULT_WEIGHTS
) -> tuple[str, ...]:
    """Sorted, distinct keys; past `max_keys` the heaviest types win (ties by key)."""
    if max_keys < 0:
        raise ValueError(f"max_keys must be >= 0, got {max_keys}")
    text_is_error = _looks_like_error(source.text)
    keys: set[str | None] = set()
    if source.error.strip():
        keys.update(_error_keys(source.error))
    if text_is_error:
        keys.update(_error_keys(source.text))
    for blob in (source.error, source.text):
        keys.update(_url_key(m.group(0)) for m in _TEXT_URL.finditer(blob))
        keys.update(_path_key(m.group(0)) for m in _TEXT_PATH.finditer(_TEXT_URL.sub(" ", blob)))
    prose = _TEXT_URL.sub(" ", source.text)
    keys.update(_hashtag_key(m.group(1)) for m in _HASHTAG.finditer(prose))
    keys.update(f"entity:{name}" for name in _tickers(prose))
    if not text_is_error:
        keys.update(f"entity:{m.group(1).lower()}" for m in _MENTION.finditer(prose))
        keys.update(f"entity:{name}" for name in _names(prose))
    keys.update(f"entity:{quantity}" for quantity in _quantities(prose))
    keys.update(_path_key(p) for p in source.paths)
    keys.update(_url_key(u) for u in source.urls)
    keys.update(_tag_key(t) for t in source.tags)
    keys.update(_entity_key(e) for e in source.entities)
    keys.add(_slug_key("tool", source.tool))
    keys.add(_slug_key("chan", source.channel.strip().lstrip("#@")))
    keys.add(_slug_key("regime", source.regime))
    keys.add(_id_key("run", source.run_id))
    keys.add(session_key(source.session_id))
    found = {k for k in keys if k is not None and len(k) <= MAX_KEY_LENGTH}
    if len(found) > max_keys:
        found = set(sorted(found, key=lambda k: (-type_weight(k, weights), k))[:max_keys])
    return tuple(sorted(found))


# --- errors -------------------------------------------------------------------

_ERROR_FAMILIES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (family, re.compile(pattern, re.IGNORECASE | re.MULTILINE))
    for family, pattern in (
        ("timeout", r"\btimed?[ _-]?out\b|\b(?:read|connect|socket)?timeout(?:error|exception)?\b"
                    r"|\bdeadline[ _]exceeded\b|\betimedout\b"),
        ("connection_refused", r"\beconnrefused\b|\bconnection[ _]?refused"),
        ("connection_reset", r"\beconnreset\b|\bconnection[ _]?reset"),
        ("broken_pipe", r"\bepipe\b|\bbroken[ _]?pipe"),
        ("dns", r"\bgetaddrinfo\b|\benotfound\b|\beai_again\b|name or service not known"
                r"|nodename nor servname|failure in name resolution|could not resolve host"),
        ("tls", r"certificate[ _]verify[ _]failed|\bssl[ _]?error\b|tls handshake"
                r"|self[ -]signed certificate|certificate has expired"),
        ("rate_limited", r"rate[ _-]?limit|too many requests|\bthrottl"),
        ("permission_denied", r"\beacces\b|\beperm\b|permission[ _]?denied|access denied"
                              r"|operation not permitted"),
        ("not_found", r"\benoent\b|no such file or directory|\bfilenotfounderror\b"),
        ("disk_full", r"\benospc\b|no space left on device|disk quota exceeded"
                      r"|\bdisk (?:is )?full\b"),
        ("oom", r"out[ _]?of[ _]?memory|\bmemoryerror\b|\benomem\b|cannot allocate memory"
                r"|\boom\b|\boom[ _-]?kill|^\s*killed\s*$"),
        ("command_not_found", r"command not found"
                              r"|not recognized as an internal or external command"),
        ("segfault", r"segmentation fault|\bsegfault|\bsigsegv\b|core dumped"),
        ("panic", r"^panic:|\bpanicked at\b"),
        ("reverted", r"execution reverted|transaction (?:was |has been )?reverted"
                     r"|reverted with (?:reason|custom error)|vm exception while processing"
                     r"|\bcall_exception\b"),
        ("out_of_gas", r"out of gas|gas required exceeds allowance|intrinsic gas too low"),
        ("insufficient_funds", r"insufficient (?:funds|balance)|transfer amount exceeds balance"),
        ("nonce", r"nonce too (?:low|high)|invalid nonce|nonce (?:has )?already (?:been )?used"),
        ("slippage", r"slippage|too little received|insufficient_output_amount"),
        ("auth", r"authentication failed|invalid (?:api[ _]?key|token|credentials)"
                 r"|\bunauthenticated\b|\bunauthorized\b"),
    )
)  # fmt: skip
_HTTP_STATUS = re.compile(
    r"\bhttp(?:/\d(?:\.\d)?)?(?: error)?[ :]+([45]\d\d)\b"
    r"|\b(?:status|response)(?:[ _-]?code)?\s*[=:]?\s*([45]\d\d)\b"
    r"|\breturned error:?\s*([45]\d\d)\b"
    r"|\b([45]\d\d)[ :-]+(?:bad request|unauthorized|payment required|forbidden|not found"
    r"|method not allowed|not acceptable|request timeout|conflict|gone|payload too large"
    r"|unprocessable|too many requests|internal server error|not implemented|bad gateway"
    r"|service unavailable|gateway time-?out)\b",
    re.IGNORECASE,
)
_EXIT_CODE = re.compile(
    r"\bexit(?:ed)?(?: with)? (?:code|status)[ :=]*(\d{1,3})\b|\bexit_?code[ :=]+(\d{1,3})\b",
    re.IGNORECASE,
)
# Case matters here: `ValueError`, `java.lang.NullPointerException`, never `ERROR`.
_EXCEPTION = re.compile(
    r"\b([A-Z][A-Za-z0-9]*(?:Error|Exception)|KeyboardInterrupt|SystemExit|StopIteration)\b"
)
_ERROR_EVIDENCE = re.compile(
    r"\b(?:errors?|errno|exceptions?|traceback|fail(?:s|ed|ure|ing)?|fatal|panic(?:ked)?"
    r"|crash(?:ed|es)?|abort(?:ed)?|refused|denied|unavailable|forbidden|unauthorized"
    r"|unreachable|timed out|cannot|can't|could not|couldn't|unable to|not found|reverted"
    r"|killed|segfault|segmentation fault|too many requests|rate[ -]limited|no space left"
    r"|out of memory|econnrefused|econnreset|etimedout|enotfound|enoent|eacces|eperm|enospc"
    r"|enomem|epipe|non-zero|exit(?:ed)?(?: with)? (?:code|status))\b",
    re.IGNORECASE,
)


def _looks_like_error(text: str) -> bool:
    return bool(_ERROR_EVIDENCE.search(text) or _EXCEPTION.search(text))


def _error_keys(message: str) -> Iterator[str]:
    for family, pattern in _ERROR_FAMILIES:
        if pattern.search(message):
            yield f"err:{family}"
    for match in _HTTP_STATUS.finditer(message):
        status = next(g for g in match.groups() if g)
        yield f"err:http_{status}"
        yield f"err:http_{status[0]}xx"
        if status == "429":
            yield "err:rate_limited"
    for match in _EXIT_CODE.finditer(message):
        code = int(next(g for g in match.groups() if g))
        if 0 < code < 256:
            yield f"err:exit_{code}"
    for match in _EXCEPTION.finditer(message):
        yield f"err:exc/{match.group(1).lower()}"


# --- paths and urls -------------------------------------------------------------

_WHITESPACE = re.compile(r"\s+")
_TRAILING = ".,;:!?)]}'\""
_TEXT_URL = re.compile(r"\b(?:https?|wss?|ftp)://[^\s<>\"'`()\[\]{}]+", re.IGNORECASE)
_DEFAULT_PORTS = {"http": 80, "ws": 80, "https": 443, "wss": 443, "ftp": 21}
_SEG = r"[\w.@+~-]+"
_EXT_SEG = r"[\w.@+~-]*\.[A-Za-z][A-Za-z0-9]{0,7}(?![\w/])"
_TEXT_PATH = re.compile(
    rf"(?<![\w.:/~@#-])(?:(?:~|\.\.?)/+(?:{_SEG}/+)*{_SEG}"  # ./x ../x ~/x
    rf"|/+(?:{_SEG}/+)+{_SEG}|/{_EXT_SEG}"  # /a/b, /app.py
    rf"|{_SEG}(?:/+{_SEG})*/+{_EXT_SEG})"  # src/app.py
)
_LINE_SUFFIX = re.compile(r"(?::\d+){1,2}$")


def _path_key(raw: str) -> str | None:
    value = _LINE_SUFFIX.sub("", raw.strip().rstrip(_TRAILING))
    value = re.sub(r"/{2,}", "/", value)
    while value.startswith("./"):
        value = value[2:]
    value = value.rstrip("/").rstrip(_TRAILING)
    return f"path:{_WHITESPACE.sub('_', value)}" if value else None


def _url_key(raw: str) -> str | None:
    value = raw.strip().rstrip(_TRAILING)
    try:
        parts = urlsplit(value if "://" in value else f"//{value}")
        port = parts.port
    except ValueError:  # a malformed port or IPv6 literal
        return None
    host = parts.hostname or ""
    if not host:
        return None
    if port is not None and port != _DEFAULT_PORTS.get(parts.scheme.lower()):
        host = f"{host}:{port}"
    path = re.sub(r"/{2,}", "/", parts.path).rstrip("/")
    return "url:" + _WHITESPACE.sub("_", host + path).lower()


# --- tags, fields ----------------------------------------------------------------

_HASHTAG = re.compile(r"(?<![\w&#/])#([A-Za-z][\w-]*(?:/[\w-]+)*)")
_HEX_COLOUR = re.compile(r"[0-9a-f]{3}(?:[0-9a-f]{3}(?:[0-9a-f]{2})?)?")


def _slug(value: str) -> str:
    return _WHITESPACE.sub("_", value.strip().lower())


def _slug_key(prefix: str, value: str) -> str | None:
    slug = _slug(value)
    return f"{prefix}:{slug}" if slug else None


def session_key(session_id: str) -> str | None:
    """The nexus key joining a session's memories, in event-time order."""
    return _id_key("session", session_id)


def _id_key(prefix: str, value: str) -> str | None:
    value = _WHITESPACE.sub("_", value.strip())
    return f"{prefix}:{value}" if value else None


def _tag_key(raw: str) -> str | None:
    return _slug_key("tag", re.sub(r"/{2,}", "/", _slug(raw).lstrip("#").strip("/")))


def _hashtag_key(value: str) -> str | None:
    if _HEX_COLOUR.fullmatch(value.lower()):
        return None
    return _tag_key(value if "/" in value else f"topic/{value}")


def _entity_key(raw: str) -> str | None:
    return _slug_key("entity", raw.strip().lstrip("@$"))


# --- entities in text ------------------------------------------------------------


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_NOT_ENTITY = STOPWORDS | _words(
    "monday tuesday wednesday thursday friday saturday sunday january february march april "
    "may june july august september october november december hi hello hey thanks thank yes "
    "no ok okay yesterday today tomorrow tonight also however maybe please sorry mr mrs ms dr "
    "sir dear just still now here well oh"
)
# Acronyms, protocol words, log levels, errno and signal names look like tickers.
_NOT_TICKER = _words(
    "ok id ui ux ai ml io ip os pr ci cd qa db vm am pm us tx lp kb mb gb tb ms ns ps re vs "
    "api sdk cli url uri pid cpu gpu ram ssd sql eof ssl tls tcp udp dns ssh ftp rpc evm abi "
    "aws gcp utc gmt utf iso llm npm env faq fyi eta kpi mvp wip dex cex amm tvl apy apr pnl "
    "ath get put post head patch delete http https json yaml toml xml html css csv pdf png "
    "jpg gif svg rest cors jwt uuid null none true false nan todo fixme note asap lgtm tldr "
    "info warn err error fatal debug trace oom path home user shell pwd enoent eacces eperm "
    "enospc enomem epipe eexist einval eagain ebadf ebusy eintr eio eisdir emfile erofs esrch "
    "sigint sighup sigbus sigfpe readme"
)
_TICKER = re.compile(r"(?<![\w./@#$-])\$?([A-Z]{2,6})(?:/([A-Z]{2,6}))?(?![\w/-]|\.\S)")
_MENTION = re.compile(r"(?<![\w@.])@([A-Za-z][\w-]*(?:\.[\w-]+)*)(?![\w@/])")
# A name word is not glued to code: no `Foo.bar`, `Foo(`, `Foo_x`, `CamelCase`, `Don't`.
_NAME_WORD = r"[A-Z][a-z]+(?![\w/(-]|\.\S|['\u2019](?!s\b)\w)"
_NAME_RUN = re.compile(rf"(?<![\w./@#$'\u2019-]){_NAME_WORD}(?: {_NAME_WORD}){{0,3}}")
_OPENERS = " \t\"'\u201c\u2018([{*->\u2022"


def _tickers(text: str) -> Iterator[str]:
    for match in _TICKER.finditer(text):
        legs = [leg.lower() for leg in match.groups() if leg]
        allowed = [leg for leg in legs if leg not in _NOT_TICKER and leg not in STOPWORDS]
        yield from allowed
        if len(legs) == 2 and len(allowed) == 2:
            yield "/".join(legs)


def _opens_sentence(text: str, start: int) -> bool:
    line = text[text.rfind("\n", 0, start) + 1 : start].rstrip(_OPENERS)
    return not line or line[-1] in ".!?:;"


def _names(text: str) -> Iterator[str]:
    """Capitalized runs, split at common words; a lone word opening a sentence is dropped."""
    for match in _NAME_RUN.finditer(text):
        at_start = _opens_sentence(text, match.start())
        piece: list[str] = []
        for word in [*match.group(0).split(" "), ""]:
            if word and word.lower() not in _NOT_ENTITY:
                piece.append(word.lower())
                continue
            if piece and not (at_start and len(piece) == 1):
                yield "_".join(piece)
            piece = []
            at_start = False


# Units that make a number a thing worth linking; calendar spans ("3 years") are
# time, not things, and a bare number links everything to everything.
_UNIT_NAMES = {
    "%": "pct", "percent": "pct", "pct": "pct",
    "ms": "ms", "s": "s", "sec": "s", "secs": "s", "second": "s", "seconds": "s",
    "min": "min", "mins": "min", "minute": "min", "minutes": "min",
    "h": "h", "hr": "h", "hrs": "h", "hour": "h", "hours": "h",
    "kb": "kb", "mb": "mb", "gb": "gb", "tb": "tb", "kib": "kib", "mib": "mib", "gib": "gib",
    "gwei": "gwei", "wei": "wei", "eth": "eth", "btc": "btc", "usdc": "usdc", "usdt": "usdt",
    "usd": "usd", "eur": "eur", "dollars": "usd", "dollar": "usd", "euros": "eur",
    "km": "km", "miles": "miles", "mile": "miles", "kg": "kg", "lbs": "lbs", "pounds": "lbs",
    "points": "points", "point": "points", "pts": "points", "goals": "goals",
    "blocks": "blocks", "block": "blocks", "x": "x",
}  # fmt: skip
_QUANTITY = re.compile(
    r"(?<![\w.$€])(?P<cur>[$€])?(?P<n>\d+(?:[.,]\d+)?)(?:\s?(?P<unit>"
    + "|".join(sorted((re.escape(u) for u in _UNIT_NAMES), key=len, reverse=True))
    + r"))?(?![\w.%])",
    re.IGNORECASE,
)


def _quantities(text: str) -> Iterator[str]:
    for match in _QUANTITY.finditer(text):
        number = match.group("n").replace(",", ".")
        if match.group("cur"):
            yield f"{number}_{'usd' if match.group('cur') == '$' else 'eur'}"
        elif match.group("unit"):
            yield f"{number}_{_UNIT_NAMES[match.group('unit').lower()]}"
