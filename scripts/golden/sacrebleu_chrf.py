#!/usr/bin/python3
"""The chrF golden values of tests/unit/bleu_test.cpp (Chrf.EmptyAndShortReferencesMatchSacrebleu),
computed with the real sacreBLEU: its CHRF class with default options.

sacreBLEU is not packaged in Debian, and PyPI is not reachable here, so this runs it from a
source checkout (https://github.com/mjpost/sacrebleu, v2.6.0). Its package imports modules the
CHRF class does not use (portalocker, tabulate, colorama, regex); where they are missing, empty
stand-ins are put on the path.

    /usr/bin/python3 scripts/golden/sacrebleu_chrf.py /path/to/sacrebleu-checkout
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
    from sacrebleu.metrics.chrf import CHRF  # noqa: E402
    chrf = CHRF()
    for hyps, refs in CASES:
        print(repr(chrf.corpus_score(hyps, refs).score))


if __name__ == "__main__":
    main()
