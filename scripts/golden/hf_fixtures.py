#!/usr/bin/python3
"""Hugging Face checkpoint fixtures for `ropelab import-hf`, made without `transformers`.

`transformers` is not packaged in Debian and nothing here can reach PyPI or the hub. So this
script writes small, randomly initialised checkpoints in the layout `save_pretrained` gives
(config.json, model.safetensors with the classes' parameter names, vocab.txt), and computes
their outputs with an independent PyTorch implementation of the published architectures,
written from the BERT paper (Devlin et al. 2019) and the classes' documented behaviour:

    embeddings: word + absolute position + token type, LayerNorm(eps), dropout
    layer:      post-LN; self-attention with biases, softmax(q k^T / sqrt(head) + mask);
                the mask adds the dtype's most negative number at padded keys;
                FFN dense -> GELU (erf) -> dense
    pooler:     tanh(dense(h[:, 0]))
    MLM head:   dense -> GELU -> LayerNorm -> decoder (the word embeddings when tied) + bias
    RoFormer:   the same without position embeddings; RoPE (Su et al. 2021) turns q and k,
                interleaved pairs, base 10000

Each fixture directory also holds expected.safetensors: the inputs (input_ids, token_type_ids,
attention_mask) and the reference outputs in float32 (computed in float64 from the float32
weights). Parity with `transformers` itself is a separate check where it is installed:
`--check-with-transformers` loads each fixture with it and compares.

    /usr/bin/python3 scripts/golden/hf_fixtures.py tests/data/hf
"""
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_fixtures import read, write  # noqa: E402

# The vocabulary: BERT's specials at BERT's ids, so a model's [CLS] is not at ropelab's id.
VOCAB = (["[PAD]", "[unused0]", "[unused1]"] + [f"[unused{i}]" for i in range(2, 5)] +
         ["[UNK]", "[CLS]", "[SEP]", "[MASK]"] +
         ["the", "a", "of", "and", "to", "in", "is", "it", "that", "was", "for", "on", "with",
          "as", "he", "she", "they", "we", "light", "day", "night", "god", "earth", "heaven",
          "water", "land", "good", "said", "let", "there", "be", "made", "called", "first",
          "##s", "##ed", "##ing", "##ly", "##er", "un", "##able", ".", ",", "!", "?", "'",
          "caf", "##e", "\u00e9", "\u4e16", "\u754c", "lord", "came", "go"])
assert len(VOCAB) == 64, len(VOCAB)


def bert_config(**kw):
    c = {
        "architectures": ["BertForMaskedLM"],
        "model_type": "bert",
        "vocab_size": len(VOCAB),
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 48,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": 0.1,
        "max_position_embeddings": 40,
        "type_vocab_size": 2,
        "initializer_range": 0.02,
        "layer_norm_eps": 1e-12,
        "pad_token_id": 0,
        "position_embedding_type": "absolute",
        "torch_dtype": "float32",
        "transformers_version": "4.46.0",
    }
    c.update(kw)
    return c


