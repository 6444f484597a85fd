"""Kernel programs: what a lowering builds, and the one place GLSL text is rendered.

Every kernel family describes a kernel as a `Program`: its tensor bindings (element type,
access, texel format), a named meta schema (`Meta`), shared arrays, extensions, named
libraries, helper code with the global names it declares, the body of `main()`, the
workgroup size, specialisation constants and flags that say how its invocations meet
(shared memory and barriers, subgroups). `render` prints the GLSL; `merged` prints
several programs as one kernel (`vulkan/merge.py` decides which) by concatenation: each
part's global names are renamed by the preprocessor (`#define o h1_o` ... `#undef o`), its
bindings numbered after the previous parts', its meta reads offset by the schema. Nothing
ever parses generated GLSL.

Meta: every kernel reads the shapes, strides and scalars of one dispatch from binding 0,
`int meta[]` (a recording replays with new bindings, and one SPIR-V module serves every
shape). A program declares its fields once, in order; the GLSL read and the host packing
both come from that declaration:

    p.meta = Meta(("n", 1), ("shape", R))       # a scalar and an array of R ints
    p.m("n"), p.m("shape", 2)                   # reads at fixed places: identifiers
    p.m("shape", "d")                           # a read at a computed place: a call
    p.meta.pack(n=12, shape=(3, 4))             # the ints for one dispatch

A read at a fixed place is an identifier (`m_n`, `m_shape_2`) that rendering binds either
to the buffer read in place or, as `hoist`, to a value read once at the top of `main()`:
lavapipe loads a storage-buffer value at a uniform address as one scalar only while every
invocation is known active, so after `if (i >= n) return;` it loads it lane by lane
behind a bounds check. A read at a computed place is a call `m_shape(d)` to a function
rendering defines.

>>> p = Program("AddOne")
>>> p.meta = Meta(("n", 1))
>>> o = p.buffer("o", "float")
>>> x = p.buffer("src", "float", readonly=True)
>>> p.main(f"uint i = gidx();", f"if (i >= uint({p.m('n')})) return;", f"{o}[i] = {x}[i] + 1.0;")
>>> print(p.render().split("// AddOne")[1].strip())
#define m_n meta[0]
layout(std430, set = 0, binding = 1) buffer B1_o { float o[]; };
layout(std430, set = 0, binding = 2) readonly buffer B2_src { float src[]; };
void main() {
  uint i = gidx();
  if (i >= uint(m_n)) return;
  o[i] = src[i] + 1.0;
}
>>> p.meta.pack(n=5).tolist()
[5]
"""
from __future__ import annotations

import dataclasses
import hashlib
import re
from functools import lru_cache
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

import numpy as np

VERSION = "#version 450\n"
SUBGROUPS = ("GL_KHR_shader_subgroup_basic", "GL_KHR_shader_subgroup_arithmetic")
# the helpers every kernel may call; a merged part gets its own (`merged`)
PRELUDE = """layout(std430, set = 0, binding = 0) readonly buffer Meta { int meta[]; };
// Grids larger than the device's per-dimension workgroup limit are folded into y.
uint gidx() { return gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x; }
uint group_id() { return gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x; }
uint lidx() { return gl_LocalInvocationID.x; }
// x / d for x < 2^31 as a multiply-high and a shift, (m, s) = kernels.divisor(d) from meta:
// integer division is a scalar loop over the lanes on lavapipe and ~20 instructions on a GPU
uint udiv(uint x, int m, int s) { uint hi, lo; umulExtended(x, uint(m), hi, lo); return s < 0 ? x : hi >> uint(s); }
"""
# names a program may not declare: the prelude's, and those a merged kernel uses
RESERVED = frozenset({"meta", "Meta", "gidx", "group_id", "lidx", "udiv", "hrel", "hcount", "HCount"})


