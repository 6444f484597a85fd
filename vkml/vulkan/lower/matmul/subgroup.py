"""The CPU scheme (`subgroup` tilings; lavapipe): one subgroup is one SIMD register there,
and any per-invocation buffer or shared-memory address costs a scalar load per lane, so
staging through shared memory only adds copies. Instead a subgroup reads a chunk of A's
rows once, spread over its lanes, and hands every element to all lanes with
``subgroupShuffle`` at a constant index (one register permute there, where
``subgroupBroadcast`` first scans for active lanes, far dearer); only B is read per
lane, as wide as the row length allows (two 32-bit elements per 64-bit component), and
each B value feeds tm multiply-adds. Within a chunk the B rows are loaded first and the
arithmetic runs row by row, so one row's accumulators stay in registers.

Edges: rows and columns outside the output are clamped on load (always valid memory)
and masked on store; k runs over whole chunks, then a remainder loop (or one masked
chunk), so m, n, k need not be multiples of anything and k = 0 gives zeros.
"""
from __future__ import annotations

from functools import lru_cache

from ...kernels import TEXEL_FORMATS, texel_format
from ...program import Meta, Program
from . import epilogue
from .epilogue import Epi
from .prologue import mad, meta_fields, prologue
from .tiling import Tiling


def texel_operands(dev, T: str, t: Tiling, a, b) -> tuple | None:
    """The (A, B) texel formats the subgroup kernel reads its operands through, where
    `kernels.texel_format` reads both under `Profile.matmul_texels` (float32 views on a
    texel boundary holding whole texels); else None (storage buffers).

    >>> from types import SimpleNamespace as NS
    >>> from vkml.vulkan import device
    >>> gpu = NS(profile=device.profile_for("nvidia", 2, True, 1 << 20), texel_alignment=16, max_texels=1 << 27)
    >>> texel_operands(gpu, "float", Tiling("subgroup", tm=8, tn=8), None, None) is None
    True
    """
    if not (dev.profile.matmul_texels and T == "float"):
        return None
    fa, fb = texel_format(dev, a, t.wa, on=True), texel_format(dev, b, t.wb, on=True)
    return (fa, fb) if fa is not None and fb is not None else None


def wide(T: str, w: int):
    """(GLSL type of one w-element load of T, unpack(var) -> [w element expressions]).

    A CPU device pays per loaded component and lane, so 32-bit data is read two
    elements per 64-bit component (uint64 bit patterns, never converted as floats).

    >>> ty, unpack = wide("float", 2); ty, unpack("v")
    ('uint64_t', ['uintBitsToFloat(unpackUint2x32(v)[0])', 'uintBitsToFloat(unpackUint2x32(v)[1])'])
    """
    if w == 1:
        return T, lambda v: [v]
    if T == "double":
        return f"dvec{w}", lambda v: [f"{v}[{c}]" for c in range(w)]
    conv = "uintBitsToFloat" if T == "float" else "int"
    if w == 2:
        return "uint64_t", lambda v: [f"{conv}(unpackUint2x32({v})[{c}])" for c in range(2)]
    if w == 4:
        return ("vec4" if T == "float" else "ivec4"), lambda v: [f"{v}[{c}]" for c in range(4)]
    if w == 8:
        return "u64vec4", lambda v: [f"{conv}(unpackUint2x32({v}[{c // 2}])[{c % 2}])" for c in range(8)]
    raise ValueError(f"MatMul: no {w}-wide load of {T}")


