"""The ``skillgraft`` command line: one click group, one module per command family."""

from .main import cli

__all__ = ["cli"]