class Meta:
    """A kernel's meta layout: named int32 fields in order, each of a fixed length.

    >>> m = Meta(("n", 1), ("shape", 2), ("strides", 2))
    >>> m.size, m.offset("strides")
    (5, 3)
    >>> m.pack(n=6, shape=(2, 3), strides=[3, 1]).tolist()
    [6, 2, 3, 3, 1]
    >>> m.pack(n=6, shape=(2, 3))
    Traceback (most recent call last):
    ...
    ValueError: meta: field 'strides' (2 ints) is missing
    """

    def __init__(self, *fields: tuple[str, int]):
        self.fields: tuple[tuple[str, int], ...] = tuple((str(n), int(k)) for n, k in fields)
        self._at: dict[str, tuple[int, int]] = {}
        off = 0
        for name, k in self.fields:
            if name in self._at:
                raise ValueError(f"meta: field {name!r} declared twice")
            if k < 0:
                raise ValueError(f"meta: field {name!r} has negative length {k}")
            self._at[name] = (off, k)
            off += k
        self.size = off

    def offset(self, name: str) -> int:
        """Where field name starts."""
        return self._field(name)[0]

    def length(self, name: str) -> int:
        return self._field(name)[1]

    def _field(self, name: str) -> tuple[int, int]:
        try:
            return self._at[name]
        except KeyError:
            raise KeyError(f"meta: no field {name!r}; fields: {[n for n, _ in self.fields]}") from None

    def pack(self, **values) -> np.ndarray:
        """The int64 meta of one dispatch: a scalar or a sequence of ints per field."""
        out = np.empty(self.size, dtype=np.int64)
        for name, (off, k) in self._at.items():
            if name not in values:
                raise ValueError(f"meta: field {name!r} ({k} ints) is missing")
            v = values[name]
            if isinstance(v, (int, np.integer)):
                if k != 1:
                    raise ValueError(f"meta: field {name!r} holds {k} ints, got one")
                out[off] = v
            else:
                v = list(v)
                if len(v) != k:
                    raise ValueError(f"meta: field {name!r} holds {k} ints, got {len(v)}")
                out[off:off + k] = v
        if len(values) != len(self._at):
            extra = sorted(set(values) - set(self._at))
            raise ValueError(f"meta: no fields {extra}; fields: {[n for n, _ in self.fields]}")
        return out

    def __repr__(self) -> str:
        return f"Meta{self.fields!r}"


@dataclass(frozen=True)
class Binding:
    """One tensor binding: `name[]` of GLSL type `type`, or with `texel` (a VkFormat) a
    float uniform texel buffer read with texelFetch. With `address`, `name[]` is reached
    through a buffer reference whose 64-bit address the recording pushes (push constants,
    in binding order): a tensor larger than one storage-buffer binding may span
    (`Program.addressed`). Its descriptor is still bound, clamped to the binding range."""
    name: str
    type: str
    readonly: bool = False
    texel: int | None = None
    address: bool = False


_SWIZZLE = (set("xyzw"), set("rgba"), set("stpq"))


def _check_name(name: str) -> None:
    # the preprocessor renames every token of a merged part's global names, so a name
    # that is also a swizzle (`v.x`) or one of the prelude's would be renamed wrongly
    if not name.isidentifier() or name in RESERVED or name.startswith(("m_", "h_", "gl_", "bda_")) or any(
            set(name) <= s for s in _SWIZZLE):
        raise ValueError(f"program: {name!r} cannot be a global name of a kernel (reserved, a swizzle, "
                         f"or prefixed m_/h_/gl_/bda_)")


