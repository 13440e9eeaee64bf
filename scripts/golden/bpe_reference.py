#!/usr/bin/python3
"""Golden ids for ropelab's byte-level BPE tokenizer (src/tokenizers/bpe.cpp), from an independent
Python implementation of what Hugging Face's `tokenizers` runs for a byte-level BPE
tokenizer.json. The pre-tokenizer regexes run through the `regex` module (Debian:
python3-regex) exactly as tokenizer.json writes them, where ropelab has hand-written scanners.

    added tokens   found verbatim in the raw text first, longest first
    normalizer     none, or NFC (unicodedata)
    pre-tokenizer  regex.findall(pattern): Llama 3's, Qwen2's, or GPT-2's
    byte level     each piece's UTF-8 bytes in GPT-2's printable alphabet
    BPE            merge the adjacent pair of lowest rank (leftmost among equals) until none is
                   left; ignore_merges: a piece that is in the vocabulary whole is one token

It trains a small byte-level BPE on the text below (300 merges, ties broken by the pair's
text), writes it as three tokenizer.json files (llama3: Llama 3's split and ignore_merges; qwen2:
NFC and Qwen2's split; gpt2: ByteLevel with use_regex) under tests/data/bpe/, and cases.json:
for each tokenizer, each test string and its ids. `--check-with-transformers` compares the cases
with `tokenizers` where it is installed, or with transformers' slow GPT2Tokenizer and
Qwen2Tokenizer where only those run (scripts/golden/transformers_offline.sh).

    /usr/bin/python3 scripts/golden/bpe_reference.py tests/data/bpe
"""
import collections
import json
import os
import sys
import unicodedata

import regex

GPT2 = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3 = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"""
          r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
QWEN2 = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"""
         r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")

TRAIN = """In the beginning God created the heaven and the earth. And the earth was without form,
and void; and darkness was upon the face of the deep. And the Spirit of God moved upon the face
of the waters. And God said, Let there be light: and there was light. And God saw the light,
that it was good: and God divided the light from the darkness. It's 10:30 and they're here; we'll
see what we've got. I'm sure you'd like 3 apples, 25 pears and 1,000,000 grapes!
Café, naïve, façade — «quoted» text… 世界你好. Dieu dit: Que la lumière soit!
"""

TEXTS = [
    "In the beginning God created the heaven and the earth.",
    "I'm sure THEY'RE here; we'Ve got what you'd like. It'S 'sa 'x",
    "12345 digits 3.14159 and 1,000,000 and \u0661\u0662\u0663 (Arabic-Indic)",
    "a   b\t\ttabs\n\nnewlines\r\n  indented   \n trailing   ",
    "Caf\u00e9 na\u00efve fa\u00e7ade Cafe\u0301 \u00dcn\u00efc\u00f6d\u00e9",
    "\u4e16\u754c\u4f60\u597d hello\u4e16\u754c \uD55C\uAD6D\uC5B4",
    "emoji \U0001F600\U0001F44D\U0001F3FD! \u2764\ufe0f",
    "Hello!!! (world)... \u00abquotes\u00bb \u2014 ok?!",
    "<|begin_of_text|>Hello<|end_of_text|> <|reserved_special_token_1|>x",
    " ",
    "   leading and trailing whitespace   ",
    "",
    "\n",
    "line one\nline two\n\n\nline five",
]
ADDED = ["<|begin_of_text|>", "<|end_of_text|>"] + [
    f"<|reserved_special_token_{i}|>" for i in range(4)]


def byte_alphabet():
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


BYTES = byte_alphabet()


def to_symbols(piece):
    return [BYTES[b] for b in piece.encode("utf-8")]


def train(text, merges=300):
    words = collections.Counter(regex.findall(LLAMA3, text))
    seqs = {w: to_symbols(w) for w in words}
    out = []
    for _ in range(merges):
        pairs = collections.Counter()
        for w, n in words.items():
            s = seqs[w]
            for a, b in zip(s, s[1:]):
                pairs[(a, b)] += n
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        out.append(best)
        for w in words:
            s, i, merged = seqs[w], 0, []
            while i < len(s):
                if i + 1 < len(s) and (s[i], s[i + 1]) == best:
                    merged.append(s[i] + s[i + 1])
                    i += 2
                else:
                    merged.append(s[i])
                    i += 1
            seqs[w] = merged
    return out


def build(merges):
    vocab = {}
    for b in range(256):
        vocab.setdefault(BYTES[b], len(vocab))
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    added = [{"id": len(vocab) + i, "content": t, "single_word": False, "lstrip": False,
              "rstrip": False, "normalized": False, "special": True} for i, t in enumerate(ADDED)]
    return vocab, added


def tokenizer_json(vocab, merges, added, style):
    if style == "gpt2":
        pre = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
               "use_regex": True}
    else:
        pre = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": LLAMA3 if style == "llama3" else QWEN2},
             "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
             "use_regex": False}]}
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "NFC"} if style == "qwen2" else None,
        "pre_tokenizer": pre, "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": style == "llama3",
                  "vocab": vocab, "merges": [a + " " + b for a, b in merges]},
    }


