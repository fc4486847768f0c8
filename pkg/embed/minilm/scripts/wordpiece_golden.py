"""Golden token ids for the Go WordPiece tokenizer (wordpiece.go), from Hugging Face tokenizers
(Rust) on the model's tokenizer.json, truncation at 256 as the embedder does:

    .tools/venv/bin/python pkg/embed/minilm/scripts/wordpiece_golden.py --model .tools/memory/minilm \
        > pkg/embed/minilm/testdata/wordpiece_golden.json

The texts are the awkward cases (accents, CJK, control and odd whitespace characters, special
tokens in the text, long words, truncation inside a word) plus generated sentences.
"""
import argparse
import json
import os
import random

from tokenizers import Tokenizer

ap = argparse.ArgumentParser()
ap.add_argument("--model", required=True)
a = ap.parse_args()
tok = Tokenizer.from_file(os.path.join(a.model, "tokenizer.json"))
tok.no_padding()
tok.enable_truncation(256)

texts = [
    "", " ", "x", "Run go vet before go test.",
    "Café crème brûlée, naïve façade — déjà vu.", "ÅNGSTRÖM Ǆemal İstanbul ΣΊΣΥΦΟΣ straße",
    "東京は日本の首都です。한국어 텍스트 and ไทย", "emoji 🚀 and tabs\tand\nnewlines\r\nend",
    "control\x00chars\x07here\x0bvertical\x0cfeed\x7fdel\u0085nel\u00a0nbsp\u200bzwsp\u2028ls\ufeffbom\ufffdrepl",
    "[CLS] already [SEP] in text [MASK]ed a[UNK]b [cls] [PAD]", "unterminated [CLS",
    "punct!!!...???(a)[b]{c}<d>\"e\"'f'`g`~h^i|j\\k/l@m#n$o%p&q*r+s=t_u-v:w;x,y", "¿Qué? «guillemets» „quotes“ 1–2—3 …",
    "a" * 99, "b" * 100, "c" * 101, "é" * 101, "supercalifragilisticexpialidocious" * 3,
    "hyphen-ated and under_scored and dotted.names.like.this and CamelCaseWords",
    " ".join("word%d" % i for i in range(300)),
    " ".join(["antidisestablishmentarianism"] * 60),
    "mixed ＦＵＬＬＷＩＤＴＨ ｔｅｘｔ and ①②③ and ½ and ﬁ ligature",
    "Ωmega µ micro ſ long s ǅ title Ⅻ roman",
]
rng = random.Random(7)
words = ["quote", "check", "retry", "file paths", "HTTP", "429", "grep", "S3", "TLS", "naïve", "e-mail", "JSON's", "x86_64"]
for _ in range(200):
    texts.append(" ".join(rng.choice(words) for _ in range(rng.randint(1, 30))) + rng.choice([".", "!", "?", ""]))
print(json.dumps([{"text": t, "ids": tok.encode(t).ids} for t in texts], ensure_ascii=False, indent=0))
