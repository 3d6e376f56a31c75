"""Compiled record framing: what ``logfile._record_framing``, ``_message_framing`` and ``_outside_batch`` compute
with NumPy, in one loop over a window's records.

Per record (v2 format): attributes, timestampDelta (varlong), offsetDelta, key length and key, value length
and value, header count; then the value's message framing (metadata: frameVersion, apiKey, version; control:
the key's int16 type and the value's int16 version); then whether its offsetDelta / timestampDelta fall outside
its batch.  The NumPy functions read the varints without a bound (the window is padded with zero bytes) and
keep a varint's partial value when it runs longer than Kafka writes; so does :func:`_varint` here, so even a
damaged record's numbers -- which its quarantine message quotes -- are the same.  The NumPy path stays the
reference (tests/controller_core/codec/test_framing.py compares both on real, simulated and damaged logs) and
is what runs when numba is not loaded.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from controller_core import numba_cache  # noqa: F401  (kernels shipped in a zip cache across jobs)
from controller_core.codec.batch import METADATA_FRAME_VERSION
from controller_core.codec.walk import CONTROL_CODE_BASE, _be16, _be32, _be64, _zigzag, helper


@helper
def _varint(a, p, max_bytes):
    """An unsigned varint at ``p`` as vector.uvarint reads it: (value, next position, ok); a varint still
    continuing after ``max_bytes`` gives the bits read so far, the position after them and ok False."""
    v = np.int64(0)
    shift = np.int64(0)
    for k in range(max_bytes):
        b = np.int64(a[p + k])
        if shift < 64:
            v |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return v, p + k + 1, True
    return v, p + max_bytes, False


@njit(cache=True, nogil=True)
def frame(a, body, rend, rbatch, bpos, ctl, ts_delta, off_delta, kpos, klen, vpos, vlen, not_taken, type_code,
          version, bstart, unframed, outside):
    """Fill the per-record outputs (see the module docstring).  ``body``: each record's attributes byte;
    ``ctl``: whether its batch is a control batch; ``not_taken``: framing the vectorized path leaves to the
    scalar reader (bad varint, headers, lengths not adding up)."""
    last_batch = np.int64(-1)
    last_off = np.int64(0)
    read_batch = np.int64(-1)  # the batch whose header fields are at hand (a batch's records come together)
    lod = b_ts = m_ts = np.int64(0)
    for i in range(len(body)):
        end = rend[i]
        ok = True
        u, p, o = _varint(a, body[i] + 1, 10)
        ts = _zigzag(u)
        ok &= o
        u, p, o = _varint(a, p, 5)
        off = _zigzag(u)
        ok &= o
        u, p, o = _varint(a, p, 5)
        kl = _zigzag(u)
        ok &= o
        kp = p
        p = min(p + max(kl, 0), end)
        u, p, o = _varint(a, p, 5)
        vl = _zigzag(u)
        ok &= o
        vp = p
        p = min(p + max(vl, 0), end)
        u, p, o = _varint(a, p, 5)
        ok &= o and vl >= 0
        ts_delta[i] = ts
        off_delta[i] = off
        kpos[i] = kp
        klen[i] = kl
        vpos[i] = vp
        vlen[i] = vl
        not_taken[i] = (not ok) or u != 0 or p != end
        # the message framing
        if ctl[i]:
            type_code[i] = CONTROL_CODE_BASE + _be16(a, kp + 2)
            version[i] = _be16(a, vp)
            bstart[i] = vp
            unframed[i] = kl != 4 or vl < 2
        else:
            fv, q, o1 = _varint(a, vp, 5)
            api, q, o2 = _varint(a, q, 5)
            ver, q, o3 = _varint(a, q, 5)
            type_code[i] = api
            version[i] = ver
            bstart[i] = q
            unframed[i] = not (o1 and o2 and o3) or fv != METADATA_FRAME_VERSION
        # inside its batch: offsetDelta in [0, lastOffsetDelta] and after the in-range record before it in the
        # batch, timestampDelta in [0, maxTimestamp - baseTimestamp] (when maxTimestamp is not below the base)
        if rbatch[i] != read_batch:
            read_batch = rbatch[i]
            b = bpos[read_batch]
            lod = np.int64(_be32(a, b + 23))
            b_ts = _be64(a, b + 27)
            m_ts = _be64(a, b + 35)
        out_of_range = off < 0 or off > lod
        bad = out_of_range or ts < 0 or (m_ts >= b_ts and ts > m_ts - b_ts)
        if not out_of_range:
            if last_batch == rbatch[i] and off <= last_off:
                bad = True
            last_batch = rbatch[i]
            last_off = off
        outside[i] = bad
