"""The ``cadence`` command line (``cadence.tooling.cli.app``). Each subcommand group lives in a
module of its own."""
