"""Errors a user can provoke: each is the documented type, raised at the call, with a
message that names the operator and the offending shapes or dtypes (and what would be
valid), so it can be acted on without reading vkml's source."""
from __future__ import annotations

import re

import numpy as np
import pytest

import vkml
import vkml.numpy as vnp
from vkml.array import bind
from vkml.trace.ops import OpKind


def raises(exc, *fragments):
    """pytest.raises(exc) whose message contains every fragment (case-insensitive)."""
    return pytest.raises(exc, match="(?is)" + "".join(f"(?=.*{re.escape(f)})" for f in fragments))


def test_error_types_are_the_builtin_ones():
    assert issubclass(vkml.ShapeError, ValueError)
    assert issubclass(vkml.DTypeError, TypeError)
    assert issubclass(vkml.ConcretizationError, TypeError)


# --------------------------------------------------------------------------- shapes


def test_broadcast_mismatch():
    with raises(vkml.ShapeError, "add", "(2, 3)", "(4,)"):
        vnp.add(vnp.ones((2, 3)), vnp.ones((4,)))
    with raises(vkml.ShapeError, "(2, 3)", "(4,)"):
        vnp.ones((2, 3)) * vnp.ones((4,))
    with raises(vkml.ShapeError, "where", "(2,)", "(3,)"):
        vnp.where(vnp.ones(2) > 0, vnp.ones(2), vnp.ones(3))
    with raises(vkml.ShapeError, "expand", "(2, 3)", "(3, 3)"):
        vnp.broadcast_to(vnp.ones((2, 3)), (3, 3))


@pytest.mark.parametrize("call, name", [
    (lambda x: vnp.sum(x, axis=2), "sum"),
    (lambda x: vnp.mean(x, axis=-3), "mean"),
    (lambda x: vnp.max(x, axis=(0, 5)), "max"),
    (lambda x: vnp.argmax(x, axis=2), "argmax"),
    (lambda x: vnp.flip(x, 2), "flip"),
    (lambda x: vnp.expand_dims(x, 4), "expand_dims"),
    (lambda x: vnp.squeeze(x, 2), "squeeze"),
    (lambda x: vnp.concatenate([x, x], axis=2), "concatenate"),
    (lambda x: vnp.stack([x, x], axis=4), "stack"),
    (lambda x: vnp.take(x, [0], axis=-3), "take"),
    (lambda x: vnp.transpose(x, (0, 2)), "transpose"),
    (lambda x: vnp.split(x, 2, axis=3), "split"),
])
def test_bad_axis(call, name):
    with raises(vkml.ShapeError, name, "axis"):
        call(vnp.ones((2, 3)))


def test_repeated_axis():
    with raises(vkml.ShapeError, "sum", "repeated"):
        vnp.sum(vnp.ones((2, 3)), axis=(1, -1))


def test_reshape_size_mismatch():
    with raises(vkml.ShapeError, "reshape", "(2, 3)", "(4,)", "6"):
        vnp.reshape(vnp.ones((2, 3)), (4,))
    with raises(vkml.ShapeError, "reshape", "(2, 3)", "(4, -1)"):
        vnp.ones((2, 3)).reshape(4, -1)
    with raises(vkml.ShapeError, "reshape", "-1"):
        vnp.reshape(vnp.ones(6), (-1, -1))


def test_matmul_contraction_mismatch():
    with raises(vkml.ShapeError, "matmul", "(2, 3)", "(4, 5)", "3 != 4"):
        vnp.matmul(vnp.ones((2, 3)), vnp.ones((4, 5)))
    with raises(vkml.ShapeError, "matmul", "(2, 3)"):
        vnp.ones((2, 3)) @ vnp.ones((2, 3))
    with raises(vkml.ShapeError, "matmul", "(3,)", "(4,)"):
        vnp.ones(3) @ vnp.ones(4)
    with raises(vkml.ShapeError, "matmul", "0-d"):
        vnp.matmul(vnp.asarray(1.0), vnp.ones(3))


