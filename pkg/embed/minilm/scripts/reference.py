"""Reference sentence vectors for the Go embedder test, from an implementation that shares only
the weights with it: Hugging Face `tokenizers` (Rust) instead of the Go WordPiece, and a float64
numpy forward pass of BERT straight from the safetensors file instead of ONNX Runtime running the
exported graph. Sentence-transformers semantics: truncation at max_seq_length (256), mean pooling
over real tokens, L2 normalization.
"""
import argparse
import json
import os

import numpy as np
from safetensors.numpy import load_file
from tokenizers import Tokenizer

SENTENCES = [
    "Run go vet before go test.",
    "The tool failed: permission denied while opening /etc/shadow",
    "Always quote file paths that contain spaces!",
    "A man is eating food.",
    "Café crème brûlée, naïve façade — déjà vu.",
    "東京は日本の首都です。",
    "ALL CAPS SHOUTING ABOUT HTTP 503 ERRORS",
    "x",
    "unbelievably unaffordable antidisestablishmentarianism",
    "emoji 🚀 and tabs\tand\nnewlines",
    " ".join(["word%d" % i for i in range(300)]),
    "Retry the request with exponential backoff when the server answers 429 Too Many Requests, "
    "and never retry a 400 Bad Request, because the body is wrong and will stay wrong.",
]


def gelu(x):
    from math import erf
    return 0.5 * x * (1.0 + np.vectorize(erf)(x / np.sqrt(2.0)))


def layer_norm(x, g, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def encode(W, cfg, ids):
    H = cfg["hidden_size"]
    nh = cfg["num_attention_heads"]
    hd = H // nh
    eps = cfg["layer_norm_eps"]
    n = len(ids)
    x = W["embeddings.word_embeddings.weight"][ids] + W["embeddings.position_embeddings.weight"][:n] \
        + W["embeddings.token_type_embeddings.weight"][0]
    x = layer_norm(x, W["embeddings.LayerNorm.weight"], W["embeddings.LayerNorm.bias"], eps)
    for i in range(cfg["num_hidden_layers"]):
        p = "encoder.layer.%d." % i
        lin = lambda t, name: t @ W[p + name + ".weight"].T + W[p + name + ".bias"]
        q = lin(x, "attention.self.query").reshape(n, nh, hd).transpose(1, 0, 2)
        k = lin(x, "attention.self.key").reshape(n, nh, hd).transpose(1, 0, 2)
        v = lin(x, "attention.self.value").reshape(n, nh, hd).transpose(1, 0, 2)
        s = q @ k.transpose(0, 2, 1) / np.sqrt(hd)
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        a = (s @ v).transpose(1, 0, 2).reshape(n, H)
        x = layer_norm(lin(a, "attention.output.dense") + x, W[p + "attention.output.LayerNorm.weight"], W[p + "attention.output.LayerNorm.bias"], eps)
        h = gelu(lin(x, "intermediate.dense"))
        x = layer_norm(lin(h, "output.dense") + x, W[p + "output.LayerNorm.weight"], W[p + "output.LayerNorm.bias"], eps)
    v = x.mean(0)
    return v / np.linalg.norm(v)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    cfg = json.load(open(os.path.join(args.model, "config.json")))
    max_len = json.load(open(os.path.join(args.model, "sentence_bert_config.json")))["max_seq_length"]
    from export_onnx import package_dir
    W = {k: v.astype(np.float64) for k, v in load_file(os.path.join(package_dir(), "model.safetensors")).items()}
    tok = Tokenizer.from_file(os.path.join(args.model, "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(max_length=max_len)
    out = []
    for s in SENTENCES:
        ids = tok.encode(s).ids
        out.append({"text": s, "ids": ids, "vector": [round(float(x), 7) for x in encode(W, cfg, ids)]})
    tmp = args.out + ".tmp"
    json.dump({"model": "sentence-transformers/all-MiniLM-L6-v2", "implementation": "numpy float64 forward pass + HF tokenizers",
               "max_seq_length": max_len, "sentences": out}, open(tmp, "w"))
    os.replace(tmp, args.out)


if __name__ == "__main__":
    main()
