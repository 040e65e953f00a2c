"""The kinds of computation a problem's forward pass performs, by name, as the KB knows them (kb never
imports harness).

A technique may declare the kinds it applies to (flash-style tiling needs attention, Welford statistics a
normalization); selection offers it only for a problem that performs one of them. The harness finds the
kinds by watching the pass (`harness.operations`); the KB only needs the names, checked against this list.
"""

from __future__ import annotations

from typing import Literal, get_args

OperationKind = Literal[
    "matmul",                  # matrix products: mm, bmm, addmm, linear, matmul
    "convolution",             # any convolution, transposed ones included
    "grouped_convolution",     # groups > 1 (depthwise among them)
    "transposed_convolution",
    "attention",               # scores from a product of two activations feed another product (softmax or not)
    "softmax",                 # softmax, log-softmax, logsumexp
    "normalization",           # batch, layer, group and instance norms; variance and standard deviation
    "reduction",               # sums, means, extrema, norms and losses over a dimension
    "scan",                    # cumulative sums, products, extrema
    "pooling",
    "recurrent",               # RNN, LSTM and GRU layers and cells, or one weight applied step after step
    "several_operations",      # more than one computing operator (views, copies and allocations not counted)
]
OPERATION_KINDS: tuple[OperationKind, ...] = get_args(OperationKind)
