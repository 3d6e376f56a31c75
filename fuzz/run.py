"""Random-mutation fuzz run of the decoder and the log-info reader (see README "Bad input").

    PYTHONPATH=$PWD nice -n 19 .venv/bin/python -m fuzz.run --inputs 1000000 --out fuzz-out

A worker process decodes input after input (``fuzz/mutate.make_input``: input ``i`` of seed ``s`` is
always the same bytes) through every decode path (``fuzz/targets.decode_bytes``); one input in ten is
a mutated GetReplicaLogInfo JSON document for ``read_log_info``.  The parent watches it:

* an exception from a decode path is a crash: the input goes to ``OUT/crashes/<i>.bin`` (or ``.json``)
  with its traceback in ``<i>.txt``;
* an input taking more than ``--hang-seconds`` (1 s) of CPU time is a hang: saved to ``OUT/hangs/``; one
  still running after ``--kill-seconds`` of wall time is killed, saved, and the worker restarts after
  it (more than 1 s of wall time but not of CPU -- the run is nice'd, other work takes the CPU -- is
  listed as ``slow_wall`` in ``events.jsonl``, not counted);
* a worker that dies (a signal, memory beyond ``--mem-gb``: the data segment limit makes a huge
  allocation a MemoryError) is a crash of the input it was on.

At the end (and every 5000 inputs in ``OUT/progress.jsonl``): inputs, minutes, inputs/s, crashes,
hangs, peak RSS of the workers.  Saved inputs become regression tests by copying them to
``tests/reliability/corpus/`` (``tests/reliability/test_fuzz_corpus.py`` decodes every file there).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path


def _is_json(i: int) -> bool:
    return i % 10 == 9


def _input(corpus, seed: int, i: int) -> bytes:
    from fuzz import mutate

    return mutate.make_json_input(seed, i) if _is_json(i) else mutate.make_input(corpus, seed, i)


def _save(out: Path, kind: str, i: int, data: bytes, text: str = "") -> None:
    d = out / kind
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{i}.{'json' if _is_json(i) else 'bin'}").write_bytes(data)
    if text:
        (d / f"{i}.txt").write_text(text)


def worker(args) -> int:
    lim = int(args.mem_gb * (1 << 30))
    resource.setrlimit(resource.RLIMIT_DATA, (lim, lim))
    from fuzz import mutate, targets

    corpus = mutate.load_corpus()
    out = Path(args.out)
    warm = tempfile.mkdtemp(prefix="fuzz-warm-", dir=args.tmp)  # compile / load numba's cache first
    targets.decode_bytes(corpus[0][:20000], warm)
    shutil.rmtree(warm, ignore_errors=True)
    work = tempfile.mkdtemp(prefix="fuzz-", dir=args.tmp)
    fd = os.open(out / "current", os.O_WRONLY | os.O_CREAT, 0o644)
    slow = 0
    try:
        for i in range(args.start, args.stop):
            os.pwrite(fd, f"{i:>12}".encode(), 0)
            data = _input(corpus, args.seed, i)
            t0, c0 = time.perf_counter(), time.process_time()
            try:
                if _is_json(i):
                    targets.read_log_info_bytes(data, work)
                else:
                    targets.decode_bytes(data, work)
            except Exception:  # noqa: BLE001 - every exception is a finding
                tb = traceback.format_exc()
                _save(out, "crashes", i, data, tb)
                with open(out / "events.jsonl", "a") as fh:
                    last = tb.strip().splitlines()
                    fh.write(json.dumps({"kind": "crash", "input": i, "error": last[-1][:300],
                                         "site": [ln.strip() for ln in last if ln.strip().startswith("File")][-1:]})
                             + "\n")
            cpu, wall = time.process_time() - c0, time.perf_counter() - t0
            if cpu > args.hang_seconds:
                slow += 1
                _save(out, "hangs", i, data, f"{cpu:.2f} s CPU, {wall:.2f} s wall\n")
                with open(out / "events.jsonl", "a") as fh:
                    fh.write(json.dumps({"kind": "hang", "input": i, "cpu_seconds": round(cpu, 2),
                                         "wall_seconds": round(wall, 2)}) + "\n")
            elif wall > args.hang_seconds:  # CPU taken by other processes (the run is nice'd): noted apart
                with open(out / "events.jsonl", "a") as fh:
                    fh.write(json.dumps({"kind": "slow_wall", "input": i, "cpu_seconds": round(cpu, 2),
                                         "wall_seconds": round(wall, 2)}) + "\n")
        os.pwrite(fd, f"{args.stop:>12}".encode(), 0)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def parent(args) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "current").write_text(f"{args.start:>12}")
    t_start = time.time()
    i = args.start
    killed = died = 0
    last_report = i
    from fuzz import mutate

    corpus = None
    while i < args.stop:
        stop = min(args.stop, i + args.restart_every)
        cmd = [sys.executable, "-m", "fuzz.run", "--worker", "--seed", str(args.seed), "--start", str(i),
               "--stop", str(stop), "--out", str(out), "--hang-seconds", str(args.hang_seconds),
               "--mem-gb", str(args.mem_gb)] + (["--tmp", args.tmp] if args.tmp else [])
        (out / "current").write_text(f"{-1:>12}")  # warming up: loading numba's cache is not an input's time
        proc = subprocess.Popen(cmd)
        cur, since = -1, time.time()
        while True:
            try:
                rc = proc.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                pass
            now_i = int((out / "current").read_text() or -1)
            if now_i != cur:
                cur, since = now_i, time.time()
            elif time.time() - since > (args.kill_seconds if cur >= 0 else 600):
                proc.kill()
                proc.wait()
                rc = None
                break
            if cur - last_report >= 5000:
                last_report = cur
                _progress(out, args, cur, t_start, killed, died)
        cur = max(i, int((out / "current").read_text() or -1))
        if rc == 0 and cur >= stop:
            i = stop
            continue
        corpus = corpus or mutate.load_corpus()
        data = _input(corpus, args.seed, cur)
        if rc is None:
            killed += 1
            _save(out, "hangs", cur, data, f"killed after {args.kill_seconds} s\n")
            kind = "killed"
        else:
            died += 1
            _save(out, "crashes", cur, data, f"worker died, exit status {rc}\n")
            kind = "died"
        with open(out / "events.jsonl", "a") as fh:
            fh.write(json.dumps({"kind": kind, "input": cur, "rc": rc}) + "\n")
        i = cur + 1
    return _progress(out, args, args.stop, t_start, killed, died, final=True)


def _progress(out: Path, args, reached: int, t_start: float, killed: int, died: int, final: bool = False) -> int:
    events = []
    if (out / "events.jsonl").exists():
        events = [json.loads(x) for x in (out / "events.jsonl").read_text().splitlines() if x.strip()]
    done = reached - args.start
    minutes = (time.time() - t_start) / 60
    rep = {"inputs": done, "minutes": round(minutes, 1), "inputs_per_s": round(done / max(minutes * 60, 1e-9), 1),
           "crashes": sum(e["kind"] in ("crash", "died") for e in events),
           "crash_sites": sorted({" ".join(e.get("site", [])) + " " + e.get("error", "") for e in events
                                  if e["kind"] == "crash"}),
           "hangs_over_1s": sum(e["kind"] in ("hang", "killed") for e in events), "killed": killed, "died": died,
           "slow_wall_only": sum(e["kind"] == "slow_wall" for e in events),
           "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1), "final": final}
    with open(out / "progress.jsonl", "a") as fh:
        fh.write(json.dumps(rep) + "\n")
    if final:
        print(json.dumps(rep, indent=1))
    return 1 if (rep["crashes"] or rep["hangs_over_1s"]) else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fuzz.run", description=__doc__.split("\n\n")[0])
    ap.add_argument("--inputs", type=int, default=100_000, help="how many inputs (default 100000)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--start", type=int, default=0, help="first input number (to resume or replay one)")
    ap.add_argument("--out", default="fuzz-out", help="findings and progress (default ./fuzz-out)")
    ap.add_argument("--hang-seconds", type=float, default=1.0)
    ap.add_argument("--kill-seconds", type=float, default=20.0)
    ap.add_argument("--mem-gb", type=float, default=4.0, help="data segment limit of the worker (default 4)")
    ap.add_argument("--restart-every", type=int, default=200_000, help="a fresh worker every N inputs")
    ap.add_argument("--tmp", default=None, help="where the worker writes its input file (default: $TMPDIR)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--stop", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.stop is None:
        args.stop = args.start + args.inputs
    if args.worker:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        return worker(args)
    return parent(args)


if __name__ == "__main__":
    sys.exit(main())
