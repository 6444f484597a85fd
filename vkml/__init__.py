"""vkml: JAX-style automatic differentiation on Vulkan compute shaders.

>>> import vkml, vkml.numpy as vnp
>>> float(vnp.sum(vnp.ones((2, 3))))
6.0
"""
from .array import Array, ConcretizationError
from .autodiff import (checkpoint, custom_vjp, grad, hessian, jacfwd, jacrev, jvp, no_grad, remat,
                       stop_gradient, value_and_grad, vjp)
from .graphs import make_graph
from .jit import jit
from .vmap import vmap
from .tensor import Tensor
from .tensor_methods import cat, stack
from .trace.dtypes import DTypeError
from .trace.shapes import ShapeError
from .trace.tracer import LeakedTracerError
from .vulkan.device import devices
from .vulkan.memory import OutOfMemoryError
from . import tree_util
from . import numpy, random, nn, optim, debug, distributed

__all__ = ["Tensor", "cat", "stack", "checkpoint", "custom_vjp", "grad", "hessian", "jacfwd", "jacrev", "jvp", "no_grad", "remat",
           "stop_gradient", "value_and_grad", "vjp", "Array", "ConcretizationError", "DTypeError", "ShapeError", "LeakedTracerError",
           "OutOfMemoryError",
           "devices", "jit", "vmap", "make_graph", "tree_util", "numpy", "random", "nn", "optim", "debug", "distributed"]
__version__ = "0.1.0"
