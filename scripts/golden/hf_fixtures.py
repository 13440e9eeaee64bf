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
    if "embeddings_project.weight" in sd:  # RoFormer with embedding_size != hidden_size
        x = linear(x, sd, "embeddings_project")
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
    # untied, with eps 1e-5, in the layout transformers 5 saves: it ties nothing when
    # tie_word_embeddings is false, so the head computes with cls.predictions.decoder.bias and
    # cls.predictions.bias stays as initialised (zeros). (transformers 4 shares one tensor
    # under both names and saves it once, as cls.predictions.bias: bert-mlm's layout.)
    for name, cfg in (("bert-mlm", bert_config()),
                      ("bert-mlm-untied",
                       bert_config(tie_word_embeddings=False, layer_norm_eps=1e-5))):
        sd = init_bert(cfg, g, {"mlm"})
        ids, types, mask = inputs(g, V)
        x, _ = bert_forward(sd, cfg, ids, types, mask)
        logits = mlm_logits(sd, cfg, x)
        prefixed = {("bert." + k if not k.startswith("cls.") else k): v for k, v in sd.items()}
        if not cfg.get("tie_word_embeddings", True):
            prefixed["cls.predictions.decoder.bias"] = prefixed["cls.predictions.bias"]
            prefixed["cls.predictions.bias"] = torch.zeros_like(prefixed["cls.predictions.bias"])
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

    llama_fixtures(out, g)
    v5_fixtures(out, g)
    swa_fixtures(out)
    gemma3_fixtures(out)
    phi3_fixtures(out)
    olmo3_fixtures(out)
    gpt2_fixtures(out)
    neox_fixtures(out)

    if "--check-with-transformers" in sys.argv:
        check_with_transformers(out)
    if "--check-exports" in sys.argv:  # DIR/NAME: `ropelab export --format hf` of fixture NAME
        check_with_transformers(out, sys.argv[sys.argv.index("--check-exports") + 1])


# ---- Llama-layout decoders (Touvron et al. 2023; transformers' LlamaForCausalLM, Mistral, Qwen2)
#
#   x = embed(ids); per layer: x += o(attn(rms(x))); x += down(silu(gate(rms(x))) * up(rms(x)))
#   rms(x) = w * x / sqrt(mean(x^2) + eps); logits = rms(x) @ lm_head^T (the embeddings if tied)
#   attention: causal softmax(q k^T / sqrt(H)); grouped-query: kv head j serves query heads
#   [j g, (j+1) g); RoPE on (i, i + H/2) pairs: q cos + rotate_half(q) sin, cos and sin of
#   m * inv_freq (twice over), times the scaling's attention factor.
#   rope_scaling, as transformers' documented rope types compute inv_freq:
#     linear   inv_freq / factor
#     dynamic  base * (factor * T / L0 - (factor - 1)) ** (H / (H - 2)) when T > L0
#     yarn     a ramp over pair indices between the correction dims of beta_fast and beta_slow
#              (floor, ceil), blending inv_freq (kept) and inv_freq / factor; attention factor
#              0.1 ln(factor) + 1
#     llama3   wavelengths above L0 / low_freq_factor divided by factor, below
#              L0 / high_freq_factor kept, a smooth blend between
#     longrope inv_freq / long_factor when T > L0 else / short_factor; attention factor
#              sqrt(1 + ln(factor) / ln(L0))

LLAMA_VOCAB = 64
LLAMA_FIXTURES = ("llama", "llama-tied-mqa", "qwen2", "mistral", "llama-linear", "llama-dynamic",
                  "llama-yarn", "llama-llama3", "llama-longrope", "llama-bpe", "llama-spm")


def llama_config(**kw):
    c = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": LLAMA_VOCAB,
        "hidden_size": 32,
        "intermediate_size": 40,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "hidden_act": "silu",
        "max_position_embeddings": 16,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "tie_word_embeddings": False,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "initializer_range": 0.02,
        "pretraining_tp": 1,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "float32",
        "transformers_version": "4.46.0",
    }
    c.update(kw)
    return c


def head_dim(cfg):
    """config.json's head_dim, else the class's default (Qwen3: 128; else hidden / heads)."""
    if cfg.get("head_dim") is not None:
        return cfg["head_dim"]
    qwen3 = cfg["architectures"][0] == "Qwen3ForCausalLM"
    return 128 if qwen3 else cfg["hidden_size"] // cfg["num_attention_heads"]


