"""Stand-in for the Rust `tokenizers` package, which transformers imports even to load a model.
AddedToken is a plain record (transformers' slow tokenizers use it); every other name is a
class that raises when used, so nothing can silently run a fast tokenizer that is not there.
For the parity checks of scripts/golden/transformers_offline.sh only."""
__version__ = "stand-in"  # transformers checks the dist-info that the script writes
__ropelab_standin__ = True


class _Unavailable:
    def __init__(self, *args, **kwargs):
        raise RuntimeError(f"tokenizers stand-in: {type(self).__name__} is not available")

    def __class_getitem__(cls, item):
        return cls


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return type(name, (_Unavailable,), {})


class AddedToken:
    def __init__(self, content="", single_word=False, lstrip=False, rstrip=False,
                 special=False, normalized=None):
        self.content, self.single_word, self.lstrip, self.rstrip = (content, single_word,
                                                                    lstrip, rstrip)
        self.special = special
        self.normalized = normalized if normalized is not None else not special

    def __getstate__(self):
        return dict(self.__dict__)

    def __setstate__(self, state):
        self.__dict__.update(state)

    def __str__(self):
        return self.content

    def __repr__(self):
        return f"AddedToken({self.content!r}, special={self.special})"

    def __eq__(self, other):
        return isinstance(other, AddedToken) and self.__dict__ == other.__dict__

    def __hash__(self):
        return hash(self.content)
