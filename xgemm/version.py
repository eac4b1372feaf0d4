"""xgemm's version: the package's, and the one a tuning file records it was written by."""

__version__ = "0.1.0"
