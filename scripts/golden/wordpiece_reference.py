#!/usr/bin/python3
"""Golden ids for ropelab's WordPiece tokenizer (src/tokenizers/wordpiece.cpp), from an independent
Python implementation of what Hugging Face's fast BertTokenizer does, written from its
documented pipeline with Python's own Unicode database:

    BertNormalizer   drop U+0000, U+FFFD and category C* (tab, newline, carriage return aside);
                     White_Space -> " "; spaces around CJK ideographs; strip_accents: NFD, drop
                     Mn; lowercase: each character's own lowercase (no final-sigma context)
    BertPreTokenizer split on whitespace; each punctuation character (ASCII or P*) alone
    WordPiece        greedy longest match, "##" continuations, [UNK] for a word that cannot be
                     covered or is longer than 100 characters
    added tokens     [PAD] [UNK] [CLS] [SEP] [MASK] found verbatim in the raw text first

It writes tests/data/wordpiece/vocab.txt (a vocabulary built from the test strings, with
BERT's specials at BERT-like ids and some words deliberately left uncoverable) and cases.json:
each test string, the options, and the expected ids as vocab.txt line numbers.
`--check-with-transformers` also runs BertTokenizerFast on the same files and compares, where
`transformers` is installed (the slow BertTokenizer where only its pure-Python classes run:
scripts/golden/transformers_offline.sh).

    /usr/bin/python3 scripts/golden/wordpiece_reference.py tests/data/wordpiece
"""
import json
import os
import sys
import unicodedata

WHITE_SPACE = set([0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680, 0x2028, 0x2029,
                   0x202F, 0x205F, 0x3000] + list(range(0x2000, 0x200B)))
