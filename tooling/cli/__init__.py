"""The lab's subcommands of ``cadence`` (``cadence.tooling.cli.commands``), one module per
command group."""