@dataclass
class Program:
    """A compute kernel, structured until `render` prints it (see the module docstring).

    Bodies call `gidx()` (the invocation's global index), `group_id()` and `lidx()` (its
    workgroup and its index within it); a program that reads the grid builtins
    (gl_WorkGroupID, gl_LocalInvocationID, ...) itself says `grid=True` and is never merged.
    """
    name: str
    local_size: int = 256
    meta: Meta = field(default_factory=Meta)
    bindings: list = field(default_factory=list)
    extensions: list = field(default_factory=list)
    libraries: dict = field(default_factory=dict)    # name -> GLSL shared by any programs
    code: list = field(default_factory=list)         # helper code at file scope, in order
    names: list = field(default_factory=list)        # global names the helper code declares
    shared_arrays: list = field(default_factory=list)  # (name, type, length)
    body: list = field(default_factory=list)         # main()'s lines
    spec: tuple = ()           # specialisation constants by constant_id 1, 2, ... (0: local size)
    barriers: bool = False     # invocations meet through barriers/shared memory: own workgroup size only
    subgroups: bool = False    # uses subgroup operations
    grid: bool = False         # reads grid builtins itself: never merged
    # never merged with other dispatches: a long-running kernel with loops (lavapipe ended a
    # merged kernel's loops of more than 65535 iterations early) gains nothing from merging
    alone: bool = False
    _reads: dict = field(default_factory=dict, repr=False)    # fixed meta reads: identifier -> index
    _calls: set = field(default_factory=set, repr=False)       # array fields read at computed places
    _source: dict = field(default_factory=dict, repr=False)
    _variants: dict = field(default_factory=dict, repr=False)   # `addressed` programs by bindings
    _addresses: tuple = ()     # set by `addressed` (a recording asks at every dispatch)
    _idents: frozenset | None = field(default=None, init=False, repr=False, compare=False)

    # ---------------------------------------------------------------- building

    def buffer(self, name: str, type: str, readonly: bool = False, texel: int | None = None) -> str:
        """Declare the next tensor binding (1, 2, ...); returns its name."""
        _check_name(name)
        self.bindings.append(Binding(name, type, readonly, texel))
        return name

    def extension(self, name: str) -> None:
        if name not in self.extensions:
            self.extensions.append(name)

    def library(self, name: str, text: str) -> None:
        """GLSL functions shared with other programs: a merged kernel holds each once."""
        self.libraries.setdefault(name, text)

    def add(self, text: str, names: Iterable[str] = ()) -> None:
        """Helper code at file scope declaring the global names `names` (functions,
        constants): a merged kernel renames them per part."""
        for n in names:
            _check_name(n)
            if n not in self.names:
                self.names.append(n)
        self.code.append(text if text.endswith("\n") else text + "\n")

    def shared(self, name: str, type: str, length: int) -> str:
        """A shared-memory array (implies `barriers`)."""
        _check_name(name)
        self.shared_arrays.append((name, type, int(length)))
        self.barriers = True
        return name

    def main(self, *lines: str) -> None:
        self.body.extend(lines)

    def m(self, name: str, i: int | str | None = None) -> str:
        """GLSL reading meta field name: a scalar field (i None), element i of an array
        field (an int: a fixed place) or element `i` where i is a GLSL int expression."""
        off, k = self.meta._field(name)
        if i is None:
            if k != 1:
                raise ValueError(f"{self.name}: meta field {name!r} holds {k} ints: give an index")
            ident = f"m_{name}"
            self._reads[ident] = off
            return ident
        if isinstance(i, (int, np.integer)):
            if not 0 <= i < k:
                raise IndexError(f"{self.name}: meta field {name!r} has {k} ints, index {i}")
            ident = f"m_{name}_{int(i)}"
            self._reads[ident] = off + int(i)
            return ident
        self._calls.add(name)
        return f"m_{name}({i})"

    # ---------------------------------------------------------------- facts

    @property
    def n_tensors(self) -> int:
        return len(self.bindings)

    @property
    def texels(self) -> tuple:
        """Per tensor binding, its texel VkFormat or None; () when none is a texel."""
        t = tuple(b.texel for b in self.bindings)
        return t if any(f is not None for f in t) else ()

    @property
    def writes(self) -> tuple:
        """The tensor bindings (0-based, as in a dispatch's views) the kernel may write."""
        return tuple(i for i, b in enumerate(self.bindings) if not b.readonly and b.texel is None)

    @property
    def mergeable(self) -> bool:
        return not self.grid and not self.alone and not self.spec and not self.addresses

    @property
    def addresses(self) -> tuple:
        """The tensor bindings (0-based) reached by address (`Binding.address`)."""
        return self._addresses

    @property
    def push_bytes(self) -> int:
        """Push-constant bytes the kernel reads: one 64-bit address per addressed binding."""
        return 8 * len(self._addresses)

    def addressed(self, bindings: Sequence[int]) -> "Program":
        """This program with the storage bindings `bindings` (0-based, as a dispatch's
        views) reached through buffer references (`Binding.address`): the same body, each
        such `name[i]` a load or store at the pushed address. A dispatch whose view
        exceeds the device's binding range runs this variant (`executor.LowerCtx`); one
        per set of bindings, made once.

        >>> p = Program("Neg")
        >>> o, x = p.buffer("o", "float"), p.buffer("x0", "float", readonly=True)
        >>> p.main(f"{o}[gidx()] = -{x}[gidx()];")
        >>> q = p.addressed([1])
        >>> q.addresses, q.push_bytes, q.mergeable, q is p.addressed([1])
        ((1,), 8, False, True)
        >>> print("".join(l for l in q.render().splitlines(True) if "x0" in l), end="")
        layout(buffer_reference, std430, buffer_reference_align = 16) readonly buffer A2_x0 { float x0[]; };
        layout(push_constant) uniform Addresses { A2_x0 bda_x0; };
        #define x0 bda_x0.x0
          o[gidx()] = -x0[gidx()];
        """
        key = tuple(sorted(set(self._addresses) | {int(i) for i in bindings}))
        q = self._variants.get(key)
        if q is not None:
            return q
        bs = list(self.bindings)
        for i in key:
            b = bs[i]
            if b.texel is not None:
                raise ValueError(f"{self.name}: binding {b.name!r} is a texel buffer, not reached by address")
            bs[i] = Binding(b.name, b.type, b.readonly, None, True)
        q = dataclasses.replace(self, bindings=bs, extensions=list(self.extensions), _source={}, _variants={},
                                _addresses=key)
        q.extension("GL_EXT_buffer_reference")
        self._variants[key] = q
        return q

    def identifiers(self) -> frozenset:
        """Every identifier the program's own text names (helpers, declarations, main()),
        read once: a merged kernel asks for each part's, not for a scan of its whole text."""
        if self._idents is None:
            self._idents = frozenset(_IDENT.findall("".join(self.code + self.body + self._decls(0))))
        return self._idents

    def globals(self) -> list[str]:
        """Every name this program declares at file scope."""
        out = [b.name for b in self.bindings] + list(self.names) + [s[0] for s in self.shared_arrays]
        return out + list(self._reads) + [f"m_{f}" for f in sorted(self._calls)] + ["main"]

    # ---------------------------------------------------------------- rendering

    def hoisted(self, hoist: int) -> bool:
        """Whether rendering with `hoist` (a minimum count, 0: never) reads the fixed
        meta values first thing in main()."""
        return bool(hoist) and len(self._reads) >= hoist

    def render(self, hoist: int = 0) -> str:
        """The GLSL source. hoist: read the fixed meta values first thing in main() when
        there are at least this many of them (0: read in place)."""
        h = self.hoisted(hoist)
        src = self._source.get(h)
        if src is None:
            src = self._source[h] = _render([(self, 0, None)], self.local_size, self.spec, h)
        return src

    def key(self, hoist: int = 0) -> str:
        """What identifies the compiled kernel: the source and the binding kinds (kept with
        the rendered source: a program is not changed once rendered)."""
        k = self._source.get(("key", hoist))
        if k is None:
            k = self._source[("key", hoist)] = hashlib.sha256(
                (self.render(hoist) + repr((self.texels, self.spec, self.local_size))).encode()).hexdigest()
        return k

    def _part(self, base: int, hoist_all: bool) -> list[str]:
        """Declarations, helpers and main() of this program, meta read at base + offset:
        reads at fixed places in place (#define) or, hoist_all, as globals main() sets."""
        out = []
        for ident, off in self._reads.items():
            out.append(f"int {ident};\n" if hoist_all else f"#define {ident} meta[{base + off}]\n")
        for f in sorted(self._calls):
            out.append(f"int m_{f}(int i) {{ return meta[{base + self.meta.offset(f)} + i]; }}\n")
        return out

    def _decls(self, first: int) -> list[str]:
        out = []
        addressed = []
        for j, b in enumerate(self.bindings):
            n = first + j
            if b.texel is not None:
                u = "u" if b.type.startswith("u") else ""     # an unsigned texel: raw bits
                out.append(f"layout(set = 0, binding = {n}) uniform {u}samplerBuffer {b.name};\n")
            elif b.address:
                # views lie at least 16 bytes apart (minStorageBufferOffsetAlignment, 256 B
                # between tensors), which the recording checks
                ro = "readonly " if b.readonly else ""
                out.append(f"layout(buffer_reference, std430, buffer_reference_align = 16) {ro}buffer "
                           f"A{n}_{b.name} {{ {b.type} {b.name}[]; }};\n")
                addressed.append((n, b.name))
            else:
                ro = "readonly " if b.readonly else ""
                out.append(f"layout(std430, set = 0, binding = {n}) {ro}buffer B{n}_{b.name} "
                           f"{{ {b.type} {b.name}[]; }};\n")
        if addressed:
            # `name[i]` stays what the body says: the name stands for the reference's array
            members = " ".join(f"A{n}_{name} bda_{name};" for n, name in addressed)
            out.append(f"layout(push_constant) uniform Addresses {{ {members} }};\n")
            out += [f"#define {name} bda_{name}.{name}\n" for _, name in addressed]
        out += [f"shared {t} {n}[{k}];\n" for n, t, k in self.shared_arrays]
        return out


