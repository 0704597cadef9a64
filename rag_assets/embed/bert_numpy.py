"""A BERT encoder's forward pass in numpy: the weights of a safetensors file, no torch.

Enough of BERT to run sentence-transformers' all-MiniLM-L6-v2 (and other small BERT
encoders saved the same way): token + position + type embeddings, ``num_hidden_layers``
post-norm encoder layers (self-attention, exact erf GELU), then masked mean pooling.
It follows Hugging Face's ``BertModel`` in float32, so its vectors match the torch ones
to rounding (the parity test asks cosine >= 0.9999; in practice ~1e-6 apart).

Speed comes from BLAS: the three attention projections are fused into one matrix and
every weight is stored pre-transposed and contiguous, so each layer is four large
``x @ W`` products plus the attention itself; elementwise work is done in place.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# Abramowitz & Stegun 7.1.26: erf to within 1.5e-7 absolute, below float32 rounding at
# GELU's scale. numpy has no erf, and scipy (which has) is not a dependency.
_ERF_P = 0.3275911
_T_SCALE = np.float32(_ERF_P * 0.7071067811865476)  # t = 1 / (1 + p |x| / sqrt 2)
# The coefficients a5 .. a1, halved: GELU needs half of erfc.
_HALF_ERF_A = tuple(np.float32(a / 2) for a in (1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592))
_FFN_ROWS = 128  # token rows per feed-forward block: 128 x 1536 float32 = 768 KB, within L2


@dataclass(frozen=True)
class BertConfig:
    """The shape of the encoder, from the model folder's ``config.json``."""

    hidden_size: int
    num_layers: int
    num_heads: int
    layer_norm_eps: float
    max_positions: int

    @classmethod
    def from_file(cls, path: Path) -> BertConfig:
        """Read ``config.json``; refuses what this pass does not implement (other activations, position types)."""
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("hidden_act", "gelu") != "gelu":
            raise ValueError(f"{path}: hidden_act {data.get('hidden_act')!r} is not supported (only exact gelu)")
        if data.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError(f"{path}: only absolute position embeddings are supported")
        return cls(
            hidden_size=int(data["hidden_size"]),
            num_layers=int(data["num_hidden_layers"]),
            num_heads=int(data["num_attention_heads"]),
            layer_norm_eps=float(data.get("layer_norm_eps", 1e-12)),
            max_positions=int(data.get("max_position_embeddings", 512)),
        )


@dataclass(frozen=True)
class LayerWeights:
    """One encoder layer, every matrix ``(in, out)`` so a product is ``x @ w``."""

    qkv: np.ndarray  # (hidden, 3 * hidden): query, key, value side by side
    qkv_bias: np.ndarray
    attn_out: np.ndarray
    attn_out_bias: np.ndarray
    attn_norm: tuple[np.ndarray, np.ndarray]  # (weight, bias) of the LayerNorm after attention
    inter: np.ndarray
    inter_bias: np.ndarray
    out: np.ndarray
    out_bias: np.ndarray
    out_norm: tuple[np.ndarray, np.ndarray]


@dataclass(frozen=True)
class BertWeights:
    """The whole encoder: embeddings and layers (the pooler is unused by mean pooling)."""

    config: BertConfig
    word: np.ndarray
    position: np.ndarray
    token_type0: np.ndarray  # single sentences only use type 0
    embed_norm: tuple[np.ndarray, np.ndarray]
    layers: tuple[LayerWeights, ...]


def _prefix(tensors: dict[str, np.ndarray]) -> str:
    """``bert.`` when the checkpoint was saved from a model with a head (BertForX), else ``""``."""
    return "bert." if "bert.embeddings.word_embeddings.weight" in tensors else ""


def _dense(tensors: dict[str, np.ndarray], name: str) -> tuple[np.ndarray, np.ndarray]:
    """A linear layer as (``(in, out)`` contiguous float32 matrix, bias)."""
    weight = np.ascontiguousarray(tensors[f"{name}.weight"].astype(np.float32).T)
    return weight, tensors[f"{name}.bias"].astype(np.float32)


