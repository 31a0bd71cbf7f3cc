"""Five PyTorch RL policies used by the tests and the benchmarks.

Each ``build_<name>()`` returns ``(module, example_inputs, input_names, output_names,
dynamic_axes)``:
  module          torch.nn.Module in eval mode, deterministic weights (seeded);
                  ``module(*[inputs[n] for n in input_names])`` returns a tuple ordered as
                  output_names;
  example_inputs  dict name -> torch tensor (batch 2) used for export;
  dynamic_axes    for torch.onnx.export (batch dim of every input and output).

``make_inputs(name, batch, seed)`` -> dict name -> numpy array for any batch size.
``export_onnx(name, path, opset=17)`` exports with the TorchScript exporter
(``torch.onnx.export(..., dynamo=False)``) and returns ``path``.

Names: mlp, atari_cnn, impala_lstm, gru_seq, multi_input (``NAMES``: every suite runs them),
and unit_transformer (``EXTRA_NAMES``: its own tests and the GPU benchmarks).
"""

from __future__ import annotations

import io
import math
import os
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

NAMES = ("mlp", "atari_cnn", "impala_lstm", "gru_seq", "multi_input")
EXTRA_NAMES = ("unit_transformer",)
ALL_NAMES = NAMES + EXTRA_NAMES
OPSET = 17


# --------------------------------------------------------------------------------
# (a) MLP actor-critic
# --------------------------------------------------------------------------------
class MLPActorCritic(nn.Module):
    def __init__(self, obs_dim=64, hidden=256, n_actions=18):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(obs_dim, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh())
        self.pi = nn.Linear(hidden, n_actions)
        self.v = nn.Linear(hidden, 1)

    def forward(self, obs):
        h = self.body(obs)
        return self.pi(h), self.v(h)


def build_mlp():
    torch.manual_seed(0)
    m = MLPActorCritic().eval()
    ex = {"obs": torch.randn(2, 64)}
    return m, ex, ["obs"], ["logits", "value"], {"obs": {0: "batch"}, "logits": {0: "batch"}, "value": {0: "batch"}}


# --------------------------------------------------------------------------------
# (b) Nature Atari CNN on uint8 frames
# --------------------------------------------------------------------------------
class NatureCNN(nn.Module):
    def __init__(self, n_actions=18):
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(4, 32, 8, stride=4), nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(),
            nn.Flatten(),
            nn.Linear(3136, 512), nn.ReLU(),
        )
        self.pi = nn.Linear(512, n_actions)
        self.v = nn.Linear(512, 1)

    def forward(self, frames):
        x = frames.float() / 255.0
        h = self.conv(x)
        return self.pi(h), self.v(h)


def build_atari_cnn():
    torch.manual_seed(1)
    m = NatureCNN().eval()
    ex = {"frames": torch.randint(0, 256, (2, 4, 84, 84), dtype=torch.uint8)}
    return m, ex, ["frames"], ["logits", "value"], {"frames": {0: "batch"}, "logits": {0: "batch"}, "value": {0: "batch"}}


# --------------------------------------------------------------------------------
# (c) IMPALA ResNet + LSTM core (one step)
# --------------------------------------------------------------------------------
class ResBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c0 = nn.Conv2d(c, c, 3, padding=1)
        self.c1 = nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x):
        return x + self.c1(F.relu(self.c0(F.relu(x))))


class ImpalaStack(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, padding=1)
        self.pool = nn.MaxPool2d(3, stride=2, padding=1)
        self.r0 = ResBlock(cout)
        self.r1 = ResBlock(cout)

    def forward(self, x):
        return self.r1(self.r0(self.pool(self.conv(x))))


