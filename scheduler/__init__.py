"""tiny-aws scheduler on Redis."""

__version__ = "0.1.0"