def _norm(tensors: dict[str, np.ndarray], name: str) -> tuple[np.ndarray, np.ndarray]:
    return tensors[f"{name}.weight"].astype(np.float32), tensors[f"{name}.bias"].astype(np.float32)


def _layer(tensors: dict[str, np.ndarray], name: str) -> LayerWeights:
    parts = [_dense(tensors, f"{name}.attention.self.{p}") for p in ("query", "key", "value")]
    attn_out, attn_out_bias = _dense(tensors, f"{name}.attention.output.dense")
    inter, inter_bias = _dense(tensors, f"{name}.intermediate.dense")
    out, out_bias = _dense(tensors, f"{name}.output.dense")
    return LayerWeights(
        qkv=np.ascontiguousarray(np.concatenate([w for w, _ in parts], axis=1)),
        qkv_bias=np.concatenate([b for _, b in parts]),
        attn_out=attn_out,
        attn_out_bias=attn_out_bias,
        attn_norm=_norm(tensors, f"{name}.attention.output.LayerNorm"),
        inter=inter,
        inter_bias=inter_bias,
        out=out,
        out_bias=out_bias,
        out_norm=_norm(tensors, f"{name}.output.LayerNorm"),
    )


def load_bert(folder: Path) -> BertWeights:
    """The encoder in ``folder`` (``config.json`` + ``model.safetensors``), ready to run.

    Raises ``KeyError``/``ValueError`` on a checkpoint that is not a BERT encoder.
    """
    from safetensors.numpy import load_file  # imported here: only the minilm provider needs it

    config = BertConfig.from_file(folder / "config.json")
    tensors = load_file(str(folder / "model.safetensors"))
    p = _prefix(tensors)
    return BertWeights(
        config=config,
        word=tensors[f"{p}embeddings.word_embeddings.weight"].astype(np.float32),
        position=tensors[f"{p}embeddings.position_embeddings.weight"].astype(np.float32),
        token_type0=tensors[f"{p}embeddings.token_type_embeddings.weight"][0].astype(np.float32),
        embed_norm=_norm(tensors, f"{p}embeddings.LayerNorm"),
        layers=tuple(_layer(tensors, f"{p}encoder.layer.{i}") for i in range(config.num_layers)),
    )


def layer_norm(x: np.ndarray, norm: tuple[np.ndarray, np.ndarray], eps: float) -> np.ndarray:
    """LayerNorm over the last axis, in place on ``x`` (which the caller no longer needs)."""
    mean = x.mean(axis=-1, keepdims=True)
    x -= mean
    var = np.mean(np.square(x), axis=-1, keepdims=True)
    x *= 1.0 / np.sqrt(var + np.float32(eps))
    x *= norm[0]
    x += norm[1]
    return x


def gelu(x: np.ndarray) -> np.ndarray:
    """Exact (erf) GELU, ``x Phi(x)``, computed in place on ``x``.

    With ``a = |x|`` and erfc(a / sqrt 2) = ``q(t) exp(-a^2 / 2)`` (A&S 7.1.26),
    ``x Phi(x) = max(x, 0) - a q / 2`` for either sign: one formula, no branch per element.
    """
    a = np.abs(x)
    t = a * _T_SCALE
    t += 1.0
    np.reciprocal(t, out=t)
    half_q = _HALF_ERF_A[0] * t  # Horner, highest power first: 0.5 * (a5 .. a1)
    for coefficient in _HALF_ERF_A[1:]:
        half_q += coefficient
        half_q *= t
    tail = np.square(a)
    tail *= np.float32(-0.5)
    np.exp(tail, out=tail)
    tail *= half_q
    tail *= a
    np.maximum(x, np.float32(0.0), out=x)
    x -= tail
    return x


