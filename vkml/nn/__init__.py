"""vkml.nn: neural-network layers as pytrees, the functional ops, and checkpoints.

>>> import vkml, vkml.numpy as vnp, vkml.nn as nn
>>> model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
>>> grads = vkml.grad(lambda m, x: m(x).sum())(model, vnp.ones((5, 3)))
>>> [g.shape for g in grads.parameters()]
[(4, 3), (4,), (2, 4), (2,)]
"""
from . import functional
from .base import IncompatibleKeys, Module, StateDictError
from .modules import (AvgPool2d, BatchNorm2d, Conv2d, Dropout, Embedding, Flatten, GELU, Identity,
                      Lambda, LayerNorm, Linear, MaxPool2d, ReLU, Sequential, Sigmoid, SiLU, Tanh)
from .layers import (CELU, ELU, GLU, SELU, Conv1d, ConvTranspose1d, ConvTranspose2d, GroupNorm,
                     Hardsigmoid, Hardswish, Hardtanh, InstanceNorm2d, LeakyReLU, LogSigmoid,
                     LogSoftmax, Mish, ModuleDict, ModuleList, MultiheadAttention, ReLU6, RMSNorm,
                     Softmax, Softmin, Softplus, Softsign, AdaptiveAvgPool2d, Upsample)
from .recurrent import GRU, GRUCell, LSTM, LSTMCell
from .serialization import SerializationError, load, save, tree_paths

__all__ = ["functional", "Module", "Linear", "Conv2d", "MaxPool2d", "AvgPool2d", "BatchNorm2d",
           "LayerNorm", "Dropout", "Embedding", "Flatten", "ReLU", "GELU", "SiLU", "Sigmoid", "Tanh",
           "Identity", "Lambda", "Sequential", "save", "load", "tree_paths", "SerializationError",
           "Conv1d", "ConvTranspose1d", "ConvTranspose2d", "GroupNorm", "InstanceNorm2d", "ModuleDict",
           "ModuleList", "MultiheadAttention", "RMSNorm", "LSTMCell", "GRUCell", "LSTM", "GRU",
           "LeakyReLU", "ELU", "CELU", "SELU", "Softplus", "Softsign", "Hardsigmoid", "Hardswish",
           "Hardtanh", "ReLU6", "Mish", "LogSigmoid", "GLU", "Softmax", "LogSoftmax", "Softmin",
           "AdaptiveAvgPool2d", "Upsample"]
__all__ += ["StateDictError", "IncompatibleKeys"]
