"""Config file, environment overrides and collection discovery."""

from __future__ import annotations

from pathlib import Path

import pytest

from rag_assets.config import ConfigError, discover_collections, load_config


def write_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "site" / "rag.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_paths_in_the_file_are_relative_to_the_file(tmp_path):
    path = write_config(tmp_path, "content_dir: notes\noutput_dir: build\n")
    cfg = load_config(path, environ={})
    assert cfg.content_dir == (tmp_path / "site" / "notes").resolve()
    assert cfg.index_path == (tmp_path / "site" / "build" / "public" / "embeddings-index.json").resolve()


def test_environment_then_flags_override_the_file(tmp_path):
    path = write_config(tmp_path, "content_dir: notes\nembedder: hashing\n")
    env = {"RAG_CONTENT_DIR": str(tmp_path / "env-content"), "RAG_EMBEDDER": "auto", "RAG_OUTPUT_DIR": "/tmp/o"}
    cfg = load_config(path, environ=env)
    assert cfg.content_dir == tmp_path / "env-content"
    assert cfg.embedder == "auto" and cfg.output_dir == Path("/tmp/o")
    cfg = load_config(path, environ=env, content_dir=tmp_path / "flag", embedder="hashing")
    assert cfg.content_dir == tmp_path / "flag" and cfg.embedder == "hashing"


def test_rag_config_env_names_the_file(tmp_path, monkeypatch):
    path = write_config(tmp_path, "output_dir: elsewhere\n")
    monkeypatch.setenv("RAG_CONFIG", str(path))
    assert load_config(environ={}).output_dir == (path.parent / "elsewhere").resolve()


def test_default_weights_and_overrides(tmp_path):
    cfg = load_config(write_config(tmp_path, "weights:\n  posts: 2\n"), environ={})
    assert cfg.weight_for("docs") == 1.5 and cfg.weight_for("posts") == 2.0
    assert cfg.weight_for("journal") == 0.8 and cfg.weight_for("other") == 1.0


@pytest.mark.parametrize(
    "text, message",
    [
        ("content_dir: [unclosed", "not valid YAML"),
        ("- a\n- b\n", "mapping"),
        ("chunking:\n  min_words: 500\n", "min_words"),
        ("vaults:\n  - name: x\n", r"line 2: vaults\[0\]\.path is required"),
        ("vaults:\n  - {name: x, path: v, tier: public}\n", r"vaults\[0\]\.tier must be 'safe' or 'private' \(got 'public'\)"),
    ],
)
def test_bad_config_says_what_to_fix(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message):
        load_config(write_config(tmp_path, text), environ={})


def test_missing_config_file_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml", environ={})


def test_collections_are_top_level_folders_without_hidden_and_vault_folders(tmp_path):
    content = tmp_path / "site" / "content"
    for folder in ("posts", "docs", ".obsidian", "vaults/work", "bad...name"):
        (content / folder).mkdir(parents=True)
    (content / "README.md").write_text("not a collection")
    path = write_config(
        tmp_path, "identity_map: null\nvaults:\n  - {name: work, path: content/vaults/work, tier: safe}\n"
    )
    found = discover_collections(load_config(path, environ={}))
    assert found.collections == ("docs", "posts")
    excluded = dict(found.excluded)
    assert "vault" in excluded["vaults"]
    assert "Dagster forbids" in excluded["bad...name"]


def test_listed_collections_restrict_and_report_missing_folders(tmp_path):
    content = tmp_path / "site" / "content"
    for folder in ("posts", "docs"):
        (content / folder).mkdir(parents=True)
    found = discover_collections(load_config(write_config(tmp_path, "collections: [posts, journal]\n"), environ={}))
    assert found.collections == ("posts", "journal")
    assert found.missing == ("journal",)


def test_vaults_folder_is_never_a_collection_even_without_configured_vaults(tmp_path):
    content = tmp_path / "site" / "content"
    for folder in ("posts", "vaults/personal"):
        (content / folder).mkdir(parents=True)
    found = discover_collections(load_config(write_config(tmp_path, ""), environ={}))
    assert found.collections == ("posts",)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("private_tier: {embedder: openai}\n", "remote API"),
        ("private_tier: {embedder: openrouter}\n", "remote API"),
        ("private_tier: {embedder: ollama}\nembedder: {ollama: {host: 'http://10.1.2.3:11434'}}\n", "not on this machine"),
        ("private_tier: {embedder: hashing, colour: red}\n", "unknown key 'private_tier.colour'"),
        ("identity_map: missing.json\nvaults:\n  - {name: w, path: v, tier: safe}\n", "identity map"),
        ("identity_map: null\nvaults:\n  - {name: w, path: v}\n  - {name: w, path: x}\n", "more than once"),
    ],
)
def test_private_tier_and_vault_configuration_errors(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message):
        load_config(write_config(tmp_path, text), environ={})


def test_private_tier_accepts_local_providers_and_listed_hosts(tmp_path):
    text = (
        "private_tier: {embedder: ollama, allowed_hosts: [gpu-box.lan]}\n"
        "embedder: {name: openai, ollama: {host: 'http://gpu-box.lan:11434'}}\n"
    )
    cfg = load_config(write_config(tmp_path, text), environ={})
    assert cfg.private_embedding.name == "ollama" and cfg.embedding.name == "openai"
    assert cfg.private_hosts == ("gpu-box.lan",)
    # OLLAMA_HOST pointing off the machine is refused for the Private tier too.
    with pytest.raises(ConfigError, match="not on this machine"):
        load_config(write_config(tmp_path, "private_tier: {embedder: ollama}\n"), environ={"OLLAMA_HOST": "10.9.9.9:11434"})
