"""The resource that carries the whole configuration into every Dagster run.

``RagSettings`` holds the validated configuration whole, as typed config generated from
:class:`RagConfig`'s fields (rag_assets/defs/config_schema.py): every setting is written once,
in rag.yaml's schema, and the launchpad can change any of them for one run (the embedder, a
vault's tier, the Private tier's embedder...) while the others keep their loaded values.
"""

import threading
from pathlib import Path

import dagster as dg
import pydantic
from pydantic import Field

from rag_assets.config import CONFIG_ADAPTER, RagConfig, config_digest
from rag_assets.defs.config_schema import config_from_value, config_value
from rag_assets.embed.selection import Selection, select_embedder
from rag_assets.privacy.local_only import select_private_embedder
from rag_assets.privacy.sanitize import Sanitizer

# Every build of the definitions made this resource anew: about 50 ms of CPU, nine tenths of
# build_definitions (generating the config classes, then Dagster inferring their schema when the
# resource is made), repeated for every `rag build` run, sensor tick and test build of one
# configuration. A resource is a frozen pydantic model, so one per (class, configuration, file
# digest) can be shared; the few most recent are kept (a code server reloading an edited rag.yaml
# makes a new one each time).
_MADE: dict[tuple[type, bytes, str], "RagSettings"] = {}
RESOURCES_KEPT = 16
_MADE_LOCK = threading.Lock()


class RagSettings(dg.ConfigurableResource):
    """The whole validated configuration, exactly as ``rag`` loaded it (file, environment, flags).

    Its ``settings`` field is every :class:`RagConfig` field (sections nested as in the
    configuration), so assets, checks and sensors see what the CLI sees and a new setting
    cannot be dropped on the way. Made by :meth:`from_config`, whose class has the loaded values
    as the schema's defaults.
    """

    config_file: str | None = Field(default=None, description="The rag.yaml the settings were read from.")
    config_digest: str = Field(default="", description="SHA-256 of that file when it was read.")

    @classmethod
    def from_config(cls, cfg: RagConfig) -> "RagSettings":
        """The resource for ``cfg``: a subclass whose ``settings`` field defaults to ``cfg`` throughout,
        so a run config that sets one nested value keeps every other one as loaded.

        Made once per configuration and rag.yaml digest (the cache above the class): the same
        inputs give the same (frozen) resource, which every later build of the definitions reuses."""
        digest = config_digest(cfg.config_path)
        # The dump is everything `_new_settings` reads of `cfg` (config_value dumps it the same way, and
        # config_path is one of its fields), so equal keys make equal resources.
        key = (cls, CONFIG_ADAPTER.dump_json(cfg), digest)
        with _MADE_LOCK:  # a code server loads definitions on several threads
            made = _MADE.pop(key, None)
            if made is None:
                made = _new_settings(cls, cfg, digest)
            _MADE[key] = made  # the most recently used last
            while len(_MADE) > RESOURCES_KEPT:
                del _MADE[next(iter(_MADE))]
        return made

    @property
    def config(self) -> RagConfig:
        """The run's configuration (the launchpad's changes included), validated."""
        # `settings` is a field of the subclass that `loaded` builds from the config at load time.
        return config_from_value(self.settings)  # type: ignore[attr-defined]

    def stale_reason(self) -> str | None:
        """Why these settings may be out of date: rag.yaml was edited after they were read.

        The partitions and sensors were built from the old file too, so the fix is a reload
        of the code location, not a re-read here.
        """
        if self.config_file and config_digest(Path(self.config_file)) != self.config_digest:
            return (
                f"{self.config_file} changed since the definitions were loaded; this run uses the settings "
                "read then: reload the code location (or restart dagster dev) to apply the edit"
            )
        return None

    def select(self) -> Selection:
        """The embedder to use now, and why (``auto`` probes the services)."""
        return select_embedder(self.config.embedding)

    def select_private(self) -> Selection:
        """The Private tier's embedder, proven local (PrivacyError otherwise)."""
        cfg = self.config
        return select_private_embedder(cfg.private_embedding, cfg.private_hosts)

    def sanitizer(self) -> Sanitizer:
        """The Safe tier's sanitiser, with the configured identity map."""
        return Sanitizer.from_file(self.config.identity_map_path)


def _new_settings(cls: type[RagSettings], cfg: RagConfig, digest: str) -> RagSettings:
    """A new resource of class ``cls`` for ``cfg`` (its file's digest given, as read for the key)."""
    value = config_value(cfg)
    loaded = pydantic.create_model(
        cls.__name__,
        __base__=cls,
        __module__=cls.__module__,
        settings=(type(value), Field(default_factory=type(value), description="Every setting, as loaded.")),
    )
    return loaded(config_file=str(cfg.config_path) if cfg.config_path else None, config_digest=digest)
