"""``kraft-audit collect-log-info``: one broker's per-replica log info, read off its data directory
(no Spark).  Writes a KIP-966 GetReplicaLogInfo-shaped JSON document; see audit/loginfo.py
for what each number is and which error codes mark an unreadable replica."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from audit.loginfo import collect, iso_utc, parse_iso

PROG = "kraft-audit collect-log-info"


def add_arguments(p) -> None:
    p.add_argument("--broker-id", type=int, required=True, metavar="N", help="the broker's node.id")
    p.add_argument("--data-dir", action="append", required=True, metavar="DIR",
                   help="a log directory of the broker (repeatable, one per entry of log.dirs)")
    p.add_argument("--broker-epoch", type=int, default=-1, metavar="E",
                   help="the broker's registration epoch, if known (default -1: unknown)")
    p.add_argument("--at", metavar="ISO8601", help="when the directory was captured (default: now, UTC)")
    p.add_argument("--at-offset", type=int, metavar="N",
                   help="the metadata log offset the capture corresponds to, if known")
    p.add_argument("-o", "--output", required=True, metavar="FILE.json", help="where to write the JSON ('-': stdout)")
    p.add_argument("--no-metadata", action="store_true",
                   help="do not read the broker's own __cluster_metadata-0 replica for its broker epoch and "
                        "the partitions' current leader epochs")


def meta_node_id(data_dir) -> tuple[Path, str | None] | None:
    """(the file, its ``node.id`` value or None) from the ``meta.properties`` Kafka writes in every log
    directory (``key=value`` lines, ``#``/``!`` comments; Java properties also allow ``:``), or None when the
    directory has none."""
    path = Path(data_dir) / "meta.properties"
    if not path.is_file():
        return None
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if cut >= 0 and line[:cut].strip() == "node.id":
            return path, line[cut + 1:].strip()
    return path, None


def check_node_ids(data_dirs, broker_id: int) -> str | None:
    """The one-line error for the first data directory whose meta.properties names another node than
    ``--broker-id`` (or has an unreadable node.id); None when every directory agrees or has no meta.properties."""
    for d in data_dirs:
        found = meta_node_id(d)
        if found is None or found[1] is None:
            continue
        path, value = found
        try:
            node = int(value)
        except ValueError:
            return f"node.id {value!r} is not an integer ({path})"
        if node != broker_id:
            return f"--broker-id {broker_id} does not match node.id={node} of the data directory ({path})"
    return None


def from_own_metadata(doc: dict, data_dirs, err) -> None:
    """Fill what only the broker's metadata knows -- its registration epoch, each partition's current
    leader epoch, the metadata offset of the capture -- from the broker's own replica of
    ``__cluster_metadata`` when one of its data directories holds it.  A leader epoch bump that left a
    partition leaderless is written only there, never to the partition's own files."""
    from controller_core.point import image_at

    meta = next((Path(d) for d in data_dirs if (Path(d) / "__cluster_metadata-0").is_dir()), None)
    if meta is None:
        return
    try:
        image, reached = image_at(str(meta), at_offset=doc.get("CollectedAtOffset"), err=err, prog=PROG)
    except (OSError, ValueError) as exc:  # PointError is a ValueError: the capture stays usable without it
        print(f"{PROG}: {meta}/__cluster_metadata-0 not used: {exc}", file=err)
        return
    b = image.brokers.get(doc["BrokerId"])
    if doc["BrokerEpoch"] == -1 and b is not None:
        doc["BrokerEpoch"] = b.epoch
    if doc.get("CollectedAtOffset") is None and reached.offset is not None:
        doc["CollectedAtOffset"] = reached.offset
    for t in doc["TopicPartitionLogInfoList"]:
        for p in t["PartitionLogInfo"]:
            part = image.partitions.get((t.get("TopicId"), p["Partition"]))
            if part is not None and p["ErrorCode"] == 0:
                p["CurrentLeaderEpoch"] = part.leader_epoch


def main(args, out=None, err=None) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    try:
        at = iso_utc(parse_iso(args.at)) if args.at else None
    except ValueError:
        print(f"kraft-audit collect-log-info: --at {args.at!r} is not an ISO 8601 time", file=err)
        return 2
    try:
        mismatch = check_node_ids(args.data_dir, args.broker_id)
    except OSError as exc:
        print(f"kraft-audit collect-log-info: cannot read meta.properties: {exc.strerror} ({exc.filename})", file=err)
        return 2
    if mismatch:
        print(f"kraft-audit collect-log-info: {mismatch}", file=err)
        return 2
    try:
        doc = collect(args.data_dir, args.broker_id, args.broker_epoch, at, args.at_offset)
    except FileNotFoundError as exc:
        print(f"kraft-audit collect-log-info: {exc}", file=err)
        return 2
    if not getattr(args, "no_metadata", False):
        from_own_metadata(doc, args.data_dir, err)
    text = json.dumps(doc, indent=2) + "\n"
    if args.output == "-":
        out.write(text)
    else:
        Path(args.output).write_text(text, encoding="utf-8")
    bad = [(t.get("TopicId") or t.get("TopicName"), p["Partition"], p["ErrorMessage"])
           for t in doc["TopicPartitionLogInfoList"] for p in t["PartitionLogInfo"] if p["ErrorCode"]]
    for topic, part, msg in bad:
        print(f"kraft-audit collect-log-info: {topic}-{part}: {msg}", file=err)
    return 0


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(prog="kraft-audit collect-log-info")
    add_arguments(ap)
    sys.exit(main(ap.parse_args()))
