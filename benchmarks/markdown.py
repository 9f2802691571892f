"""RESULTS.md: the machine, the table, how each figure was taken, each library's setup."""

from __future__ import annotations

from typing import Any

from benchmarks import report, targets

METHOD = """\
- **enqueue 1-by-1**: {jobs:,} no-op jobs, one library call each, from one process (sync
  API for sync libraries and lockgate's sync facade, `await` for asyncio ones; BullMQ's
  `await queue.add` in a Node producer started and connected before the clock starts, which
  the measuring process drives through a pipe, one command per measurement or critical job).
- **bulk enqueue**: the same jobs through the library's bulk API; † marks a library
  without one, measured with the stand-in named under its configuration below.
- **drain**: {jobs:,} no-op jobs queued first, then one worker process started; jobs/s
  from the first job's start to the last one's end (worker start-up excluded). Jobs count
  themselves in batches (one `INCRBY` per 100 jobs), so counting costs no round trip per job.
- **critical p50 / p99**: {latency_jobs:,} low jobs (1 ms each) queued, one worker busy
  with them, then {critical} critical jobs sent 5 ms apart; the wait from the enqueue call
  to the task's first line. **low jobs/s meanwhile** says whether low jobs still progress
  while critical ones arrive (libraries without priorities serve everything FIFO: their
  critical jobs wait behind the backlog).
- **worker peak RSS**: the high-water mark of resident memory (`VmHWM`) of the worker's
  process tree, at the end of a drain.
- **Redis MB**: `used_memory` of a server holding nothing else: empty, with
  {memory_jobs:,} jobs queued, and 0.5 s after a worker drained them (one run). What
  stays after the drain is what each library keeps by default: results or job records
  (rq, arq, saq, streaq), acked entries of an untrimmed stream (taskiq), the events
  stream capped at about 10,000 entries (BullMQ), idempotency done markers for 24 h
  (lockgate); the configuration notes below say which and how long.
- Each figure is the median of {runs} runs; (n%) is its share of the ceiling measured on
  the same server: bare redis-py XADD one by one, XADD pipelined 500 at a time, and
  XREADGROUP COUNT 100 + XACK, each from one process.
"""


def _machine(results: dict[str, Any]) -> str:
    m, redis = results["machine"], results["redis"]
    return "\n".join([
        "| | |", "|---|---|",
        f"| date | {m['date']} |",
        f"| CPU | {m['cpu']}, {m['nproc']} cores (nproc) |",
        f"| RAM | {m['memory_gib']} GiB |",
        f"| load average at start | {' / '.join(str(x) for x in m['load_average'])} |",
        f"| OS, Python | {m['os']}, Python {m['python']} |",
        f"| Redis | {redis['version']}, {redis['server']} |",
        f"| lockgate | {m['lockgate']} (from src/) |",
        f"| wall time | {results.get('elapsed_seconds', '?')} s |",
    ])  # fmt: skip


def _library(name: str, entry: dict[str, Any]) -> str:
    if "error" in entry:
        return f"### {name}\n\nNot measured: {entry['error']}\n"
    profile = entry.get("profile") or {}
    lines = [f"### {name} {entry.get('version') or ''}", ""]
    for key in ("worker", "concurrency", "config", "bulk", "priorities", "delivery"):
        if key in profile:
            lines.append(f"- {key}: {profile[key]}")
    for measure, error in (entry.get("errors") or {}).items():
        lines.append(f"- **{measure} failed**: {error}")
    return "\n".join(lines) + "\n"


def _ceiling(results: dict[str, Any]) -> str:
    ceiling = results.get("ceiling", {})
    median = ceiling.get("median")
    if not median:
        return f"Not measured: {ceiling.get('error', 'unknown')}\n"
    lines = [f"redis-py {ceiling.get('redis_py')} with hiredis, one process:", ""]
    lines.append(f"- XADD one by one: {median['xadd_one']:,.0f}/s")
    lines.append(f"- XADD pipelined (500 per round trip): {median['xadd_pipelined']:,.0f}/s")
    lines.append(f"- XREADGROUP COUNT 100 + XACK: {median['xreadgroup_xack']:,.0f}/s")
    if median.get("redis_benchmark_c1"):
        n = int(median["redis_benchmark_n"])
        lines.append(f"- `redis-benchmark -n {n} -c 1 XADD key '*' f v`: "
                     f"{median['redis_benchmark_c1']:,.0f}/s")  # fmt: skip
        lines.append(f"- `redis-benchmark -n {n} -c 50 XADD key '*' f v`: "
                     f"{median['redis_benchmark_c50']:,.0f}/s")  # fmt: skip
    else:
        lines.append("- redis-benchmark: not installed")
    return "\n".join(lines) + "\n"


