"""Typed decode errors.  Every one names where in which file the bad bytes are."""
from __future__ import annotations


class DecodeError(Exception):
    """Bytes that do not follow Kafka's format.

    ``reason`` is a stable code (it becomes the quarantine table's ``reason``), ``position`` the byte
    offset in the file where the offending unit (batch or record) starts, ``length`` how many bytes the
    unit spans (as far as that is known).
    """

    def __init__(self, reason: str, detail: str, position: int = -1, length: int = 0, file: str = ""):
        self.reason = reason
        self.detail = detail
        self.position = position
        self.length = length
        self.file = file
        super().__init__(self.message)

    @property
    def message(self) -> str:
        where = f"{self.file or '<buffer>'} at byte {self.position}" if self.position >= 0 else (self.file or "<buffer>")
        return f"{where}: {self.reason}: {self.detail}"

    def located(self, file: str, base: int = 0) -> "DecodeError":
        """The same error, placed in ``file`` with positions shifted by ``base``."""
        return DecodeError(self.reason, self.detail, self.position + base if self.position >= 0 else base,
                           self.length, file)


# Stable reason codes (quarantine.reason)
CRC_MISMATCH = "CRC_MISMATCH"
TRUNCATED_BATCH = "TRUNCATED_BATCH"
BAD_BATCH_HEADER = "BAD_BATCH_HEADER"
UNSUPPORTED_MAGIC = "UNSUPPORTED_MAGIC"
COMPRESSED_BATCH = "COMPRESSED_BATCH"
MALFORMED_RECORD = "MALFORMED_RECORD"
BAD_VARINT = "BAD_VARINT"
UNKNOWN_RECORD_TYPE = "UNKNOWN_RECORD_TYPE"
UNKNOWN_RECORD_VERSION = "UNKNOWN_RECORD_VERSION"
TRAILING_BYTES = "TRAILING_BYTES"
NOT_A_LOG = "NOT_A_LOG"
GARBAGE = "GARBAGE"
EMPTY_FILE = "EMPTY_FILE"
