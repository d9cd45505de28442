"""The inspector says where a clade copy came from: "shared by <agent> (memory
<id>)", from the memory route's `origin` or, failing that, the copy's source event
id `clade:<agent>/<memory id>` (the agent id may hold `/`). The parsing runs in
Node (Debian's `nodejs`, which this machine and CI have: a missing one fails the
test rather than skipping it)."""

from __future__ import annotations

import json
import shutil
import subprocess

from tests.support.paths import ROOT

STATIC = ROOT / "infra" / "http" / "static"


def test_the_page_has_a_place_for_the_origin() -> None:
    page = (STATIC / "inspector.html").read_text(encoding="utf-8")
    assert 'id="memory-origin"' in page and 'data-testid="memory-origin"' in page
    script = (STATIC / "inspector.js").read_text(encoding="utf-8")
    assert "shared by ${origin.agent_id} (memory ${origin.memory_id})" in script


CASES = [
    ({"provenance": "clade", "source_event_id": "clade:fleet/golem-2/m-1"},
     {"agent_id": "fleet/golem-2", "memory_id": "m-1"}),
    ({"provenance": "clade", "origin": {"agent_id": "a", "memory_id": "b"},
      "source_event_id": "clade:x/y"}, {"agent_id": "a", "memory_id": "b"}),
    ({"provenance": "self", "source_event_id": "clade:a/b"}, None),
    ({"provenance": "clade", "source_event_id": "clade:a/"}, None),
    ({"provenance": "clade", "source_event_id": "clade:/m"}, None),
    ({"provenance": "clade", "source_event_id": "e-1"}, None),
    ({"provenance": "clade"}, None),
]  # fmt: skip


def test_the_script_reads_a_copy_s_origin() -> None:
    script = (STATIC / "inspector.js").read_text(encoding="utf-8")
    start = script.index("  const CLADE_SOURCE")
    end = script.index("  // ---- the API")
    program = (
        "const cladeOrigin = new Function(process.argv[1] + '; return cladeOrigin;')();\n"
        "const cases = JSON.parse(process.argv[2]);\n"
        "console.log(JSON.stringify(cases.map((memory) => cladeOrigin(memory))));\n"
    )
    node = shutil.which("node")
    assert node is not None, "the inspector's script test needs Node (apt-get install nodejs)"
    done = subprocess.run(
        [node, "-e", program, script[start:end], json.dumps([memory for memory, _ in CASES])],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert json.loads(done.stdout) == [wanted for _, wanted in CASES]