def encode(text, vocab, merges, added, style):
    ranks = {m: i for i, m in enumerate(merges)}
    pattern = {"llama3": LLAMA3, "qwen2": QWEN2, "gpt2": GPT2}[style]
    specials = sorted((a["content"] for a in added), key=len, reverse=True)
    ids = []

    def plain(s):
        if style == "qwen2":
            s = unicodedata.normalize("NFC", s)
        for piece in regex.findall(pattern, s):
            sym = to_symbols(piece)
            if style == "llama3" and "".join(sym) in vocab:
                ids.append(vocab["".join(sym)])
                continue
            while len(sym) > 1:
                cand = [(ranks[(a, b)], i) for i, (a, b) in enumerate(zip(sym, sym[1:]))
                        if (a, b) in ranks]
                if not cand:
                    break
                _, i = min(cand)
                sym = sym[:i] + [sym[i] + sym[i + 1]] + sym[i + 2:]
            ids.extend(vocab[s] for s in sym)

    i = start = 0
    while i < len(text):
        hit = next((t for t in specials if text.startswith(t, i)), None)
        if hit is None:
            i += 1
            continue
        plain(text[start:i])
        ids.append(next(a["id"] for a in added if a["content"] == hit))
        i += len(hit)
        start = i
    plain(text[start:])
    return ids


def main():
    out = sys.argv[1]
    merges = train(TRAIN)
    vocab, added = build(merges)
    cases = []
    for style in ("llama3", "qwen2", "gpt2"):
        d = os.path.join(out, style)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(tokenizer_json(vocab, merges, added, style), f, ensure_ascii=False,
                      indent=1)
        for t in TEXTS:
            cases.append({"tokenizer": style, "text": t,
                          "pieces": regex.findall({"llama3": LLAMA3, "qwen2": QWEN2,
                                                   "gpt2": GPT2}[style], t),
                          "ids": encode(t, vocab, merges, added, style)})
    with open(os.path.join(out, "cases.json"), "w", encoding="utf-8") as f:
        f.write("[\n" + ",\n".join(json.dumps(c, ensure_ascii=True) for c in cases) + "\n]\n")
    print(f"wrote {out}: {len(vocab) + len(added)} ids, {len(merges)} merges, "
          f"{len(cases)} cases")
    if "--check-with-transformers" in sys.argv:
        sys.exit(check_with_transformers(out, cases))


def check_with_transformers(out, cases):
    """`tokenizers` on each tokenizer.json. Where only transformers' pure-Python classes can run
    (the `tokenizers` stand-in of transformers_offline.sh): the slow GPT2Tokenizer and
    Qwen2Tokenizer on the same vocabulary and merges (as vocab.json and merges.txt) with the
    same added tokens; Llama 3's has no slow class and is reported as not checked."""
    import tokenizers
    slow = getattr(tokenizers, "__ropelab_standin__", False)
    bad = checked = 0
    for style in ("llama3", "qwen2", "gpt2"):
        path = os.path.join(out, style, "tokenizer.json")
        mine = [c for c in cases if c["tokenizer"] == style]
        if not slow:
            tok = tokenizers.Tokenizer.from_file(path)
            encode_ids = lambda t: tok.encode(t, add_special_tokens=False).ids  # noqa: E731
        elif style == "llama3":
            print(f"{style}: not checked (no slow tokenizer class; needs `tokenizers`)")
            continue
        else:
            encode_ids = slow_tokenizer(path, style)
        wrong = 0
        for c in mine:
            got = encode_ids(c["text"])
            if got != c["ids"]:
                wrong += 1
                print("differs:", style, repr(c["text"]), got, c["ids"])
        print(f"{style}: {'slow transformers' if slow else 'tokenizers'} agrees on "
              f"{len(mine) - wrong}/{len(mine)} cases")
        bad, checked = bad + wrong, checked + len(mine)
    return 1 if bad or not checked else 0


def slow_tokenizer(path, style):
    import tempfile

    from tokenizers import AddedToken
    from transformers import GPT2Tokenizer, Qwen2Tokenizer
    spec = json.load(open(path, encoding="utf-8"))
    d = tempfile.mkdtemp()
    with open(os.path.join(d, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(spec["model"]["vocab"], f, ensure_ascii=False)
    with open(os.path.join(d, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "".join((m if isinstance(m, str) else " ".join(m)) + "\n"
                                           for m in spec["model"]["merges"]))
    cls = {"gpt2": GPT2Tokenizer, "qwen2": Qwen2Tokenizer}[style]
    tok = cls(os.path.join(d, "vocab.json"), os.path.join(d, "merges.txt"), unk_token=None,
              bos_token=None, eos_token=None, pad_token=None)
    added = sorted(spec["added_tokens"], key=lambda a: a["id"])
    tok.add_tokens([AddedToken(a["content"], special=a["special"], normalized=a["normalized"],
                               lstrip=a["lstrip"], rstrip=a["rstrip"],
                               single_word=a["single_word"]) for a in added],
                   special_tokens=True)
    for a in added:
        assert tok.convert_tokens_to_ids(a["content"]) == a["id"], a
    return lambda t: tok(t, add_special_tokens=False)["input_ids"]


if __name__ == "__main__":
    main()
