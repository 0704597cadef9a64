"""The whole configuration reaches a Dagster run, and comes back, field by field.

The fields are walked from :class:`RagConfig` itself, so a setting added to the configuration
fails here until the test's rag.yaml gives it a value of its own (and the run carries it).
"""

from __future__ import annotations

import contextvars
import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pydantic

from rag_assets.config import CONFIG_ADAPTER, RagConfig, load_config
from rag_assets.defs.assembly import build_definitions
from rag_assets.defs.distributed import config_json
from rag_assets.defs.resources import (
    RESOURCES_KEPT,
    RagSettings,  # module level: Dagster resolves the probe asset's hints here
)

# Every setting away from its default (the dataclasses' defaults: those of an empty rag.yaml).
EVERY_FIELD = """\
content_dir: notes
output_dir: build
collections: [a]
weights: {a: 2.5}
shards: {a: 3}
chunking: {target_words: 300, overlap_words: 20, min_words: 50, max_chars: 2000}
embedder:
  name: hashing
  batch_size: 7
  max_retries: 5
  timeout: 12.5
  retry_after_cap: 9
  backoff: 0.25
  openai: {base_url: 'http://127.0.0.1:3/v1', model: emb-x, dimension: 99, api_key_env: EMB_KEY,
           send_dimensions: true, price_per_million_tokens: 0.02}
  ollama: {host: 'http://127.0.0.1:1', model: bge-m3, dimension: 1024}
  local: {model_path: models/mini}
  hashing: {dimension: 64}
vaults:
  - {name: notes, path: notes/vaults/notes, tier: safe}
  - {name: me, path: notes/vaults/me, transclude_embeds: true}
identity_map: ids.json
private_tier: {embedder: hashing, allowed_hosts: [gpu.lan]}
vector_decimals: 4
public_index: {vector_encoding: int8}
automation: {sensor_enabled: false, sensor_interval_seconds: 90, nightly_cron: '0 4 * * *', timezone: Europe/Paris}
follow_symlinks: true
max_file_bytes: 1234
workers: 3
evaluation: {questions: [qs.jsonl], hit_at_5_floor: 0.7}
reranker: {name: http, base_url: 'http://127.0.0.1:2', model: judge, top_n: 7, api_key_env: RR_KEY,
           model_path: models/judge, timeout: 4, max_retries: 1, batch_size: 3}
llm:
  name: ollama
  context_budget: 2000
  max_answer_tokens: 300
  temperature: 0.4
  timeout: 20
  max_retries: 4
  retry_after_cap: 5
  backoff: 0.75
  openai: {base_url: 'http://127.0.0.1:4/v1', model: chat-x, api_key_env: CHAT_KEY}
  ollama: {host: 'http://127.0.0.1:5', model: qwen}
store: {backend: postgres, url: 'postgresql://rag@127.0.0.1:5432/rag', ef_search: 200, vector_search: exact,
        hnsw_m: 24, hnsw_ef_construction: 96}
serve:
  token_file: secret/tokens.json
  cors_origins: ['https://notes.example.org']
  search_limit: {per_second: 3, burst: 6}
  ask_limit: {per_second: 0.5, burst: 2}
  max_concurrent_asks: 2
  anonymous_chat_tokens_per_day: 10
  admin_vault_roots: [more-vaults]
  dagster_url: 'http://127.0.0.1:3333'
"""


def every_field_config(tmp_path: Path) -> RagConfig:
    site = tmp_path / "site"
    site.mkdir(parents=True, exist_ok=True)
    (site / "ids.json").write_text("{}")
    (site / "rag.yaml").write_text(EVERY_FIELD)
    return load_config(site / "rag.yaml", environ={})


