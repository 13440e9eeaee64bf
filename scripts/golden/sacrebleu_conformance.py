#!/usr/bin/python3
"""The sacreBLEU conformance set of `ropelab bleu` (tests/unit/sacrebleu_conformance_test.cpp).

Writes tests/data/sacrebleu/: a small set of hard segments (Unicode punctuation, CJK, accents,
emoji, non-breaking spaces, empty lines on either side, tokenized text, numbers) with two
reference streams and three systems, a long corpus (1,500 segments, one reference, three
systems made from it by seeded word drops, swaps, substitutions and block moves), and
expected.tsv: what the real sacreBLEU computes on them for every option ropelab offers -
corpus scores, sentence scores, signatures, and the paired bootstrap and approximate
randomization tests (p-values, bootstrap means and 95% intervals, seed 12345).

sacreBLEU is not packaged in Debian and PyPI is not reachable here, so this runs it from a
source checkout (https://github.com/mjpost/sacrebleu, v2.6.0) with Debian's python3-numpy,
python3-regex, python3-tabulate, python3-portalocker and python3-colorama:

    /usr/bin/python3 scripts/golden/sacrebleu_conformance.py /path/to/sacrebleu-checkout
"""
import os
import random
import sys

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "data",
                   "sacrebleu")

NBSP, NNBSP = "\u00a0", "\u202f"

# (hypothesis of system 0, system 1, system 2, reference a, reference b)
HARD = [
    ("The dog bit the man.", "The dog bit a man .", "the DOG bit the man!",
     "The dog bit the man.", "The dog had bit the man."),
    ("It wasn't surprising.", "It was n't surprising .", "It wasn\u2019t surprising\u2026",
     "It was not unexpected.", "No one was surprised."),
    ("\u00abHola\u00bb, dijo \u00e9l \u2014 \u00bfqu\u00e9 tal?", "\u00abHola\u00bb dijo \u00e9l, \u00bfqu\u00e9 tal?",
     "Hola, dijo el - que tal?", "\u00abHola\u00bb, dijo \u00e9l. \u00bfQu\u00e9 tal?",
     "\u201cHola\u201d, dijo \u00e9l \u2013 \u00bfc\u00f3mo est\u00e1s?"),
    ("\u4eca\u5929\u5929\u6c14\u5f88\u597d\u3002", "\u4eca\u5929\u5929\u6c14\u4e0d\u9519\uff01",
     "\u4eca\u5929 \u5929\u6c14 \u5f88 \u597d \u3002", "\u4eca\u5929\u7684\u5929\u6c14\u5f88\u597d\u3002",
     "\u4eca\u5929\u5929\u6c14\u771f\u597d\u3002"),
    ("\u3053\u308c\u306f\u30c6\u30b9\u30c8\u3067\u3059\u3002", "\u3053\u308c\u306f\u30c6\u30b9\u30c8\u3002",
     "\u30c6\u30b9\u30c8\u3067\u3059", "\u3053\u308c\u306f\u30c6\u30b9\u30c8\u3067\u3059\u3002",
     "\u3053\u308c\u3082\u30c6\u30b9\u30c8\u3067\u3059\u3002"),
    ("Great job \U0001F44D\U0001F3FD! \U0001F600\U0001F600", "Great job! \U0001F600",
     "great job \U0001F468\u200d\U0001F469\u200d\U0001F467", "Great job \U0001F44D! \U0001F600",
     "Well done \U0001F44F\U0001F3FD!"),
    ("Price:" + NBSP + "3.5" + NNBSP + "\u20ac, 1,000 units (approx.)",
     "Price: 3.5 \u20ac , 1,000 units ( approx . )", "Price 3,5\u20ac 1.000 units",
     "Price: 3.5" + NBSP + "\u20ac for 1,000 units (approx.)", "Cost: \u20ac3.50 per 1,000 units."),
    ("", "Something where the reference is empty.", "", "", "Only the second reference."),
    ("Nothing in the reference here.", "", "x", "", ""),
    ("\u039f\u0394\u039f\u03a3 \u0130stanbul Stra\u00dfe \u00c9COLE",
     "\u03bf\u03b4\u03bf\u03c2 istanbul strasse \u00e9cole", "ODOS Istanbul Strasse Ecole",
     "\u03bf\u03b4\u03cc\u03c2 \u0130stanbul Stra\u00dfe \u00c9cole", "Odos Istanbul Strasse Ecole"),
    ("The 3-4 km walk , e.g. U.S.A. 's best .", "The 3 - 4 km walk, e.g. U.S.A.'s best.",
     "3-4km walk e.g. USA best", "The 3-4 km walk, e.g. the U.S.A.'s best.",
     "A 3-4 km walk: the best of the U.S.A."),
    ("A quick brown fox jumps over the lazy dog", "over the lazy dog a quick brown fox jumps",
     "the lazy dog jumps over a quick brown fox", "A quick brown fox jumps over the lazy dog",
     "The quick brown fox jumped over a lazy dog"),
    ("&quot;Quoted&quot; &amp; <tags> \u300c\u5f15\u7528\u300d\uff08\u62ec\u5f27\uff09",
     "\"Quoted\" & <tags> \u300c\u5f15\u7528\u300d", "Quoted and tags",
     "\"Quoted\" & <tags> \u300c\u5f15\u7528\u300d\uff08\u62ec\u5f27\uff09",
     "&quot;Quoted&quot; and tags"),
    ("Tabs\tand  double  spaces ", "Tabs and double spaces", "tabs", "Tabs and double spaces",
     "Tabs\tand spaces"),
]