def init_llama(cfg, g, qkv_bias=False, qk_norm=False):
    D, F, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    N, Nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    H = head_dim(cfg)

    def rnd(*shape, std):
        return (torch.randn(*shape, generator=g) * std).float()

    sd = {"model.embed_tokens.weight": rnd(V, D, std=0.5)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        for n, rows in (("q", N * H), ("k", Nkv * H), ("v", Nkv * H)):
            sd[p + f"self_attn.{n}_proj.weight"] = rnd(rows, D, std=1 / math.sqrt(D))
            if qkv_bias:
                sd[p + f"self_attn.{n}_proj.bias"] = rnd(rows, std=0.1)
        sd[p + "self_attn.o_proj.weight"] = rnd(D, N * H, std=1 / math.sqrt(N * H))
        if qk_norm == "projection":  # OLMo 2: one gain per channel of the whole projection
            sd[p + "self_attn.q_norm.weight"] = 1 + rnd(N * H, std=0.3)
            sd[p + "self_attn.k_norm.weight"] = 1 + rnd(Nkv * H, std=0.3)
        elif qk_norm:  # Qwen3: one RMSNorm gain over the head's channels, shared by the heads
            sd[p + "self_attn.q_norm.weight"] = 1 + rnd(H, std=0.3)
            sd[p + "self_attn.k_norm.weight"] = 1 + rnd(H, std=0.3)
        sd[p + "mlp.gate_proj.weight"] = rnd(F, D, std=1 / math.sqrt(D))
        sd[p + "mlp.up_proj.weight"] = rnd(F, D, std=1 / math.sqrt(D))
        sd[p + "mlp.down_proj.weight"] = rnd(D, F, std=1 / math.sqrt(F))
        olmo2 = cfg["architectures"][0] in OLMO  # norms after the sublayers
        sd[p + ("post_attention_layernorm" if olmo2 else "input_layernorm") + ".weight"] = \
            1 + rnd(D, std=0.1)
        sd[p + ("post_feedforward_layernorm" if olmo2 else "post_attention_layernorm") +
           ".weight"] = 1 + rnd(D, std=0.1)
    sd["model.norm.weight"] = 1 + rnd(D, std=0.1)
    if not cfg["tie_word_embeddings"]:
        sd["lm_head.weight"] = rnd(V, D, std=1 / math.sqrt(D))
    return sd


def rope_of(cfg):
    """(base, scaling dict) from either layout of config.json: transformers 4's rope_theta and
    rope_scaling, or 5's rope_parameters (base and scaling in one object; nested per layer type,
    keyed like layer_types, where the model has several attention kinds: here all alike)."""
    rp = cfg.get("rope_parameters")
    default = 2000000.0 if cfg["architectures"][0] == "SmolLM3ForCausalLM" else 10000.0
    if rp is None:
        rs = dict(cfg.get("rope_scaling") or {"rope_type": "default"})
        if "type" in rs:  # the older name (Phi-3's configs)
            rs.setdefault("rope_type", rs.pop("type"))
        return cfg.get("rope_theta", default), rs
    if set(rp) <= set(cfg.get("layer_types") or []):
        rp = rp[cfg["layer_types"][0]]
    rs = {k: v for k, v in rp.items() if k != "rope_theta"}
    rs.setdefault("rope_type", "default")
    return rp.get("rope_theta", default), rs


def rotary_width(cfg):
    """The channels of each head that turn: Phi-3's partial_rotary_factor of head_dim (floored),
    else all of them."""
    if cfg["architectures"][0] == "Phi3ForCausalLM":
        return int(head_dim(cfg) * cfg.get("partial_rotary_factor", 1.0))
    return head_dim(cfg)


def llama_inv_freq(cfg, T):
    """inv_freq [R/2] and the attention factor for a forward pass over T tokens (float64), R the
    rotary width."""
    H = rotary_width(cfg)
    base, rs = rope_of(cfg)
    inv = base ** (-torch.arange(0, H, 2, dtype=torch.float64) / H)
    kind = rs["rope_type"]
    L0 = rs.get("original_max_position_embeddings",
                cfg.get("original_max_position_embeddings", cfg["max_position_embeddings"]))
    f = rs.get("factor", 1.0)
    if kind == "default":
        return inv, 1.0
    if kind == "linear":
        return inv / f, 1.0
    if kind == "dynamic":
        if T <= L0:
            return inv, 1.0
        b = base * ((f * T / L0) - (f - 1)) ** (H / (H - 2))
        return b ** (-torch.arange(0, H, 2, dtype=torch.float64) / H), 1.0
    if kind == "yarn":
        def corr(rot):
            return (H * math.log(L0 / (rot * 2 * math.pi))) / (2 * math.log(base))
        lo = max(math.floor(corr(rs.get("beta_fast", 32))), 0)
        hi = min(math.ceil(corr(rs.get("beta_slow", 1))), H - 1)
        if lo == hi:
            hi += 0.001
        ramp = ((torch.arange(H // 2, dtype=torch.float64) - lo) / (hi - lo)).clamp(0, 1)
        extrapolate = 1 - ramp
        return inv / f * (1 - extrapolate) + inv * extrapolate, 0.1 * math.log(f) + 1.0
    if kind == "llama3":
        lo_f, hi_f = rs["low_freq_factor"], rs["high_freq_factor"]
        wl = 2 * math.pi / inv
        out = torch.where(wl > L0 / lo_f, inv / f, inv)
        smooth = (L0 / wl - lo_f) / (hi_f - lo_f)
        blended = (1 - smooth) * out / f + smooth * out
        medium = (wl >= L0 / hi_f) & (wl <= L0 / lo_f)
        return torch.where(medium, blended, out), 1.0
    if kind == "longrope":
        # transformers 5 reads rope_parameters' factor where given; both read the ratio else.
        factor = rs.get("factor") if "rope_parameters" in cfg else None
        factor = factor or cfg["max_position_embeddings"] / L0
        ext = torch.tensor(rs["long_factor"] if T > L0 else rs["short_factor"],
                           dtype=torch.float64)
        return inv / ext, math.sqrt(1 + math.log(factor) / math.log(L0))
    raise ValueError(kind)


def rms_norm(x, w, eps):
    return w * x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], -1)


def layer_windows(cfg):
    """Each layer's sliding window (None: full attention), as the classes read config.json:
    Mistral slides every layer when sliding_window is set (default 4096) and ignores
    layer_types; Phi-3 likewise, without a default; Qwen2 and Qwen3 slide only with use_sliding_window, the layers layer_types names, else
    those from max_window_layers (default 28) on; Llama never."""
    L, arch = cfg["num_hidden_layers"], cfg["architectures"][0]
    if arch == "MistralForCausalLM":
        return [cfg.get("sliding_window", 4096)] * L
    if arch == "Phi3ForCausalLM":  # as Mistral, without a default window
        return [cfg.get("sliding_window")] * L
    if arch == "Olmo3ForCausalLM":
        return [cfg.get("sliding_window", 4096) if t == "sliding_attention" else None
                for t in olmo3_types(cfg)]
    if arch in ("Qwen2ForCausalLM", "Qwen3ForCausalLM", "SmolLM3ForCausalLM"):
        w = cfg.get("sliding_window") if cfg.get("use_sliding_window", False) else None
        if arch == "SmolLM3ForCausalLM":  # SmolLM3's window falls on its NoPE layers
            slides = [not r for r in layer_rope(cfg)]
        else:
            slides = [i >= cfg.get("max_window_layers", 28) for i in range(L)]
        types = cfg.get("layer_types") or [
            "sliding_attention" if w is not None and slides[i] else "full_attention"
            for i in range(L)]
        return [w if t == "sliding_attention" else None for t in types]
    return [None] * L


OLMO = ("Olmo2ForCausalLM", "Olmo3ForCausalLM")


def olmo3_types(cfg):
    """OLMo 3's layer_types, else every 4th layer (1-based) full_attention, the rest sliding."""
    L = cfg["num_hidden_layers"]
    return cfg.get("layer_types") or [
        "sliding_attention" if (i + 1) % 4 != 0 else "full_attention" for i in range(L)]


def layer_rope_cfgs(cfg):
    """The config each layer's RoPE is read from: OLMo 3's by layer type (transformers 5's
    rope_parameters[type]; in 4's layout rope_scaling is the full_attention layers' only, both
    with rope_theta), every other class's whole."""
    L = cfg["num_hidden_layers"]
    if cfg["architectures"][0] != "Olmo3ForCausalLM":
        return [cfg] * L
    out = []
    for t in olmo3_types(cfg):
        c = dict(cfg)
        if "rope_parameters" in cfg:
            c["rope_parameters"] = cfg["rope_parameters"][t]
        elif t == "sliding_attention":
            c["rope_scaling"] = None
        out.append(c)
    return out


def layer_rope(cfg):
    """Whether each layer rotates: SmolLM3's no_rope_layers (1 RoPE, 0 NoPE), else a NoPE layer
    every no_rope_layer_interval (default 4); every layer in the other classes."""
    L = cfg["num_hidden_layers"]
    if cfg["architectures"][0] != "SmolLM3ForCausalLM":
        return [True] * L
    if cfg.get("no_rope_layers") is not None:
        return [bool(v) for v in cfg["no_rope_layers"][:L]]
    every = cfg.get("no_rope_layer_interval", 4)
    return [(i + 1) % every != 0 for i in range(L)]


def llama_logits(sd, cfg, ids):
    sd = {k: v.double() for k, v in sd.items()}
    B, T = ids.shape
    D, N, Nkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    olmo2 = cfg["architectures"][0] in OLMO
    phi3 = cfg["architectures"][0] == "Phi3ForCausalLM"
    H, R = head_dim(cfg), rotary_width(cfg)
    eps = cfg.get("rms_norm_eps", 1e-5 if olmo2 or phi3 else 1e-6)

    def cos_sin(c):
        inv, att = llama_inv_freq(c, T)
        ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
        ang = torch.cat([ang, ang], -1)
        return ang.cos() * att, ang.sin() * att

    tables = [cos_sin(c) for c in layer_rope_cfgs(cfg)]
    causal = torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)
    # A sliding layer's query q sees the keys k with q - window < k <= q.
    offset = torch.arange(T)[:, None] - torch.arange(T)[None, :]
    masks = [causal if w is None else causal.masked_fill(offset >= w, float("-inf"))
             for w in layer_windows(cfg)]
    rotates = layer_rope(cfg)

    def lin(x, name):
        y = x @ sd[name + ".weight"].t()
        return y + sd[name + ".bias"] if name + ".bias" in sd else y

    x = sd["model.embed_tokens.weight"][ids]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        # OLMo 2 normalises each sublayer's output, the others its input.
        h = x if olmo2 else rms_norm(x, sd[p + "input_layernorm.weight"], eps)
        q, k = lin(h, p + "self_attn.q_proj"), lin(h, p + "self_attn.k_proj")
        if olmo2:  # QK-norm over the whole projections, before the split into heads
            q = rms_norm(q, sd[p + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, sd[p + "self_attn.k_norm.weight"], eps)
        q = q.view(B, T, N, H).transpose(1, 2)
        k = k.view(B, T, Nkv, H).transpose(1, 2)
        v = lin(h, p + "self_attn.v_proj").view(B, T, Nkv, H).transpose(1, 2)
        if not olmo2 and p + "self_attn.q_norm.weight" in sd:  # QK-norm per head (Qwen3)
            q = rms_norm(q, sd[p + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, sd[p + "self_attn.k_norm.weight"], eps)
        cos, sin = tables[i]
        if rotates[i]:  # the first R channels turn (Phi-3's partial rotary), the rest pass
            q = torch.cat([q[..., :R] * cos + rotate_half(q[..., :R]) * sin, q[..., R:]], -1)
            k = torch.cat([k[..., :R] * cos + rotate_half(k[..., :R]) * sin, k[..., R:]], -1)
        k, v = k.repeat_interleave(N // Nkv, 1), v.repeat_interleave(N // Nkv, 1)
        a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(H) + masks[i], -1) @ v
        a = lin(a.transpose(1, 2).reshape(B, T, N * H), p + "self_attn.o_proj")
        if olmo2:
            x = x + rms_norm(a, sd[p + "post_attention_layernorm.weight"], eps)
            h = x
        else:
            x = x + a
            h = rms_norm(x, sd[p + "post_attention_layernorm.weight"], eps)
        gate = lin(h, p + "mlp.gate_proj")
        f = lin(gate * torch.sigmoid(gate) * lin(h, p + "mlp.up_proj"), p + "mlp.down_proj")
        x = x + (rms_norm(f, sd[p + "post_feedforward_layernorm.weight"], eps) if olmo2 else f)
    x = rms_norm(x, sd["model.norm.weight"], eps)
    w = sd.get("lm_head.weight", sd["model.embed_tokens.weight"])
    return x @ w.t()


def save_decoder(out, name, cfg, sd, inputs, expected=True, logits_of=None):
    """A decoder fixture: config.json, model.safetensors and (with `expected`) the reference
    logits of each (tag, input_ids) of `inputs` in expected.safetensors (by `logits_of`:
    llama_logits unless given)."""
    logits_of = logits_of or llama_logits
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
    write(os.path.join(d, "model.safetensors"), [(k, "F32", sd[k]) for k in sorted(sd)],
          {"format": "pt"})
    if expected:
        tensors = []
        for tag, ids in inputs:
            tensors += [("input_ids" + tag, "I64", ids),
                        ("logits" + tag, "F32", logits_of(sd, cfg, ids).float())]
        write(os.path.join(d, "expected.safetensors"), tensors, {"format": "pt"})
    print(f"wrote {d}")


def llama_fixtures(out, g):
    """LlamaForCausalLM (untied, grouped-query), a tied multi-query one (SmolLM-like), Qwen2
    (q/k/v biases), Mistral, and each rope_scaling type on the first one's weights. Each holds
    a short input (12 tokens) and a long one (40: beyond the scaled types' original length)."""
    V = LLAMA_VOCAB
    short = torch.randint(3, V, (2, 12), generator=g)
    long = torch.randint(3, V, (2, 40), generator=g)

    def save_llama(name, cfg, sd):
        save_decoder(out, name, cfg, sd, (("", long), ("_short", short)))

    base = llama_config()
    base_sd = init_llama(base, g)
    save_llama("llama", base, base_sd)
    cfg = llama_config(tie_word_embeddings=True, num_key_value_heads=1, rope_theta=500000.0)
    save_llama("llama-tied-mqa", cfg, init_llama(cfg, g))
    cfg = llama_config(architectures=["Qwen2ForCausalLM"], model_type="qwen2",
                       use_sliding_window=False, sliding_window=4096, max_window_layers=2)
    del cfg["attention_bias"], cfg["mlp_bias"]
    save_llama("qwen2", cfg, init_llama(cfg, g, qkv_bias=True))
    cfg = llama_config(architectures=["MistralForCausalLM"], model_type="mistral",
                       sliding_window=None)
    del cfg["attention_bias"], cfg["mlp_bias"]
    save_llama("mistral", cfg, init_llama(cfg, g))
    scalings = {
        "linear": ({"rope_type": "linear", "factor": 4.0}, {}),
        "dynamic": ({"rope_type": "dynamic", "factor": 4.0}, {}),
        # original length and max_position_embeddings agree with factor, so the transformers
        # versions that took factor from their ratio read the same factor; older ones take the
        # correction range over max_position_embeddings (check_with_transformers).
        "yarn": ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 256,
                  "beta_fast": 32.0, "beta_slow": 1.0}, {"max_position_embeddings": 1024}),
        "llama3": ({"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
                    "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
                   {"max_position_embeddings": 256}),
        "longrope": ({"rope_type": "longrope", "short_factor": [1.0, 1.3, 2.0, 3.0],
                      "long_factor": [1.0, 2.5, 5.0, 9.0]},
                     {"max_position_embeddings": 64, "original_max_position_embeddings": 16}),
    }
    for name, (rs, extra) in scalings.items():
        save_llama("llama-" + name, llama_config(rope_scaling=rs, **extra), base_sd)

    # With their tokenizers: a byte-level BPE tokenizer.json in Llama 3's layout (from
    # bpe_reference.py; the embeddings padded past its end, as Qwen2's are), and a SentencePiece
    # tokenizer.model in Llama 2's (unk 0, bos 1, eos 2, byte fallback), trained here by the
    # sentencepiece library, whose ids on the test strings are recorded as the reference.
    import bpe_reference as bpe
    merges = bpe.train(bpe.TRAIN)
    vocab, added = bpe.build(merges)
    n = len(vocab) + len(added)
    bos, eos = added[0]["id"], added[1]["id"]
    cfg = llama_config(vocab_size=n + 10, bos_token_id=bos, eos_token_id=[eos, added[2]["id"]],
                       rope_theta=500000.0)
    save_llama_tok("llama-bpe", cfg, init_llama(cfg, g), g, out, save_llama,
                   {"tokenizer.json": json.dumps(bpe.tokenizer_json(vocab, merges, added,
                                                                   "llama3"))})
    spm_model = train_llama_spm()
    import sentencepiece
    sp = sentencepiece.SentencePieceProcessor(model_proto=spm_model)
    cfg = llama_config(vocab_size=sp.get_piece_size())
    save_llama_tok("llama-spm", cfg, init_llama(cfg, g), g, out, save_llama,
                   {"tokenizer.model": spm_model}, sp)
    roformer_small(out, g)


def roformer_small(out, g):
    """RoFormerForMaskedLM with embedding_size 16 < hidden_size 32 (the small Chinese
    checkpoints' layout): 16-wide embeddings and embedding LayerNorm, embeddings_project onto
    32, the MLM transform back to 16, the decoder tied to the 16-wide embeddings."""
    cfg = bert_config(architectures=["RoFormerForMaskedLM"], model_type="roformer",
                      embedding_size=16, rotary_value=False, max_position_embeddings=64)
    del cfg["position_embedding_type"]
    sd = init_bert(cfg, g, {"mlm"})
    E, D, V = 16, cfg["hidden_size"], cfg["vocab_size"]

    def rnd(*shape, std=0.3):
        return (torch.randn(*shape, generator=g) * std).float()

    sd["embeddings.word_embeddings.weight"] = rnd(V, E)
    sd["embeddings.token_type_embeddings.weight"] = rnd(2, E)
    sd["embeddings.LayerNorm.weight"] = 1 + rnd(E, std=0.1)
    sd["embeddings.LayerNorm.bias"] = rnd(E, std=0.1)
    sd["embeddings_project.weight"] = rnd(D, E, std=1 / math.sqrt(E))
    sd["embeddings_project.bias"] = rnd(D, std=0.1)
    sd["cls.predictions.transform.dense.weight"] = rnd(E, D, std=1 / math.sqrt(D))
    sd["cls.predictions.transform.dense.bias"] = rnd(E, std=0.1)
    sd["cls.predictions.transform.LayerNorm.weight"] = 1 + rnd(E, std=0.1)
    sd["cls.predictions.transform.LayerNorm.bias"] = rnd(E, std=0.1)
    ids, types, mask = inputs(g, V)
    x, _ = bert_forward(sd, cfg, ids, types, mask)
    logits = mlm_logits(sd, cfg, x)
    prefixed = {("roformer." + k if not k.startswith("cls.") else k): v for k, v in sd.items()}
    save(out, "roformer-mlm-small", cfg, prefixed,
         [("input_ids", "I64", ids), ("token_type_ids", "I64", types),
          ("attention_mask", "I64", mask), ("logits", "F32", logits.float())])


# ---- transformers 5's layout (the current release writes every config.json this way)
#
#   rope_theta moved inside rope_parameters, beside rope_type and the type's keys; no
#   rope_scaling; torch_dtype is now dtype; Qwen2 lists layer_types. Each Llama-layout class with
#   each rope type (base 500000, so a reader that misses it computes another function), BERT and
#   RoFormer. Qwen2's bos = eos (as in the Qwen2.5 and Qwen3 base models), Mistral's pad = eos.
#   Two that the import must refuse: an unknown key (Gemma 2's softcapping, which would change
#   the function), and transformers 4's rope_theta beside a rope_parameters that disagrees.

V5_CLASSES = ("llama", "mistral", "qwen2")
V5_ROPE = {  # rope_parameters' keys besides rope_type and rope_theta; top-level keys
    "default": ({}, {}),
    "linear": ({"factor": 4.0}, {}),
    "dynamic": ({"factor": 4.0}, {}),
    "yarn": ({"factor": 4.0, "original_max_position_embeddings": 256, "beta_fast": 32.0,
              "beta_slow": 1.0}, {"max_position_embeddings": 1024}),
    "llama3": ({"factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64}, {"max_position_embeddings": 256}),
    "longrope": ({"short_factor": [1.0, 1.3, 2.0, 3.0], "long_factor": [1.0, 2.5, 5.0, 9.0],
                  "original_max_position_embeddings": 16}, {"max_position_embeddings": 64}),
}
V5_FIXTURES = tuple(f"{c}-v5-{k}" for c in V5_CLASSES for k in V5_ROPE)


def v5_config(cls, kind):
    c = llama_config(transformers_version="5.0.0", dtype="float32", use_cache=True,
                     pad_token_id=None, head_dim=8)
    del c["rope_theta"], c["rope_scaling"], c["torch_dtype"]
    params, extra = V5_ROPE[kind]
    c["rope_parameters"] = dict(rope_type=kind, rope_theta=500000.0, **params)
    c.update(extra)
    if cls != "llama":
        del c["attention_bias"], c["mlp_bias"], c["pretraining_tp"]
        c["sliding_window"] = None
    if cls == "mistral":
        c.update(architectures=["MistralForCausalLM"], model_type="mistral", pad_token_id=2)
    if cls == "qwen2":
        c.update(architectures=["Qwen2ForCausalLM"], model_type="qwen2", use_sliding_window=False,
                 max_window_layers=2, layer_types=["full_attention"] * 2, bos_token_id=2,
                 eos_token_id=2)
    return c


def v5_fixtures(out, g):
    V = LLAMA_VOCAB
    ids = (("", torch.randint(3, V, (2, 40), generator=g)),
           ("_short", torch.randint(3, V, (2, 12), generator=g)))
    weights = {}
    for cls in V5_CLASSES:
        weights[cls] = init_llama(v5_config(cls, "default"), g, qkv_bias=cls == "qwen2")
        for kind in V5_ROPE:
            save_decoder(out, f"{cls}-v5-{kind}", v5_config(cls, kind), weights[cls], ids)
    refused = {"llama-v5-unknown-key": {"attn_logit_softcapping": 30.0},
               "llama-v4-v5-disagree": {"rope_theta": 10000.0}}
    for name, extra in refused.items():
        cfg = v5_config("llama", "default")
        cfg.update(extra)
        save_decoder(out, name, cfg, weights["llama"], ids, expected=False)

    # BERT and RoFormer as transformers 5 saves them (no RoPE keys: dtype and the version).
    for name, cfg in (("bert-mlm-v5", bert_config()),
                      ("roformer-mlm-v5",
                       bert_config(architectures=["RoFormerForMaskedLM"], model_type="roformer",
                                   embedding_size=32, rotary_value=False,
                                   max_position_embeddings=64))):
        del cfg["torch_dtype"]
        cfg.update(dtype="float32", transformers_version="5.0.0")
        prefix = "bert." if name.startswith("bert") else "roformer."
        if not name.startswith("bert"):
            del cfg["position_embedding_type"]
        sd = init_bert(cfg, g, {"mlm"})
        tok, types, mask = inputs(g, V)
        logits = mlm_logits(sd, cfg, bert_forward(sd, cfg, tok, types, mask)[0])
        prefixed = {(prefix + k if not k.startswith("cls.") else k): v for k, v in sd.items()}
        save(out, name, cfg, prefixed,
             [("input_ids", "I64", tok), ("token_type_ids", "I64", types),
              ("attention_mask", "I64", mask), ("logits", "F32", logits.float())])


# ---- sliding windows (Mistral; Qwen2 with use_sliding_window), windows shorter than the inputs:
#   mistral-swa      every layer slides (window 5)
#   qwen2-swa        max_window_layers 1: layer 0 full, layer 1 slides (window 6)
#   mistral-v5-swa   transformers 5's layout, window 5
#   qwen2-v5-swa     layer_types [sliding, full] (window 7): layer_types over max_window_layers

SWA_FIXTURES = ("mistral-swa", "qwen2-swa", "qwen3", "llama-head-dim", "qwen3-bpe", "smollm3",
                "olmo2")
SWA_V5_FIXTURES = ("mistral-v5-swa", "qwen2-v5-swa", "qwen3-v5-swa", "smollm3-v5",
                   "smollm3-v5-swa", "olmo2-v5")


def swa_fixtures(out):
    g = torch.Generator().manual_seed(20261129)
    V = LLAMA_VOCAB
    ids = (("", torch.randint(3, V, (2, 40), generator=g)),
           ("_short", torch.randint(3, V, (2, 12), generator=g)))
    cfg = llama_config(architectures=["MistralForCausalLM"], model_type="mistral",
                       sliding_window=5)
    del cfg["attention_bias"], cfg["mlp_bias"]
    save_decoder(out, "mistral-swa", cfg, init_llama(cfg, g), ids)
    cfg = llama_config(architectures=["Qwen2ForCausalLM"], model_type="qwen2",
                       use_sliding_window=True, sliding_window=6, max_window_layers=1)
    del cfg["attention_bias"], cfg["mlp_bias"]
    save_decoder(out, "qwen2-swa", cfg, init_llama(cfg, g, qkv_bias=True), ids)
    cfg = v5_config("mistral", "default")
    cfg["sliding_window"] = 5
    save_decoder(out, "mistral-v5-swa", cfg, init_llama(cfg, g), ids)
    cfg = v5_config("qwen2", "default")
    cfg.update(use_sliding_window=True, sliding_window=7,
               layer_types=["sliding_attention", "full_attention"])
    save_decoder(out, "qwen2-v5-swa", cfg, init_llama(cfg, g, qkv_bias=True), ids)
    qwen3_fixtures(out, g, ids)
    smollm3_fixtures(out, g, ids)
    olmo2_fixtures(out, g, ids)


# ---- Phi-3 (arXiv:2404.14219): the Llama layout with q, k, v fused in qkv_proj (rows q, k, v)
# and gate, up in gate_up_proj (rows gate, up); LongRoPE's factors with the original length at
# the top level; partial_rotary_factor (the first R = floor(H * factor) channels of each head
# turn, inv_freq over R); sliding_window on every layer (none by default); rms_norm_eps 1e-5.
# The reference is llama_logits on the unfused weights.
#   phi3              transformers 4's layout: longrope (short factors up to 16 tokens, long
#                     beyond), rope_scaling's older key "type", untied, grouped-query
#   phi3-v5-partial   transformers 5's: partial_rotary_factor 0.5 (4 of 8 channels), window 7

PHI3_FIXTURES = ("phi3",)
PHI3_V5_FIXTURES = ("phi3-v5-partial",)


def phi3_config(**kw):
    cfg = llama_config(architectures=["Phi3ForCausalLM"], model_type="phi3", rms_norm_eps=1e-5,
                       resid_pdrop=0.0, embd_pdrop=0.0, pad_token_id=2, sliding_window=None,
                       **kw)
    del cfg["attention_bias"], cfg["mlp_bias"], cfg["pretraining_tp"]
    return cfg


def fuse_phi3(sd, cfg):
    """Phi-3's names for init_llama's weights: qkv_proj and gate_up_proj."""
    out = {}
    for k, v in sd.items():
        if ".self_attn.q_proj." in k:
            p = k.replace("q_proj", "{}")
            out[k.replace("q_proj", "qkv_proj")] = torch.cat(
                [sd[p.format(n)] for n in ("q_proj", "k_proj", "v_proj")])
        elif ".mlp.gate_proj." in k:
            out[k.replace("gate_proj", "gate_up_proj")] = torch.cat(
                [v, sd[k.replace("gate_proj", "up_proj")]])
        elif not any(n in k for n in (".k_proj.", ".v_proj.", ".up_proj.")):
            out[k] = v
    return out


def phi3_fixtures(out):
    g = torch.Generator().manual_seed(20261203)
    V = LLAMA_VOCAB
    ids = (("", torch.randint(3, V, (2, 40), generator=g)),
           ("_short", torch.randint(3, V, (2, 12), generator=g)))
    cfg = phi3_config(rope_scaling={"type": "longrope", "short_factor": [1.0, 1.3, 2.0, 3.0],
                                    "long_factor": [1.0, 2.5, 5.0, 9.0]},
                      max_position_embeddings=64, original_max_position_embeddings=16)
    sd = init_llama(cfg, g)
    save_decoder(out, "phi3", cfg, fuse_phi3(sd, cfg), ids,
                 logits_of=lambda _, c, x, sd=sd: llama_logits(sd, c, x))
    cfg = phi3_config(transformers_version="5.0.0", dtype="float32", partial_rotary_factor=0.5,
                      rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    del cfg["rope_theta"], cfg["rope_scaling"], cfg["torch_dtype"]
    cfg["sliding_window"] = 7
    sd = init_llama(cfg, g)
    save_decoder(out, "phi3-v5-partial", cfg, fuse_phi3(sd, cfg), ids,
                 logits_of=lambda _, c, x, sd=sd: llama_logits(sd, c, x))


# ---- OLMo 3 (Ai2 2025): OLMo 2's layers (QK-norm over the projections, norms after the
# sublayers) with sliding-window layers (layer_types; by default every 4th layer global, window
# 4096) and RoPE by layer type: transformers 4's rope_scaling applies to the full_attention
# layers only, 5's rope_parameters are nested per type.
#   olmo3      transformers 4's layout, 4 layers, no layer_types (sliding, sliding, sliding,
#              full), window 5, YaRN x4 from 16 tokens on the global layer, base 500000 (in
#              this layout transformers 5 gives the sliding layers 500000 whatever rope_theta
#              says, 4.x gives them rope_theta: only this base reads alike)
#   olmo3-v5   transformers 5's: layer_types [sliding, full], window 6, rope_parameters with
#              YaRN x4 on full_attention and the plain base (500000) on both, tied

OLMO3_FIXTURES = ("olmo3",)
OLMO3_V5_FIXTURES = ("olmo3-v5",)


def olmo3_fixtures(out):
    g = torch.Generator().manual_seed(20261204)
    V = LLAMA_VOCAB
    ids = (("", torch.randint(3, V, (2, 40), generator=g)),
           ("_short", torch.randint(3, V, (2, 12), generator=g)))
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16,
            "beta_fast": 32.0, "beta_slow": 1.0}
    cfg = llama_config(architectures=["Olmo3ForCausalLM"], model_type="olmo3", rms_norm_eps=1e-6,
                       num_hidden_layers=4, sliding_window=5, pad_token_id=1, rope_scaling=yarn,
                       max_position_embeddings=64, transformers_version="4.57.0",
                       rope_theta=500000.0)
    del cfg["mlp_bias"], cfg["pretraining_tp"]
    save_decoder(out, "olmo3", cfg, init_llama(cfg, g, qk_norm="projection"), ids)
    cfg = llama_config(architectures=["Olmo3ForCausalLM"], model_type="olmo3",
                       transformers_version="5.0.0", dtype="float32", tie_word_embeddings=True,
                       layer_types=["sliding_attention", "full_attention"], sliding_window=6,
                       max_position_embeddings=64,
                       rope_parameters={"full_attention": dict(yarn, rope_theta=500000.0),
                                        "sliding_attention": {"rope_type": "default",
                                                              "rope_theta": 500000.0}})
    del cfg["mlp_bias"], cfg["pretraining_tp"], cfg["rope_theta"], cfg["rope_scaling"]
    del cfg["torch_dtype"], cfg["rms_norm_eps"]
    save_decoder(out, "olmo3-v5", cfg, init_llama(cfg, g, qk_norm="projection"), ids)


# ---- OLMo 2 (arXiv:2501.00656): QK-norm over the whole q and k projections (one gain per
# channel), each sublayer's output normalised before the residual add (post_attention_layernorm,
# post_feedforward_layernorm), no input norms; rms_norm_eps 1e-5 by default.
#   olmo2      transformers 4's layout, eps 1e-6 given, base 500000, grouped-query
#   olmo2-v5   transformers 5's, no rms_norm_eps (its default), tied

def olmo2_fixtures(out, g, ids):
    cfg = llama_config(architectures=["Olmo2ForCausalLM"], model_type="olmo2",
                       rope_theta=500000.0, pad_token_id=1)
    del cfg["mlp_bias"], cfg["pretraining_tp"]
    save_decoder(out, "olmo2", cfg, init_llama(cfg, g, qk_norm="projection"), ids)
    cfg = llama_config(architectures=["Olmo2ForCausalLM"], model_type="olmo2",
                       transformers_version="5.0.0", dtype="float32", tie_word_embeddings=True,
                       rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    del cfg["mlp_bias"], cfg["pretraining_tp"], cfg["rope_theta"], cfg["rope_scaling"]
    del cfg["torch_dtype"], cfg["rms_norm_eps"]
    save_decoder(out, "olmo2-v5", cfg, init_llama(cfg, g, qk_norm="projection"), ids)


# ---- SmolLM3: Llama's layers, some without RoPE (NoPE), tied, base 2e6 by default
#   smollm3          transformers 4's layout, no_rope_layers [1, 0] (the second layer is NoPE)
#   smollm3-v5       transformers 5's, no_rope_layer_interval 2 (the same layers), no base given
#   smollm3-v5-swa   and use_sliding_window with window 5: the NoPE layer slides

def smollm3_fixtures(out, g, ids):
    # pad_token_id given: SmolLM3's default (128004) lies outside this vocabulary.
    base = dict(architectures=["SmolLM3ForCausalLM"], model_type="smollm3",
                tie_word_embeddings=True, use_sliding_window=False, sliding_window=None,
                no_rope_layer_interval=4, pad_token_id=2)
    cfg = llama_config(no_rope_layers=[1, 0], rope_theta=2000000.0, **base)
    del cfg["pretraining_tp"]
    save_decoder(out, "smollm3", cfg, init_llama(cfg, g), ids)
    for name, extra in (("smollm3-v5", {}),
                        ("smollm3-v5-swa", {"use_sliding_window": True, "sliding_window": 5})):
        cfg = llama_config(transformers_version="5.0.0", dtype="float32", **base)
        del cfg["pretraining_tp"], cfg["rope_theta"], cfg["rope_scaling"], cfg["torch_dtype"]
        cfg.update(no_rope_layer_interval=2, rope_parameters={"rope_type": "default"}, **extra)
        save_decoder(out, name, cfg, init_llama(cfg, g), ids)


# ---- Qwen3 (QK-norm: an RMSNorm over each head's q and k, one gain shared by the heads, before
# the rotation) and explicit head widths: head_dim 16 with hidden 32 and 4 heads, so q has 64
# channels and o_proj maps 64 back to 32.
#   qwen3            transformers 4's layout (as Qwen3 was released), tied, base 1e6
#   qwen3-v5-swa     transformers 5's, layer_types [full, sliding] (window 6)
#   llama-head-dim   LlamaForCausalLM with head_dim 16
#   qwen3-bpe        qwen3 with a byte-level BPE tokenizer.json (Qwen2's style)

def qwen3_config(**kw):
    c = llama_config(architectures=["Qwen3ForCausalLM"], model_type="qwen3", head_dim=16,
                     rope_theta=1000000.0, tie_word_embeddings=True, use_sliding_window=False,
                     sliding_window=None, max_window_layers=2, bos_token_id=2, eos_token_id=2)
    del c["mlp_bias"], c["pretraining_tp"]
    c.update(kw)
    return c


def qwen3_fixtures(out, g, ids):
    cfg = qwen3_config()
    save_decoder(out, "qwen3", cfg, init_llama(cfg, g, qk_norm=True), ids)
    cfg = qwen3_config(transformers_version="5.0.0", dtype="float32", use_sliding_window=True,
                       sliding_window=6, layer_types=["full_attention", "sliding_attention"])
    del cfg["rope_theta"], cfg["rope_scaling"], cfg["torch_dtype"]
    cfg["rope_parameters"] = {"rope_type": "default", "rope_theta": 1000000.0}
    save_decoder(out, "qwen3-v5-swa", cfg, init_llama(cfg, g, qk_norm=True), ids)
    cfg = llama_config(head_dim=16)
    save_decoder(out, "llama-head-dim", cfg, init_llama(cfg, g), ids)
    # With a byte-level BPE tokenizer.json in Qwen2's style (NFC, its pre-tokenizer pattern), so
    # that the imported run can be fine-tuned on text (tests/e2e/hf_import.sh).
    import bpe_reference as bpe
    merges = bpe.train(bpe.TRAIN)
    vocab, added = bpe.build(merges)
    n = len(vocab) + len(added)
    cfg = qwen3_config(vocab_size=n + 10, bos_token_id=added[0]["id"],
                       eos_token_id=added[1]["id"])
    save_llama_tok("qwen3-bpe", cfg, init_llama(cfg, g, qk_norm=True), g, out,
                   lambda name, c, sd: save_decoder(out, name, c, sd, ids),
                   {"tokenizer.json": json.dumps(bpe.tokenizer_json(vocab, merges, added,
                                                                   "qwen2"))})


# ---- Gemma 3 (Team Gemma 2025, arXiv:2503.19786), text only, written from the report and the
# class's documented configuration:
#     embeddings times sqrt(hidden_size); RMSNorm with (1 + w) as the gain, four a layer:
#     x + post_attn(attn(input(x))), then x + post_ffw(ffn(pre_ffw(x))); a final norm;
#     QK-norm (the same norm) over each head before RoPE; scores q.k / sqrt(query_pre_attn_scalar);
#     FFN down(gelu_tanh(gate(h)) * up(h)); sliding layers (window W: q - W < k <= q) with their
#     own RoPE base (rope_local_base_freq) and no scaling, global layers with rope_theta and
#     rope_scaling; transformers 5 nests both in rope_parameters by layer type.
#   gemma3      transformers 4's layout: sliding_window_pattern 3 over 4 layers (sliding,
#               sliding, global, sliding), window 5, head_dim 16 in a model 32 wide,
#               query_pre_attn_scalar 24, linear scaling 4 on the global layers, tied
#   gemma3-v5   transformers 5's: layer_types (sliding, global, ...), window 6, rope_parameters
#               per type (linear 2 on the global layers), defaults for query_pre_attn_scalar
#               (256) and rms_norm_eps, hidden_activation gelu (erf), untied

GEMMA3_FIXTURES = ("gemma3",)
GEMMA3_V5_FIXTURES = ("gemma3-v5",)


def gemma3_config(**kw):
    c = {"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
         "vocab_size": LLAMA_VOCAB, "hidden_size": 32, "intermediate_size": 40,
         "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
         "head_dim": 16, "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 16,
         "rms_norm_eps": 1e-6, "tie_word_embeddings": True, "attention_bias": False,
         "attention_dropout": 0.0, "query_pre_attn_scalar": 24, "sliding_window": 5,
         "sliding_window_pattern": 3, "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
         "rope_scaling": {"rope_type": "linear", "factor": 4.0},
         "final_logit_softcapping": None, "attn_logit_softcapping": None,
         "cache_implementation": "hybrid", "initializer_range": 0.02, "pad_token_id": 0,
         "eos_token_id": 1, "bos_token_id": 2, "use_cache": True, "torch_dtype": "float32",
         "transformers_version": "4.50.0"}
    c.update(kw)
    return c


def gemma3_types(cfg):
    if cfg.get("layer_types"):
        return cfg["layer_types"]
    every = cfg.get("sliding_window_pattern", 6)
    return ["sliding_attention" if (i + 1) % every else "full_attention"
            for i in range(cfg["num_hidden_layers"])]


def gemma3_inv_freq(cfg, kind):
    """A layer type's inverse frequencies [H/2] (float64): its base and linear scaling."""
    H = cfg["head_dim"]
    if cfg.get("rope_parameters") is not None:
        entry = dict(cfg["rope_parameters"].get(kind) or {"rope_type": "default"})
    elif kind == "full_attention":
        entry = dict(cfg.get("rope_scaling") or {"rope_type": "default"})
    else:
        entry = {"rope_type": "default"}
    fallback = (cfg.get("rope_theta", 1e6) if kind == "full_attention"
                else cfg.get("rope_local_base_freq", 1e4))
    inv = entry.get("rope_theta", fallback) ** (-torch.arange(0, H, 2, dtype=torch.float64) / H)
    if entry["rope_type"] == "linear":
        return inv / entry["factor"]
    assert entry["rope_type"] == "default", entry
    return inv


def init_gemma3(cfg, g):
    D, F, V, H = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["head_dim"]
    N, Nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]

    def rnd(*shape, std):
        return (torch.randn(*shape, generator=g) * std).float()

    sd = {"model.embed_tokens.weight": rnd(V, D, std=0.2)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        for n, rows in (("q", N * H), ("k", Nkv * H), ("v", Nkv * H)):
            sd[p + f"self_attn.{n}_proj.weight"] = rnd(rows, D, std=1 / math.sqrt(D))
        sd[p + "self_attn.o_proj.weight"] = rnd(D, N * H, std=1 / math.sqrt(N * H))
        for n in ("q_norm", "k_norm"):  # gains (1 + w): w around 0
            sd[p + f"self_attn.{n}.weight"] = rnd(H, std=0.3)
        sd[p + "mlp.gate_proj.weight"] = rnd(F, D, std=1 / math.sqrt(D))
        sd[p + "mlp.up_proj.weight"] = rnd(F, D, std=1 / math.sqrt(D))
        sd[p + "mlp.down_proj.weight"] = rnd(D, F, std=1 / math.sqrt(F))
        for n in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                  "post_feedforward_layernorm"):
            sd[p + n + ".weight"] = rnd(D, std=0.3)
    sd["model.norm.weight"] = rnd(D, std=0.3)
    if not cfg["tie_word_embeddings"]:
        sd["lm_head.weight"] = rnd(V, D, std=1 / math.sqrt(D))
    return sd


def gemma3_logits(sd, cfg, ids):
    sd = {k: v.double() for k, v in sd.items()}
    B, T = ids.shape
    D, N, Nkv, H = (cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"],
                    cfg["head_dim"])
    eps = cfg.get("rms_norm_eps", 1e-6)
    scale = cfg.get("query_pre_attn_scalar", 256) ** -0.5

    def norm(x, name):
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * (1 + sd[name + ".weight"])

    def lin(x, name):
        return x @ sd[name + ".weight"].t()

    def act(x):
        if cfg.get("hidden_activation", "gelu_pytorch_tanh") == "gelu":
            return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))
        return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))

    causal = torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)
    offset = torch.arange(T)[:, None] - torch.arange(T)[None, :]
    x = sd["model.embed_tokens.weight"][ids] * math.sqrt(D)
    for i, kind in enumerate(gemma3_types(cfg)):
        p = f"model.layers.{i}."
        ang = torch.arange(T, dtype=torch.float64)[:, None] * gemma3_inv_freq(cfg, kind)[None, :]
        ang = torch.cat([ang, ang], -1)
        cos, sin = ang.cos(), ang.sin()
        mask = causal if kind == "full_attention" else causal.masked_fill(
            offset >= cfg["sliding_window"], float("-inf"))
        h = norm(x, p + "input_layernorm")
        q = norm(lin(h, p + "self_attn.q_proj").view(B, T, N, H), p + "self_attn.q_norm")
        k = norm(lin(h, p + "self_attn.k_proj").view(B, T, Nkv, H), p + "self_attn.k_norm")
        v = lin(h, p + "self_attn.v_proj").view(B, T, Nkv, H).transpose(1, 2)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k, v = k.repeat_interleave(N // Nkv, 1), v.repeat_interleave(N // Nkv, 1)
        a = torch.softmax(q @ k.transpose(-1, -2) * scale + mask, -1) @ v
        a = lin(a.transpose(1, 2).reshape(B, T, N * H), p + "self_attn.o_proj")
        x = x + norm(a, p + "post_attention_layernorm")
        h = norm(x, p + "pre_feedforward_layernorm")
        f = lin(act(lin(h, p + "mlp.gate_proj")) * lin(h, p + "mlp.up_proj"), p + "mlp.down_proj")
        x = x + norm(f, p + "post_feedforward_layernorm")
    x = norm(x, "model.norm")
    return x @ sd.get("lm_head.weight", sd["model.embed_tokens.weight"]).t()


def gemma3_fixtures(out):
    g = torch.Generator().manual_seed(20261130)
    V = LLAMA_VOCAB
    ids = (("", torch.randint(3, V, (2, 40), generator=g)),
           ("_short", torch.randint(3, V, (2, 12), generator=g)))
    cfg = gemma3_config()
    save_decoder(out, "gemma3", cfg, init_gemma3(cfg, g), ids, logits_of=gemma3_logits)
    cfg = gemma3_config(
        transformers_version="5.0.0", dtype="float32", sliding_window=6,
        hidden_activation="gelu", tie_word_embeddings=False,
        layer_types=["sliding_attention", "full_attention"] * 2,
        rope_parameters={"full_attention": {"rope_type": "linear", "factor": 2.0,
                                            "rope_theta": 1000000.0},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}})
    for k in ("torch_dtype", "rope_theta", "rope_local_base_freq", "rope_scaling",
              "sliding_window_pattern", "query_pre_attn_scalar", "rms_norm_eps"):
        del cfg[k]
    save_decoder(out, "gemma3-v5", cfg, init_gemma3(cfg, g), ids, logits_of=gemma3_logits)