def leaves(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """Every setting of a configuration (sections walked), as (dotted path, value)."""
    if isinstance(value, pydantic.BaseModel):
        names = list(type(value).model_fields)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        names = [item.name for item in dataclasses.fields(value)]
    else:
        yield path, value
        return
    for name in names:
        yield from leaves(getattr(value, name), f"{path}.{name}" if path else name)


def test_the_trip_configuration_sets_every_field_away_from_its_default(tmp_path):
    cfg = every_field_config(tmp_path)
    defaults = dict(leaves(RagConfig(content_dir=Path("/"), output_dir=Path("/"))))
    same = [path for path, value in leaves(cfg) if value == defaults[path]]
    assert not same, f"give these settings a value of their own in EVERY_FIELD: {', '.join(same)}"


def run_probe(cfg: RagConfig, run_config: dict | None = None) -> RagConfig:
    """The configuration an asset sees in a real run of the definitions built for ``cfg``."""
    seen: dict[str, RagConfig] = {}

    @dg.asset
    def probe(rag: RagSettings) -> None:
        seen["cfg"] = rag.config

    resources = build_definitions(cfg).resources
    # In an empty context, as loaded_definitions resolves definitions: an instance an earlier test of
    # this worker entered leaves itself Dagster's current definitions-state storage, dead once
    # collected ("Attempted to resolve undefined DagsterInstance weakref"; seen when the order changed).
    run = contextvars.Context().run(dg.materialize, [probe], resources={"rag": resources["rag"]}, run_config=run_config)
    assert run.success
    return seen["cfg"]


def test_every_field_survives_the_trip_into_a_dagster_run_and_back(tmp_path):
    cfg = every_field_config(tmp_path)
    got = run_probe(cfg)
    differ = [path for (path, sent), (_, came) in zip(leaves(cfg), leaves(got)) if sent != came]
    assert not differ, f"changed on the way through the run: {', '.join(differ)}"
    assert got == cfg


def test_every_field_survives_the_trip_to_a_celery_worker(tmp_path):
    cfg = every_field_config(tmp_path)
    assert CONFIG_ADAPTER.validate_json(config_json(cfg)) == cfg


def test_a_launchpad_override_of_one_setting_keeps_the_others_as_loaded(tmp_path):
    cfg = every_field_config(tmp_path)
    settings = {
        "embedding": {"name": "ollama"},
        "private_embedding": {"name": "local"},
        "vaults": [{"name": "me", "path": str(tmp_path / "elsewhere"), "tier": "safe"}],
    }
    got = run_probe(cfg, {"resources": {"rag": {"config": {"settings": settings}}}})
    assert got.embedding.name == "ollama" and got.private_embedding.name == "local"
    # The list is replaced: a field its entry leaves out takes the section's default, not the file's.
    expected = dataclasses.replace(cfg.vaults[1], path=tmp_path / "elsewhere", tier="safe", transclude_embeds=False)
    assert got.vaults == (expected,)
    # Everything not named keeps rag.yaml's value, down to the sections' other fields.
    assert got.embedding.batch_size == 7 and got.embedding.ollama.model == "bge-m3"
    assert (
        dataclasses.replace(got, embedding=cfg.embedding, private_embedding=cfg.private_embedding, vaults=cfg.vaults)
        == cfg
    )


def test_builds_of_one_configuration_share_its_resource_and_no_other(tmp_path):
    """``RagSettings.from_config`` is made once per configuration and rag.yaml digest (it was about 50
    ms of every build of the definitions): an equal configuration gets the same frozen resource,
    one nested setting or the file's bytes apart get their own, a run's launchpad override does not
    stick to the shared one, and only the most recent ``RESOURCES_KEPT`` are kept."""
    cfg = every_field_config(tmp_path)
    first = RagSettings.from_config(cfg)
    assert cfg.config_path is not None
    reread = load_config(cfg.config_path, environ={})
    assert reread is not cfg and RagSettings.from_config(reread) is first
    assert build_definitions(cfg).resources["rag"] is first
    # One nested setting apart: a resource of its own, carrying that value.
    other = dataclasses.replace(cfg, embedding=cfg.embedding.model_copy(update={"batch_size": 8}))
    apart = RagSettings.from_config(other)
    assert apart is not first and apart.config == other and first.config == cfg
    # An override of one run, then a run of the shared resource without one: the loaded value.
    assert run_probe(cfg, {"resources": {"rag": {"config": {"settings": {"embedding": {"name": "ollama"}}}}}}) != cfg
    assert run_probe(cfg) == cfg
    # The same settings from a file whose bytes changed (a comment): its own digest, so the old
    # resource still says it is stale and the new one does not.
    cfg.config_path.write_text(cfg.config_path.read_text() + "# edited\n")
    edited = RagSettings.from_config(load_config(cfg.config_path, environ={}))
    assert edited.config == cfg and edited.config_digest != first.config_digest
    assert edited.stale_reason() is None and first.stale_reason() is not None
    # Bounded: after RESOURCES_KEPT other configurations, the first one's is made anew (and equal).
    for size in range(RESOURCES_KEPT):
        RagSettings.from_config(dataclasses.replace(cfg, max_file_bytes=10_000 + size))
    assert RagSettings.from_config(cfg) is not edited
    assert RagSettings.from_config(cfg).config == cfg