def init_bert(cfg, g, heads):
    """Random parameters with BERT's names (base model's names without a prefix)."""
    D, F, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]

    def rnd(*shape, std=0.3):
        return (torch.randn(*shape, generator=g) * std).float()

    def ln(prefix, sd):
        sd[prefix + ".weight"] = 1 + rnd(D, std=0.1)
        sd[prefix + ".bias"] = rnd(D, std=0.1)

    def lin(prefix, sd, i, o):
        sd[prefix + ".weight"] = rnd(o, i, std=1 / math.sqrt(i))
        sd[prefix + ".bias"] = rnd(o, std=0.1)

    sd = {}
    sd["embeddings.word_embeddings.weight"] = rnd(V, D)
    if cfg["model_type"] == "roformer":
        sd["encoder.embed_positions.weight"] = roformer_table(
            cfg["max_position_embeddings"], D // cfg["num_attention_heads"])
    else:
        sd["embeddings.position_embeddings.weight"] = rnd(cfg["max_position_embeddings"], D)
    sd["embeddings.token_type_embeddings.weight"] = rnd(cfg["type_vocab_size"], D)
    ln("embeddings.LayerNorm", sd)
    for i in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        for n in ("query", "key", "value"):
            lin(p + "attention.self." + n, sd, D, D)
        lin(p + "attention.output.dense", sd, D, D)
        ln(p + "attention.output.LayerNorm", sd)
        lin(p + "intermediate.dense", sd, D, F)
        lin(p + "output.dense", sd, F, D)
        ln(p + "output.LayerNorm", sd)
    if "pooler" in heads:
        lin("pooler.dense", sd, D, D)
    if "mlm" in heads:
        lin("cls.predictions.transform.dense", sd, D, D)
        ln("cls.predictions.transform.LayerNorm", sd)
        sd["cls.predictions.bias"] = rnd(V, std=0.1)
        if not cfg.get("tie_word_embeddings", True):
            sd["cls.predictions.decoder.weight"] = rnd(V, D)
    if "cls" in heads:
        lin("classifier", sd, D, cfg["num_labels"] if "num_labels" in cfg else
            len(cfg["id2label"]))
    return sd


def roformer_table(n_pos, dim):
    """RoFormer's saved table (RoFormerSinusoidalPositionalEmbedding): row m holds
    sin(m theta_j) for j < dim/2, then cos(m theta_j), theta_j = 10000^(-2j/dim)."""
    pos = torch.arange(n_pos, dtype=torch.float64)[:, None]
    theta = 10000.0 ** (-2 * torch.arange(dim // 2, dtype=torch.float64) / dim)
    return torch.cat([torch.sin(pos * theta), torch.cos(pos * theta)], 1).float()


def rotate(x):
    """RoPE (RoFormer Eq. 34) on [B, N, T, H], interleaved pairs (2i, 2i+1) turned by m theta_i,
    theta_i = 10000^(-2i/H), m the position."""
    T, H = x.shape[-2], x.shape[-1]
    theta = 10000.0 ** (-2 * torch.arange(H // 2, dtype=torch.float64) / H)
    angle = torch.arange(T, dtype=torch.float64)[:, None] * theta  # [T, H/2]
    cos, sin = torch.cos(angle), torch.sin(angle)
    even, odd = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = even * cos - odd * sin
    out[..., 1::2] = odd * cos + even * sin
    return out


def gelu(x):
    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))


def layer_norm(x, sd, prefix, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * sd[prefix + ".weight"] + sd[prefix + ".bias"]


def linear(x, sd, prefix):
    return x @ sd[prefix + ".weight"].t() + sd[prefix + ".bias"]


def bert_forward(sd, cfg, ids, types, mask):
    """Hidden states [B, T, D] and pooled [B, D] (pooled None without a pooler), in float64."""
    sd = {k: v.double() for k, v in sd.items()}
    eps = cfg["layer_norm_eps"]
    B, T = ids.shape
    N = cfg["num_attention_heads"]
    H = cfg["hidden_size"] // N
    roformer = cfg["model_type"] == "roformer"
    x = (sd["embeddings.word_embeddings.weight"][ids] +
         sd["embeddings.token_type_embeddings.weight"][types])
    if not roformer:
        x = x + sd["embeddings.position_embeddings.weight"][torch.arange(T)]
    x = layer_norm(x, sd, "embeddings.LayerNorm", eps)
    add_mask = (1.0 - mask[:, None, None, :].double()) * torch.finfo(torch.float32).min
    for i in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{i}."

        def heads(t):
            return t.view(B, T, N, H).transpose(1, 2)

        q = heads(linear(x, sd, p + "attention.self.query"))
        k = heads(linear(x, sd, p + "attention.self.key"))
        v = heads(linear(x, sd, p + "attention.self.value"))
        if roformer:
            q, k = rotate(q), rotate(k)
        scores = q @ k.transpose(-1, -2) / math.sqrt(H) + add_mask
        ctx = (torch.softmax(scores, -1) @ v).transpose(1, 2).reshape(B, T, N * H)
        x = layer_norm(linear(ctx, sd, p + "attention.output.dense") + x, sd,
                       p + "attention.output.LayerNorm", eps)
        h = gelu(linear(x, sd, p + "intermediate.dense"))
        x = layer_norm(linear(h, sd, p + "output.dense") + x, sd, p + "output.LayerNorm", eps)
    pooled = torch.tanh(linear(x[:, 0], sd, "pooler.dense")) if "pooler.dense.weight" in sd \
        else None
    return x, pooled


def mlm_logits(sd, cfg, x):
    sd = {k: v.double() for k, v in sd.items()}
    t = gelu(linear(x, sd, "cls.predictions.transform.dense"))
    t = layer_norm(t, sd, "cls.predictions.transform.LayerNorm", cfg["layer_norm_eps"])
    w = sd.get("cls.predictions.decoder.weight", sd["embeddings.word_embeddings.weight"])
    return t @ w.t() + sd["cls.predictions.bias"]


def inputs(g, V, T=12):
    ids = torch.randint(11, V, (2, T), generator=g)
    ids[:, 0] = VOCAB.index("[CLS]")
    ids[0, -1] = VOCAB.index("[SEP]")
    ids[1, 7] = VOCAB.index("[SEP]")
    ids[1, 8:] = VOCAB.index("[PAD]")
    ids[0, 3] = VOCAB.index("[MASK]")
    types = torch.zeros(2, T, dtype=torch.long)
    types[0, 6:] = 1
    mask = (ids != VOCAB.index("[PAD]")).long()
    return ids, types, mask


def save(out, name, cfg, sd, expected, legacy_names=False, extra=None):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
    tensors = []
    for k in sorted(sd):
        n = k
        if legacy_names:  # TF-converted checkpoints: LayerNorm.gamma / .beta
            n = n.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias",
                                                                          "LayerNorm.beta")
        tensors.append((n, "F32", sd[k]))
    for n, dt, t in extra or []:
        tensors.append((n, dt, t))
    write(os.path.join(d, "model.safetensors"), tensors, {"format": "pt"})
    write(os.path.join(d, "expected.safetensors"), expected, {"format": "pt"})
    with open(os.path.join(d, "vocab.txt"), "w") as f:
        f.write("".join(v + "\n" for v in VOCAB))
    print(f"wrote {d}")


def main():
    out = sys.argv[1]
    g = torch.Generator().manual_seed(20261126)
    V = len(VOCAB)

    # BertForMaskedLM, tied decoder (save_pretrained drops the tied decoder weight); then
    # untied, with eps 1e-5.
    for name, cfg in (("bert-mlm", bert_config()),
                      ("bert-mlm-untied",
                       bert_config(tie_word_embeddings=False, layer_norm_eps=1e-5))):
        sd = init_bert(cfg, g, {"mlm"})
        ids, types, mask = inputs(g, V)
        x, _ = bert_forward(sd, cfg, ids, types, mask)
        logits = mlm_logits(sd, cfg, x)
        prefixed = {("bert." + k if not k.startswith("cls.") else k): v for k, v in sd.items()}
        save(out, name, cfg, prefixed,
             [("input_ids", "I64", ids), ("token_type_ids", "I64", types),
              ("attention_mask", "I64", mask), ("logits", "F32", logits.float())])

    # BertModel as TF-converted checkpoints have it: no prefix, LayerNorm.gamma/beta, the
    # position_ids buffer saved.
    cfg = bert_config(architectures=["BertModel"])
    sd = init_bert(cfg, g, {"pooler"})
    ids, types, mask = inputs(g, V)
    x, pooled = bert_forward(sd, cfg, ids, types, mask)
    save(out, "bert-base", cfg, sd,
         [("input_ids", "I64", ids), ("token_type_ids", "I64", types),
          ("attention_mask", "I64", mask), ("last_hidden_state", "F32", x.float()),
          ("pooler_output", "F32", pooled.float())],
         legacy_names=True,
         extra=[("embeddings.position_ids", "I64",
                 torch.arange(cfg["max_position_embeddings"]).reshape(1, -1))])

    # BertForSequenceClassification, 3 labels.
    cfg = bert_config(architectures=["BertForSequenceClassification"],
                      id2label={"0": "entailment", "1": "neutral", "2": "contradiction"},
                      label2id={"entailment": 0, "neutral": 1, "contradiction": 2})
    sd = init_bert(cfg, g, {"pooler", "cls"})
    ids, types, mask = inputs(g, V)
    x, pooled = bert_forward(sd, cfg, ids, types, mask)
    logits = pooled @ sd["classifier.weight"].double().t() + sd["classifier.bias"].double()
    prefixed = {("bert." + k if not k.startswith("classifier") else k): v for k, v in sd.items()}
    save(out, "bert-cls", cfg, prefixed,
         [("input_ids", "I64", ids), ("token_type_ids", "I64", types),
          ("attention_mask", "I64", mask), ("logits", "F32", logits.float())])

    # RoFormerForMaskedLM (Su et al. 2021): BERT's layers with RoPE in place of the position
    # embeddings; the fixed sinusoid table is saved, as transformers does.
    cfg = bert_config(architectures=["RoFormerForMaskedLM"], model_type="roformer",
                      embedding_size=32, rotary_value=False, max_position_embeddings=64)
    del cfg["position_embedding_type"]  # a BERT key
    sd = init_bert(cfg, g, {"mlm"})
    ids, types, mask = inputs(g, V)
    x, _ = bert_forward(sd, cfg, ids, types, mask)
    logits = mlm_logits(sd, cfg, x)
    prefixed = {("roformer." + k if not k.startswith("cls.") else k): v for k, v in sd.items()}
    save(out, "roformer-mlm", cfg, prefixed,
         [("input_ids", "I64", ids), ("token_type_ids", "I64", types),
          ("attention_mask", "I64", mask), ("logits", "F32", logits.float())])

    # RoFormerForSequenceClassification, two labels under transformers' default names: the
    # head is dense -> GELU -> out_proj on [CLS] (no tanh pooler).
    cfg = bert_config(architectures=["RoFormerForSequenceClassification"], model_type="roformer",
                      embedding_size=32, rotary_value=False, max_position_embeddings=64,
                      id2label={"0": "LABEL_0", "1": "LABEL_1"},
                      label2id={"LABEL_0": 0, "LABEL_1": 1})
    del cfg["position_embedding_type"]
    sd = init_bert(cfg, g, set())
    D = cfg["hidden_size"]
    sd["classifier.dense.weight"] = (torch.randn(D, D, generator=g) / math.sqrt(D)).float()
    sd["classifier.dense.bias"] = (torch.randn(D, generator=g) * 0.1).float()
    sd["classifier.out_proj.weight"] = (torch.randn(2, D, generator=g) / math.sqrt(D)).float()
    sd["classifier.out_proj.bias"] = (torch.randn(2, generator=g) * 0.1).float()
    ids, types, mask = inputs(g, V)
    x, _ = bert_forward(sd, cfg, ids, types, mask)
    d64 = {k: v.double() for k, v in sd.items()}
    logits = linear(gelu(linear(x[:, 0], d64, "classifier.dense")), d64, "classifier.out_proj")
    prefixed = {("roformer." + k if not k.startswith("classifier.") else k): v
                for k, v in sd.items()}
    save(out, "roformer-cls", cfg, prefixed,
         [("input_ids", "I64", ids), ("token_type_ids", "I64", types),
          ("attention_mask", "I64", mask), ("logits", "F32", logits.float())])
    with open(os.path.join(out, "roformer-cls", "tokenizer_config.json"), "w") as f:
        json.dump({"do_lower_case": True, "tokenizer_class": "RoFormerTokenizer"}, f, indent=2)

    if "--check-with-transformers" in sys.argv:
        check_with_transformers(out)


def check_with_transformers(out):
    """Loads every fixture with `transformers` and compares its outputs (where installed)."""
    import transformers  # noqa: E402
    for name in ("bert-mlm", "bert-mlm-untied", "bert-base", "bert-cls", "roformer-mlm",
                 "roformer-cls"):
        d = os.path.join(out, name)
        cfg = json.load(open(os.path.join(d, "config.json")))
        cls = getattr(transformers, cfg["architectures"][0])
        model = cls.from_pretrained(d).eval()
        exp = {k: t for k, (_, _, t) in read(os.path.join(d, "expected.safetensors")).items()}
        with torch.no_grad():
            o = model(input_ids=exp["input_ids"], token_type_ids=exp["token_type_ids"],
                      attention_mask=exp["attention_mask"])
        for key in ("logits", "last_hidden_state", "pooler_output"):
            if key in exp:
                diff = (getattr(o, key) - exp[key]).abs().max().item()
                print(f"{name} {key}: max |transformers - reference| = {diff:.2e}")
                assert diff < 1e-4, (name, key, diff)


if __name__ == "__main__":
    main()
