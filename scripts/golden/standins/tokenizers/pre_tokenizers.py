"""The stand-in's tokenizers.pre_tokenizers: every name raises when used."""
from tokenizers import __getattr__  # noqa: F401
