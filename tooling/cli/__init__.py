"""The ``cadence`` command line (``tooling.cli.app``). Each subcommand group lives in a module of
its own."""
