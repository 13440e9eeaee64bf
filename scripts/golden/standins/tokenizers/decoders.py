"""The stand-in's tokenizers.decoders: every name raises when used."""
from tokenizers import __getattr__  # noqa: F401