def _render(parts: Sequence[tuple], local_size: int, spec: tuple, hoist: bool,
            own=None, code: Sequence[str] = (), main: Sequence[str] | None = None) -> str:
    """GLSL for parts [(program, meta base, rename prefix or None)]: one program alone
    (prefix None), or a merged kernel's parts after code, each with own(program) (its
    gidx, group_id and lidx), and the merged main's lines."""
    exts = list(SUBGROUPS)
    libs: dict[str, str] = {}
    for p, _, _ in parts:
        exts += [e for e in p.extensions if e not in exts]
        for k, v in p.libraries.items():
            libs.setdefault(k, v)
    src = [VERSION] + [f"#extension {e} : enable\n" for e in exts]
    if spec:
        src.append("layout(local_size_x_id = 0, local_size_y = 1, local_size_z = 1) in;\n")
    else:
        src.append(f"layout(local_size_x = {local_size}, local_size_y = 1, local_size_z = 1) in;\n")
    src.append(PRELUDE)
    head, src = src, list(code)
    used = set(_IDENT.findall("".join(list(code) + list(main or ()))))
    first = 1
    for p, base, pre in parts:
        src.append(f"// {p.name}\n")
        names = p.globals()
        if pre is not None:
            src += [f"#define {n} {pre}{n}\n" for n in names + ["gidx", "group_id", "lidx"]]
            mine = own(p)
            src += mine
            used.update(_IDENT.findall("".join(mine)))
        used |= p.identifiers()
        src += p._part(base, hoist or pre is not None)
        src += p._decls(first)
        src += p.code
        src.append("void main() {\n")
        if hoist and pre is None:
            src += [f"  {ident} = meta[{base + off}];\n" for ident, off in p._reads.items()]
        src += [f"  {l}\n" for l in p.body]
        src.append("}\n")
        if pre is not None:
            src += [f"#undef {n}\n" for n in names + ["gidx", "group_id", "lidx"]]
        first += p.n_tensors
    if main is not None:
        src += ["void main() {\n"] + [f"  {l}\n" for l in main] + ["}\n"]
    kept = _used_items(libs, used)
    head += [f"// library {k}\n{v}" + ("" if v.endswith("\n") else "\n") for k, v in kept.items()]
    return "".join(head + src)


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


