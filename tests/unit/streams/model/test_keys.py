"""grimoire.streams.model.nexus_keys: typed nexus-key extraction, type weights, commonness."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest

from grimoire.streams.model.nexus_keys import (
    DEFAULT_WEIGHTS,
    MAX_KEY_LENGTH,
    KeySource,
    KeyWeights,
    commonness_penalty,
    extract_keys,
    key_type,
    type_weight,
)

PY_TRACEBACK = """Traceback (most recent call last):
  File "/app/grimoire/agents/ingest.py", line 88, in handle
    record = parse(payload)
  File "/app/grimoire/streams/normalize.py", line 131, in parse
    ts = int(raw["ts"])
ValueError: invalid literal for int() with base 10: '12:00'
"""
PY_TRACEBACK_KEYS = (
    "err:exc/valueerror",
    "path:/app/grimoire/agents/ingest.py",
    "path:/app/grimoire/streams/normalize.py",
)
NODE_STACK = """TypeError: Cannot read properties of undefined (reading 'map')
    at renderList (/home/dev/web/src/components/List.jsx:14:22)
    at Object.<anonymous> (/home/dev/web/src/index.js:3:1)
    at Module._compile (node:internal/modules/cjs/loader:1256:14)"""
JAVA_STACK = """Exception in thread "main" java.lang.NullPointerException: Cannot invoke "x()"
\tat com.acme.orders.OrderService.total(OrderService.java:57)
\tat com.acme.orders.Main.main(Main.java:12)
Caused by: java.io.IOException: Broken pipe"""
GO_PANIC = """panic: runtime error: index out of range [5] with length 3