SPM_TEXTS = ["In the beginning God created the heaven and the earth.",
             "Caf\u00e9 cr\u00e8me, 12345 and \u4e16\u754c \U0001F600!", "  spaces   and\ttabs ",
             "unseen characters: \u0416\u0417 \u05d0"]


def train_llama_spm():
    """A Llama 2 style SentencePiece BPE model: unk 0, bos 1, eos 2, no pad, byte fallback,
    digits split, no normalisation but the dummy prefix."""
    import io
    import sentencepiece
    import bpe_reference as bpe
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(bpe.TRAIN.splitlines() * 4), model_writer=model, vocab_size=320,
        model_type="bpe", byte_fallback=True, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
        character_coverage=1.0, num_threads=1, minloglevel=2,
        normalization_rule_name="identity", remove_extra_whitespaces=False,
        add_dummy_prefix=True, split_digits=True)
    return model.getvalue()


# ---- GPT-2 (Radford et al. 2019) and GPT-NeoX (Black et al. 2022; Pythia), the classic
# learned-position baseline and the suite of the encoding-swap studies. Both: LayerNorm with a
# shift, biases on every projection, a non-gated feed-forward, causal softmax(q k^T / sqrt(H)).
#
#   GPT-2   x = wte[ids] + wpe[t]; per layer x += attn(ln_1(x)); x += mlp(ln_2(x)); ln_f;
#           Conv1D weights are [in, out] (y = x W + b); c_attn's columns are q, k, v;
#           activation_function gelu_new (GELU's tanh form) or gelu (erf); scale_attn_weights
#           false: no 1/sqrt(H); tied to wte unless tie_word_embeddings is false (lm_head)
#   NeoX    x = embed_in[ids]; per layer a = dense(attn(input_layernorm(x))), then
#           parallel (use_parallel_residual): x + a + mlp(post_attention_layernorm(x)),
#           else x' = x + a, x' + mlp(post_attention_layernorm(x')); final_layer_norm; embed_out
#           (untied by default). query_key_value's rows are [head, (q, k, v), H]. RoPE on the
#           first R = int(H * rotary_pct) channels (rope_parameters.partial_rotary_factor in
#           transformers 5), pairs (i, i + R/2), theta_i = base^(-2i/R), base rotary_emb_base
#   gpt2             the hub's layout (no transformer. prefix, attn.bias / masked_bias buffers,
#                    n_ctx and the summary_* keys), gelu_new, tied, V = the tokenizer's size
#   gpt2-untied-v5   transformers 5's: transformer. prefix, lm_head, gelu (erf), no score
#                    scale, n_inner 40
#   gpt-neox         transformers 4's (Pythia's keys): rotary_pct 0.25 (4 of 16 channels),
#                    parallel residual, untied, embeddings padded past the tokenizer, buffers
#   gpt-neox-v5      transformers 5's: rope_parameters with partial_rotary_factor 0.5 and
#                    linear scaling x2, sequential residual, gelu_new, tied

