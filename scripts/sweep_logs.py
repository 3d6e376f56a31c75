"""Every Spark-free command over every metadata log under a folder: the check to run on a pile of real logs.

    python scripts/sweep_logs.py ROOT [--jsonl OUT] [--timeout SECONDS]

Finds each ``__cluster_metadata-0`` folder under ROOT (data directories copied from real clusters, a node's
volume each) and runs ``decode --summary``, ``verify --json``, ``describe --json`` and ``audit --log-dir --json``
on it in fresh processes, as a user would.  Real Kafka wrote these logs, so anything but the following is a
defect of this program, printed and counted:

* an exit code outside the contract (0, 1, 2), a Python traceback, or a command that hangs;
* a divergence: the controller's decision recomputed differently from what the log records (unless offsets are
  missing from the folder -- ``verify``'s ``missingOffsets``: a segment emptied or deleted in the copy --, when the
  state after the gap is not what Kafka had: printed, not counted);
* a decode error other than an empty file (a freshly rolled segment, or a file a copy lost);
* a snapshot that is not what the segments replay to: for each of the newest ``--snapshots`` (2) ``.checkpoint``
  files of a folder whose segments start at offset 0, ``describe --json`` (partitions) and ``describe --brokers
  --json`` of the segments alone at the snapshot's end offset - 1 equal those of the snapshot alone (Kafka
  wrote the snapshot from its own replay of the same records); a snapshot past the segments' last record (Kafka
  starts such a log from it: ``replay.kafka_start``) has nothing to be compared with and is counted apart.

An exit 2 of a folder with nothing decodable is fine (one line naming the file).  Also printed per folder: bytes,
records, exit codes, the invariant findings per rule and severity, and seconds per command.  Exit 1 when anything
above was found, 0 otherwise.  ``--jsonl``: one JSON line per folder with every command's result.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DIVERGENCES = "divergences"  # verify --json's list (a JSON key)
COMMANDS = {"summary": ["decode", "--summary"], "verify": ["verify", "--json", "--log-dir"],
            "describe": ["describe", "--json", "--log-dir"], "audit": ["audit", "--json", "--log-dir"]}


def run(argv: list[str], timeout: float) -> dict:
    t0 = time.perf_counter()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    try:
        p = subprocess.run([sys.executable, "-m", "jobs.cli", *argv], capture_output=True, text=True, env=env,
                           timeout=timeout, cwd=str(ROOT))
    except subprocess.TimeoutExpired:
        return {"rc": None, "secs": timeout, "out": "", "err": f"timed out after {timeout:.0f} s"}
    return {"rc": p.returncode, "secs": round(time.perf_counter() - t0, 2), "out": p.stdout, "err": p.stderr}


def snapshot_problems(folder: Path, newest: int, timeout: float) -> tuple[int, list[str], int]:
    """(snapshots compared, how they differ from the segments' replay, snapshots past the segments' last record;
    see the module docstring)."""
    segments = sorted(folder.glob("*.log"))
    if not segments or segments[0].name != f"{0:020d}.log" or segments[0].stat().st_size == 0:
        return 0, [], 0
    snapshots = sorted(folder.glob("*.checkpoint"))[-newest:] if newest > 0 else []
    found, beyond = [], 0
    for snap in snapshots:
        end = int(snap.name.split("-")[0])
        with tempfile.TemporaryDirectory() as tmp:
            replayed, alone = Path(tmp, "segments", folder.name), Path(tmp, "snapshot", folder.name)
            replayed.mkdir(parents=True)
            alone.mkdir(parents=True)
            for f in segments:
                os.symlink(f.resolve(), replayed / f.name)
            if (folder.parent / "bootstrap.checkpoint").is_file():
                shutil.copy(folder.parent / "bootstrap.checkpoint", replayed.parent)
            os.symlink(snap.resolve(), alone / snap.name)
            for what in ([], ["--brokers"]):
                a = run(["describe", "--json", *what, "--log-dir", str(replayed), "--at-offset", str(end - 1)], timeout)
                b = run(["describe", "--json", *what, "--log-dir", str(alone)], timeout)
                if a["rc"] == 2 and "is past the end of the log" in a["err"]:
                    beyond += not what  # (once a snapshot)
                    continue
                if a["rc"] not in (0, 1) or b["rc"] not in (0, 1):
                    found.append(f"snapshot {snap.name}: describe {' '.join(what)} exit {a['rc']} / {b['rc']}: "
                                 f"{(a['err'] or b['err']).strip().splitlines()[-1:]}")
                    continue
                want = {json.dumps(r, sort_keys=True) for r in json.loads(b["out"])}
                got = {json.dumps(r, sort_keys=True) for r in json.loads(a["out"])}
                if got != want:
                    diff = sorted(got ^ want)
                    found.append(f"snapshot {snap.name}: {'brokers' if what else 'partitions'} differ from the "
                                 f"segments' replay at offset {end - 1} ({len(diff)} rows, e.g. {diff[0][:300]})")
    return len(snapshots) - beyond, found, beyond


def problems(res: dict) -> list[str]:
    """What in one folder's results is a defect (see the module docstring)."""
    found = []
    for name, r in res.items():
        if r["rc"] not in (0, 1, 2):
            found.append(f"{name}: exit {r['rc']} ({r['err'].strip().splitlines()[-1:] or ''})")
        if "Traceback (most recent call last)" in r["err"]:
            found.append(f"{name}: traceback: {r['err'].strip().splitlines()[-1]}")
    for line in res["summary"]["out"].splitlines():
        doc = json.loads(line) if line.startswith("{") else {}
        for e in doc.get("errors", []):
            if e.get("reason") != "EMPTY_FILE":
                found.append(f"decode: {e.get('reason')}: {e.get('message')}")
    verdict = _json(res["verify"]["out"])
    if (verdict or {}).get("missingOffsets"):
        return found  # (records missing: what follows the gap is not Kafka's state, divergences are expected)
    for d in (verdict or {}).get(DIVERGENCES, []):
        found.append(f"divergence at offset {d.get('offset')} ({d.get('topic')}-{d.get('partition')}): "
                     f"{d.get('field')} recorded {d.get('recorded')} expected {d.get('expected')}")
    return found


