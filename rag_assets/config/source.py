"""Reading ``rag.yaml`` into its settings and the line of every key, refusing what no
configuration needs before it costs time or memory.

Every way the file can be unusable becomes a :class:`ConfigError` naming the file, the line
where known, and what to do: larger than :data:`MAX_CONFIG_BYTES` (checked before anything
is parsed: 50 MB of comments once took over 15 minutes and 1.2 GB), not UTF-8 (the byte
offset), not YAML, nested deeper than :data:`MAX_CONFIG_DEPTH` (the YAML composer recurses
once per level), a number of more than :data:`MAX_NUMBER_DIGITS` digits, or a YAML alias.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rag_assets.config.errors import ConfigError
from rag_assets.config.schema import Loc

# A configuration is a few kilobytes; 1 MiB is far above any real one.
MAX_CONFIG_BYTES = 1 << 20
# rag.yaml's deepest setting is three levels down (embedder.ollama.model, vaults[0].path).
MAX_CONFIG_DEPTH = 20
# No setting is a number of more than a few digits; Python refuses to read ints past 4,300.
MAX_NUMBER_DIGITS = 100
# A plain scalar YAML may read as a number (decimal, 0x/0o/0b, 1:20 sexagesimal, 1e5...).
_LONG_NUMBER = re.compile(r"[-+]?\.?[0-9][0-9a-fA-FxXoO_:.eE+-]{%d,}" % MAX_NUMBER_DIGITS)  # noqa: UP031 (braces of the regex)


@dataclass
class ConfigSource:
    """A config file's settings with the line of every key, so errors can point at them."""

    path: Path | None
    data: dict[str, Any]
    lines: dict[Loc, int]
    problems: list[str]  # found while reading (duplicate keys)

    @classmethod
    def empty(cls) -> ConfigSource:
        return cls(None, {}, {}, [])


def display_path(path: Path) -> str:
    """The file as the user would type it: relative to the working directory when inside it."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def dotted(loc: Sequence[str | int]) -> str:
    """``('vaults', 0, 'tier')`` -> ``vaults[0].tier``."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def read_config_source(path: Path, text: str | None = None) -> ConfigSource:
    """Parse the file once: the nodes with their line marks (checked as they are read), then
    the values made from those nodes. ``text``: the content to parse instead of the file's (a
    would-be version of it, held to the same size cap)."""
    shown = display_path(path)
    if text is None:
        text = _decoded(_bounded_bytes(path, shown), shown)
    elif len(text.encode("utf-8")) > MAX_CONFIG_BYTES:
        raise ConfigError(
            f"{shown} would be larger than {MAX_CONFIG_BYTES:,} bytes (1 MiB), the most a configuration may be"
        )
    loader = _GuardedLoader(text, shown)
    lines: dict[Loc, int] = {}
    problems: list[str] = []
    try:
        root = loader.get_single_node()
        # The lines before the values: making the values folds `<<` merge keys into their
        # mapping's nodes, and the lines are those of the file as written.
        _collect_lines(root, (), lines, problems, shown)
        data = loader.construct_document(root) if root is not None else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{shown}, line {mark.line + 1}" if mark is not None else shown
        raise ConfigError(f"{where}: not valid YAML: {getattr(exc, 'problem', None) or exc}") from None
    except (ValueError, RecursionError) as exc:
        # A backstop: the loader's checks refuse the values known to do this first.
        raise ConfigError(f"{shown}: cannot read the settings: {exc}") from None
    finally:
        loader.dispose()
    if data is None:
        return ConfigSource(path, {}, {}, [])
    if not isinstance(data, dict):
        raise ConfigError(f"{shown} must hold a mapping of settings (key: value lines), not a {type(data).__name__}")
    return ConfigSource(path, data, lines, problems)


def _bounded_bytes(path: Path, shown: str) -> bytes:
    """At most MAX_CONFIG_BYTES of the file: a larger one is refused unread past the cap."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{shown}: cannot read the file: {exc.strerror or exc}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(
            f"{shown} is larger than {MAX_CONFIG_BYTES:,} bytes (1 MiB), the most a configuration may be; "
            "a rag.yaml needs a few kilobytes: check that --config names the right file"
        )
    return raw


def _decoded(raw: bytes, shown: str) -> str:
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ConfigError(
            f"{shown}, line {line}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}); "
            "save the file as UTF-8, or check that --config names a YAML file"
        ) from None


class _GuardedLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing as it reads what it would choke on: nesting deeper than
    MAX_CONFIG_DEPTH, numbers too long, and aliases. Each event is checked before it is composed
    into a node, so nothing is built from a refused value and the composer never recurses past
    the depth cap; one pass over the text gives the nodes (their lines) and then the values."""

    def __init__(self, text: str, shown: str) -> None:
        super().__init__(text)
        self._shown = shown
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        """Check the next event, then compose it as PyYAML does."""
        event = self.peek_event()
        opens = isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent))
        _refuse(event, self._depth + opens, self._shown)
        self._depth += opens
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= opens


def _refuse(event: yaml.Event, depth: int, shown: str) -> None:
    """ConfigError for an event no configuration needs; ``depth``: the nesting once it has opened."""
    where = f"{shown}, line {event.start_mark.line + 1}"
    if depth > MAX_CONFIG_DEPTH:
        raise ConfigError(
            f"{where}: settings nest more than {MAX_CONFIG_DEPTH} levels deep; no setting of rag.yaml "
            "is more than a few levels down"
        )
    if isinstance(event, yaml.AliasEvent):
        # A few nested aliases expand to gigabytes while the file is validated.
        raise ConfigError(
            f"{where}: YAML alias *{event.anchor} is not allowed in the configuration; write the value out"
        )
    if isinstance(event, yaml.ScalarEvent) and event.style is None and _LONG_NUMBER.fullmatch(event.value):
        raise ConfigError(
            f"{where}: a number of {len(event.value):,} characters; no setting needs more than "
            f"{MAX_NUMBER_DIGITS} digits (quote it if it is meant as text)"
        )


def _collect_lines(node: yaml.Node, path: Loc, lines: dict[Loc, int], problems: list[str], shown: str) -> None:
    """Record the line of every key (mapping) and item (sequence) under ``node``."""
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                continue
            key_path = path + (key_node.value,)
            line = key_node.start_mark.line + 1
            if key_path in lines:
                # safe_load keeps the last silently: two `embedder:` sections lose the first.
                problems.append(
                    f"{shown}, line {line}: key '{dotted(key_path)}' appears twice (also at line "
                    f"{lines[key_path]}); only the last would count, remove one"
                )
            lines[key_path] = line
            _collect_lines(value_node, key_path, lines, problems, shown)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            lines[path + (index,)] = item.start_mark.line + 1
            _collect_lines(item, path + (index,), lines, problems, shown)