READING = """\
- Libraries without priorities in one worker (arq, saq, taskiq) serve critical jobs
  after the whole low backlog: their critical wait is the time to drain it.
- RQ runs one job at a time per worker process: its low jobs/s meanwhile is its whole
  throughput with 1 ms jobs; more RQ workers would scale it, one process is measured.
- BullMQ is the one Node.js library: its worker is one process whose single event loop
  runs 100 jobs at once; the other libraries' workers are Python processes.
- Drain figures are a small share of the bare XREADGROUP+XACK loop: that loop does no
  decoding, dispatch, bookkeeping or acknowledgement work beyond the two commands.
"""
VARIANTS = """\
The headline lockgate setup (idempotent tasks, streams backend, one worker process at
the adapter's concurrency) with one setting changed at a time, through the environment
`benchmarks/peers/lockgate.py` reads. Every variant's worker counts its **client round
trips**: each redis-py `send_packed_command` (one per command, one per whole pipeline,
health-check PINGs included; the probe's own connection left out), from each worker
process's first job (start-up excluded) to the N-th job's end, divided by N. Redis
`INFO commandstats` cannot be used: it counts the commands scripts run. The counter is
checked first (`python -m benchmarks.roundtrips`: {counter}).

- **drain**: as above, {jobs:,} jobs, median of {variant_runs} run(s) per variant, with
  counting on (so `lockgate` here may differ a little from the headline row). **% of
  plain**: against the plain variant at the same concurrency; **x fastest peer**: against
  the fastest other library's drain in this run. **Redis B/job left**: (`used_memory`
  0.5 s after the drain minus empty) / N, which for idempotent tasks is the done markers.
  With two processes, each reports its jobs every 5 ms (batches cannot span processes).
- **critical latency sweep**: one run per row, {sweep_critical:,} critical jobs 5 ms apart
  while a worker at that concurrency works through a low backlog large enough that about
  {latency_jobs:,} low jobs still wait when the last one is sent (**low jobs left**: the
  backlog at the end); idempotent tasks.
- **enqueue**: the headline row's rates against the bare redis-py loops of the same run.
"""


def _variants(results: dict[str, Any]) -> str:
    found = results.get("lockgate_variants")
    if not found:
        return ""
    check = found.get("counter_check") or {}
    counter = "holds" if check.get("ok") else f"FAILED, {check.get('error', 'see the log')}"
    settings = {**results["settings"], "variant_runs": found.get("variant_runs", "?")}
    parts = ["## lockgate variants", "", VARIANTS.format(counter=counter, **settings)]
    for title, headers, body in targets.sections(results):
        parts += [f"### {title}", "", report.markdown_rows(headers, body), ""]
    failures = [f"- **{failed} failed**: {error}" for failed, error in targets.errors(results)]
    parts += [*failures, *([""] if failures else []), "### Targets", ""]
    parts += [f"- {line}" for line in targets.target_lines(results)]
    return "\n".join([*parts, ""])


FULL = {"jobs": 20_000, "latency_jobs": 20_000, "memory_jobs": 100_000, "runs": 3}


def _scope(settings: dict[str, Any]) -> str:
    if settings["smoke"]:
        return ("Smoke mode: lockgate only, a few hundred jobs (2,000 for the round-trip "
                "check), to check the harness works.\n")  # fmt: skip
    if all(settings[key] == value for key, value in FULL.items()):
        return ""
    return (
        "A smaller run than the full one (20,000 jobs, 20,000 low jobs, 100,000 for memory, "
        "3 runs), which `make bench` does.\n"
    )


def render(results: dict[str, Any], table: str) -> str:
    """The whole of RESULTS.md."""
    settings = results["settings"]
    smoke = " (smoke mode: lockgate only, tiny N; not a benchmark)" if settings["smoke"] else ""
    chart = results.get("chart", "")
    picture = "![throughput and latency](results.png)" if chart.startswith("chart:") else chart
    parts = [
        f"# Benchmark results{smoke}",
        "",
        f"`{settings['command']}` — rerun everything with `make bench` (about 30 minutes "
        "on 2 cores) or see `python -m benchmarks --help` for smaller runs. Raw runs are in "
        "`results.json`.",
        "",
        _scope(settings),
        "## Machine",
        "",
        _machine(results),
        "",
        "All processes (producer, worker, Redis) share the machine's cores; other work may",
        "have run at the same time (see the load average).",
        "",
        "## Results",
        "",
        table,
        "",
        picture,
        "",
        READING,
        _variants(results),
        "## How each figure is measured",
        "",
        METHOD.format(**settings),
        "## Libraries and their configuration",
        "",
        *(_library(name, entry) for name, entry in results["peers"].items()),
        "## Ceiling",
        "",
        _ceiling(results),
    ]
    return "\n".join(parts)