def _json(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root", type=Path)
    ap.add_argument("--jsonl", type=Path, help="one JSON line per folder: every command's exit, time and output")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per command (default 600)")
    ap.add_argument("--snapshots", type=int, default=2, metavar="N",
                    help="newest .checkpoint files per folder compared with the segments' replay (default 2; 0: none)")
    args = ap.parse_args(argv)
    if not args.root.is_dir():
        print(f"sweep_logs: {args.root}: not a folder", file=sys.stderr)
        return 2
    folders = sorted(p for p in args.root.rglob("__cluster_metadata-0")  # with a segment or snapshot in it
                     if p.is_dir() and any(f.suffix in (".log", ".checkpoint") for f in p.iterdir()))
    out = args.jsonl.open("w") if args.jsonl else None
    bad = 0
    for folder in folders:
        res = {name: run(cmd + [str(folder)], args.timeout) for name, cmd in COMMANDS.items()}
        verdict = _json(res["verify"]["out"]) or {}
        rules = Counter(f"{b['rule']} {b['severity']}" for b in verdict.get("invariantBreaches", []))
        found = problems(res)
        missing = sum(g["last"] - g["first"] + 1 for g in verdict.get("missingOffsets", []))
        compared, differ, beyond = snapshot_problems(folder, args.snapshots, args.timeout)
        found += differ
        bad += bool(found)
        size = sum(f.stat().st_size for f in folder.iterdir() if f.suffix in (".log", ".checkpoint"))
        print(f"{folder.relative_to(args.root)}: {size:,} bytes, {verdict.get('records', '-')} records; exit "
              + " ".join(f"{n} {r['rc']}" for n, r in res.items())
              + f"; {sum(r['secs'] for r in res.values()):.1f} s; findings {dict(rules) or 'none'}"
              + (f"; {compared} snapshot(s) compared" if compared else "")
              + (f"; {beyond} snapshot(s) past the segments' last record" if beyond else "")
              + (f"; {missing} offsets missing ({len(verdict.get(DIVERGENCES, []))} divergences after them, "
                 "not counted)" if missing else ""))
        for f in found:
            print(f"  DEFECT {f}")
        if out:
            out.write(json.dumps({"folder": str(folder), "bytes": size, "problems": found, "results": res}) + "\n")
    if out:
        out.close()
    print(f"{len(folders)} log folders, {bad} with a defect")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