@lru_cache(maxsize=64)
def library_items(text: str) -> tuple[tuple[str | None, str, frozenset], ...]:
    r"""A library's top-level items in order: (the name it declares, its text, the
    identifiers it names). An item starts at a line in column 0 that begins with a letter
    (the comments and blank lines above it are its own); its name is the last identifier
    before the first '(', '[' or '=' of that line. A directive is an item without a name
    (always kept).

    >>> lib = "// one\nfloat a() { return 1.0; }\nfloat b() {\n  return a();\n}\n"
    >>> [(n, sorted(u & {'a', 'b'})) for n, _, u in library_items(lib)]
    [('a', ['a']), ('b', ['a', 'b'])]
    """
    items: list[list] = []
    pending: list[str] = []
    for line in text.splitlines(keepends=True):
        c = line[:1]
        if c.isalpha() or c == "_":
            ids = _IDENT.findall(re.split(r"[(\[=]", line, maxsplit=1)[0])
            items.append([ids[-1] if ids else None, pending + [line]])
            pending = []
        elif c == "#":
            items.append([None, pending + [line]])
            pending = []
        elif c == "/" or not line.strip() or not items:
            pending.append(line)
        else:                       # the current item's body or its closing brace
            items[-1][1] += pending + [line]
            pending = []
    if pending:
        items.append([None, pending])
    # names in comments are not references (a comment naming a function keeps nothing)
    return tuple((n, "".join(t), frozenset(_IDENT.findall(_COMMENT.sub(" ", "".join(t))))) for n, t in items)


