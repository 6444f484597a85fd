"""What a lowered program is made of: views of device memory, dispatches, device checks.

Shared by the lowering (`executor`), horizontal merging (`merge`) and the recording
(`recording`), so none of them imports another for its types.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from .kernels import Kernel
from .memory import Buffer


@dataclass(frozen=True)
class View:
    """A tensor's place on the device: buffer range plus shape and dtype (contiguous)."""
    vkbuf: object
    offset: int
    nbytes: int
    region: int          # identity of the underlying block, for hazard tracking
    shape: tuple
    dtype: np.dtype

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    def sub(self, byte_offset: int, nbytes: int, shape: tuple, dtype=None) -> "View":
        return View(self.vkbuf, self.offset + byte_offset, nbytes, self.region, shape,
                    np.dtype(dtype or self.dtype))


def view_of(buf: Buffer, shape, dtype) -> View:
    return View(buf.block.buffer, buf.offset, buf.nbytes, id(buf.block), tuple(shape), np.dtype(dtype))


@dataclass
class Dispatch:
    kernel: Kernel
    meta: np.ndarray
    views: list
    writes: tuple         # indices into views that the kernel writes
    groups: int
    zero: tuple = ()      # views the recording fills with zeros first (`merge` counters)


CHECK_WORDS = 4      # int32 words of one device check: [flag, then what the kernel records]


@dataclass
class Check:
    """One device check of a lowered program: CHECK_WORDS host-mapped int32 words a kernel
    sets (word 0 non-zero: an error) and `error(words)`, the exception to raise then."""
    buf: Buffer
    error: Callable[[np.ndarray], BaseException]

    def words(self) -> np.ndarray:
        b = self.buf
        return b.block.mapped[b.offset:b.offset + 4 * CHECK_WORDS].view(np.int32)


def arm(checks: Sequence[Check]) -> None:
    """Zero the checks' words before a submission (host writes are visible to the
    submission that follows them)."""
    for c in checks:
        c.words()[:] = 0


def raise_checks(checks: Sequence[Check]) -> None:
    """After the submission's wait: raise the first check that a kernel set."""
    for c in checks:
        w = c.words()
        if w[0]:
            raise c.error(w.copy())


def barriers_before(dispatches: list) -> list[bool]:
    """Per dispatch: does it need a barrier first? Yes where it reads or writes a byte
    range written since the last barrier, or writes one read since then."""
    def hit(a, bs):
        return any(a[0] == b[0] and a[1] < b[2] and b[1] < a[2] for b in bs)
    out, written, read = [], [], []
    for ds in dispatches:
        rr = [(v.region, v.offset, v.offset + v.nbytes) for v in ds.views]
        ws = [rr[i] for i in ds.writes]
        rs = [r for i, r in enumerate(rr) if i not in ds.writes]
        need = any(hit(r, written) for r in rs + ws) or any(hit(w, read) for w in ws)
        if need:
            written, read = [], []
        out.append(need)
        written += ws
        read += rs
    return out