GPT2_FIXTURES = ("gpt2", "gpt-neox")
GPT2_V5_FIXTURES = ("gpt2-untied-v5", "gpt-neox-v5")


def gelu_tanh(x):
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def act_of(name):
    return {"gelu": gelu, "gelu_new": gelu_tanh, "relu": torch.relu}[name]


def causal_attention(q, k, v, scale):
    """[B, N, T, H] each: causal softmax(q k^T * scale) v, back as [B, T, N * H]."""
    B, N, T, H = q.shape
    mask = torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)
    a = torch.softmax(q @ k.transpose(-1, -2) * scale + mask, -1) @ v
    return a.transpose(1, 2).reshape(B, T, N * H)


def gpt2_logits(sd, cfg, ids):
    sd = {k: v.double() for k, v in sd.items()}
    p = "transformer." if "transformer.wte.weight" in sd else ""
    B, T = ids.shape
    D, N = cfg["n_embd"], cfg["n_head"]
    H, eps = D // N, cfg["layer_norm_epsilon"]
    act = act_of(cfg["activation_function"])
    scale = 1 / math.sqrt(H) if cfg.get("scale_attn_weights", True) else 1.0

    def conv1d(x, name):  # transformers' Conv1D: weight [in, out]
        return x @ sd[name + ".weight"] + sd[name + ".bias"]

    x = sd[p + "wte.weight"][ids] + sd[p + "wpe.weight"][:T]
    for i in range(cfg["n_layer"]):
        h = layer_norm(x, sd, f"{p}h.{i}.ln_1", eps)
        q, k, v = conv1d(h, f"{p}h.{i}.attn.c_attn").split(D, -1)
        q, k, v = (t.view(B, T, N, H).transpose(1, 2) for t in (q, k, v))
        x = x + conv1d(causal_attention(q, k, v, scale), f"{p}h.{i}.attn.c_proj")
        h = layer_norm(x, sd, f"{p}h.{i}.ln_2", eps)
        x = x + conv1d(act(conv1d(h, f"{p}h.{i}.mlp.c_fc")), f"{p}h.{i}.mlp.c_proj")
    x = layer_norm(x, sd, p + "ln_f", eps)
    return x @ sd.get("lm_head.weight", sd[p + "wte.weight"]).t()