@lru_cache(maxsize=64)
def _library_index(texts: tuple) -> tuple[list, dict, set]:
    """The items of the libraries `texts` ((name, text) pairs): [(library, text)] in
    order, each named item's indices by its name with the names it refers to, and the
    indices of the items kept whatever is used (directives) with the names those name."""
    items, by_name, always, roots = [], {}, set(), set()
    for k, v in texts:
        for n, t, u in library_items(v):
            if n is None:
                always.add(len(items))
                roots |= u
            else:
                by_name.setdefault(n, []).append((len(items), u))
            items.append((k, t))
    return items, by_name, (always, roots)


def _used_items(libs: Mapping[str, str], used: set) -> dict[str, str]:
    """The libraries cut to the items that `used` (the kernel's own identifiers) names, directly
    or through other items: an unused function still costs the driver its translation
    (lavapipe turns every function of a module into NIR before dropping the unreached ones,
    in every process), and the math library is most of a kernel's source."""
    items, by_name, (keep, roots) = _library_index(tuple(libs.items()))
    keep = set(keep)
    todo = [x for x in used | roots if x in by_name]
    seen = set(todo)
    while todo:
        for q, u in by_name[todo.pop()]:
            keep.add(q)
            todo += [x for x in u if x in by_name and x not in seen]
            seen.update(u)
    out: dict[str, str] = {}
    for q in sorted(keep):
        k, t = items[q]
        out[k] = out.get(k, "") + t
    return {k: out[k] for k in libs if k in out}


