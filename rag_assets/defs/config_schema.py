"""Dagster's config schema for the whole configuration, generated from :class:`RagConfig`'s own
fields, so the resource that carries it into a run can neither drop nor misspell a setting.

Dagster's Pythonic config accepts only its own ``dg.Config`` classes as nested sections, and the
core configuration may not import Dagster (the layers contract). So this module walks the
configuration's types once per loaded configuration and makes the matching ``dg.Config``
classes, each field's default being the loaded value: the launchpad then shows every setting
as loaded, and a run config that changes one of them (``embedding: {name: ollama}``) keeps the
others. Values go in and come back through pydantic's own validation of the configuration's
types (:data:`rag_assets.config.CONFIG_ADAPTER`); there is no hand-written serialiser.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, Union, get_args, get_origin

import dagster as dg
import pydantic
from pydantic import Field

from rag_assets.config import CONFIG_ADAPTER, RagConfig

_SCALARS = (str, int, float, bool)


def config_value(cfg: RagConfig) -> dg.Config:
    """``cfg`` as an instance of its generated Dagster config class (defaults: ``cfg`` itself)."""
    schema = config_class(RagConfig, CONFIG_ADAPTER.dump_python(cfg, mode="json"))
    return schema()


def config_from_value(value: dg.Config) -> RagConfig:
    """The configuration a run's (possibly overridden) config value describes, validated."""
    return CONFIG_ADAPTER.validate_python(value.model_dump())


def config_class(cls: type, values: dict[str, Any]) -> type[dg.Config]:
    """A ``dg.Config`` class with ``cls``'s fields, each defaulting to its entry in ``values``."""
    fields: dict[str, Any] = {}
    for name, hint in _field_types(cls).items():
        value = values[name]
        kind = _dagster_type(hint, value)
        described = f"{name} as loaded; change it here for this run only."
        if isinstance(kind, type) and issubclass(kind, dg.Config):
            fields[name] = (kind, Field(default_factory=kind, description=described))
        else:
            # Dagster reads the default as plain data; validate_default makes a list of sections
            # (vaults) config instances in the value, as pydantic expects when it dumps them.
            fields[name] = (kind, Field(default=value, validate_default=True, description=described))
    return pydantic.create_model(f"{cls.__name__}Schema", __base__=dg.Config, __doc__=cls.__doc__, **fields)


def _is_section(kind: Any) -> bool:
    """A settings class: a dataclass of the configuration, or one of the schema's models."""
    return isinstance(kind, type) and (dataclasses.is_dataclass(kind) or issubclass(kind, pydantic.BaseModel))


def _field_types(cls: type) -> dict[str, Any]:
    """The settings of a section and their types."""
    if issubclass(cls, pydantic.BaseModel):
        return {name: info.annotation for name, info in cls.model_fields.items()}
    hints = typing.get_type_hints(cls)
    assert dataclasses.is_dataclass(cls)  # _is_section: a section that is no model is a dataclass
    return {item.name: hints[item.name] for item in dataclasses.fields(cls)}


def _own_defaults(cls: type) -> dict[str, Any]:
    """The plain (not factory-made) defaults a section declares, paths as text."""
    if issubclass(cls, pydantic.BaseModel):
        found = {
            name: info.default
            for name, info in cls.model_fields.items()
            if not info.is_required() and info.default_factory is None
        }
    else:
        assert dataclasses.is_dataclass(cls)  # as in _field_types
        found = {item.name: item.default for item in dataclasses.fields(cls) if item.default is not dataclasses.MISSING}
    return {name: str(value) if isinstance(value, Path) else value for name, value in found.items()}


def _dagster_type(kind: Any, value: Any) -> Any:
    """The Dagster config type of a configuration type (paths as text, tuples as lists)."""
    origin = get_origin(kind)
    if kind is Path:
        return str
    if kind in _SCALARS:
        return kind
    if origin is Annotated:  # a validator's marks: pydantic applies them on the way back
        return _dagster_type(get_args(kind)[0], value)
    if origin is Literal:  # a choice (an embedder's name): its type here, checked on the way back
        return type(get_args(kind)[0])
    if _is_section(kind):
        return config_class(kind, value) if value is not None else _required_class(kind)
    if origin in (Union, types.UnionType):
        (inner,) = [arg for arg in get_args(kind) if arg is not type(None)]
        return Optional[_dagster_type(inner, None)]  # noqa: UP045 (a type built at run time, for Dagster)
    if origin is tuple:
        return list[_dagster_type(get_args(kind)[0], None)]  # type: ignore[misc]  # a type made at run time, for Dagster
    if origin in (dict, collections.abc.Mapping):
        key, item = get_args(kind)
        return dict[_dagster_type(key, None), _dagster_type(item, None)]  # type: ignore[misc]  # as above
    raise TypeError(f"no Dagster config type for {kind!r}: teach rag_assets/defs/config_schema.py this type")


def _required_class(cls: type) -> type[dg.Config]:
    """A section inside a list (a vault): each entry gives its own fields; those the section
    itself defaults (a vault's templates folder) keep that default when an entry leaves them out."""
    defaults = _own_defaults(cls)
    fields: dict[str, Any] = {
        name: (_dagster_type(hint, None), defaults.get(name, ...)) for name, hint in _field_types(cls).items()
    }
    return pydantic.create_model(f"{cls.__name__}Schema", __base__=dg.Config, __doc__=cls.__doc__, **fields)
