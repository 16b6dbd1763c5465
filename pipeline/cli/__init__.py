"""The ``cadence`` command line. Each subcommand group lives in a module of its own."""

from pipeline.cli.app import app, main

__all__ = ["app", "main"]
