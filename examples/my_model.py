"""A model of your own, for docs/your-model.md: run perflab from this directory
(``cd examples``), where perflab finds this file as ``my_model``.

    perflab model=custom model._target_=my_model.build model.input.shape=[16,32] \\
        model.target.num_classes=4 device=cpu

``build`` makes a small attention classifier over a sequence of feature vectors. It
returns a dict, as many models do (a Hugging Face model returns a ModelOutput, a dict
with attributes): perflab takes its ``logits`` (model.output=auto) and computes the loss
for model.target on them, unless the output carries a ``loss`` of its own.

``attn`` picks the attention implementation, the knob of the docs' study: ``eager``
(matmul, softmax, matmul) or ``sdpa`` (torch's scaled_dot_product_attention). Any other
value falls back to eager silently, as real models do when an implementation is not
available: ``attention_used`` reports what the last forward ran, so that perflab's
report can say whether the knob took effect (schedule.evidence).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F


class AttentionClassifier(nn.Module):
    def __init__(self, features: int, width: int, heads: int, num_classes: int, attn: str):
        super().__init__()
        self.heads, self.attn = heads, attn
        self.embed = nn.Linear(features, width)
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)
        self.head = nn.Linear(width, num_classes)
        # what the last forward ran: the evidence attention_used reads
        self.attn_used = ""

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        h = self.embed(x)  # [batch, seq, width]
        b, s, w = h.shape
        q, k, v = self.qkv(h).view(b, s, 3, self.heads, w // self.heads).unbind(2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [batch, heads, seq, head_dim]
        if self.attn == "sdpa":
            a = F.scaled_dot_product_attention(q, k, v)
            self.attn_used = "sdpa"
        else:  # eager, and the fallback for any implementation this model lacks
            scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
            a = scores.softmax(-1) @ v
            self.attn_used = "eager"
        hidden = h + self.out(a.transpose(1, 2).reshape(b, s, w))
        return {"hidden": hidden, "logits": self.head(hidden.mean(1))}


def build(
    features: int = 32, width: int = 64, heads: int = 4, num_classes: int = 4, attn: str = "eager"
) -> nn.Module:
    """The factory perflab calls: model.args are its keyword arguments."""
    return AttentionClassifier(features, width, heads, num_classes, attn)


def attention_used(model: AttentionClassifier) -> str:
    """The evidence of the ``attn`` knob (schedule.evidence): what the last forward ran,
    which perflab compares with the knob's value. A check may instead return
    ``(observed, ok)`` and judge by itself."""
    return model.attn_used


def smoothed_cross_entropy(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """A loss of your own (model.loss=my_model.smoothed_cross_entropy): it gets the tensor
    model.output picks (the logits) and the batch's target, and returns a scalar."""
    return F.cross_entropy(output, target, label_smoothing=0.1)