WORDS = ("the of and to in a is that for it as was with be by on not he I this are or his from "
         "at which but have an they you were her she there one all we their \u00e9t\u00e9 "
         "caf\u00e9 na\u00efve \u00fcber se\u00f1or \u00a1hola! \u00bfqu\u00e9? \u201cquote\u201d "
         "\u2014 \u2026 3.5 1,000 2-3 U.S. e.g. it's don't (note) [ref] \u20ac5 $10 50% "
         "\u4e2d\u6587 \u65e5\u672c\u8a9e \u3002 \uff0c \U0001F600 \U0001F44D\U0001F3FD " +
         NBSP + " x\u00b2 \u00bd").split(" ")


def long_corpus(n=1500, seed=7):
    rng = random.Random(seed)
    refs, systems = [], [[], [], []]
    for _ in range(n):
        words = [w for w in (rng.choice(WORDS) for _ in range(rng.randint(3, 28))) if w != ""]
        ref = " ".join(words)
        if rng.random() < 0.7:
            ref = ref[0].upper() + ref[1:] + rng.choice([".", "!", "?", " .", ""])
        refs.append(ref)
        for k, sys in enumerate(systems):
            noise = 0.08 + 0.07 * k
            out = []
            for w in ref.split(" "):
                r = rng.random()
                if r < noise / 3:
                    continue
                if r < 2 * noise / 3:
                    out.append(rng.choice(WORDS))
                    continue
                out.append(w)
                if r < noise:
                    out.append(rng.choice(WORDS))
            if len(out) > 4 and rng.random() < 0.3:  # move a block
                a = rng.randrange(len(out) - 2)
                b = a + rng.randint(1, 3)
                block, rest = out[a:b], out[:a] + out[b:]
                at = rng.randrange(len(rest) + 1)
                out = rest[:at] + block + rest[at:]
            if rng.random() < 0.03:
                out = []
            sys.append(" ".join(out))
    return refs, systems


def write(name, lines):
    with open(os.path.join(OUT, name), "w", encoding="utf-8", newline="\n") as f:
        for line in lines:
            f.write(line + "\n")


# Option sets: (id, metric, keyword arguments of its sacreBLEU class). The C++ test maps the
# same ids onto ScoreOptions.
OPTIONS = [
    ("bleu", "bleu", {}),
    ("bleu-lc", "bleu", {"lowercase": True}),
    ("bleu-intl", "bleu", {"tokenize": "intl"}),
    ("bleu-zh", "bleu", {"tokenize": "zh"}),
    ("bleu-char", "bleu", {"tokenize": "char"}),
    ("bleu-none", "bleu", {"tokenize": "none"}),
    ("bleu-intl-lc", "bleu", {"tokenize": "intl", "lowercase": True}),
    ("chrf", "chrf", {}),
    ("chrf-lc", "chrf", {"lowercase": True}),
    ("chrf++", "chrf", {"word_order": 2}),
    ("chrf++-lc", "chrf", {"word_order": 2, "lowercase": True}),
    ("ter", "ter", {}),
    ("ter-cs", "ter", {"case_sensitive": True}),
    ("ter-norm", "ter", {"normalized": True}),
    ("ter-nopunct", "ter", {"no_punct": True}),
    ("ter-norm-asian", "ter", {"normalized": True, "asian_support": True}),
    ("ter-nopunct-asian", "ter", {"no_punct": True, "asian_support": True}),
]