def neox_rope(cfg):
    """(base, rotating fraction, linear factor) from either layout."""
    rp = cfg.get("rope_parameters")
    if rp is not None:
        assert rp["rope_type"] in ("default", "linear"), rp
        return rp["rope_theta"], rp.get("partial_rotary_factor", 1.0), rp.get("factor", 1.0)
    rs = cfg.get("rope_scaling") or {"rope_type": "default"}
    assert rs.get("rope_type", rs.get("type")) in ("default", "linear"), rs
    return cfg.get("rotary_emb_base", 10000.0), cfg.get("rotary_pct", 0.25), rs.get("factor", 1.0)


def neox_logits(sd, cfg, ids):
    sd = {k: v.double() for k, v in sd.items()}
    p = "gpt_neox." if "gpt_neox.embed_in.weight" in sd else ""
    B, T = ids.shape
    D, N = cfg["hidden_size"], cfg["num_attention_heads"]
    H, eps = D // N, cfg["layer_norm_eps"]
    act = act_of(cfg["hidden_act"])
    base, frac, factor = neox_rope(cfg)
    R = int(H * frac)
    inv = 1.0 / base ** (torch.arange(0, R, 2, dtype=torch.float64) / R) / factor
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    cos, sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()

    def turn(x):
        return torch.cat([x[..., :R] * cos + rotate_half(x[..., :R]) * sin, x[..., R:]], -1)

    def mlp(h, lp):
        return linear(act(linear(h, sd, lp + "mlp.dense_h_to_4h")), sd, lp + "mlp.dense_4h_to_h")

    x = sd[p + "embed_in.weight"][ids]
    for i in range(cfg["num_hidden_layers"]):
        lp = f"{p}layers.{i}."
        h = layer_norm(x, sd, lp + "input_layernorm", eps)
        qkv = linear(h, sd, lp + "attention.query_key_value").view(B, T, N, 3 * H).transpose(1, 2)
        q, k, v = qkv.chunk(3, -1)
        a = linear(causal_attention(turn(q), turn(k), v, 1 / math.sqrt(H)), sd,
                   lp + "attention.dense")
        if cfg.get("use_parallel_residual", True):
            x = x + a + mlp(layer_norm(x, sd, lp + "post_attention_layernorm", eps), lp)
        else:
            x = x + a
            x = x + mlp(layer_norm(x, sd, lp + "post_attention_layernorm", eps), lp)
    x = layer_norm(x, sd, p + "final_layer_norm", eps)
    return x @ sd.get("embed_out.weight", sd[p + "embed_in.weight"]).t()


