"""Writes the bundled ONNX models with ``onnx.helper``: ``python -m sample_graphs.onnx_models``.

Tiny versions of what ``torch.onnx.export`` writes for the three families the importer
targets: a 2-layer MLP (Gemm, exact GELU through Erf, MatMul, LogSoftmax), a CNN block
(Conv, BatchNormalization, Relu, Clip, MaxPool, a grouped dilated Conv, AveragePool,
GlobalAveragePool, Flatten, Gemm, Softmax) and a GPT-style block (token and position
embeddings by Gather, LayerNormalization, fused QKV split, heads by Reshape/Transpose with
shapes computed from Shape, a causal mask applied by Where, GELU, tied output weights).
Weights are seeded, so the files are reproducible.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

OPSET = 20
MODELS = ("mlp", "cnn", "gpt")


def _rng(name: str) -> np.random.Generator:
    return np.random.default_rng(sum(map(ord, name)))


def _weight(name: str, *shape: int, scale: float | None = None):
    from onnx import numpy_helper

    fan_in = shape[-1] if len(shape) > 1 else shape[0]
    value = _rng(name).normal(0, scale if scale is not None else 1 / np.sqrt(fan_in), shape).astype(np.float32)
    return numpy_helper.from_array(value, name)


def _const(name: str, value) -> object:
    from onnx import numpy_helper

    return numpy_helper.from_array(np.asarray(value), name)


def _model(graph, opset: int = OPSET):
    from onnx import checker, helper

    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="zyx-explore")
    model.ir_version = 9
    checker.check_model(model, full_check=True)
    return model


def mlp():
    from onnx import TensorProto, helper

    n = helper.make_node
    nodes = [
        n("Gemm", ["x", "fc1.weight", "fc1.bias"], ["fc1/Gemm_output_0"], name="fc1/Gemm", transB=1),
        n("Div", ["fc1/Gemm_output_0", "sqrt2"], ["act/Div_output_0"], name="act/Div"),
        n("Erf", ["act/Div_output_0"], ["act/Erf_output_0"], name="act/Erf"),
        n("Add", ["act/Erf_output_0", "one"], ["act/Add_output_0"], name="act/Add"),
        n("Mul", ["fc1/Gemm_output_0", "act/Add_output_0"], ["act/Mul_output_0"], name="act/Mul"),
        n("Mul", ["act/Mul_output_0", "half"], ["act/Mul_1_output_0"], name="act/Mul_1"),
        n("MatMul", ["act/Mul_1_output_0", "fc2.weight_T"], ["fc2/MatMul_output_0"], name="fc2/MatMul"),
        n("Add", ["fc2/MatMul_output_0", "fc2.bias"], ["fc2/Add_output_0"], name="fc2/Add"),
        n("LogSoftmax", ["fc2/Add_output_0"], ["log_probs"], name="LogSoftmax", axis=-1),
    ]
    inits = [_weight("fc1.weight", 32, 16), _weight("fc1.bias", 32, scale=0.1), _weight("fc2.weight_T", 32, 10),
             _weight("fc2.bias", 10, scale=0.1), _const("sqrt2", np.float32(np.sqrt(2))),
             _const("one", np.float32(1)), _const("half", np.float32(0.5))]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
                              [helper.make_tensor_value_info("log_probs", TensorProto.FLOAT, [4, 10])], inits)
    return _model(graph)


def cnn():
    from onnx import TensorProto, helper

    n = helper.make_node
    c = 8
    nodes = [
        n("Conv", ["image", "conv1.weight", "conv1.bias"], ["conv1"], name="conv1/Conv", kernel_shape=[3, 3],
          pads=[1, 1, 1, 1], strides=[1, 1]),
        n("BatchNormalization", ["conv1", "bn1.weight", "bn1.bias", "bn1.running_mean", "bn1.running_var"], ["bn1"],
          name="bn1/BatchNormalization", epsilon=1e-5),
        n("Relu", ["bn1"], ["relu1"], name="relu1/Relu"),
        n("MaxPool", ["relu1"], ["pool1"], name="pool1/MaxPool", kernel_shape=[2, 2], strides=[2, 2]),
        n("Conv", ["pool1", "conv2.weight"], ["conv2"], name="conv2/Conv", kernel_shape=[3, 3], pads=[2, 2, 2, 2],
          dilations=[2, 2], group=2),
        n("Clip", ["conv2", "zero", "six"], ["relu6"], name="relu6/Clip"),
        n("AveragePool", ["relu6"], ["pool2"], name="pool2/AveragePool", kernel_shape=[3, 3], strides=[2, 2],
          pads=[1, 1, 1, 1], count_include_pad=0),
        n("GlobalAveragePool", ["pool2"], ["gap"], name="gap/GlobalAveragePool"),
        n("Flatten", ["gap"], ["flat"], name="flatten/Flatten", axis=1),
        n("Gemm", ["flat", "fc.weight", "fc.bias"], ["fc"], name="fc/Gemm", transB=1),
        n("Softmax", ["fc"], ["probs"], name="Softmax", axis=1),
    ]
    var = np.abs(_rng("bn1.running_var").normal(1, 0.2, c)).astype(np.float32)
    inits = [_weight("conv1.weight", c, 3, 3, 3, scale=0.3), _weight("conv1.bias", c, scale=0.1),
             _weight("bn1.weight", c, scale=0.5), _weight("bn1.bias", c, scale=0.1),
             _weight("bn1.running_mean", c, scale=0.2), _const("bn1.running_var", var),
             _weight("conv2.weight", c, c // 2, 3, 3, scale=0.3), _const("zero", np.float32(0)),
             _const("six", np.float32(6)), _weight("fc.weight", 5, c), _weight("fc.bias", 5, scale=0.1)]
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("image", TensorProto.FLOAT, [2, 3, 12, 12])],
                              [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [2, 5])], inits)
    return _model(graph)


def gpt():
    from onnx import TensorProto, helper

    vocab, seq, embed, heads = 32, 8, 16, 2
    head = embed // heads
    n = helper.make_node
    nodes = [
        n("Gather", ["wte.weight", "input_ids"], ["tok_emb"], name="wte/Gather", axis=0),
        n("Gather", ["wpe.weight", "position_ids"], ["pos_emb"], name="wpe/Gather", axis=0),
        n("Add", ["tok_emb", "pos_emb"], ["h0"], name="embed/Add"),
        n("LayerNormalization", ["h0", "ln_1.weight", "ln_1.bias"], ["ln_1"], name="ln_1/LayerNormalization",
          axis=-1, epsilon=1e-5),
        n("MatMul", ["ln_1", "attn.c_attn.weight"], ["qkv0"], name="attn/c_attn/MatMul"),
        n("Add", ["qkv0", "attn.c_attn.bias"], ["qkv"], name="attn/c_attn/Add"),
        n("Split", ["qkv", "split_sizes"], ["q", "k", "v"], name="attn/Split", axis=2),
        # heads: the shape [B, T, H, D] is computed from Shape(q), as torch.onnx.export writes it
        n("Shape", ["q"], ["q_shape"], name="attn/Shape"),
        n("Slice", ["q_shape", "zero_1d", "two_1d"], ["bt"], name="attn/Slice"),
        n("Concat", ["bt", "heads_dims"], ["head_shape"], name="attn/Concat", axis=0),
        *[n("Reshape", [t, "head_shape"], [f"{t}_heads"], name=f"attn/Reshape_{t}") for t in "qkv"],
        n("Transpose", ["q_heads"], ["q_t"], name="attn/Transpose_q", perm=[0, 2, 1, 3]),
        n("Transpose", ["k_heads"], ["k_t"], name="attn/Transpose_k", perm=[0, 2, 3, 1]),
        n("Transpose", ["v_heads"], ["v_t"], name="attn/Transpose_v", perm=[0, 2, 1, 3]),
        n("MatMul", ["q_t", "k_t"], ["scores0"], name="attn/MatMul"),
        n("Div", ["scores0", "sqrt_head"], ["scores"], name="attn/Div"),
        n("Where", ["causal_mask", "scores", "neg_inf"], ["masked"], name="attn/Where"),
        n("Softmax", ["masked"], ["probs"], name="attn/Softmax", axis=-1),
        n("MatMul", ["probs", "v_t"], ["ctx_t"], name="attn/MatMul_1"),
        n("Transpose", ["ctx_t"], ["ctx_heads"], name="attn/Transpose", perm=[0, 2, 1, 3]),
        n("Reshape", ["ctx_heads", "embed_shape"], ["ctx"], name="attn/Reshape"),
        n("MatMul", ["ctx", "attn.c_proj.weight"], ["attn_out"], name="attn/c_proj/MatMul"),
        n("Add", ["h0", "attn_out"], ["h1"], name="residual/Add"),
        n("LayerNormalization", ["h1", "ln_2.weight", "ln_2.bias"], ["ln_2"], name="ln_2/LayerNormalization"),
        n("MatMul", ["ln_2", "mlp.c_fc.weight"], ["fc0"], name="mlp/c_fc/MatMul"),
        n("Add", ["fc0", "mlp.c_fc.bias"], ["fc"], name="mlp/c_fc/Add"),
        n("Gelu", ["fc"], ["gelu"], name="mlp/Gelu", approximate="tanh"),
        n("MatMul", ["gelu", "mlp.c_proj.weight"], ["mlp_out"], name="mlp/c_proj/MatMul"),
        n("Add", ["h1", "mlp_out"], ["h2"], name="residual_1/Add"),
        n("LayerNormalization", ["h2", "ln_f.weight", "ln_f.bias"], ["ln_f"], name="ln_f/LayerNormalization"),
        n("Transpose", ["wte.weight"], ["wte_T"], name="lm_head/Transpose", perm=[1, 0]),
        n("MatMul", ["ln_f", "wte_T"], ["logits"], name="lm_head/MatMul"),
    ]
    mask = np.tril(np.ones((seq, seq), bool))
    inits = [
        _weight("wte.weight", vocab, embed, scale=0.5), _weight("wpe.weight", seq, embed, scale=0.2),
        _const("position_ids", np.arange(seq, dtype=np.int64)[None]),
        _const("ln_1.weight", np.ones(embed, np.float32)), _const("ln_1.bias", np.zeros(embed, np.float32)),
        _weight("attn.c_attn.weight", embed, 3 * embed, scale=0.3), _weight("attn.c_attn.bias", 3 * embed, scale=0.05),
        _const("split_sizes", np.array([embed] * 3, np.int64)),
        _const("zero_1d", np.array([0], np.int64)), _const("two_1d", np.array([2], np.int64)),
        _const("heads_dims", np.array([heads, head], np.int64)), _const("sqrt_head", np.float32(np.sqrt(head))),
        _const("causal_mask", mask), _const("neg_inf", np.float32(-np.inf)),
        _const("embed_shape", np.array([0, 0, embed], np.int64)),
        _weight("attn.c_proj.weight", embed, embed, scale=0.2),
        _weight("ln_2.weight", embed, scale=0.1), _weight("ln_2.bias", embed, scale=0.1),
        _weight("mlp.c_fc.weight", embed, 4 * embed, scale=0.3), _weight("mlp.c_fc.bias", 4 * embed, scale=0.05),
        _weight("mlp.c_proj.weight", 4 * embed, embed, scale=0.15),
        _const("ln_f.weight", np.ones(embed, np.float32)), _const("ln_f.bias", np.zeros(embed, np.float32)),
    ]
    graph = helper.make_graph(
        nodes, "gpt", [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, seq])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, seq, vocab])], inits)
    return _model(graph)


def build(out_dir: Path | None = None) -> list[Path]:
    """Write every model as ``NAME.onnx`` to ``out_dir`` (default: this package) and return the paths."""
    out_dir = out_dir or Path(__file__).parent
    written = []
    for name in MODELS:
        path = out_dir / f"{name}.onnx"
        path.write_bytes(globals()[name]().SerializeToString(deterministic=True))
        written.append(path)
    return written


if __name__ == "__main__":
    for p in build(Path(sys.argv[1]) if len(sys.argv) > 1 else None):
        print(p, p.stat().st_size, "bytes")
