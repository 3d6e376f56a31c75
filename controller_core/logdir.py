"""Find and classify the files of a KRaft metadata log directory.

Users point kraft-audit at a ``__cluster_metadata-0`` folder or at the data directory holding it (and
its ``bootstrap.checkpoint``), often copied off a dead machine.  Only three kinds of file hold metadata
records; everything else Kafka keeps beside them is recognised and left alone, so an index or a
producer-state ``.snapshot`` is never mistaken for record data.

A file whose name says it holds records (a segment, a snapshot, ``bootstrap.checkpoint``) but that cannot be
read -- a dangling symbolic link, a FIFO, a directory or device, a file this process may not open -- stops
the command (:class:`UnreadableLogFile`, exit 2 naming it): replaying the log without it would report a
history with a hole as if it were the whole one.  A FIFO is recognised by ``stat`` and never opened (opening
it for reading blocks until a writer appears).  Files Kafka keeps beside the records are never read, so
what they are does not matter.
"""
from __future__ import annotations

import errno
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

METADATA_DIR = "__cluster_metadata-0"
BOOTSTRAP = "bootstrap.checkpoint"
SEGMENT_RE = re.compile(r"^(\d{20})\.log$")
PARTITION_DIR_RE = re.compile(r"^(.+)-(\d+)$")  # <topic>-<partition> folder of a broker data dir
SNAPSHOT_RE = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")

SEGMENT, SNAPSHOT, BOOTSTRAP_KIND = "segment", "snapshot", "bootstrap"

@dataclass(frozen=True)
class LogFile:
    path: Path
    kind: str  # segment | snapshot | bootstrap
    label: str  # path relative to the data directory: stable across copies of the same directory
    offset: int  # segment base offset / snapshot end offset / -1 for bootstrap
    epoch: int = -1  # snapshot epoch

    @property
    def first_offset(self) -> int | None:
        """The offset the file's first batch must start at: a segment's base offset (unknown for a
        file not named like one); snapshots and bootstrap.checkpoint number their records from 0."""
        if self.kind == SEGMENT:
            return self.offset if self.offset >= 0 else None
        return 0

    @property
    def sort_key(self):
        # bootstrap first; then by offset, a snapshot before a segment starting where it ends
        return (self.offset, 0 if self.kind == SNAPSHOT else 1)


class UnreadableLogFile(OSError):
    """A file named like a log file that cannot be read as one: the command cannot run (exit 2)."""


_KIND_WORDS = {SEGMENT: "segment", SNAPSHOT: "snapshot", BOOTSTRAP_KIND: "bootstrap file"}


def check_readable(lf: "LogFile") -> "LogFile":
    """``lf`` when its path is a regular file (through any symbolic link) this process can open; else
    UnreadableLogFile saying what the path is.  Never opens a FIFO, a socket or a device."""
    path = lf.path
    what = f"{_KIND_WORDS.get(lf.kind, 'log file')} {path.name}"
    try:
        st = os.stat(path)  # follows symbolic links; opens nothing
    except OSError as e:
        if not os.path.islink(path):
            raise
        target = os.readlink(path)
        kind = "a symbolic link loop" if e.errno == errno.ELOOP else f"a dangling symbolic link (to {target})"
        raise UnreadableLogFile(f"{what} is {kind}: its records cannot be read ({path})") from None
    if stat.S_ISFIFO(st.st_mode):
        raise UnreadableLogFile(f"{what} is a FIFO (named pipe), not a file: never opened, reading it would "
                                f"block ({path})")
    if not stat.S_ISREG(st.st_mode):
        kind = ("a directory" if stat.S_ISDIR(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode)
                else "a device" if stat.S_ISBLK(st.st_mode) or stat.S_ISCHR(st.st_mode) else "not a regular file")
        raise UnreadableLogFile(f"{what} is {kind}, not a file: its records cannot be read ({path})")
    try:
        os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))  # O_NONBLOCK: even a FIFO swapped in since stat
    except OSError as e:
        raise UnreadableLogFile(f"{what} cannot be opened: {e.strerror or type(e).__name__} ({path})") from None
    return lf


