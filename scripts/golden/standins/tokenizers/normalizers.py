"""The stand-in's tokenizers.normalizers: every name raises when used."""
from tokenizers import __getattr__  # noqa: F401
