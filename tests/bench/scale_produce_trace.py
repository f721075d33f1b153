#!/usr/bin/env python3
"""The three-node scale stage's produce (Kafka's Java producer, 500,000 x 1 KiB, acks=all,
across N partitions of RF 3 on three fresh Oxbow nodes), traced: the producer's warnings (errors
it retried, batches it expired), each node's metrics every 2 s (GET /metrics: purgatory, Produce
and Fetch request counts, ISR changes), and the nodes' logs kept when the producer saw an error.
Found why some rounds of that stage ran at 3.5-3.9 MB/s instead of 8-9 (docs/benchmarks.md,
"The scale stage's slow rounds").

Usage: tests/bench/scale_produce_trace.py [--rounds R] [--partitions N] [--out DIR]
(the broker is OXBOW_BROKER_BIN, default the release build)
"""

import argparse
import glob
import json
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402

LOG4J = """log4j.rootLogger=WARN, stderr
log4j.appender.stderr=org.apache.log4j.ConsoleAppender
log4j.appender.stderr.Target=System.err
log4j.appender.stderr.layout=org.apache.log4j.PatternLayout
log4j.appender.stderr.layout.ConversionPattern=[%d] %p %m (%c)%n
"""

WANTED = re.compile(r'^(oxbow_broker_purgatory_size|oxbow_broker_isr_(expands|shrinks)_total'
                    r'|oxbow_broker_request_duration_seconds_count\{[^}]*api="(Produce|Fetch)"'
                    r'|oxbow_broker_produced_bytes_total)')


class TracedNodes(bench.Nodes):
    """Nodes with the HTTP listener on (GET /metrics)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.http = {n: bench.free_port() for n in self.ports}

    def conf(self, node: int) -> dict:
        return {**super().conf(node), "oxbow.http.listener": f"127.0.0.1:{self.http[node]}"}


def scrape(port: int) -> dict:
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
    except OSError as e:
        return {"error": str(e)}
    return {k: float(v) for k, v in (l.rsplit(" ", 1) for l in text.splitlines() if WANTED.match(l))}


def one_round(r: int, partitions: int, cp: str, out: Path) -> dict:
    wd = Path(tempfile.mkdtemp(prefix="oxbow-trace-"))
    nodes = TracedNodes("oxbow", wd, cp, 3, voters=3)
    try:
        nodes.start()
        bench.create_partitions_in_steps(nodes, "t", partitions, replicas=3)
        bench.settle_page_cache()
        stop = threading.Event()

        def sample() -> None:
            t0 = time.monotonic()
            with open(out / f"round{r}.metrics.jsonl", "w") as f:
                while not stop.is_set():
                    row = {"t": round(time.monotonic() - t0, 1), **{n: scrape(p) for n, p in nodes.http.items()}}
                    f.write(json.dumps(row) + "\n")
                    stop.wait(2)

        sampler = threading.Thread(target=sample)
        sampler.start()
        log4j = out / "log4j.properties"
        log4j.write_text(LOG4J)
        cmd = bench.java_cmd(cp, "org.apache.kafka.tools.ProducerPerformance",
                             bench.producer_perf_args(nodes.bootstrap(), "t", 500000, 1024, "all", "none"), str(log4j))
        cpu0, _ = nodes.stats()
        t0 = time.monotonic()
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        elapsed = time.monotonic() - t0
        cpu1, _ = nodes.stats()
        stop.set()
        sampler.join()
        (out / f"round{r}.producer.txt").write_text(p.stdout)
        (out / f"round{r}.producer-warnings.txt").write_text(p.stderr)
        errors = dict(sorted({e: p.stderr.count(f"Error: {e}") for e in set(re.findall(r"Error: ([A-Z_]+)", p.stderr))}.items()))
        if errors or "Expiring" in p.stderr:
            keep = out / f"round{r}-logs"
            keep.mkdir(exist_ok=True)
            for f in glob.glob(str(wd / "*.log")):
                shutil.copy(f, keep)
        last = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else ""
        m = re.search(r"^(\d+) records sent, [\d.]+ records/sec \(([\d.]+) MB/sec\)", last)
        return {"round": r, "acknowledged": int(m.group(1)) if m else None, "MB/s": float(m.group(2)) if m else None,
                "elapsed_s": round(elapsed, 1), "broker_cpu_s": round(cpu1 - cpu0, 1),
                "expired_batches": p.stderr.count("Expiring"), "retried_errors": errors}
    finally:
        nodes.stop()
        shutil.rmtree(wd, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--out", default="/tmp/oxbow-scale-trace")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    bench.Oxbow.binary = bench.oxbow_binary(False)
    cp = bench.java_classpath()
    for r in range(args.rounds):
        print(json.dumps(one_round(r, args.partitions, cp, out)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