def classify(path: Path, root: Path | None = None) -> LogFile | None:
    """The LogFile for a record-bearing file, None for anything else."""
    name = path.name
    root = root or path.parent
    try:
        label = str(path.relative_to(root))
    except ValueError:
        label = name
    if name == BOOTSTRAP:
        return LogFile(path, BOOTSTRAP_KIND, label, -1)
    m = SEGMENT_RE.match(name)
    if m:
        return LogFile(path, SEGMENT, label, int(m.group(1)))
    m = SNAPSHOT_RE.match(name)
    if m:
        return LogFile(path, SNAPSHOT, label, int(m.group(1)), int(m.group(2)))
    return None


def resolve_log_dir(path: Path) -> tuple[Path, Path]:
    """(data directory, metadata folder) for a path naming either of them."""
    path = Path(path)
    if (path / METADATA_DIR).is_dir():
        return path, path / METADATA_DIR
    m = PARTITION_DIR_RE.match(path.name)
    if path.is_dir() and m and path.name != METADATA_DIR and any(
            classify(p) or p.name == "partition.metadata" for p in path.iterdir()):
        # a broker's <topic>-<partition> folder (not a data dir named like kafka-1: that holds folders)
        raise FileNotFoundError(f"{path}: {path.name} is the partition folder of topic '{m.group(1)}', "
                                f"not the metadata log {METADATA_DIR}")
    if path.is_dir() and (path.name == METADATA_DIR or any(classify(p) for p in path.iterdir())):
        return path.parent, path
    # say why: a typo (missing), a log file given for its folder (a file), or the wrong folder
    why = ("it is a file" if path.is_file() else "no log files in it" if path.is_dir()
           else f"it is a dangling symbolic link to {os.readlink(path)}" if os.path.islink(path)
           else "it is not a file nor a directory" if os.path.lexists(path) else "it does not exist")
    raise FileNotFoundError(f"{path}: neither a {METADATA_DIR} folder nor a data directory holding one ({why})")


def discover(path: Path) -> list[LogFile]:
    """Every record-bearing file of a log directory, in the order a replay reads them:
    bootstrap.checkpoint, then segments and snapshots by offset."""
    data_dir, meta = resolve_log_dir(Path(path))
    files = []
    boot = data_dir / BOOTSTRAP
    if os.path.lexists(boot):  # a dangling link too: named, never skipped
        files.append(check_readable(classify(boot, data_dir)))
    for p in sorted(meta.iterdir()):
        lf = classify(p, data_dir)
        if lf is not None and lf.kind != BOOTSTRAP_KIND:
            files.append(check_readable(lf))
    boots = [f for f in files if f.kind == BOOTSTRAP_KIND]
    return boots + _without_empty_active_segment(
        sorted((f for f in files if f.kind != BOOTSTRAP_KIND), key=lambda f: f.sort_key))


def _without_empty_active_segment(files: list[LogFile]) -> list[LogFile]:
    """Kafka rolls a segment by creating the next one, empty, as the active segment: a log copied right
    after a roll ends in an empty ``.log`` whose base offset is where the records end.  That file holds
    nothing and lost nothing, so it is left out (not quarantined as EMPTY_FILE).  Only that one: an empty
    segment before other files, or an empty log with nothing before it, stays in and is reported."""
    if len(files) < 2:
        return files
    last = files[-1]
    if last.kind == SEGMENT and last.offset > 0 and last.path.is_file() and last.path.stat().st_size == 0:
        return files[:-1]
    return files


def expand(paths: list[str]) -> list[LogFile]:
    """Files named on a command line: folders expand to their log files; a file is taken as given
    (its kind guessed from its name, a segment if unknown, so decoding it names what is wrong)."""
    out: list[LogFile] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            out.extend(discover(p))
        elif os.path.lexists(p):  # a FIFO, a dangling link, an unreadable file: named, never opened
            out.append(check_readable(classify(p) or LogFile(p, SEGMENT, p.name, -1)))
        else:
            raise FileNotFoundError(f"{raw}: no such file or directory")
    return out