def merged(parts: Sequence[tuple[Program, int, int]], L: int, G: int, counter: bool = False,
           turns: int = 0) -> Program:
    """One program running parts [(program, workgroups, meta base)] as G units of L
    invocations, each unit running its share of every part's workgroups (their count in
    workgroups of L, a multiple of G) in turn. A unit is a workgroup, or with counter
    (a zeroed uint buffer bound last; L a subgroup) one turn of a few workgroups' loop,
    each taking the next unit from the counter, at most `turns` of them (0: until none
    is left; the dispatch then has enough workgroups). Every fixed meta read is done first thing.
    A part's bindings follow the previous parts'; its meta lies at its base. With counter,
    G is read from the meta after the parts' (field `units`): one kernel for every G."""
    ps = []
    for q, (p, groups, base) in enumerate(parts):
        if not p.mergeable:
            raise ValueError(f"merge: {p.name} reads the grid itself or is specialised")
        Q = p.local_size // L
        if p.local_size % L or (Q > 1 and p.barriers):
            raise ValueError(f"merge: {p.name} (workgroups of {p.local_size}) cannot run in units of {L}")
        ps.append((p, base, f"h{q}_", Q, groups * Q // G))

    units = {id(p): Q for p, _, _, Q, _ in ps}

    def own(p):
        Q = units[id(p)]
        if Q == 1:
            return ["uint group_id() { return hrel; }\n", "uint lidx() { return gl_LocalInvocationID.x; }\n",
                    f"uint gidx() {{ return group_id() * {p.local_size}u + lidx(); }}\n"]
        return [f"uint group_id() {{ return hrel / {Q}u; }}\n",
                f"uint lidx() {{ return (hrel % {Q}u) * {L}u + gl_LocalInvocationID.x; }}\n",
                f"uint gidx() {{ return group_id() * {p.local_size}u + lidx(); }}\n"]

    n = sum(p.n_tensors for p, *_ in ps)
    code = ["uint hrel;   // this workgroup's index within its part\n"]
    main = [f"{pre}{ident} = meta[{base + off}];" for p, base, pre, _, _ in ps for ident, off in p._reads.items()]
    total = sum(p.meta.size for p, *_ in ps)
    if counter:
        # the unit count is meta (after the parts'), not code: one kernel for every count
        main.append(f"uint hunits = uint(meta[{total}]);")
    ind = ""
    if counter is False:
        main.append("uint hg = group_id();")
    else:
        code.append(f"layout(std430, set = 0, binding = {n + 1}) buffer HCount {{ uint hcount[]; }};\n")
        main += ["for (;;) {" if not turns else f"for (uint ht = 0u; ht < {turns}u; ++ht) {{", "  uint hn = 0u;", "  if (subgroupElect()) hn = atomicAdd(hcount[0], 1u);",
                 "  uint hg = subgroupMax(hn);", "  if (hg >= hunits) break;"]
        ind = "  "
    for p, _, pre, _, r in ps:
        if r == 1:
            main.append(f"{ind}hrel = hg; {pre}main();")
        else:
            main.append(f"{ind}for (uint i = 0u; i < {r}u; ++i) {{ hrel = hg * {r}u + i; {pre}main(); }}")
    if counter:
        main.append("}")
    src = _render([(p, base, pre) for p, base, pre, _, _ in ps], L, (), False, own, code, main)
    names = [p.name for p, *_ in ps]
    out = Program("+".join(names) if len(names) <= 4 else f"{names[0]}+{len(names) - 1}_more", local_size=L)
    out.meta = Meta(("parts", total), ("units", 1)) if counter else Meta(("parts", total))
    out.bindings = [b for p, *_ in ps for b in p.bindings]
    if counter:
        out.bindings.append(Binding("hcount", "uint"))
    out.grid = True
    out._source = {False: src, True: src}
    return out


def pack(program: Program, meta: Mapping | np.ndarray | Sequence[int]) -> np.ndarray:
    """A dispatch's meta for program: a mapping of fields (`Meta.pack`) or ints already packed."""
    if isinstance(meta, Mapping):
        return program.meta.pack(**meta)
    m = np.asarray(meta, dtype=np.int64).reshape(-1)
    if m.size != program.meta.size:
        raise ValueError(f"{program.name}: {m.size} meta ints for a schema of {program.meta.size} "
                         f"({program.meta!r})")
    return m
