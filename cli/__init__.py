"""The ``cadence`` command line of a deployment (``cadence.cli.app``): one module per command
group. The lab adds its own commands to it (``tooling/cli/commands.py``)."""