def gpt_tokenizer():
    """A byte-level BPE tokenizer.json in GPT-2's layout (ByteLevel with its regex): the 256
    byte symbols in GPT-2's order (the printable bytes first, so "!" is id 0 and the control
    bytes come from 188 on), the merges, then its one added token <|endoftext|>; (tokenizer.json
    text, its size, that id)."""
    import bpe_reference as bpe
    merges = bpe.train(bpe.TRAIN)
    vocab = {}
    for symbol in list(bpe.BYTES.values()) + [a + b for a, b in merges]:
        vocab.setdefault(symbol, len(vocab))
    eot = len(vocab)
    added = [{"id": eot, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
              "rstrip": False, "normalized": True, "special": True}]
    return json.dumps(bpe.tokenizer_json(vocab, merges, added, "gpt2")), eot + 1, eot


def gpt2_fixtures(out):
    g = torch.Generator().manual_seed(20261205)
    tok, V, eot = gpt_tokenizer()
    D, L, N, P = 32, 2, 4, 48

    def rnd(*shape, std=0.3):
        return (torch.randn(*shape, generator=g) * std).float()

    def init(prefix, F, tied):
        sd = {prefix + "wte.weight": rnd(V, D), prefix + "wpe.weight": rnd(P, D, std=0.2)}
        for name, width in (("ln_f", D),) + tuple((f"h.{i}.ln_{j}", D) for i in range(L)
                                                  for j in (1, 2)):
            sd[prefix + name + ".weight"] = 1 + rnd(width, std=0.1)
            sd[prefix + name + ".bias"] = rnd(width, std=0.1)
        for i in range(L):
            for name, fan_in, fan_out in (("attn.c_attn", D, 3 * D), ("attn.c_proj", D, D),
                                          ("mlp.c_fc", D, F), ("mlp.c_proj", F, D)):
                sd[f"{prefix}h.{i}.{name}.weight"] = rnd(fan_in, fan_out, std=1 / math.sqrt(fan_in))
                sd[f"{prefix}h.{i}.{name}.bias"] = rnd(fan_out, std=0.1)
        if not tied:
            sd["lm_head.weight"] = rnd(V, D)
        return sd

    ids = (("", torch.randint(0, V, (2, 40), generator=g)),
           ("_short", torch.randint(0, V, (2, 12), generator=g)))
    cfg = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": V,
           "n_embd": D, "n_layer": L, "n_head": N, "n_positions": P, "n_ctx": P,
           "activation_function": "gelu_new", "resid_pdrop": 0.1, "embd_pdrop": 0.1,
           "attn_pdrop": 0.1, "layer_norm_epsilon": 1e-5, "initializer_range": 0.02,
           "summary_type": "cls_index", "summary_use_proj": True, "summary_activation": None,
           "summary_proj_to_labels": True, "summary_first_dropout": 0.1,
           "bos_token_id": eot, "eos_token_id": eot,
           "task_specific_params": {"text-generation": {"do_sample": True, "max_length": 50}}}
    sd = init("", 4 * D, True)
    # The hub's GPT-2 saved the causal mask and the masked score as buffers.
    for i in range(L):
        sd[f"h.{i}.attn.bias"] = torch.ones(P, P).tril().view(1, 1, P, P)
        sd[f"h.{i}.attn.masked_bias"] = torch.tensor(-1e4)
    save_decoder(out, "gpt2", cfg, sd, ids, logits_of=gpt2_logits)
    cfg = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": V,
           "n_embd": D, "n_layer": L, "n_head": N, "n_positions": P, "n_inner": 40,
           "activation_function": "gelu", "layer_norm_epsilon": 1e-5, "scale_attn_weights": False,
           "scale_attn_by_inverse_layer_idx": False, "reorder_and_upcast_attn": False,
           "tie_word_embeddings": False, "bos_token_id": eot, "eos_token_id": eot,
           "dtype": "float32", "transformers_version": "5.0.0"}
    save_decoder(out, "gpt2-untied-v5", cfg, init("transformer.", 40, False), ids,
                 logits_of=gpt2_logits)
    for name in ("gpt2", "gpt2-untied-v5"):
        with open(os.path.join(out, name, "tokenizer.json"), "w") as f:
            f.write(tok)