goroutine 1 [running]:
main.main()
\t/home/dev/app/main.go:12 +0x1d
exit status 2"""
SSL_ERROR = (
    "requests.exceptions.SSLError: HTTPSConnectionPool(host='api.example.com', port=443): "
    "Max retries exceeded (Caused by SSLError(SSLCertVerificationError(1, '[SSL: "
    "CERTIFICATE_VERIFY_FAILED] certificate verify failed: unable to get local issuer "
    "certificate (_ssl.c:1006)')))"
)


def case(case_id: str, source: KeySource, *keys: str) -> Any:
    return pytest.param(source, frozenset(keys), id=case_id)


CASES = [
    # --- Python ---
    case("py_traceback_error_field", KeySource(error=PY_TRACEBACK), *PY_TRACEBACK_KEYS),
    case("py_traceback_in_text", KeySource(text=PY_TRACEBACK), *PY_TRACEBACK_KEYS),
    case("py_keyerror", KeySource(error="KeyError: 'price'"), "err:exc/keyerror"),
    case(
        "py_module_not_found",
        KeySource(error="ModuleNotFoundError: No module named 'requests'"),
        "err:exc/modulenotfounderror",
    ),
    case(
        "py_file_not_found",
        KeySource(
            error="FileNotFoundError: [Errno 2] No such file or directory: "
            "'/etc/grimoire/config.yaml'"
        ),
        "err:exc/filenotfounderror",
        "err:not_found",
        "path:/etc/grimoire/config.yaml",
    ),
    case(
        "py_connection_refused",
        KeySource(error="ConnectionRefusedError: [Errno 111] Connection refused"),
        "err:connection_refused",
        "err:exc/connectionrefusederror",
    ),
    case(
        "py_asyncio_timeout",
        KeySource(error="asyncio.exceptions.TimeoutError"),
        "err:exc/timeouterror",
        "err:timeout",
    ),
    case(
        "py_called_process_exit_status",
        KeySource(
            error="subprocess.CalledProcessError: Command '['make', 'build']' "
            "returned non-zero exit status 2."
        ),
        "err:exc/calledprocesserror",
        "err:exit_2",
    ),
    case(
        "py_ssl_verify_failed",
        KeySource(error=SSL_ERROR),
        "err:exc/sslcertverificationerror",
        "err:exc/sslerror",
        "err:tls",
    ),
    # --- Node / JS ---
    case(
        "node_type_error_stack",
        KeySource(error=NODE_STACK),
        "err:exc/typeerror",
        "path:/home/dev/web/src/components/List.jsx",
        "path:/home/dev/web/src/index.js",
    ),
    case(
        "node_econnrefused",
        KeySource(
            error="Error: connect ECONNREFUSED 127.0.0.1:5432\n"
            "    at TCPConnectWrap.afterConnect [as oncomplete] (node:net:1555:16)"
        ),
        "err:connection_refused",
    ),
    case(
        "node_enotfound", KeySource(error="Error: getaddrinfo ENOTFOUND api.example.com"), "err:dns"
    ),
    case(
        "node_heap_oom",
        KeySource(
            error="FATAL ERROR: Reached heap limit Allocation failed - "
            "JavaScript heap out of memory"
        ),
        "err:oom",
    ),
    case(
        "node_eacces",
        KeySource(error="Error: EACCES: permission denied, open '/root/.npmrc'"),
        "err:permission_denied",
        "path:/root/.npmrc",
    ),
    case(
        "axios_429",
        KeySource(error="AxiosError: Request failed with status code 429"),
        "err:exc/axioserror",
        "err:http_429",
        "err:http_4xx",
        "err:rate_limited",
    ),
    # --- JVM, Go, Rust, k8s ---
    case(
        "java_npe_stack",
        KeySource(error=JAVA_STACK),
        "err:broken_pipe",
        "err:exc/ioexception",
        "err:exc/nullpointerexception",
    ),
    case(
        "java_spring_503",
        KeySource(
            error="org.springframework.web.client.HttpServerErrorException$ServiceUnavailable: "
            "503 Service Unavailable"
        ),
        "err:exc/httpservererrorexception",
        "err:http_503",
        "err:http_5xx",
    ),
    case(
        "java_oom",
        KeySource(error="java.lang.OutOfMemoryError: Java heap space"),
        "err:exc/outofmemoryerror",
        "err:oom",
    ),
    case(
        "go_panic",
        KeySource(error=GO_PANIC),
        "err:exit_2",
        "err:panic",
        "path:/home/dev/app/main.go",
    ),
    case(
        "rust_panic",
        KeySource(
            error="thread 'main' panicked at src/main.rs:5:9:\n"
            "called `Option::unwrap()` on a `None` value"
        ),
        "err:panic",
        "path:src/main.rs",
    ),
    case(
        "k8s_oomkilled",
        KeySource(text="Last State: Terminated\n  Reason: OOMKilled\n  Exit Code: 137"),
        "err:exit_137",
        "err:oom",
    ),
    # --- shell ---
    case(
        "bash_command_not_found",
        KeySource(error="bash: foo: command not found", text="the step failed with exit code 127"),
        "err:command_not_found",
        "err:exit_127",
    ),
    case(
        "bash_permission_denied",
        KeySource(error="bash: ./deploy.sh: Permission denied"),
        "err:permission_denied",
        "path:deploy.sh",
    ),
    case("segfault", KeySource(error="Segmentation fault (core dumped)"), "err:segfault"),
    case("bash_killed_is_oom", KeySource(error="Killed"), "err:oom"),
    case(
        "enospc",
        KeySource(
            error="Error: ENOSPC: no space left on device, write '/var/lib/grimoire/spool/out.log'"
        ),
        "err:disk_full",
        "path:/var/lib/grimoire/spool/out.log",
    ),
    # --- HTTP and network ---
    case(
        "http_503_url_with_secret_query",
        KeySource(
            text="GET https://api.x.com/v1/users?id=1&token=SECRET failed: 503 Service Unavailable"
        ),
        "err:http_503",
        "err:http_5xx",
        "url:api.x.com/v1/users",
    ),
    case(
        "http_status_line",
        KeySource(error="HTTP/1.1 500 Internal Server Error"),
        "err:http_500",
        "err:http_5xx",
    ),
    case(
        "curl_22_404",
        KeySource(error="curl: (22) The requested URL returned error: 404"),
        "err:http_404",
        "err:http_4xx",
    ),
    case(
        "curl_7_refused",
        KeySource(error="curl: (7) Failed to connect to localhost port 8080: Connection refused"),
        "err:connection_refused",
    ),
    case(
        "curl_6_dns", KeySource(error="curl: (6) Could not resolve host: api.internal"), "err:dns"
    ),
    case(
        "status_code_kwarg_in_text",
        KeySource(text="upstream failed, status_code=502 after 3 retries"),
        "err:http_502",
        "err:http_5xx",
    ),
    case(
        "grpc_deadline",
        KeySource(error="rpc error: code = DeadlineExceeded desc = context deadline exceeded"),
        "err:timeout",
    ),
    case("etimedout", KeySource(error="Error: connect ETIMEDOUT 10.0.0.5:443"), "err:timeout"),
    case(
        "rate_limit_message",
        KeySource(error="Rate limit reached for requests in organization org-abc123 on tokens"),
        "err:rate_limited",
    ),
    # --- EVM ---
    case(
        "evm_revert_slippage",
        KeySource(error="execution reverted: UniswapV2Router: INSUFFICIENT_OUTPUT_AMOUNT"),
        "err:reverted",
        "err:slippage",
    ),
    case("evm_nonce", KeySource(error="nonce too low: next nonce 42, tx nonce 41"), "err:nonce"),
    case(
        "evm_insufficient_funds",
        KeySource(error="insufficient funds for gas * price + value: have 1000 want 2000"),
        "err:insufficient_funds",
    ),
    # --- paths and urls ---
    case(
        "paths_in_prose",
        KeySource(
            text="Edited src/grimoire/app.py:42 and ./scripts/run.sh; logs in /var/log//syslog."
        ),
        "path:/var/log/syslog",
        "path:scripts/run.sh",
        "path:src/grimoire/app.py",
    ),
    case(
        "parent_and_home_paths_keep_case",
        KeySource(text="Compare ../shared/SPEC.md with ~/notes/todo.txt before merging"),
        "path:../shared/SPEC.md",
        "path:~/notes/todo.txt",
    ),
    case(
        "structured_paths",
        KeySource(paths=("/srv/app//data/", "./README.md", "src/App.tsx:10:3", "  ")),
        "path:/srv/app/data",
        "path:README.md",
        "path:src/App.tsx",
    ),
    case(
        "structured_urls_userinfo_ports_query_fragment",
        KeySource(
            urls=(
                "https://user:pass@Example.COM:443/a/b/?q=1#frag",
                "http://host:8080/x/",
                "example.org/p",
            )
        ),
        "url:example.com/a/b",
        "url:example.org/p",
        "url:host:8080/x",
    ),
    case(
        "urls_in_text",
        KeySource(
            text="Docs at https://Docs.Python.org/3/library/re.html#module-re, "
            "API at http://localhost:8000/v1/?q=x."
        ),
        "url:docs.python.org/3/library/re.html",
        "url:localhost:8000/v1",
    ),
    # --- structured fields ---
    case("tool_call", KeySource(tool="Bash", text="ran the linter on the repo"), "tool:bash"),
    case(
        "tags_with_and_without_namespace",
        KeySource(tags=("ops/deploy", "topic/DeFi", "src/slack", "eth", "Team/Infra")),
        "tag:eth",
        "tag:ops/deploy",
        "tag:src/slack",
        "tag:team/infra",
        "tag:topic/defi",
    ),
    case(
        "hashtags_are_topics",
        KeySource(text="Shipped the fix #deploy #ops/rollback, see issue #123"),
        "tag:ops/rollback",
        "tag:topic/deploy",
    ),
    case(
        "channel_regime_ids_keep_id_case",
        KeySource(
            channel="#Trading-Desk",
            regime="High Volatility",
            run_id="01J9ZK3",
            session_id="sess-AbC",
        ),
        "chan:trading-desk",
        "regime:high_volatility",
        "run:01J9ZK3",
        "session:sess-AbC",
    ),
    # --- entities ---
    case(
        "names_mid_sentence",
        KeySource(text="Yesterday Caroline told Melanie about the trip to New York."),
        "entity:caroline",
        "entity:melanie",
        "entity:new_york",
    ),
    case(
        "structured_entities",
        KeySource(entities=("Uniswap V3", "@alice", " ")),
        "entity:alice",
        "entity:uniswap_v3",
    ),
    case(
        "tickers_and_pair",
        KeySource(text="Rebalanced ETH/USDC and bought $ARB on Arbitrum"),
        "entity:arb",
        "entity:arbitrum",
        "entity:eth",
        "entity:eth/usdc",
        "entity:usdc",
    ),
    case(
        "mentions_not_emails",
        KeySource(text="ping @oncall-bot and @dana.k, cc bob@example.com"),
        "entity:dana.k",
        "entity:oncall-bot",
    ),
    case(
        # Error-like text keeps tickers but not names ("Uniswap" here).
        "swap_event_combined",
        KeySource(
            text="Swap failed on Uniswap for ETH/USDC #defi",
            error="execution reverted: Too little received",
            tool="swap",
            tags=("ops/trade",),
            regime="volatile",
        ),
        "entity:eth",
        "entity:eth/usdc",
        "entity:usdc",
        "err:reverted",
        "err:slippage",
        "regime:volatile",
        "tag:ops/trade",
        "tag:topic/defi",
        "tool:swap",
    ),
    # --- negatives ---
    case("neg_plain_prose", KeySource(text="we went for a walk and talked about nothing much.")),
    case(
        "neg_numbers", KeySource(text="Block 19283746 closed at 3456.78 with 12 txs and pid 4242")
    ),
    # Calm words make no err: key; the quantities are things all the same.
    case(
        "calm_timeout_and_slippage_quantities_only",
        KeySource(text="I set the timeout to 30 seconds and slippage to 0.5% for this pool."),
        "entity:0.5_pct",
        "entity:30_s",
    ),
    case(
        "quantities_with_units_and_currencies",
        KeySource(text="We scored 40 points, paid $5 and €3,50, gas 25 gwei, 2x faster"),
        "entity:2_x",
        "entity:25_gwei",
        "entity:3.50_eur",
        "entity:40_points",
        "entity:5_usd",
    ),
    case("neg_calendar_spans", KeySource(text="it was 3 years ago, for 2 weeks, in 2023")),
    # "error" is evidence, but no family matches, so no err: key is invented.
    case("neg_word_error_not_a_family", KeySource(text="The error bars on that chart look fine.")),
    case("neg_acronyms", KeySource(text="The API returned JSON over HTTP as usual, CPU was low")),
    case("neg_lone_name_opening_sentence", KeySource(text="Melanie went home early.")),
    case("neg_fractions_and_dates", KeySource(text="Split it 50/50 on 2024/01/02 and/or later.")),
    case("neg_slash_commands", KeySource(text="Use /help or /reset to start over")),
    case("neg_exit_code_zero", KeySource(text="Process finished with exit code 0")),
    case("neg_empty", KeySource()),
]
SOURCES = [param.values[0] for param in CASES]


@pytest.mark.parametrize(("source", "expected"), CASES)
def test_extract_keys(source: KeySource, expected: frozenset[str]) -> None:
    keys = extract_keys(source)
    assert set(keys) == expected
    assert list(keys) == sorted(set(keys))


def test_case_table_is_large() -> None:
    assert len(CASES) >= 40


@pytest.mark.parametrize("source", SOURCES)
def test_keys_are_typed_and_have_no_whitespace(source: KeySource) -> None:
    for key in extract_keys(source):
        assert not re.search(r"\s", key)
        key_type(key)  # raises on an untyped key
        if key.startswith("err:") and not key.startswith(("err:http_", "err:exit_")):
            assert not re.search(r"\d", key), key  # no line numbers, pids, addresses


def test_query_secrets_never_reach_keys() -> None:
    keys = extract_keys(KeySource(urls=("https://u:hunter2@x.io/cb?token=SECRET#sig=abc",)))
    assert keys == ("url:x.io/cb",)


def test_deterministic_and_independent_of_input_order() -> None:
    tags = ("ops/deploy", "topic/defi", "src/slack", "eth")
    first = KeySource(text=PY_TRACEBACK, tags=tags, paths=("b.py", "a/c.py"))
    again = KeySource(text=PY_TRACEBACK, tags=tags[::-1], paths=("a/c.py", "b.py"))
    assert extract_keys(first) == extract_keys(first) == extract_keys(again)


def test_truncation_keeps_heaviest_types_then_lexicographic() -> None:
    source = KeySource(
        error="ECONNREFUSED; ETIMEDOUT",
        paths=("/b/x.py", "/a/x.py"),
        tool="bash",
        tags=("src/slack",),
        session_id="s1",
    )
    assert len(extract_keys(source)) == 7
    # err (3.0) > path (2.5) > tool (2.0) > tag:src (1.0) = session (1.0)
    assert extract_keys(source, max_keys=3) == (
        "err:connection_refused",
        "err:timeout",
        "path:/a/x.py",
    )
    assert extract_keys(source, max_keys=6) == (
        "err:connection_refused",
        "err:timeout",
        "path:/a/x.py",
        "path:/b/x.py",
        "session:s1",
        "tool:bash",
    )
    assert extract_keys(source, max_keys=0) == ()
    light_errors = KeyWeights(err=0.1)
    assert extract_keys(source, max_keys=1, weights=light_errors) == ("path:/a/x.py",)
    with pytest.raises(ValueError):
        extract_keys(source, max_keys=-1)


def test_overlong_keys_are_dropped() -> None:
    long_path = "/data/" + "x" * MAX_KEY_LENGTH + ".txt"
    assert extract_keys(KeySource(paths=(long_path, "/ok/y.txt"))) == ("path:/ok/y.txt",)


@pytest.mark.parametrize(
    ("key", "kind", "weight"),
    [
        ("err:timeout", "err", 3.0),
        ("path:/var/log/syslog", "path", 2.5),
        ("url:api.x.com/v1", "url", 2.5),
        ("tool:bash", "tool", 2.0),
        ("tag:ops/deploy", "tag:ops", 2.0),
        ("tag:topic/defi", "tag:topic", 1.7),
        ("chan:general", "chan", 1.3),
        ("tag:src/slack", "tag:src", 1.0),
        ("tag:eth", "tag", 1.0),
        ("tag:team/infra", "tag", 1.0),
        ("regime:volatile", "regime", 1.5),
        ("entity:eth", "entity", 1.5),
        ("run:01J9ZK3", "run", 1.2),
        ("session:s1", "session", 1.0),
    ],
)
def test_key_type_and_default_weight(key: str, kind: str, weight: float) -> None:
    assert key_type(key) == kind
    assert type_weight(key) == weight
    assert type_weight(key, DEFAULT_WEIGHTS) == weight


def test_type_weight_follows_configured_weights() -> None:
    weights = KeyWeights(tag_topic=0.5, tag_other=0.25)
    assert type_weight("tag:topic/defi", weights) == 0.5
    assert type_weight("tag:eth", weights) == 0.25
    assert type_weight("err:oom", weights) == 3.0


@pytest.mark.parametrize("key", ["", "timeout", "err:", "bogus:x", ":x"])
def test_key_type_rejects_untyped_strings(key: str) -> None:
    with pytest.raises(ValueError):
        key_type(key)


def test_commonness_penalty_hand_computed() -> None:
    assert commonness_penalty(0) == 1.0
    assert commonness_penalty(10) == pytest.approx(1.0 / math.sqrt(1.0 + math.log(11)))
    assert commonness_penalty(50_000) == pytest.approx(1.0 / math.sqrt(1.0 + math.log(50_001)))
    penalties = [commonness_penalty(d) for d in (0, 1, 10, 100, 10_000)]
    assert penalties == sorted(penalties, reverse=True)
    with pytest.raises(ValueError):
        commonness_penalty(-1)