def main():
    checkout = sys.argv[1]
    version = os.path.join(checkout, "sacrebleu", "version.py")
    if not os.path.exists(version):  # a git checkout: setuptools-scm writes it at install time
        with open(version, "w") as f:
            f.write('__version__ = "2.6.0"\n')
    sys.path.insert(0, checkout)
    from sacrebleu.metrics.bleu import BLEU
    from sacrebleu.metrics.chrf import CHRF
    from sacrebleu.metrics.ter import TER
    from sacrebleu.significance import PairedTest
    classes = {"bleu": BLEU, "chrf": CHRF, "ter": TER}

    os.makedirs(OUT, exist_ok=True)
    hard_sys = [[row[k] for row in HARD] for k in range(3)]
    hard_refs = [[row[3] for row in HARD], [row[4] for row in HARD]]
    long_refs, long_sys = long_corpus()
    sets = {"hard": (hard_sys, hard_refs), "long": (long_sys, [long_refs])}
    for name, (systems, refs) in sets.items():
        for k, lines in enumerate(systems):
            write(f"{name}.sys{k}.txt", lines)
        for r, lines in enumerate(refs):
            write(f"{name}.ref{r}.txt", lines)

    rows = ["# set\toption\tkind\tsystem\tsegment\tname|signature\tscore\tmean\tci\tp"]

    def sig(metric):
        return metric.get_signature().format().replace("version:2.6.0", "version:2.x")

    for set_name, (systems, refs) in sets.items():
        for opt_id, metric_name, kwargs in OPTIONS:
            metric = classes[metric_name](**kwargs)
            for k, hyps in enumerate(systems):
                s = metric.corpus_score(hyps, refs)
                rows.append(f"{set_name}\t{opt_id}\tcorpus\t{k}\t-\t{s.name}|{sig(metric)}\t"
                            f"{s.score!r}\t-\t-\t-")
            if set_name == "hard":  # sentence scores (BLEU with effective order, as the CLI)
                skw = dict(kwargs, effective_order=True) if metric_name == "bleu" else kwargs
                smetric = classes[metric_name](**skw)
                for i, hyp in enumerate(systems[0]):
                    s = smetric.sentence_score(hyp, [r[i] for r in refs])
                    rows.append(f"{set_name}\t{opt_id}\tsentence\t0\t{i}\t{s.name}|{sig(smetric)}"
                                f"\t{s.score!r}\t-\t-\t-")
        # Paired tests of systems 1 and 2 against system 0, for the default metrics and chrF++.
        for opt_id, metric_name, kwargs in OPTIONS:
            if opt_id not in ("bleu", "chrf", "ter", "chrf++", "bleu-intl"):
                continue
            named = [(f"sys{k}", hyps) for k, hyps in enumerate(systems)]
            for test, n in (("bs", 1000), ("ar", 10000)):
                metric = classes[metric_name](**kwargs, references=refs)
                ps = PairedTest(named, {metric_name: metric}, None, test_type=test, n_samples=n)
                sigs, scores = ps()
                for key, results in scores.items():
                    if key == "System":
                        continue
                    signature = sigs[key].format().replace("version:2.6.0", "version:2.x")
                    for k, res in enumerate(results):
                        mean = "-" if res.mean is None else repr(float(res.mean))
                        ci = "-" if res.ci is None else repr(float(res.ci))
                        p = "-" if res.p_value is None else repr(float(res.p_value))
                        rows.append(f"{set_name}\t{opt_id}\tpaired-{test}\t{k}\t-\t"
                                    f"{key}|{signature}\t{float(res.score)!r}\t{mean}\t{ci}\t{p}")
    write("expected.tsv", rows)
    print(f"wrote {len(rows) - 1} expected values to {os.path.normpath(OUT)}")


if __name__ == "__main__":
    main()