def neox_fixtures(out):
    g = torch.Generator().manual_seed(20261206)
    tok, n, eot = gpt_tokenizer()
    V, D, L, N, F, P = n + 7, 32, 2, 2, 64, 48

    def rnd(*shape, std=0.3):
        return (torch.randn(*shape, generator=g) * std).float()

    def init(tied):
        p = "gpt_neox."
        sd = {p + "embed_in.weight": rnd(V, D)}
        names = ["final_layer_norm"] + [f"layers.{i}.{n}" for i in range(L)
                                        for n in ("input_layernorm", "post_attention_layernorm")]
        for name in names:
            sd[p + name + ".weight"] = 1 + rnd(D, std=0.1)
            sd[p + name + ".bias"] = rnd(D, std=0.1)
        for i in range(L):
            for name, fan_in, fan_out in (("attention.query_key_value", D, 3 * D),
                                          ("attention.dense", D, D),
                                          ("mlp.dense_h_to_4h", D, F),
                                          ("mlp.dense_4h_to_h", F, D)):
                sd[f"{p}layers.{i}.{name}.weight"] = rnd(fan_out, fan_in, std=1 / math.sqrt(fan_in))
                sd[f"{p}layers.{i}.{name}.bias"] = rnd(fan_out, std=0.1)
        if not tied:
            sd["embed_out.weight"] = rnd(V, D)
        return sd

    ids = (("", torch.randint(0, V, (2, 40), generator=g)),
           ("_short", torch.randint(0, V, (2, 12), generator=g)))
    common = {"architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox", "vocab_size": V,
              "hidden_size": D, "num_hidden_layers": L, "num_attention_heads": N,
              "intermediate_size": F, "max_position_embeddings": P, "layer_norm_eps": 1e-5,
              "initializer_range": 0.02, "bos_token_id": eot, "eos_token_id": eot,
              "attention_dropout": 0.0, "hidden_dropout": 0.0, "classifier_dropout": 0.1,
              "use_cache": True}
    cfg = dict(common, hidden_act="gelu", rotary_pct=0.25, rotary_emb_base=10000,
               use_parallel_residual=True, tie_word_embeddings=False, rope_scaling=None,
               torch_dtype="float32", transformers_version="4.40.0")
    sd = init(False)
    H, R = D // N, int(D // N * 0.25)
    for i in range(L):  # the buffers older versions saved
        sd[f"gpt_neox.layers.{i}.attention.bias"] = torch.ones(P, P).tril().view(1, 1, P, P)
        sd[f"gpt_neox.layers.{i}.attention.masked_bias"] = torch.tensor(-1e9)
        sd[f"gpt_neox.layers.{i}.attention.rotary_emb.inv_freq"] = \
            (1.0 / 10000 ** (torch.arange(0, R, 2).float() / R))
    save_decoder(out, "gpt-neox", cfg, sd, ids, logits_of=neox_logits)
    cfg = dict(common, hidden_act="gelu_new", use_parallel_residual=False,
               tie_word_embeddings=True, attention_bias=True, dtype="float32",
               transformers_version="5.0.0",
               rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0,
                                "partial_rotary_factor": 0.5})
    save_decoder(out, "gpt-neox-v5", cfg, init(True), ids, logits_of=neox_logits)
    for name in ("gpt-neox", "gpt-neox-v5"):
        with open(os.path.join(out, name, "tokenizer.json"), "w") as f:
            f.write(tok)


