"""``Options``: the base of every typed set of options — a configuration section, a
package's own settings.

Unknown keys are errors (a typo must not silently fall back to a default), instances are
frozen, and each field's docstring is its description, which ``cadence config show`` renders
as a comment.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)
