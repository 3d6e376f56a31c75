"""The builder inputs each controller trigger uses (controller-rules.md §2.2), in one place.

Both directions use these: :mod:`controller_core.rules.verify` recomputes recorded changes from them, and
:mod:`controller_core.rules.whatif` produces the records a hypothetical event would cause.
"""
from __future__ import annotations

from controller_core.rules.builder import ONLINE, UNCLEAN, Inputs
from controller_core.image import Cluster, Partition

MV_4_0_IV0 = 22  # Kafka 4.0+ elects the last known leader only if it is acceptable ([LATER] §2.3-3)


def acceptable(c: Cluster, p: Partition, exclude: int | None = None, include: int | None = None):
    """§2.2 acceptability: active (or the broker being unfenced), not the broker being removed, and
    its directory for this partition online."""
    def ok(b: int) -> bool:
        if b == exclude:
            return False
        return (b == include or c.active(b)) and c.dir_online(b, c.partition_dir(p, b))
    return ok


def topic_mode(c: Cluster, p: Partition) -> str:
    return UNCLEAN if c.unclean_enabled(p.topic_id) else ONLINE


def inputs(c: Cluster, p: Partition, election: str, *, elr: bool | None = None, min_isr: int | None = None,
           check_lkl: bool | None = None, **kw) -> Inputs:
    mv = c.metadata_version
    return Inputs(acceptable=kw.pop("acceptable", None) or acceptable(c, p),
                  min_isr=c.min_isr(p.topic_id) if min_isr is None else min_isr,
                  elr_enabled=c.elr_enabled if elr is None else elr, metadata_version=mv, election=election,
                  check_last_known_leader=(mv >= MV_4_0_IV0) if check_lkl is None else check_lkl, **kw)


def broker_removed(c: Cluster, p: Partition, b: int, **kw) -> Inputs:
    """Fence, controlled shutdown, unregistration, offline directory of broker b: T_I = I - {b}."""
    return inputs(c, p, kw.pop("election", topic_mode(c, p)), target_isr=[x for x in p.isr if x != b],
                  acceptable=acceptable(c, p, exclude=b), **kw)


def unclean_shutdown(c: Cluster, p: Partition, b: int, **kw) -> Inputs:
    """§1.6: broker b re-registers after an unclean shutdown: out of ISR and ELR (U = {b})."""
    return broker_removed(c, p, b, unclean_shutdown=frozenset({b}), **kw)


def unfenced(c: Cluster, p: Partition, b: int, **kw) -> Inputs:
    """Unfence of b: every leaderless partition tries an election in which b already counts."""
    return inputs(c, p, kw.pop("election", topic_mode(c, p)), acceptable=acceptable(c, p, include=b), **kw)


