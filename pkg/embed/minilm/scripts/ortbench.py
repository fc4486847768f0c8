"""Python onnxruntime on the same model.onnx, tokenizer and texts as the Go embedder benchmarks
(BenchmarkEmbed* in minilm_test.go), with every graph optimisation on: the reference the Go
embedder is compared with in docs/benchmarks.md.

    .tools/venv/bin/python pkg/embed/minilm/scripts/ortbench.py --model .tools/memory/minilm [--threads 1]

Prints median wall ms, median CPU ms (time.process_time) and mean CPU ms per call (the Go
benchmarks' cpu-ms/op is a mean) for batch 1 and batch 32.
"""
import argparse
import os
import time

import numpy as np
import onnxruntime as ort
import tokenizers

ap = argparse.ArgumentParser()
ap.add_argument("--model", required=True)
ap.add_argument("--threads", type=int, default=os.cpu_count())
ap.add_argument("--seconds", type=float, default=5)
ap.add_argument("--calls", type=int, default=0, help="exactly this many measured calls (for instruction counts)")
ap.add_argument("--only", choices=["batch1", "batch32"], help="run one of the two")
a = ap.parse_args()

so = ort.SessionOptions()
so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
so.intra_op_num_threads = a.threads
sess = ort.InferenceSession(os.path.join(a.model, "model.onnx"), so, providers=["CPUExecutionProvider"])
tok = tokenizers.Tokenizer.from_file(os.path.join(a.model, "tokenizer.json"))
tok.no_padding()
tok.enable_truncation(256)


def embed(texts):
    encs = tok.encode_batch(texts)
    n = max(len(e.ids) for e in encs)
    ids = np.zeros((len(texts), n), np.int64)
    mask = np.zeros_like(ids)
    for i, e in enumerate(encs):
        ids[i, : len(e.ids)] = e.ids
        mask[i, : len(e.ids)] = 1
    h = sess.run(["last_hidden_state"], {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})[0]
    v = (h * mask[:, :, None]).sum(1) / mask.sum(1, keepdims=True)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


one = ["The tool failed with permission denied while writing to /var/log; run it with a writable log dir."]
b32 = ["Guideline %d: check the exit status of step %d and retry transient network errors with backoff." % (i, i * 7) for i in range(32)]
for name, texts in (("batch1", one), ("batch32", b32)):
    if a.only and name != a.only:
        continue
    for _ in range(3):
        embed(texts)
    wall, cpu = [], []
    end = time.perf_counter() + a.seconds
    while (len(wall) < a.calls) if a.calls else (time.perf_counter() < end or len(wall) < 5):
        w, c = time.perf_counter(), time.process_time()
        embed(texts)
        wall.append(time.perf_counter() - w)
        cpu.append(time.process_time() - c)
    print(f"{name} threads={a.threads}: median {np.median(wall)*1000:.2f} ms wall, {np.median(cpu)*1000:.2f} ms cpu, "
          f"mean {np.mean(cpu)*1000:.2f} ms cpu ({len(wall)} calls)")