class ImpalaLSTM(nn.Module):
    def __init__(self, n_actions=15, hidden=256):
        super().__init__()
        self.stacks = nn.Sequential(ImpalaStack(3, 16), ImpalaStack(16, 32), ImpalaStack(32, 32))
        self.fc = nn.Linear(32 * 8 * 8, 256)
        self.core = nn.LSTM(256, hidden, num_layers=1)
        self.pi = nn.Linear(hidden, n_actions)
        self.v = nn.Linear(hidden, 1)

    def forward(self, frames, h0, c0):
        # frames: uint8 [B, 64, 64, 3] (NHWC, as environments emit them)
        x = frames.permute(0, 3, 1, 2).float() / 255.0
        x = self.stacks(x)
        x = F.relu(torch.flatten(F.relu(x), 1))
        x = F.relu(self.fc(x))
        y, (hn, cn) = self.core(x.unsqueeze(0), (h0, c0))
        y = y.squeeze(0)
        return self.pi(y), self.v(y), hn, cn


def build_impala_lstm():
    torch.manual_seed(2)
    m = ImpalaLSTM().eval()
    ex = {"frames": torch.randint(0, 256, (2, 64, 64, 3), dtype=torch.uint8),
          "h0": torch.randn(1, 2, 256) * 0.5, "c0": torch.randn(1, 2, 256) * 0.5}
    dyn = {"frames": {0: "batch"}, "h0": {1: "batch"}, "c0": {1: "batch"}, "logits": {0: "batch"},
           "value": {0: "batch"}, "hn": {1: "batch"}, "cn": {1: "batch"}}
    return m, ex, ["frames", "h0", "c0"], ["logits", "value", "hn", "cn"], dyn


# --------------------------------------------------------------------------------
# (d) GRU policy over a sequence of 8 steps
# --------------------------------------------------------------------------------
class GRUPolicy(nn.Module):
    def __init__(self, obs_dim=48, hidden=128, n_actions=10):
        super().__init__()
        self.enc = nn.Linear(obs_dim, hidden)
        self.gru = nn.GRU(hidden, hidden, batch_first=True)
        self.pi = nn.Linear(hidden, n_actions)
        self.v = nn.Linear(hidden, 1)

    def forward(self, obs_seq, h0):
        x = F.relu(self.enc(obs_seq))           # [B, T, H]
        y, hn = self.gru(x, h0)                 # y [B, T, H], hn [1, B, H]
        return self.pi(y), self.v(y).squeeze(-1), hn


def build_gru_seq():
    torch.manual_seed(3)
    m = GRUPolicy().eval()
    ex = {"obs_seq": torch.randn(2, 8, 48), "h0": torch.randn(1, 2, 128) * 0.5}
    dyn = {"obs_seq": {0: "batch"}, "h0": {1: "batch"}, "logits": {0: "batch"}, "value": {0: "batch"},
           "hn": {1: "batch"}}
    return m, ex, ["obs_seq", "h0"], ["logits", "value", "hn"], dyn


# --------------------------------------------------------------------------------
# (e) multi-input: spatial planes + unit vectors + unit-type ids + attention + LSTM
# --------------------------------------------------------------------------------
class MultiInputPolicy(nn.Module):
    def __init__(self, n_unit_types=16, d=64, heads=4, hidden=256, n_actions=12):
        super().__init__()
        self.d, self.heads = d, heads
        self.cnn = nn.Sequential(nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(),
                                 nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
                                 nn.Flatten(), nn.Linear(32 * 8 * 8, 128), nn.ReLU())
        self.unit_mlp = nn.Sequential(nn.Linear(12, d), nn.ReLU(), nn.Linear(d, d))
        self.unit_norm = nn.LayerNorm(d)
        self.type_emb = nn.Embedding(n_unit_types, d)
        self.q = nn.Linear(128, d)
        self.k = nn.Linear(d, d)
        self.v = nn.Linear(d, d)
        self.o = nn.Linear(d, d)
        self.core_in = nn.Linear(128 + d, hidden)
        self.core = nn.LSTM(hidden, hidden)
        self.pi = nn.Linear(hidden, n_actions)
        self.val = nn.Linear(hidden, 1)
        self.ptr = nn.Linear(hidden, d)

    def forward(self, planes, units, unit_types, unit_pad, h0, c0):
        B, N = unit_types.shape[0], unit_types.shape[1]
        s = self.cnn(planes)                                              # [B,128]
        u = self.unit_norm(self.unit_mlp(units) + self.type_emb(unit_types))  # [B,N,d]
        hd = self.d // self.heads
        q = self.q(s).reshape(B, 1, self.heads, hd).transpose(1, 2)      # [B,h,1,hd]
        k = self.k(u).reshape(B, N, self.heads, hd).transpose(1, 2)      # [B,h,N,hd]
        v = self.v(u).reshape(B, N, self.heads, hd).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(hd)   # [B,h,1,N]
        scores = scores.masked_fill(unit_pad[:, None, None, :], float("-inf"))
        attn = torch.softmax(scores, dim=-1)
        a = torch.matmul(attn, v).transpose(1, 2).reshape(B, self.d)    # [B,d]
        a = self.o(a)
        x = F.relu(self.core_in(torch.cat([s, a], dim=-1)))
        y, (hn, cn) = self.core(x.unsqueeze(0), (h0, c0))
        y = y.squeeze(0)
        # pointer logits over units, padding masked with a large negative number
        ptr = torch.einsum("bd,bnd->bn", self.ptr(y), u)
        ptr = ptr.masked_fill(unit_pad, -1e9)
        return self.pi(y), self.val(y), ptr, hn, cn


