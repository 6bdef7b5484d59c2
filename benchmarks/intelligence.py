"""Context-intelligence benchmarks: ingest end to end (HTTP → queryable) and example-question latency.

    python -m benchmarks.intelligence            # ~2 minutes: ci-small, ci-large (300 sessions)
    python -m benchmarks.intelligence --quick    # smoke run (seconds)
    python -m benchmarks.intelligence --source conversation   # conversation events instead

What is measured (all on the embedded FalkorDB child, ``IntelligenceService.open``; data layer 1
only unless ``--semantic-layers``):

1. **HTTP batch ingest**: a real uvicorn server (subprocess) with the Litestar router and the
   process setting ``convograph serve`` applies at start-up (its GC thresholds,
   ``SERVE_GC_THRESHOLDS``; ``--server-gc default`` keeps CPython's, as before 2026-11-27); the client
   POSTs NDJSON batches (1,000 envelopes each, 2 connections); the clock stops when
   ``/intelligence/status`` reports an empty backlog, i.e. every event is queryable.
2. **HTTP single-event ingest**: the hook client's shape, one envelope per POST, 8 concurrent
   keep-alive connections (stdlib ``http.client``: the load generator's CPU is not what is
   measured, and httpx's cost ~1 ms per request here; before 2026-11-27 this row used httpx), on
   the first ``--single-events`` events.
3. **In-process ingest**: ``ingest_many`` → ``wait_applied`` without HTTP, in this process with
   CPython's GC thresholds (a library embedding the service, which sets none).
4. **Example questions** (seed 004 and upstream spec §7.4, layer-1 forms): p50/p95 of
   ``IntelligenceService.cypher`` over ``--repeat`` runs on the biggest graph built here. The
   whole-workspace ones are asked twice: as a scan and through the workspace rollups (``Tool``,
   ``Model``, ``ParallelGroup``); each rollup answer is checked against its scan.
5. **Forgetting a session** on that graph (after the questions): the ``forget_session`` call
   (journal rows + tombstones + blobs) and the time until the graph no longer holds the session,
   for the biggest session (layer 1 only: purged in place) and, for the ratio in the same run,
   the second biggest with the applier told to rebuild the workspace instead (replay of the
   workspace's journal); then the in-process ingest of 10,000 more events with tombstones
   present (the append's tombstone check) next to the same count before the forget.
6. **Journal append as the log grows** (``--journal-growth SESSIONS``, run alone): a generated
   workload of SESSIONS root sessions appended to a new SQLite journal in batches of 1,000
   (envelopes parsed beforehand), reporting this thread's CPU per event over the whole run and in
   its first and last tenth: whether an append's cost grows with what the journal holds.

7. **Conversation events** (``--source conversation``, run alone): harness-shaped conversations
   fed as the server's feeder feeds them, through the semantic layers' conversation fold
   (`benchmarks.intelligence_conversations`).

Every ingest row also reports CPU time per event (the figure to compare on a shared machine):
the serving process (the uvicorn server, or this process in process) and the FalkorDB child,
read from ``/proc/<pid>/stat``; the HTTP client's own CPU is not counted.

The upstream pipeline (FastAPI + Neo4j) cannot run on this machine; its figure (about 550 events/s
over HTTP end to end on the same workload) comes from ``../shared/README.md``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks.machine import speed_reference
from convograph.intelligence.envelope import parse_envelope
from convograph.intelligence.journal import SqliteJournal
from convograph.intelligence.service import IntelligenceService

WORKLOADS = Path(__file__).resolve().parents[2] / "shared" / "workloads"
UPSTREAM_HTTP_EVENTS_PER_S = 550.0
TARGET_EVENTS_PER_S = 20_000.0
TARGET_P50_MS = 50.0

SERVER = textwrap.dedent(
    """
    import gc
    import sys
    import uvicorn
    from litestar import Litestar
    from convograph.intelligence.http import create_intelligence_router
    from convograph.intelligence.service import IntelligenceService
    from convograph.server.app import SERVE_GC_THRESHOLDS

    if sys.argv[4] == "serve":  # what `convograph serve` sets at start-up (serve_app)
        gc.set_threshold(*SERVE_GC_THRESHOLDS)
    service = IntelligenceService.open(sys.argv[1], semantic_layers=sys.argv[3] == "1")
    app = Litestar(route_handlers=[create_intelligence_router(service)], on_shutdown=[service.close])
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning", access_log=False)
    """
)

QUESTIONS: list[tuple[str, str]] = [
    (
        "seed: recent sessions",
        "MATCH (s:Session {workspace: $workspace}) RETURN s.node_id, s.started_at "
        "ORDER BY s.started_at DESC LIMIT 10",
    ),
    (
        "Q1 sessions by kind",
        "MATCH (s:Session {workspace: $workspace}) WITH [l IN labels(s) WHERE l IN "
        "['RootSession', 'ForkedSession']] AS kinds RETURN kinds, count(*) AS sessions ORDER BY sessions DESC",
    ),
    (
        "Q4 timeline of a session",
        "MATCH (:Session {workspace: $workspace, node_id: $sid})-[:HAS_EVENT]->(e:Event) "
        "RETURN e.occurred_at AS at, e.event_name AS event ORDER BY at LIMIT 300",
    ),
    (
        "Q5 event histogram",
        "MATCH (:Session {workspace: $workspace, node_id: $sid})-[:HAS_EVENT]->(e:Event) "
        "RETURN e.event_name AS event, count(*) AS n ORDER BY n DESC",
    ),
    (
        "Q6 most used tools",
        "MATCH (t:ToolCall {workspace: $workspace}) RETURN t.tool_name AS tool, count(*) AS calls "
        "ORDER BY calls DESC LIMIT 15",
    ),
    (
        "Q7 slowest tool calls",
        "MATCH (t:ToolCall {workspace: $workspace}) WHERE t.duration_ms IS NOT NULL "
        "RETURN t.tool_name AS tool, t.session_id AS session, t.duration_ms AS ms ORDER BY ms DESC LIMIT 10",
    ),
    (
        "Q8 failed tools of a session",
        "MATCH (t:ToolCall {workspace: $workspace, session_id: $sid}) "
        "WHERE t.result_success = false RETURN t.tool_name, substring(coalesce(t.result_error, ''), 0, 200) AS err, "
        "t.started_at ORDER BY t.started_at LIMIT 50",
    ),
    (
        "seed: flexible tool path",
        "MATCH (s:Session {workspace: $workspace, node_id: $sid})-[:HAS_EVENT]->"
        "(e:ToolEvent) RETURN e.tool_name AS tool, count(*) AS n ORDER BY n DESC",
    ),
    (
        "seed: structured tool path",
        "MATCH (s:Session {workspace: $workspace, node_id: $sid})-[:HAS_TOOL_CALL]->"
        "(tc:ToolCall)-[:HAS_EVENT]->(e:Event) RETURN tc.tool_name, tc.duration_ms, collect(e.event_name) AS events "
        "LIMIT 100",
    ),
    (
        "Q12 LLM calls per model",
        "MATCH (e:LlmResponseEvent {workspace: $workspace}) RETURN e.model AS model, "
        "count(*) AS calls ORDER BY calls DESC",
    ),
    (
        "Q15 fork depth",
        "MATCH path = (root:RootSession {workspace: $workspace})-[:HAS_FORK*1..20]->(:Session) "
        "RETURN max(length(path)) AS deepest, count(path) AS chains",
    ),
    (
        "Q26 parallel fan-outs",
        "MATCH (t:ToolCall {workspace: $workspace}) WHERE t.parallel_group_id IS NOT NULL "
        "RETURN t.parallel_group_id AS grp, count(*) AS width ORDER BY width DESC LIMIT 10",
    ),
    # The same whole-workspace questions through the workspace rollups (docs/querying.md,
    # "Workspace rollups"): same answers, read from Tool / Model / ParallelGroup nodes kept at write time.
    (
        "Q6 most used tools (rollup)",
        "MATCH (s:Tool {workspace: $workspace}) RETURN s.tool_name AS tool, s.calls AS calls "
        "ORDER BY calls DESC LIMIT 15",
    ),
    (
        "Q7 slowest tool calls (rollup)",
        "MATCH (tool:Tool {workspace: $workspace}) WHERE tool.max_duration_ms IS NOT NULL "
        "WITH tool.max_duration_ms AS longest ORDER BY longest DESC LIMIT 10 "
        "WITH collect(longest) AS maxima "
        "WITH CASE WHEN size(maxima) = 10 THEN maxima[9] ELSE 0 END AS threshold "
        "MATCH (t:ToolCall {workspace: $workspace}) WHERE t.duration_ms >= threshold "
        "WITH t ORDER BY t.duration_ms DESC LIMIT 10 "
        "RETURN t.tool_name AS tool, t.session_id AS session, t.duration_ms AS ms",
    ),
    (
        "Q12 LLM calls per model (rollup)",
        "MATCH (m:Model {workspace: $workspace}) RETURN m.model AS model, m.responses AS calls "
        "ORDER BY calls DESC",
    ),
    (
        "Q26 parallel fan-outs (rollup)",
        "MATCH (g:ParallelGroup {workspace: $workspace}) WITH g ORDER BY g.width DESC LIMIT 10 "
        "MATCH (g)-[:HAS_MEMBER]->(t:ToolCall) "
        "RETURN g.parallel_group_id AS grp, g.session_id AS session, g.width AS width, "
        "collect(t.tool_name)[0..8] AS tools ORDER BY width DESC",
    ),
]

ROLLUP_COLUMN = {"Q6": "calls", "Q7": "ms", "Q12": "calls", "Q26": "width"}
"""The column compared between a question's scan and rollup forms (ties may order the other
columns differently)."""

_TICK = os.sysconf("SC_CLK_TCK")


def proc_cpu(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def child_pids(pid: int) -> list[int]:
    """Direct children of ``pid`` (scan of /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                out.append(int(entry))
    return out


class CpuMeter:
    """CPU seconds of a set of processes between `start` and `stop`, per event."""

    def __init__(self, **pids: int) -> None:
        self.pids = pids
        self.before: dict[str, float] = {}
        self.used: dict[str, float] = {}

    def start(self) -> None:
        self.before = {name: proc_cpu(pid) for name, pid in self.pids.items()}

    def stop(self) -> None:
        self.used = {name: proc_cpu(pid) - self.before[name] for name, pid in self.pids.items()}

    def per_event_us(self, events: int) -> dict[str, float]:
        return {f"{name}_cpu_us_per_event": round(used / events * 1e6, 1) for name, used in self.used.items()}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def generate(path: Path, sessions: int, seed: int = 7, workspaces: int = 5) -> list[bytes]:
    subprocess.run(
        [
            sys.executable,
            str(WORKLOADS / "gen_ci_events.py"),
            "--sessions",
            str(sessions),
            "--tools-per-session",
            "24",
            "--seed",
            str(seed),
            "--workspaces",
            str(workspaces),
            "--out",
            str(path),
        ],
        check=True,
        capture_output=True,
        timeout=900,
    )
    return path.read_bytes().splitlines()


class Server:
    """``uvicorn`` subprocess serving the intelligence router on an embedded FalkorDB."""

    def __init__(self, data_dir: Path, semantic_layers: bool = False, gc_settings: str = "serve") -> None:
        self.port = free_port()
        script = data_dir / "server.py"
        script.write_text(SERVER)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(script),
                str(data_dir / "data"),
                str(self.port),
                "1" if semantic_layers else "0",
                gc_settings,
            ],
            cwd=data_dir,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.base = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(self.base + "/intelligence/status", timeout=1)
                return
            except httpx.TransportError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("benchmark server did not start") from None
                time.sleep(0.1)

    def meter(self) -> CpuMeter:
        """CPU meter over the server process and its FalkorDB child."""
        children = child_pids(self.proc.pid)
        if len(children) != 1:
            raise RuntimeError(f"expected one FalkorDB child of the server, found {children}")
        return CpuMeter(server=self.proc.pid, falkordb=children[0])

    def wait_drained(self, client: httpx.Client, expected: int, timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = client.get("/intelligence/status").json()
            if status["applied_seq"] >= expected and status["backlog"] == 0:
                return
            # each poll costs the server ~0.5 ms of CPU: every 10 ms that was ~4 us per event of
            # ci-large in the server's CPU figure; every 50 ms it is <1 (and <=50 ms of wall)
            time.sleep(0.05)
        raise TimeoutError("ingest did not drain")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


def http_batch_ingest(
    lines: list[bytes],
    workdir: Path,
    batch: int = 1000,
    connections: int = 2,
    semantic_layers: bool = False,
    gc_settings: str = "serve",
) -> tuple[float, dict[str, float]]:
    """Events/s from the first POST until the last event is queryable, and CPU per event."""
    server = Server(workdir, semantic_layers, gc_settings)
    try:
        chunks = [b"\n".join(lines[i : i + batch]) for i in range(0, len(lines), batch)]
        headers = {"content-type": "application/x-ndjson"}
        meter = server.meter()
        with httpx.Client(base_url=server.base, timeout=120) as client:
            meter.start()
            start = time.perf_counter()

            def post(body: bytes) -> None:
                response = client.post("/events", content=body, headers=headers)
                response.raise_for_status()

            with concurrent.futures.ThreadPoolExecutor(connections) as pool:
                list(pool.map(post, chunks))
            server.wait_drained(client, len(lines))
            elapsed = time.perf_counter() - start
            meter.stop()
    finally:
        server.stop()
    return len(lines) / elapsed, meter.per_event_us(len(lines))


def http_single_ingest(
    lines: list[bytes],
    workdir: Path,
    clients: int = 8,
    semantic_layers: bool = False,
    gc_settings: str = "serve",
) -> tuple[float, dict[str, float]]:
    """Events/s with one envelope per POST (the hook client's shape), ``clients`` concurrent
    keep-alive connections, until every event is queryable; and the server's CPU per event.

    The load generator is ``http.client`` (stdlib), not httpx: it shares this machine's two cores
    with the server, and httpx's sync client cost ~1 ms of CPU per request here (about twice the
    server's own), which made the client the bottleneck; ``http.client`` costs ~0.2 ms."""
    server = Server(workdir, semantic_layers, gc_settings)
    try:
        per_client = [lines[i::clients] for i in range(clients)]
        headers = {"content-type": "application/json"}
        meter = server.meter()
        meter.start()
        start = time.perf_counter()

        def run(share: list[bytes]) -> None:
            connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
            try:
                for body in share:
                    connection.request("POST", "/events", body=body, headers=headers)
                    response = connection.getresponse()
                    reply = response.read()
                    if response.status != 202:
                        raise RuntimeError(f"POST /events: {response.status} {reply[:200]!r}")
            finally:
                connection.close()

        with concurrent.futures.ThreadPoolExecutor(clients) as pool:
            list(pool.map(run, per_client))
        with httpx.Client(base_url=server.base, timeout=60) as client:
            server.wait_drained(client, len(lines))
        elapsed = time.perf_counter() - start
        meter.stop()
    finally:
        server.stop()
    return len(lines) / elapsed, meter.per_event_us(len(lines))


def in_process_ingest(
    lines: list[bytes], data_dir: Path, semantic_layers: bool = False
) -> tuple[float, dict[str, float], IntelligenceService]:
    service = IntelligenceService.open(data_dir, semantic_layers=semantic_layers)
    child = service.embedded.pid if service.embedded is not None else None
    if child is None:
        raise RuntimeError("the in-process benchmark needs the embedded FalkorDB child")
    meter = CpuMeter(process=os.getpid(), falkordb=child)
    meter.start()
    start = time.perf_counter()
    for i in range(0, len(lines), 2000):
        service.ingest_many(lines[i : i + 2000])
    if not service.wait_applied(timeout=1200):
        raise TimeoutError("in-process ingest did not drain")
    rate = len(lines) / (time.perf_counter() - start)
    meter.stop()
    return rate, meter.per_event_us(len(lines)), service


def question_latencies(
    service: IntelligenceService, repeat: int, results: dict[str, Any]
) -> list[dict[str, Any]]:
    sizes = service.cypher(
        "MATCH (s:Session) RETURN s.workspace AS ws, count(*) AS n",
        workspace="*",  # every workspace
    ).results
    workspace = max(sizes, key=lambda r: r["n"])["ws"]
    results["queried_workspace_events"] = service.cypher(
        "MATCH (e:Event) RETURN count(e) AS n", workspace=workspace
    ).results[0]["n"]
    busiest = service.cypher(
        "MATCH (s:RootSession {workspace: $workspace})-[:HAS_TOOL_CALL]->(t:ToolCall) "
        "RETURN s.node_id AS sid, count(t) AS n ORDER BY n DESC LIMIT 1",
        workspace=workspace,
    ).results[0]["sid"]
    out = []
    answers: dict[str, list[dict[str, Any]]] = {}
    for name, query in QUESTIONS:
        params = {"sid": busiest} if "$sid" in query else None
        service.cypher(query, params, workspace=workspace)  # warm the plan cache
        samples = []
        for _ in range(repeat):
            start = time.perf_counter()
            result = service.cypher(query, params, workspace=workspace)
            samples.append((time.perf_counter() - start) * 1000)
        samples.sort()
        answers[name] = result.results
        row: dict[str, Any] = {
            "question": name,
            "p50_ms": round(statistics.median(samples), 2),
            "p95_ms": round(samples[min(len(samples) - 1, int(len(samples) * 0.95))], 2),
            "rows": len(result.results),
        }
        if name.endswith(" (rollup)"):  # the rollup form must give the scan's answer
            column = ROLLUP_COLUMN[name.split()[0]]
            scanned = answers[name.removesuffix(" (rollup)")]
            row["same_answer_as_scan"] = sorted(r[column] for r in result.results) == sorted(
                r[column] for r in scanned
            )
        out.append(row)
    return out


def forget_cost(service: IntelligenceService, extra: list[bytes], results: dict[str, Any]) -> None:
    """Forget the biggest session of the biggest workspace; time the call, the rebuild, and the
    ingest of ``extra`` (split in two halves: before the forget, then with tombstones present)."""
    half = len(extra) // 2

    def ingest_rate(lines: list[bytes]) -> float:
        start = time.perf_counter()
        for i in range(0, len(lines), 2000):
            service.ingest_many(lines[i : i + 2000])
        if not service.wait_applied(timeout=600):
            raise TimeoutError("ingest did not drain")
        return len(lines) / (time.perf_counter() - start)

    results["forget_ingest_before_events_per_s"] = round(ingest_rate(extra[:half]))
    biggest = service.cypher(
        "MATCH (s:Session)-[:HAS_EVENT]->(e) "  # every workspace
        "RETURN s.workspace AS ws, s.node_id AS sid, count(e) AS n ORDER BY n DESC LIMIT 2",
        workspace="*",
    ).results
    # the biggest session as the service does it (layer 1 only: in place), the next one with the
    # applier told to rebuild the workspace, for the ratio in one run
    for key, row, in_place in (("forget", biggest[0], True), ("forget_rebuilt", biggest[1], False)):
        workspace_events = service.cypher("MATCH (e:Event) RETURN count(e) AS n", workspace=row["ws"]).results
        service.applier.purge_in_place = in_place
        start = time.perf_counter()
        result = service.forget_session(row["ws"], row["sid"])
        call = time.perf_counter() - start
        if not service.wait_rebuilt(timeout=1200):
            raise TimeoutError("the forget was not applied to the graph")
        rebuild = time.perf_counter() - start
        results[key] = {
            "session_events": result.events,
            "workspace_events": workspace_events[0]["n"],
            "call_ms": round(call * 1000, 1),
            "graph_s": round(rebuild, 3),
            "in_place": in_place and service.applier.purges_done > 0,
        }
    service.applier.purge_in_place = True
    results["forget_ingest_after_events_per_s"] = round(ingest_rate(extra[half:]))


def journal_growth(root: Path, sessions: int, batch: int = 1000) -> dict[str, Any]:
    """CPU µs per event of `SqliteJournal.append` over a growing journal (see item 6 above)."""
    lines = generate(root / "growth.ndjson", sessions)
    batches = [[parse_envelope(line) for line in lines[i : i + batch]] for i in range(0, len(lines), batch)]
    del lines
    journal = SqliteJournal(root / "growth.sqlite3")
    costs = []
    try:
        for envelopes in batches:
            start = time.thread_time()
            journal.append(envelopes)
            costs.append((time.thread_time() - start) / len(envelopes) * 1e6)
    finally:
        journal.close()
    tenth = max(1, len(costs) // 10)
    return {
        "events": sum(map(len, batches)),
        "us_per_event": round(statistics.mean(costs), 2),
        "first_tenth_us": round(statistics.mean(costs[:tenth]), 2),
        "last_tenth_us": round(statistics.mean(costs[-tenth:]), 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: small workloads, few repeats")
    parser.add_argument("--sessions", type=int, default=300, help="root sessions of the generated ci-large")
    parser.add_argument("--single-events", type=int, default=5000, help="events for the one-per-POST run")
    parser.add_argument(
        "--query-sessions",
        type=int,
        default=None,
        help="root sessions of a separate, bigger workload for the in-process ingest and the questions",
    )
    parser.add_argument("--repeat", type=int, default=30, help="runs per question")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument(
        "--skip-http", action="store_true", help="only the in-process ingest and the questions"
    )
    parser.add_argument(
        "--semantic-layers",
        action="store_true",
        help="also build layers 2/3 (default: layer 1 only, issue 7)",
    )
    parser.add_argument(
        "--server-gc",
        choices=("serve", "default"),
        default="serve",
        help="GC thresholds of the HTTP server: what `convograph serve` sets (default) or CPython's",
    )
    parser.add_argument(
        "--journal-growth",
        type=int,
        metavar="SESSIONS",
        help="only measure the journal append as the log grows, on a workload of SESSIONS root sessions",
    )
    parser.add_argument(
        "--source",
        choices=("hook", "conversation"),
        default="hook",
        help="hook events (the runs above) or conversation events (benchmarks.intelligence_conversations)",
    )
    parser.add_argument(
        "--conversations", type=int, default=400, help="conversations of --source conversation"
    )
    args = parser.parse_args(argv)
    if args.source == "conversation":
        from benchmarks.intelligence_conversations import report, run

        found = run(40 if args.quick else args.conversations)
        print(json.dumps(found, indent=1) if args.json else report(found))
        return 0
    if args.journal_growth:
        with tempfile.TemporaryDirectory(prefix="cg-bench-journal-") as tmp:
            growth = journal_growth(Path(tmp), args.journal_growth)
        print(
            f"journal append, {growth['events']:,} events in batches of 1,000 (load average "
            f"{os.getloadavg()[0]:.2f}): {growth['us_per_event']} us of CPU per event; first tenth "
            f"{growth['first_tenth_us']}, last tenth {growth['last_tenth_us']}"
        )
        return 0
    if args.quick:
        args.sessions, args.single_events, args.repeat = 20, 500, 5
    results: dict[str, Any] = {
        "machine": f"{os.cpu_count()} cores (shared)",
        "speed_reference_ms": round(speed_reference(), 1),
        "semantic_layers": args.semantic_layers,
        "server_gc": args.server_gc,
        "load_average_start": round(os.getloadavg()[0], 2),
    }
    with tempfile.TemporaryDirectory(prefix="cg-bench-ci-") as tmp:
        root = Path(tmp)
        small = (WORKLOADS / "ci-small.ndjson").read_bytes().splitlines()
        large = generate(root / "ci-large.ndjson", args.sessions)
        results["workloads"] = {"ci-small": len(small), f"ci-large({args.sessions} sessions)": len(large)}
        if not args.skip_http:
            for name, lines in (("ci-small", small), ("ci-large", large)):
                workdir = root / f"http-{name}"
                workdir.mkdir()
                rate, cpu = http_batch_ingest(
                    lines, workdir, semantic_layers=args.semantic_layers, gc_settings=args.server_gc
                )
                results[f"http_batch_{name}_events_per_s"] = round(rate)
                results[f"http_batch_{name}_cpu"] = cpu
            single = large[: args.single_events]
            workdir = root / "http-single"
            workdir.mkdir()
            results["http_single_events"] = len(single)
            rate, cpu = http_single_ingest(
                single, workdir, semantic_layers=args.semantic_layers, gc_settings=args.server_gc
            )
            results["http_single_events_per_s"] = round(rate)
            results["http_single_cpu"] = cpu
        query_lines = large
        if args.query_sessions:
            # one workspace: the questions then run on a single graph holding every event
            query_lines = generate(root / "ci-query.ndjson", args.query_sessions, seed=11, workspaces=1)
        rate, cpu, service = in_process_ingest(query_lines, root / "inproc", args.semantic_layers)
        results["in_process_ci-large_events_per_s"] = round(rate)
        results["in_process_ci-large_cpu"] = cpu
        results["in_process_events"] = len(query_lines)
        try:
            counts = service.cypher("MATCH (n) RETURN count(n) AS n", workspace="*").results
            edges = service.cypher("MATCH ()-[r]->() RETURN count(r) AS n", workspace="*").results
            results["query_graph"] = {
                "events": len(query_lines),
                "nodes": sum(r["n"] for r in counts),
                "edges": sum(r["n"] for r in edges),
            }
            results["questions"] = question_latencies(service, args.repeat, results)
            extra = generate(root / "ci-extra.ndjson", max(2, args.sessions // 12), seed=23, workspaces=1)
            forget_cost(service, extra[:10_000], results)
        finally:
            service.close()
    results["load_average_end"] = round(os.getloadavg()[0], 2)
    if args.json:
        print(json.dumps(results, indent=1))
        return 0
    print(
        f"machine: {results['machine']}, speed reference {results['speed_reference_ms']} ms "
        f"(benchmarks/machine.py); workloads: {results['workloads']}; HTTP server GC "
        f"{results['server_gc']}; load average "
        f"{results['load_average_start']} -> {results['load_average_end']}"
    )
    for key in (
        "http_batch_ci-small_events_per_s",
        "http_batch_ci-large_events_per_s",
        "http_single_events_per_s",
        "in_process_ci-large_events_per_s",
    ):
        if key not in results:
            continue
        rate = results[key]
        cpu = results.get(key.replace("_events_per_s", "_cpu"), {})
        cpu_text = "  ".join(f"{name.split('_')[0]} {value:5.1f}" for name, value in cpu.items())
        print(
            f"{key:36s} {rate:>8,} ev/s  target ratio {rate / TARGET_EVENTS_PER_S:5.2f}  "
            f"vs upstream {rate / UPSTREAM_HTTP_EVENTS_PER_S:6.1f}x"
            + (f"  CPU us/event: {cpu_text}" if cpu_text else "")
        )
    print(
        f"query graph: {results['query_graph']}; events in the queried workspace graph: "
        f"{results['queried_workspace_events']:,}"
    )
    for q in results["questions"]:
        print(
            f"  {q['question']:32s} p50 {q['p50_ms']:7.2f} ms  p95 {q['p95_ms']:7.2f} ms  rows {q['rows']:4d}  "
            f"target ratio {TARGET_P50_MS / max(q['p50_ms'], 1e-6):6.1f}x"
            + (
                ""
                if "same_answer_as_scan" not in q
                else f"  same answer as the scan: {q['same_answer_as_scan']}"
            )
        )
    for key in ("forget", "forget_rebuilt"):
        forget = results[key]
        print(
            f"forget a session of {forget['session_events']:,} events in a workspace of "
            f"{forget['workspace_events']:,}: call {forget['call_ms']} ms, out of the graph after "
            f"{forget['graph_s']} s ({'in place' if forget['in_place'] else 'workspace rebuilt'})"
        )
    print(
        f"in-process ingest {results['forget_ingest_before_events_per_s']:,} ev/s before the forgets, "
        f"{results['forget_ingest_after_events_per_s']:,} ev/s with tombstones"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