def save_llama_tok(name, cfg, sd, g, out, save_llama, files, sp=None):
    save_llama(name, cfg, sd)
    d = os.path.join(out, name)
    for fname, content in files.items():
        with open(os.path.join(d, fname), "wb" if isinstance(content, bytes) else "w") as f:
            f.write(content)
    if sp is not None:  # the reference tokenisation of the test strings, one list per line
        with open(os.path.join(d, "spm_ids.json"), "w") as f:
            json.dump({"texts": SPM_TEXTS, "ids": [sp.encode(t) for t in SPM_TEXTS]}, f)


def check_with_transformers(out, exports=None):
    """Loads every fixture with `transformers` and compares its outputs with the reference
    (where installed). With `exports`, loads instead EXPORTS/NAME, ropelab's export of the
    imported fixture NAME (as far as it exists), against the same reference outputs."""
    import transformers  # noqa: E402

    def load(name):
        d = os.path.join(exports or out, name)
        if not os.path.isdir(d):
            print(f"{name}: no export")
            return None, None
        cfg = json.load(open(os.path.join(d, "config.json")))
        cls = getattr(transformers, cfg["architectures"][0], None)
        if cls is None:  # a class newer than this transformers
            print(f"{name}: transformers {transformers.__version__} has no "
                  f"{cfg['architectures'][0]}, not checked")
            return None, None
        return cls.from_pretrained(d).eval(), cfg

    what = "transformers on ropelab's export" if exports else "transformers"
    # transformers 4 ignores rope_parameters (it would run with base 10000): the fixtures in
    # transformers 5's layout are for transformers 5 only.
    v5 = int(transformers.__version__.split(".")[0]) >= 5
    # bert-mlm-untied is an untied MLM head in transformers 5's layout (the decoder's bias in
    # use, cls.predictions.bias as initialised), which transformers 4 reads the other way round;
    # ropelab's export of it writes both names, so its export is checked with either.
    v5_only = V5_FIXTURES + SWA_V5_FIXTURES + GEMMA3_V5_FIXTURES + PHI3_V5_FIXTURES + \
        OLMO3_V5_FIXTURES + GPT2_V5_FIXTURES + (
        "bert-mlm-v5", "roformer-mlm-v5") + (() if exports else ("bert-mlm-untied",))
    if not v5:
        print(f"transformers {transformers.__version__}: the {len(v5_only)} fixtures in "
              f"transformers 5's layout are not read by this version, not checked")
    encoders = tuple(n for n in ("bert-mlm", "bert-mlm-untied", "bert-base", "bert-cls",
                                 "roformer-mlm", "roformer-cls", "roformer-mlm-small",
                                 "bert-mlm-v5", "roformer-mlm-v5") if v5 or n not in v5_only)
    for name in encoders:
        d = os.path.join(out, name)
        model, _ = load(name)
        if model is None:
            continue
        exp = {k: t for k, (_, _, t) in read(os.path.join(d, "expected.safetensors")).items()}
        with torch.no_grad():
            o = model(input_ids=exp["input_ids"], token_type_ids=exp["token_type_ids"],
                      attention_mask=exp["attention_mask"], output_hidden_states=True)
        for key in ("logits", "last_hidden_state", "pooler_output"):
            if key in exp:
                got = getattr(o, key, None)
                if got is None and key == "last_hidden_state":
                    got = o.hidden_states[-1]
                if got is None:  # a bare BertModel comes back as BertForMaskedLM: no pooler
                    assert exports, (name, key)
                    print(f"{name} {key}: not in the export's class, {type(model).__name__}")
                    continue
                diff = (got - exp[key]).abs().max().item()
                print(f"{name} {key}: max |{what} - reference| = {diff:.2e}")
                assert diff < 1e-4, (name, key, diff)
    # Two rope types read differently in older transformers; ropelab follows the current ones.
    # With an older transformers those fixtures are compared with the reference recomputed its way
    # (each told apart by what its code does, not by version number):
    # - yarn, before the 2025 change for DeepSeek-V3: the correction range over
    #   max_position_embeddings, rope_scaling's original_max_position_embeddings ignored (the
    #   fixture's 1024, not 256);
    # - longrope, before rope_utils' dynamic_rope_update: a Llama-layout model used the long
    #   factors at every length (later: the short ones up to the original length).
    import inspect  # noqa: E402

    import transformers.modeling_rope_utils as rope_utils  # noqa: E402
    older = {}
    if "original_max_position_embeddings" not in inspect.getsource(
            rope_utils._compute_yarn_parameters):
        older["llama-yarn"] = ("this transformers: YaRN's range over max_position_embeddings",
                               lambda c: c["rope_scaling"].update(
                                   original_max_position_embeddings=c["max_position_embeddings"]))
    if not hasattr(rope_utils, "dynamic_rope_update"):
        older["llama-longrope"] = ("this transformers: long factors at every length",
                                   lambda c: c["rope_scaling"].update(
                                       short_factor=c["rope_scaling"]["long_factor"]))
    for name in (LLAMA_FIXTURES + SWA_FIXTURES + GEMMA3_FIXTURES + PHI3_FIXTURES +
                 OLMO3_FIXTURES + GPT2_FIXTURES +
                 (V5_FIXTURES + SWA_V5_FIXTURES + GEMMA3_V5_FIXTURES + PHI3_V5_FIXTURES +
                  OLMO3_V5_FIXTURES + GPT2_V5_FIXTURES if v5 else ())):
        d = os.path.join(out, name)
        model, _ = load(name)
        if model is None:
            continue
        cfg = json.load(open(os.path.join(d, "config.json")))  # the reference's: the fixture's
        exp = {k: t for k, (_, _, t) in read(os.path.join(d, "expected.safetensors")).items()}
        how = ""
        if name in older:
            how, change = older[name]
            how = f" ({how})"
            change(cfg)
            sd = {k: t for k, (_, _, t) in read(os.path.join(d, "model.safetensors")).items()}
        for tag in ("", "_short"):
            with torch.no_grad():
                logits = model(input_ids=exp["input_ids" + tag]).logits
            ref = llama_logits(sd, cfg, exp["input_ids" + tag]).float() if how else \
                exp["logits" + tag]
            diff = (logits - ref).abs().max().item()
            print(f"{name} logits{tag}: max |{what} - reference| = {diff:.2e}{how}")
            assert diff < 1e-4, (name, tag, diff)


if __name__ == "__main__":
    main()