def test_movement_shape_errors():
    with raises(vkml.ShapeError, "concat", "(2, 3)", "(2, 4)"):
        vnp.concatenate([vnp.ones((2, 3)), vnp.ones((2, 4))])
    with raises(vkml.ShapeError, "stack", "(2,)", "(3,)"):
        vnp.stack([vnp.ones(2), vnp.ones(3)])
    with raises(vkml.ShapeError, "squeeze", "(2, 3)", "not 1"):
        vnp.squeeze(vnp.ones((2, 3)), 0)
    with raises(vkml.ShapeError, "split", "3"):
        vnp.split(vnp.ones((2, 3)), 2, axis=1)
    with raises(vkml.ShapeError, "concatenate", "zero-dimensional"):
        vnp.concatenate([vnp.asarray(1.0), vnp.asarray(2.0)])
    with raises(vkml.ShapeError, "pad", "non-negative"):
        vnp.pad(vnp.ones(3), ((-1, 0),))
    with raises(vkml.ShapeError, "permute", "(2, 3)"):
        bind(OpKind.Permute, [vnp.ones((2, 3))], perm=(0, 0))
    with raises(vkml.ShapeError, "slice", "step 0"):
        bind(OpKind.Slice, [vnp.ones(3)], starts=(0,), stops=(3,), steps=(0,))


# --------------------------------------------------------------------------- dtypes


@pytest.mark.parametrize("value", [np.array([1 + 2j]), np.ones(2, np.float128),
                                   np.array(["a"]), np.ones(2, np.complex64)])
def test_unsupported_input_dtype(value):
    with raises(vkml.DTypeError, "asarray", str(value.dtype), "float32"):
        vnp.asarray(value)


def test_unsupported_dtype_request():
    with raises(vkml.DTypeError, "float128", "bool, int32, float16, bfloat16, float32, float64"):
        vnp.zeros(3, dtype=np.float128)
    with raises(vkml.DTypeError, "complex"):
        vnp.asarray([1.0, 2.0], dtype=np.complex64)
    with raises(vkml.DTypeError, "float128"):
        vnp.ones(2).astype(np.float128)
    with raises(vkml.DTypeError, "complex"):
        vnp.ones(2) + np.ones(2, np.complex64)       # NumPy operands are checked too


def test_operator_dtype_checked_at_bind():
    # vkml.numpy converts for you; the operator itself states what it takes
    assert vnp.sin(vnp.asarray([1, 2])).dtype == np.float32
    with raises(vkml.DTypeError, "Sin", "int32", "float32, float64"):
        bind(OpKind.Sin, [vnp.asarray([1, 2])])
    with raises(vkml.DTypeError, "Div", "int32"):
        bind(OpKind.Div, [vnp.asarray([1]), vnp.asarray([2])])
    with raises(vkml.DTypeError, "Add", "float32", "int32"):
        bind(OpKind.Add, [vnp.ones(2), vnp.ones(2, np.int32)])
    with raises(vkml.DTypeError, "Where", "condition", "float32"):
        bind(OpKind.Where, [vnp.ones(2), vnp.ones(2), vnp.ones(2)])
    with raises(vkml.DTypeError, "IndexSelect", "index", "float32"):
        bind(OpKind.IndexSelect, [vnp.ones(3), vnp.ones(2)], axis=0)


def test_take_with_float_indices():
    with raises(vkml.DTypeError, "take", "float32"):
        vnp.take(vnp.ones(3), vnp.asarray([0.0, 1.0]))


def test_int64_overflow_on_asarray():
    ok = vnp.asarray(np.array([2**31 - 1, -2**31], np.int64))
    assert ok.dtype == np.int32 and np.asarray(ok).tolist() == [2**31 - 1, -2**31]
    with raises(vkml.DTypeError, "asarray", "int32", str(2**40)):
        vnp.asarray(np.array([1, 2**40], np.int64))
    with raises(vkml.DTypeError, "asarray", "int32", str(-2**31 - 1)):
        vnp.asarray([-2**31 - 1])
    with raises(vkml.DTypeError, "asarray", str(2**31)):
        vnp.asarray(2**31)


