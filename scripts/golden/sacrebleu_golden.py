#!/usr/bin/python3
"""The sacreBLEU golden values of tests/unit/bleu_test.cpp, computed with the real sacreBLEU:
chrF with empty and short references (Chrf.EmptyAndShortReferencesMatchSacrebleu), and BLEU and
chrF under the options ropelab has (Bleu.OptionsMatchSacrebleu: --tokenize, --lowercase,
--chrf-lowercase), with their signatures.

sacreBLEU is not packaged in Debian, and PyPI is not reachable here, so this runs it from a
source checkout (https://github.com/mjpost/sacrebleu, v2.6.0). Its package imports modules the
CHRF class does not use (portalocker, tabulate, colorama, regex); where they are missing, empty
stand-ins are put on the path.

    /usr/bin/python3 scripts/golden/sacrebleu_golden.py /path/to/sacrebleu-checkout
"""
import os
import sys
import tempfile

CASES = [
    (["the cat sat on the mat", "hello there", "abc"], [["the cat sat on a mat", "", "ab"]]),
    (["abcdef"], [["abc"]]),
    (["hello world"], [[""], ["hello word"]]),
    (["hello world", "x"], [["", ""]]),
    (["el perro ve la casa roja", "un hombre", "gracias"],
     [["el perro ve una casa roja", "un", ""]]),
]


OPTION_HYPS = ["The Dog bit THE man .",
               "\u00c9cole \u039f\u0394\u039f\u03a3 Stra\u00dfe \u0130stanbul",
               "It was n't surprising ."]
OPTION_REFS = [["the dog bit the man .",
                "\u00e9cole \u03bf\u03b4\u03bf\u03c2 strasse istanbul",
                "it was not unexpected ."]]


def main():
    checkout = sys.argv[1]
    stubs = tempfile.mkdtemp()
    for mod, text in (("portalocker", ""), ("regex", ""),
                      ("tabulate", "def tabulate(*a, **k):\n    return ''\n"),
                      ("colorama", "class _C:\n    def __getattr__(self, k):\n        return ''\n"
                                   "Fore = Style = _C()\ndef init(*a, **k):\n    pass\n")):
        try:
            __import__(mod)
        except ImportError:
            with open(os.path.join(stubs, mod + ".py"), "w") as f:
                f.write(text)
    version = os.path.join(checkout, "sacrebleu", "version.py")
    if not os.path.exists(version):  # a git checkout: setuptools-scm writes it at install time
        with open(version, "w") as f:
            f.write('__version__ = "2.6.0"\n')
    sys.path[:0] = [checkout, stubs]
    from sacrebleu.metrics.bleu import BLEU  # noqa: E402
    from sacrebleu.metrics.chrf import CHRF  # noqa: E402
    chrf = CHRF()
    for hyps, refs in CASES:
        print(repr(chrf.corpus_score(hyps, refs).score))
    for tok in ("13a", "none", "char"):
        for lc in (False, True):
            bleu = BLEU(tokenize=tok, lowercase=lc)
            score = bleu.corpus_score(OPTION_HYPS, OPTION_REFS)
            print(f"BLEU|{bleu.get_signature()} = {score.score!r} {score}")
    for lc in (False, True):
        chrf = CHRF(lowercase=lc)
        score = chrf.corpus_score(OPTION_HYPS, OPTION_REFS).score
        print(f"chrF2|{chrf.get_signature()} = {score!r}")


if __name__ == "__main__":
    main()