CJK = [(0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
       (0x2B740, 0x2B81F), (0x2B920, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F)]
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def is_white(ch):
    return ord(ch) in WHITE_SPACE


def is_control(ch):
    return ch not in "\t\n\r" and unicodedata.category(ch).startswith("C")


def is_punct(ch):
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def normalize(text, lowercase, strip_accents):
    out = []
    for ch in text:
        if ord(ch) in (0, 0xFFFD) or is_control(ch):
            continue
        if is_white(ch):
            ch = " "
        if any(lo <= ord(ch) <= hi for lo, hi in CJK):
            out += [" ", ch, " "]
        else:
            out.append(ch)
    s = "".join(out)
    if strip_accents:
        s = "".join(c for c in unicodedata.normalize("NFD", s) if unicodedata.category(c) != "Mn")
    if lowercase:
        s = "".join(c.lower() for c in s)  # per character, as Rust's char::to_lowercase
    return s


def pre_tokenize(s):
    words, cur = [], ""
    for ch in s:
        if is_white(ch) or is_punct(ch):
            if cur:
                words.append(cur)
            cur = ""
            if is_punct(ch):
                words.append(ch)
        else:
            cur += ch
    if cur:
        words.append(cur)
    return words


def wordpiece(word, vocab):
    if len(word) > 100:
        return [vocab["[UNK]"]]
    ids, start = [], 0
    while start < len(word):
        end, found = len(word), None
        while start < end:
            sub = ("##" if start > 0 else "") + word[start:end]
            if sub in vocab:
                found = vocab[sub]
                break
            end -= 1
        if found is None:
            return [vocab["[UNK]"]]
        ids.append(found)
        start = end
    return ids


def encode(text, vocab, lowercase, strip_accents):
    ids, i, plain = [], 0, 0
    while i < len(text):
        hit = next((s for s in SPECIALS if text.startswith(s, i)), None)
        if hit:
            for w in pre_tokenize(normalize(text[plain:i], lowercase, strip_accents)):
                ids += wordpiece(w, vocab)
            ids.append(vocab[hit])
            i += len(hit)
            plain = i
        else:
            i += 1
    for w in pre_tokenize(normalize(text[plain:], lowercase, strip_accents)):
        ids += wordpiece(w, vocab)
    return ids


TEXTS = [
    "In the beginning God created the heaven and the earth.",
    "  Whitespace\truns\n\nand\u00a0non-breaking\u2003spaces,\u3000ideographic  ",
    "Caf\u00e9 cr\u00e8me br\u00fbl\u00e9e, na\u00efve fa\u00e7ade; Cafe\u0301 (decomposed)",
    "\u4e16\u754c\u4f60\u597d hello\u4e16\u754c \u3053\u3093\u306b\u3061\u306f",
    "emoji \U0001F600 and \U0001F44D\U0001F3FD thumbs \u2764\ufe0f",
    "\u03a3\u038a\u03a3\u03a5\u03a6\u039f\u03a3 sings \u1f00\u03bd\u03b8\u03c1\u03c9\u03c0\u03bf\u03c2",
    "\u0130stanbul D\u0130YARBAKIR stra\u00dfe STRASSE",
    "control\u0000chars\u200bhere\ufffd\u0085x\u000bq\u001fend",
    "the [MASK] was [SEP] and[CLS]glued [mask] [UNK]",
    "unbelievably antidisestablishmentarianism " + "a" * 101,
    "Korean \ud55c\uad6d\uc5b4 text",
    "Punctuation!!! \u00abquoted\u00bb \u2014 dash\u2026 (paren) \u00bfqu\u00e9? 1,000.5%",
    "a\u2028b\u2029c",
    "\ufb01nancial \uff26\uff35\uff2c\uff2c\uff37\uff29\uff24\uff34\uff28 \u2460",
    "Vietnamese: Ti\u1ebfng Vi\u1ec7t c\u00f3 d\u1ea5u",
    "",
]
OPTIONS = [(True, True), (False, False), (True, False), (False, True)]


def build_vocab():
    words = set()
    for t in TEXTS:
        for lo, st in OPTIONS:
            words.update(pre_tokenize(normalize(t, lo, st)))
    pieces = []
    for k, w in enumerate(sorted(words)):
        if "q" in w or len(w) > 100:
            continue  # left uncoverable: [UNK]
        if k % 3 == 0:
            pieces.append(w)
        elif k % 3 == 1:
            pieces += [w[:2], "##" + w[2:]] if len(w) > 2 else [w]
        else:
            pieces += [w[:1]] + ["##" + c for c in w[1:]]
    pieces += ["un", "##believ", "##ably", "unbeliev", "##able"]  # longest match first
    seen, vocab = set(), []
    for p in pieces:
        if p and p not in seen and p not in SPECIALS:
            seen.add(p)
            vocab.append(p)
    return (["[PAD]", "[unused0]", "[unused1]", "[unused2]"] + vocab[:40] +
            ["[UNK]", "[CLS]", "[SEP]", "[MASK]"] + vocab[40:])


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    tokens = build_vocab()
    vocab = {t: i for i, t in enumerate(tokens)}
    with open(os.path.join(out, "vocab.txt"), "w", encoding="utf-8") as f:
        f.write("".join(t + "\n" for t in tokens))
    cases = []
    for t in TEXTS:
        for lo, st in OPTIONS:
            cases.append({"text": t, "lowercase": lo, "strip_accents": st,
                          "normalized": normalize(t, lo, st) if "[" not in t else None,
                          "ids": encode(t, vocab, lo, st)})
    with open(os.path.join(out, "cases.json"), "w", encoding="utf-8") as f:
        f.write("[\n" + ",\n".join(json.dumps(c, ensure_ascii=True) for c in cases) + "\n]\n")
    print(f"wrote {out}: {len(tokens)} tokens, {len(cases)} cases")
    if "--check-with-transformers" in sys.argv:
        sys.exit(check_with_transformers(out, cases, vocab))


def check_with_transformers(out, cases, vocab):
    """BertTokenizerFast on the same files; where only transformers' pure-Python classes can run
    (the `tokenizers` stand-in of transformers_offline.sh), the slow BertTokenizer instead. The
    slow one composes its input to NFC first (the fast BertNormalizer does not), so it is
    compared with this reference run on the NFC text."""
    import tokenizers
    slow = getattr(tokenizers, "__ropelab_standin__", False)
    if slow:
        from transformers import BertTokenizer as Tok
    else:
        from transformers import BertTokenizerFast as Tok
    bad = 0
    for c in cases:
        tok = Tok(os.path.join(out, "vocab.txt"), do_lower_case=c["lowercase"],
                  strip_accents=c["strip_accents"])
        got = tok(c["text"], add_special_tokens=False)["input_ids"]
        want = c["ids"]
        if slow:
            want = encode(unicodedata.normalize("NFC", c["text"]), vocab, c["lowercase"],
                          c["strip_accents"])
        if got != want:
            bad += 1
            print("differs:", repr(c["text"]), c["lowercase"], c["strip_accents"], got, want)
    composed = sum(unicodedata.normalize("NFC", c["text"]) != c["text"] for c in cases)
    print(f"transformers {Tok.__name__}: {len(cases) - bad}/{len(cases)} cases agree"
          + (f" ({composed} of them on NFC text)" if slow else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    main()