def build_multi_input():
    torch.manual_seed(4)
    m = MultiInputPolicy().eval()
    pad = torch.zeros(2, 32, dtype=torch.bool)
    pad[:, 20:] = True
    ex = {"planes": torch.randn(2, 8, 16, 16), "units": torch.randn(2, 32, 12),
          "unit_types": torch.randint(0, 16, (2, 32)), "unit_pad": pad,
          "h0": torch.randn(1, 2, 256) * 0.5, "c0": torch.randn(1, 2, 256) * 0.5}
    ins = ["planes", "units", "unit_types", "unit_pad", "h0", "c0"]
    outs = ["logits", "value", "unit_logits", "hn", "cn"]
    dyn = {n: {0: "batch"} for n in ins[:4] + outs[:3]}
    dyn.update({"h0": {1: "batch"}, "c0": {1: "batch"}, "hn": {1: "batch"}, "cn": {1: "batch"}})
    return m, ex, ins, outs, dyn


# --------------------------------------------------------------------------------
# (f) unit transformer: self-attention over a padded set of units (torch's own
#     nn.TransformerEncoder, post-norm, GELU, key padding mask), masked mean pool,
#     global features, policy / value heads and one logit per unit
# --------------------------------------------------------------------------------
class UnitTransformerPolicy(nn.Module):
    def __init__(self, unit_dim=16, glob_dim=24, d=64, heads=4, layers=2, ff=128, n_actions=12):
        super().__init__()
        self.embed = nn.Linear(unit_dim, d)
        layer = nn.TransformerEncoderLayer(d, heads, dim_feedforward=ff, dropout=0.0, activation="gelu",
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.glob = nn.Sequential(nn.Linear(glob_dim, d), nn.ReLU())
        self.core = nn.Sequential(nn.Linear(2 * d, 256), nn.ReLU())
        self.pi = nn.Linear(256, n_actions)
        self.v = nn.Linear(256, 1)
        self.target = nn.Linear(d, 1)

    def forward(self, units, unit_pad, glob):
        x = self.encoder(self.embed(units), src_key_padding_mask=unit_pad)   # [B, N, d]
        keep = (~unit_pad).unsqueeze(-1).to(x.dtype)                          # [B, N, 1]
        pooled = (x * keep).sum(1) / keep.sum(1).clamp(min=1.0)              # [B, d]
        h = self.core(torch.cat([pooled, self.glob(glob)], dim=-1))
        unit_logits = self.target(x).squeeze(-1).masked_fill(unit_pad, -1e9)  # [B, N]
        return self.pi(h), self.v(h), unit_logits


def build_unit_transformer():
    torch.manual_seed(5)
    m = UnitTransformerPolicy().eval()
    pad = torch.zeros(2, 32, dtype=torch.bool)
    pad[0, 20:] = True
    pad[1, 7:] = True
    ex = {"units": torch.randn(2, 32, 16), "unit_pad": pad, "glob": torch.randn(2, 24)}
    ins = ["units", "unit_pad", "glob"]
    outs = ["logits", "value", "unit_logits"]
    dyn = {n: {0: "batch"} for n in ins + outs}
    return m, ex, ins, outs, dyn


BUILDERS = {
    "mlp": build_mlp,
    "atari_cnn": build_atari_cnn,
    "impala_lstm": build_impala_lstm,
    "gru_seq": build_gru_seq,
    "multi_input": build_multi_input,
    "unit_transformer": build_unit_transformer,
}


def build(name):
    return BUILDERS[name]()


# --------------------------------------------------------------------------------
# inputs / export / reference forward
# --------------------------------------------------------------------------------
def make_inputs(name: str, batch: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Random numpy inputs of the right dtypes for any batch size (never all zeros)."""
    rng = np.random.default_rng(seed)
    f32 = np.float32
    if name == "mlp":
        return {"obs": rng.standard_normal((batch, 64)).astype(f32)}
    if name == "atari_cnn":
        return {"frames": rng.integers(0, 256, (batch, 4, 84, 84)).astype(np.uint8)}
    if name == "impala_lstm":
        return {"frames": rng.integers(0, 256, (batch, 64, 64, 3)).astype(np.uint8),
                "h0": (0.5 * rng.standard_normal((1, batch, 256))).astype(f32),
                "c0": (0.5 * rng.standard_normal((1, batch, 256))).astype(f32)}
    if name == "gru_seq":
        return {"obs_seq": rng.standard_normal((batch, 8, 48)).astype(f32),
                "h0": (0.5 * rng.standard_normal((1, batch, 128))).astype(f32)}
    if name == "multi_input":
        n_valid = rng.integers(1, 33, size=batch)             # >= 1 valid unit per row
        pad = np.arange(32)[None, :] >= n_valid[:, None]
        return {"planes": rng.standard_normal((batch, 8, 16, 16)).astype(f32),
                "units": rng.standard_normal((batch, 32, 12)).astype(f32),
                "unit_types": rng.integers(0, 16, (batch, 32)).astype(np.int64),
                "unit_pad": pad,
                "h0": (0.5 * rng.standard_normal((1, batch, 256))).astype(f32),
                "c0": (0.5 * rng.standard_normal((1, batch, 256))).astype(f32)}
    if name == "unit_transformer":
        n_valid = rng.integers(1, 33, size=batch)             # >= 1 valid unit per row
        return {"units": rng.standard_normal((batch, 32, 16)).astype(f32),
                "unit_pad": np.arange(32)[None, :] >= n_valid[:, None],
                "glob": rng.standard_normal((batch, 24)).astype(f32)}
    raise KeyError(name)


def torch_forward(module, inputs: dict[str, np.ndarray], input_names) -> list[np.ndarray]:
    with torch.no_grad():
        outs = module(*[torch.from_numpy(np.array(inputs[n], order="C")) for n in input_names])
    return [o.detach().numpy() for o in outs]


def export_bytes(name: str, opset: int = OPSET) -> bytes:
    module, ex, ins, outs, dyn = build(name)
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, tuple(ex[n] for n in ins), f, dynamo=False, opset_version=opset,
                          input_names=ins, output_names=outs, dynamic_axes=dyn, do_constant_folding=True)
    return f.getvalue()


def export_onnx(name: str, path: str | os.PathLike, opset: int = OPSET) -> str:
    """Export policy ``name`` to ``path`` (TorchScript exporter, dynamic batch); returns path."""
    data = export_bytes(name, opset)
    path = os.fspath(path)
    d = os.path.dirname(path)
    if d:
        os.makedirs(d, exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(data)
    return path


if __name__ == "__main__":  # python policies.py OUTDIR  -> exports all five
    import sys

    out = sys.argv[1] if len(sys.argv) > 1 else "."
    for n in NAMES:
        print(export_onnx(n, os.path.join(out, f"{n}.onnx")))
