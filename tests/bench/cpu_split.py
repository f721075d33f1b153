#!/usr/bin/env python3
"""How the two cores are shared between Kafka's Java producer and the broker during one
ProducerPerformance run (1,500,000 x 1 KiB, acks=all, 16 partitions, linger.ms=5, batch.size=64
KiB: the benchmark's worst Java case), against Oxbow ($OXBOW_BROKER_BIN, or the release build).
Prints the producer's own summary line and the CPU seconds (and cores) each process used.

    OXBOW_BROKER_BIN=target/release/oxbow-broker python3 tests/bench/cpu_split.py
"""

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402

TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    """utime + stime of a live process, or None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return None
    return (int(fields[11]) + int(fields[12])) / TCK


def main():
    cp = bench.java_classpath()
    binary = bench.oxbow_binary(build=False)
    data = tempfile.mkdtemp(prefix="oxbow-cpu-split-")
    port = bench.free_port()
    broker = subprocess.Popen(
        [str(binary), "--override", f"log.dirs={data}", "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
         "--override", "num.partitions=16"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1)
        cmd = bench.java_cmd(cp, "org.apache.kafka.tools.ProducerPerformance",
                             bench.producer_perf_args(f"127.0.0.1:{port}", "split", 1500000, 1024, "all", "none"))
        broker_before = cpu_seconds(broker.pid)
        start = time.time()
        producer = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        producer_cpu = 0.0
        while producer.poll() is None:
            producer_cpu = cpu_seconds(producer.pid) or producer_cpu
            time.sleep(0.1)
        wall = time.time() - start
        broker_cpu = cpu_seconds(broker.pid) - broker_before
        print(producer.stdout.read().strip().splitlines()[-1])
        print(f"wall {wall:.1f} s; producer JVM {producer_cpu:.1f} CPU-s ({producer_cpu / wall:.2f} cores); "
              f"broker {broker_cpu:.1f} CPU-s ({broker_cpu / wall:.2f} cores); {os.cpu_count()} cores")
    finally:
        broker.kill()
        broker.wait()
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