def _attention(x: np.ndarray, layer: LayerWeights, mask_bias: np.ndarray, shape: tuple[int, int, int]) -> np.ndarray:
    """Multi-head self-attention of ``x`` ``(batch * length, hidden)``, before its output projection.

    Dense products stay 2-D: numpy runs ``(b, l, h) @ (h, o)`` as b small products, several
    times slower than one ``(b * l, h) @ (h, o)``.
    """
    batch, length, heads = shape
    hidden = x.shape[1]
    size = hidden // heads
    qkv = x @ layer.qkv
    qkv += layer.qkv_bias
    # (batch, length, 3, heads, size) -> three contiguous (batch, heads, length, size) arrays.
    qkv = np.ascontiguousarray(qkv.reshape(batch, length, 3, heads, size).transpose(2, 0, 3, 1, 4))
    q, k, v = qkv[0], qkv[1], qkv[2]
    q *= np.float32(1.0 / np.sqrt(size))  # scaling q (length x size) is cheaper than the scores (length^2)
    scores = q @ k.transpose(0, 1, 3, 2)
    scores += mask_bias  # padding keys get a huge negative score: zero weight after softmax
    scores -= scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    scores /= scores.sum(axis=-1, keepdims=True)
    context = scores @ v  # (batch, heads, length, size)
    return context.transpose(0, 2, 1, 3).reshape(batch * length, hidden)


def _encoder_layer(
    x: np.ndarray, layer: LayerWeights, mask_bias: np.ndarray, cfg: BertConfig, shape: tuple[int, int]
) -> np.ndarray:
    """One post-norm BERT layer on ``(batch * length, hidden)``: attention + residual + norm,
    feed-forward + residual + norm."""
    attended = _attention(x, layer, mask_bias, (*shape, cfg.num_heads)) @ layer.attn_out
    attended += layer.attn_out_bias
    attended += x
    x = layer_norm(attended, layer.attn_norm, cfg.layer_norm_eps)
    out = np.empty_like(x)
    # The feed-forward by blocks of rows: each block's (rows, 1536) activation stays in the CPU
    # cache through GELU's dozen elementwise passes, instead of streaming 4x the hidden state
    # through memory for each pass (GELU took as long as both products without this).
    for start in range(0, x.shape[0], _FFN_ROWS):
        rows = slice(start, start + _FFN_ROWS)
        hidden = x[rows] @ layer.inter
        hidden += layer.inter_bias
        np.matmul(gelu(hidden), layer.out, out=out[rows])
    out += layer.out_bias
    out += x
    return layer_norm(out, layer.out_norm, cfg.layer_norm_eps)


def mean_pooled(weights: BertWeights, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Mean of the last layer's token vectors over the mask: ``(batch, hidden)`` float32.

    ``ids`` and ``mask`` are ``(batch, length)``; padding positions have mask 0. Not normalised.
    """
    cfg = weights.config
    length = ids.shape[1]
    if length > cfg.max_positions:
        raise ValueError(f"sequence of {length} tokens exceeds the model's {cfg.max_positions} positions")
    batch = ids.shape[0]
    x = weights.word[ids]  # a fresh (batch, length, hidden) array: safe to modify in place
    x += weights.position[:length]
    x += weights.token_type0
    x = layer_norm(x.reshape(batch * length, cfg.hidden_size), weights.embed_norm, cfg.layer_norm_eps)
    maskf = mask.astype(np.float32)
    # (batch, 1, 1, length): added to every head's scores for every query position.
    mask_bias = ((1.0 - maskf) * np.float32(-1e9))[:, None, None, :]
    for layer in weights.layers:
        x = _encoder_layer(x, layer, mask_bias, cfg, (batch, length))
    summed = np.einsum("blh,bl->bh", x.reshape(batch, length, cfg.hidden_size), maskf)
    counts = np.maximum(maskf.sum(axis=1, keepdims=True), np.float32(1e-9))
    return (summed / counts).astype(np.float32, copy=False)


__all__ = ["BertConfig", "BertWeights", "LayerWeights", "gelu", "layer_norm", "load_bert", "mean_pooled"]
