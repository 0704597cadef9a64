"""The one exception of the configuration: every problem found, each on its own line."""

from __future__ import annotations

from collections.abc import Sequence


class ConfigError(ValueError):
    """The configuration is unusable; the message says what to fix.

    ``problems`` lists every problem found, one self-contained line each (``rag.yaml, line 3:
    unknown key 'embeder' (did you mean 'embedder'?)``); the message joins them.
    """

    def __init__(self, message: str, problems: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.problems: tuple[str, ...] = tuple(problems) or (message,)

    @classmethod
    def from_problems(cls, problems: Sequence[str]) -> ConfigError:
        if len(problems) == 1:
            return cls(problems[0], problems)
        listed = "\n".join(f"  {p}" for p in problems)
        return cls(f"{len(problems)} problems in the configuration:\n{listed}", problems)
