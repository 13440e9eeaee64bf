"""The stand-in's tokenizers.processors: every name raises when used."""
from tokenizers import __getattr__  # noqa: F401
