"""W consecutive elements as one GLSL value: what the wide loads and stores of the
elementwise and window kernels move (a 4-vector, or for W = 8 four uint64 words of two
32-bit elements each: lavapipe pays per loaded component and lane)."""
from __future__ import annotations

VEC4 = {"float": "vec4", "double": "dvec4", "int": "ivec4"}


def wide_type(T: str, W: int) -> str:
    """The GLSL type holding W (4 or 8) consecutive elements of T.

    >>> wide_type("float", 4), wide_type("int", 8)
    ('vec4', 'u64vec4')
    """
    return "u64vec4" if W == 8 else VEC4[T]


def unpack(T: str, W: int, v: str) -> list[str]:
    """GLSL of the W elements of the wide value v.

    >>> unpack("float", 4, "l")
    ['l.x', 'l.y', 'l.z', 'l.w']
    """
    if W == 4:
        return [f"{v}.{c}" for c in "xyzw"]
    conv = "uintBitsToFloat" if T == "float" else "ivec2"
    return [f"{conv}(unpackUint2x32({v}.{c}))[{k}]" for c in "xyzw" for k in range(2)]


def pack(T: str, W: int, vals: list[str]) -> str:
    """GLSL building the `wide_type(T, W)` value of W element expressions (in order).

    >>> pack("float", 4, ["a", "b", "c", "d"])
    'vec4(a, b, c, d)'
    """
    if W == 4:
        return f"{VEC4[T]}({', '.join(vals)})"
    conv = "floatBitsToUint" if T == "float" else "uvec2"
    pairs = [f"packUint2x32({conv}({T[0] if T != 'float' else ''}vec2({vals[2 * i]}, {vals[2 * i + 1]})))"
             for i in range(4)]
    return f"u64vec4({', '.join(pairs)})"