def pack_wide(T: str, w: int, vals: list) -> str:
    """One w-element value of `wide(T, w)`'s type holding vals (bit patterns kept).

    >>> pack_wide("float", 4, ["a", "b", "c", "d"])
    'vec4(a, b, c, d)'
    """
    if w == 1:
        return vals[0]
    if T == "double":
        return f"dvec{w}({', '.join(vals)})"
    if w == 4:
        return f"{'vec4' if T == 'float' else 'ivec4'}({', '.join(vals)})"
    conv = "floatBitsToUint" if T == "float" else "uvec2"
    pairs = [f"packUint2x32({conv}({'' if T == 'float' else 'i'}vec2({vals[2 * p]}, {vals[2 * p + 1]})))"
             for p in range(w // 2)]
    return pairs[0] if w == 2 else f"u64vec4({', '.join(pairs)})"


class _Loader:
    """One w-element load of operand buf at a wide index: lines declaring var, and
    unpack(var) -> its w element expressions. A texel operand is a float32 texel buffer
    of w-element texels (`kernels.TEXEL_FORMATS`); w = 8 reads two 4-element texels."""

    def __init__(self, T: str, w: int, buf: str, tex: bool):
        self.T, self.w, self.buf, self.tex = T, w, buf, tex

    def __call__(self, var: str, idx: str) -> list[str]:
        if not self.tex:
            return [f"{wide(self.T, self.w)[0]} {var} = {self.buf}[{idx}];"]
        if self.w == 8:
            return [f"vec4 {var}a = texelFetch({self.buf}, 2 * ({idx}));",
                    f"vec4 {var}b = texelFetch({self.buf}, 2 * ({idx}) + 1);"]
        return [f"vec4 {var} = texelFetch({self.buf}, {idx});"]

    def unpack(self, var: str) -> list[str]:
        if not self.tex:
            return wide(self.T, self.w)[1](var)
        if self.w == 8:
            return [f"{var}{h}.{c}" for h in "ab" for c in "xyzw"]
        return [f"{var}.{c}" for c in "xyzw"[:self.w]]


def _unweave(T: str, TM: int, TN: int, S: int) -> list[str]:
    """Lines moving interleaved accumulators (lane l, slot j: column l + S*j of the tile)
    to consecutive ones (lane L, slot J: column TN*L + J), row by row: slot J of lane L
    comes from lane (TN*L + J) % S, slot (TN*L + J) / S; TN shuffles per slot, kept by a
    select on the source slot. All lanes are active here (no branch yet)."""
    L = [f"int uw_l{J} = (lane * {TN} + {J}) % {S}; int uw_s{J} = (lane * {TN} + {J}) / {S};"
         for J in range(TN)]
    for i in range(TM):
        for J in range(TN):
            # every shuffle by every lane, then the pick: a shuffle inside ?: runs only
            # where its side is taken, and a lane cannot read one that did not run it
            L += [f"{T} uw_{i}_{J}_{sl} = subgroupShuffle(acc_{i}_{sl}, uw_l{J});" for sl in range(TN)]
            x = f"uw_{i}_{J}_{TN - 1}"
            for sl in range(TN - 2, -1, -1):
                x = f"(uw_s{J} == {sl} ? uw_{i}_{J}_{sl} : {x})"
            L.append(f"{T} uw_{i}_{J} = {x};")
        L += [f"acc_{i}_{J} = uw_{i}_{J};" for J in range(TN)]
    return L


@lru_cache(maxsize=1024)
def program(t: Tiling, T: str, rank: int, S: int, ta: bool = False, tb: bool = False,
            epi: Epi | None = None, ws: int = 1, tex: bool = False, ilv: bool = False,
            swap: bool = False, tail: bool = False) -> Program:
    """Lane l owns rows m0 + i (i < tm) and columns n0 + l*tn + j (j < tn); S lanes.

    A chunk of k values is handed out per lane and shared by shuffles: A's rows are read
    wa elements of k per lane (chunks of S*wa k); a transposed A (K x M in memory) is
    read one k per lane instead, wa rows at a time (chunks of S k). B is read per lane,
    wb columns at a time; a transposed B (N x K) wb values of k at a time per column.
    Both layouts keep every load contiguous, so no operand needs a transposed copy.
    tex: A and B are read through uniform texel buffers (float32; `texel_operands`), C is
    stored ws elements at a time (ws > 1: N is a multiple of tn).
    ilv (with tb): lane l multiplies columns n0 + l + S*j instead, and the accumulators are
    moved back to its tn consecutive columns by shuffles before the epilogue (`_unweave`).
    B^T's rows for one lane's columns then lie K apart, not tn*K: with tn*K*4 bytes a
    multiple of 4096 every lane's load fell in one cache set (`tiling.interleave`).
    swap: the kernel computes C^T = B^T A^T (its M, N are C's N, M; `tiling.swap_small_n`)
    and stores element (i, j) at C's (j, i), one at a time; the epilogue sees C's indices.
    tail: k past the last whole chunk runs as one masked chunk, not a step-by-step loop.

    >>> p = program(Tiling("subgroup", tm=4, tn=4, wa=1, wb=4), "float", 0, 8)
    >>> p.name, p.local_size, p.subgroups, p.mergeable
    ('MatMul_subgroup', 8, True, True)
    """
    TM, TN, wa, wb = t.tm, t.tn, t.wa, t.wb
    chunk = S if ta else S * wa
    TA, unA = wide(T, wa)
    TB, unB = wide(T, wb)
    ldA, ldB = _Loader(T, wa, "A", tex), _Loader(T, wb, "B", tex)
    if tex:
        TA = TB = ""
    TC = wide(T, ws)[0]
    p = Program("MatMul_subgroup" + ("_epi" if epi is not None else ""), local_size=S)
    p.subgroups = True
    p.meta = Meta(*meta_fields(rank), *epilogue.fields(epi))
    p.extension("GL_KHR_shader_subgroup_shuffle")
    if "64" in TA + TB + TC:
        p.extension("GL_ARB_gpu_shader_int64")
    C = p.buffer("C", TC)
    if tex:
        p.buffer("A", "float", readonly=True, texel=TEXEL_FORMATS[wa])
        p.buffer("B", "float", readonly=True, texel=TEXEL_FORMATS[wb])
    else:
        p.buffer("A", TA, readonly=True)
        p.buffer("B", TB, readonly=True)
    ehoist, estore = epilogue.declare(p, epi, "M" if swap else "N")
    L = prologue(p, rank) + ehoist
    L += ["int lane = int(gl_SubgroupInvocationID);",
          f"int row0 = tmi * {TM}; int col0 = tni * {S * TN} + lane * {TN};",
          f"int Nw = N / {wb};"]
    # clamped addresses (in units of one wide load): loads never leave the operands
    if ta:   # A^T[k, m]: a wide load holds rows row0 + q*wa .. + wa - 1 (wa divides M)
        L += [f"int ar{q} = (aoff + min(row0 + {q * wa}, M - {wa})) / {wa};" for q in range(TM // wa)]
        L.append(f"int Mw = M / {wa};")
    else:
        L += [f"int ar{i} = (aoff + min(row0 + {i}, M - 1) * K) / {wa};" for i in range(TM)]
    if tb and ilv:   # lane l's columns one lane apart: tni*S*TN + l + S*j
        L += [f"int bc{j} = (boff + min(tni * {S * TN} + lane + {S * j}, N - 1) * K) / {wb};"
              for j in range(TN)]
    elif tb:   # B^T[n, k]: one row of B^T per column, read wb values of k at a time
        L += [f"int bc{j} = (boff + min(col0 + {j}, N - 1) * K) / {wb};" for j in range(TN)]
    else:
        L += [f"int bc{q} = (boff + min(col0 + {q * wb}, N - {wb})) / {wb};" for q in range(TN // wb)]
    L += [f"{T} acc_{i}_{j} = {T}(0);" for i in range(TM) for j in range(TN)]

    def load_b(krow: str, tag: str, indent: str) -> list[str]:
        out = []
        for q in range(TN // wb):
            out += [indent + x for x in ldB(f"bw{tag}_{q}", f"bc{q} + ({krow}) * Nw")]
            out += [f"{indent}{T} b{tag}_{q * wb + c} = {e};" for c, e in enumerate(ldB.unpack(f"bw{tag}_{q}"))]
        return out

    def load_bt_chunk(indent: str, kmax: str | None = None) -> list[str]:
        out = []
        for j in range(TN):
            for kq in range(chunk // wb):
                at = f"k0 / {wb} + {kq}" if kmax is None else f"min(k0 / {wb} + {kq}, {kmax} / {wb} - 1)"
                out += [indent + x for x in ldB(f"bt{j}_{kq}", f"bc{j} + {at}")]
                out += [f"{indent}{T} b{kq * wb + c}_{j} = {e};" for c, e in enumerate(ldB.unpack(f"bt{j}_{kq}"))]
        return out

    def pick(parts: list[str], sel: str) -> str:
        x = parts[-1]
        for c in range(len(parts) - 2, -1, -1):
            x = f"(({sel}) == {c} ? {parts[c]} : {x})"
        return x

    def chunk_body(tail: bool) -> list[str]:
        """One chunk of k at k0; tail: the last, shorter one: loads clamped into the
        operands and every product with k >= K made 0 * 0 (a clamped load may hold an
        inf, and inf * 0 is nan)."""
        out = []
        if ta:
            for q in range(TM // wa):
                kr = "k0 + lane" if not tail else "min(k0 + lane, K - 1)"
                out += ["  " + x for x in ldA(f"aw{q}", f"ar{q} + ({kr}) * Mw")]
                out += [f"  {T} a{q * wa + c}_0 = {e};" for c, e in enumerate(ldA.unpack(f"aw{q}"))]
        else:
            for i in range(TM):
                kw = f"k0 / {wa} + lane" if not tail else f"min(k0 / {wa} + lane, K / {wa} - 1)"
                out += ["  " + x for x in ldA(f"aw{i}", f"ar{i} + {kw}")]
                out += [f"  {T} a{i}_{c} = {e};" for c, e in enumerate(ldA.unpack(f"aw{i}"))]
        if tb:
            out += load_bt_chunk("  ", "K" if tail else None)
        else:
            for kk in range(chunk):
                out += load_b(f"k0 + {kk}" if not tail else f"min(k0 + {kk}, K - 1)", str(kk), "  ")
        if tail:
            out += [f"  bool in{kk} = k0 + {kk} < K;" for kk in range(chunk)]
            out += [f"  b{kk}_{j} = in{kk} ? b{kk}_{j} : {T}(0);" for kk in range(chunk) for j in range(TN)]
        for i in range(TM):
            for kk in range(chunk):
                a_src = f"a{i}_0, {kk}" if ta else f"a{i}_{kk % wa}, {kk // wa}"
                x = f"subgroupShuffle({a_src})"
                if tail:
                    x = f"(in{kk} ? {x} : {T}(0))"
                out.append(f"  {{ {T} x = {x};")
                out += ["    " + mad(T, f"acc_{i}_{j}", "x", f"b{kk}_{j}") for j in range(TN)]
                out.append("  }")
        return out

    # main loop: whole chunks of k; lane l holds A's values for its share of the chunk
    L += ["int k0 = 0;", f"for (; k0 + {chunk} <= K; k0 += {chunk}) {{"]
    L += chunk_body(False)
    L.append("}")
    if tail:
        # the rest of k as one more chunk: a tm-row tile loaded A at every remaining k,
        # every lane at one address, tm gathers per k (bench/tools/lvp_small_k.py)
        L += ["if (k0 < K) {"] + chunk_body(True) + ["}"]
    # remainder: one k at a time; every lane reads the same A element
    if not tail:
        L += ["for (; k0 < K; ++k0) {"]
        if tb:
            for j in range(TN):
                L += ["  " + x for x in ldB(f"btr{j}", f"bc{j} + k0 / {wb}")]
                L.append(f"  {T} br_{j} = {pick(ldB.unpack(f'btr{j}'), f'k0 % {wb}')};")
        else:
            L += load_b("k0", "r", "  ")
        if ta:
            for q in range(TM // wa):
                L += ["  " + x for x in ldA(f"awr{q}", f"ar{q} + k0 * Mw")]
        for i in range(TM):
            if ta:
                x = ldA.unpack(f"awr{i // wa}")[i % wa]
            else:
                L += ["  " + x for x in ldA(f"aw{i}", f"ar{i} + k0 / {wa}")]
                x = pick(ldA.unpack(f"aw{i}"), f"k0 % {wa}")
            L.append(f"  {{ {T} x = {x};")
            L += ["    " + mad(T, f"acc_{i}_{j}", "x", f"br_{j}") for j in range(TN)]
            L.append("  }")
        L.append("}")
    if tb and ilv:
        L += _unweave(T, TM, TN, S)
    # column-vector (bias) loads once per column, clamped into the row like B's loads
    L += estore.column_loads([f"min(col0 + {j}, N - 1)" for j in range(TN)]) if epi and not swap else []
    if swap:     # C^T's (row0 + i, col0 + j) is C's (col0 + j, row0 + i)
        for i in range(TM):
            L += [f"if (row0 + {i} < M) {{"]
            L += [f"  if (col0 + {j} < N) {C}[coff + (col0 + {j}) * M + row0 + {i}] = "
                  f"{estore(f'acc_{i}_{j}', f'col0 + {j}', f'row0 + {i}')};" for j in range(TN)]
            L += ["}"]
    elif ws > 1:   # ws divides N and TN: each run of ws columns is all in or all out
        for i in range(TM):
            L += [f"if (row0 + {i} < M) {{", f"  int cr = (coff + (row0 + {i}) * N + col0) / {ws};"]
            vals = [estore(f'acc_{i}_{j}', f'row0 + {i}', f'col0 + {j}', j) for j in range(TN)]
            L += [f"  if (col0 + {q * ws} < N) {C}[cr + {q}] = {pack_wide(T, ws, vals[q * ws:(q + 1) * ws])};"
                  for q in range(TN // ws)]
            L += ["}"]
    else:
        for i in range(TM):
            L += [f"if (row0 + {i} < M) {{", f"  int cr = coff + (row0 + {i}) * N + col0;"]
            L += [f"  if (col0 + {j} < N) {C}[cr + {j}] = "
                  f"{estore(f'acc_{i}_{j}', f'row0 + {i}', f'col0 + {j}', j)};" for j in range(TN)]
            L += ["}"]
    p.main(*L)
    return p