# --------------------------------------------------------------------------- device limits


def test_too_large_tensor_raises_before_allocating():
    from vkml.vulkan import runtime
    rt = runtime.get()
    dev = rt.dev
    limit = dev.max_tensor_bytes      # one allocation (lavapipe: 2 GiB), past one binding's range
    name = "maxMemoryAllocationSize" if dev.max_allocation <= dev.max_buffer_size else "maxBufferSize"
    n = limit // 4 + 2_000_000        # just over the device's limit
    blocks, live = len(rt.allocator.blocks), rt.allocator.live_bytes
    with raises(ValueError, "Full", name, f"{limit / 2**20:.1f} MiB",
                f"{n * 4 / 2**20:.1f} MiB", f"{n * 4:,} bytes", f"{limit:,} bytes"):
        vnp.zeros((n,), vnp.float32)
    assert len(rt.allocator.blocks) == blocks and rt.allocator.live_bytes == live
    # the runtime is still usable afterwards
    assert float(vnp.ones(3).sum()) == 3.0


@pytest.mark.parametrize("extra", [4, 20_000])
def test_too_large_tensor_message_tells_the_sizes_apart(extra):
    """Issue 14: 128.02 MiB printed as "128.0 MiB exceeds ... 128 MiB"."""
    from vkml.vulkan import runtime
    limit = runtime.get().dev.max_tensor_bytes
    n = (limit + extra) // 4
    with pytest.raises(ValueError) as e:
        vnp.zeros((n,), vnp.float32)
    got, lim = re.findall(r"([\d,]+) bytes \(([\d.]+) MiB\)", str(e.value))
    assert got[0] == f"{n * 4:,}" and lim[0] == f"{limit:,}"
    digits = len(got[1].partition(".")[2])   # the MiB shown, rounded to as many digits as differ
    assert float(got[1]) != float(lim[1]) and abs(float(got[1]) - n * 4 / 2**20) <= 0.5 * 10**-digits


# --------------------------------------------------------------------------- tracing


@pytest.mark.parametrize("read, what", [
    (float, "item()"), (lambda x: x.item(), "item()"), (bool, "bool()"),
    (np.asarray, "np.asarray"), (lambda x: x.numpy(), "np.asarray"),
])
def test_reading_a_traced_value(read, what):
    def f(x):
        read(x)
        return x
    with raises(vkml.ConcretizationError, what, "(1,)", "float32", "traced"):
        vkml.make_graph(f, vnp.ones(1))


def test_leaked_tracer():
    leaked = []
    vkml.make_graph(lambda x: leaked.append(x * 2.0) or x, vnp.ones(2))
    with pytest.raises(vkml.LeakedTracerError, match="traced"):
        leaked[0] + vnp.ones(2)


# --------------------------------------------------------------------------- host access


def test_scalar_conversions_of_non_scalars():
    with raises(ValueError, "item()", "(2,)"):
        vnp.ones(2).item()
    with raises(ValueError, "(2, 2)", "ambiguous"):
        bool(vnp.ones((2, 2)))
    with raises(TypeError, "0-d"):
        len(vnp.asarray(1.0))
    with raises(TypeError, "float32"):
        [1, 2][vnp.asarray(1.0)]


def test_arrays_are_immutable_and_not_constructed_directly():
    with raises(TypeError, "asarray"):
        vkml.Array([1, 2])
    a = vnp.ones(2)
    with pytest.raises(TypeError):
        a[0] = 2.0


def test_nn_and_custom_vjp_error_types():
    """A bad checkpoint and a malformed custom_vjp bwd raise ValueErrors (the structure
    error is also JAX's TypeError)."""
    from vkml.autodiff import CustomVJPError
    from vkml.nn import SerializationError
    assert issubclass(SerializationError, ValueError)
    assert issubclass(CustomVJPError, ValueError) and issubclass(CustomVJPError, TypeError)
    with raises(ValueError, "Conv2d", "padding='same' is not supported for strided convolutions"):
        vkml.nn.Conv2d(1, 1, 3, stride=2, padding="same")
