"""Hand-made attention models (torch export) for the FusedAttention tests
(test_attention.py on the CPU, test_cuda_attention.py on a GPU)."""

from __future__ import annotations

import functools
import io
import math
import warnings

import numpy as np


@functools.lru_cache(maxsize=None)
def attention_model(heads: int, head_dim: int, masked: bool, relu: bool = False, tokens: int = 40) -> bytes:
    """relu: a ReLU on the attention's output (fused into the last MatMul by the optimizer);
    tokens: queries and keys (fixed in the export; the batch is dynamic)."""
    import torch
    import torch.nn as nn

    class Attn(nn.Module):
        def __init__(self):
            super().__init__()
            e = heads * head_dim
            self.qkv = nn.Linear(12, 3 * e)
            self.out = nn.Linear(e, 10)

        def forward(self, x, mask):
            b, n = x.shape[0], x.shape[1]
            q, k, v = self.qkv(x).chunk(3, dim=-1)
            if heads > 1:
                q, k, v = (t.reshape(b, n, heads, head_dim).transpose(1, 2) for t in (q, k, v))
            if masked:  # q scaled first, as nn.MultiheadAttention's export does
                s = torch.matmul(q * (1.0 / math.sqrt(head_dim)), k.transpose(-1, -2)) + mask
            else:  # the scores scaled: a Div between the MatMul and the Softmax
                s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(head_dim)
            a = torch.matmul(torch.softmax(s, dim=-1), v)
            if relu:
                a = torch.relu(a)
            if heads > 1:
                a = a.transpose(1, 2).reshape(b, n, heads * head_dim)
            return self.out(a)

    torch.manual_seed(heads * 100 + head_dim)
    m = Attn().eval()
    x = torch.randn(2, tokens, 12)
    mask = torch.zeros(2, 1, 1, tokens) if heads > 1 else torch.zeros(2, 1, tokens)
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(m, (x, mask), f, dynamo=False, opset_version=17, input_names=["x", "mask"],
                          output_names=["y"], dynamic_axes={"x": {0: "b"}, "mask": {0: "b"}, "y": {0: "b"}})
    return f.getvalue()


def feeds_for(heads, batch, seed, tokens=40):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, tokens, 12)).astype(np.float32)
    mask = np.zeros((batch, 1, 1, tokens) if heads > 1 else (batch, 1, tokens), np.float32)
    for b in range(batch):  # a padding mask: the last keys of each item, never all of them
        mask[b, ..., tokens - int(rng.integers(0, min(30, tokens - 1))):] = -np.inf
    return {"x": x, "mask": mask}


def model_feeds(data: bytes, heads: int, batch: int, seed: int, tokens: int = 40) -> dict:
    """feeds_for, kept to the inputs the export has (an unused mask is dropped)."""
    import onnx

    names = {i.name for i in onnx.load_from_string(data).graph.input}
    return {k: v for k, v in feeds_for(heads, batch, seed, tokens).items() if k in names}
