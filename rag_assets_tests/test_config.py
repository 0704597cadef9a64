"""Config file, environment overrides and collection discovery."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import get_args

import pytest
import yaml

from rag_assets.config import (
    ChunkingParams,
    ConfigError,
    EmbedderSettings,
    RagConfig,
    chunking_params,
    load_config,
    mask_secrets,
)
from rag_assets.config.providers import ALIASES, PROVIDERS
from rag_assets.config.schema import ChunkingSection, EmbedderName, EmbedderSection
from rag_assets.defs.resources import (
    RagSettings,  # module level: Dagster resolves the probe asset's hints here
)
from rag_assets.ingest.collections import discover_collections
from rag_assets.serve.cli import main

from .conftest import instance_for_test
from .deadline import deadline


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
    assert cfg.collection_weights["docs"] == 1.5 and cfg.collection_weights["posts"] == 2.0
    assert cfg.collection_weights["journal"] == 0.8 and "other" not in cfg.collection_weights


@pytest.mark.parametrize(
    "text, message",
    [
        ("content_dir: [unclosed", "not valid YAML"),
        ("- a\n- b\n", "mapping"),
        ("chunking:\n  min_words: 500\n", "min_words"),
        ("vaults:\n  - name: x\n", r"line 2: vaults\[0\]\.path is required"),
        (
            "vaults:\n  - {name: x, path: v, tier: public}\n",
            r"vaults\[0\]\.tier must be 'safe' or 'private' \(got 'public'\)",
        ),
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


@pytest.mark.parametrize(
    ("output", "written"),
    [
        ("content/out", ["out"]),  # the output folder a top-level folder
        ("content", ["data", "public"]),  # the content folder itself: its data/ and public/
    ],
)
def test_a_folder_builds_write_in_is_never_a_collection(tmp_path, output: str, written: list[str]) -> None:
    content = tmp_path / "site" / "content"
    for folder in ("posts", "docs", *written):
        (content / folder).mkdir(parents=True, exist_ok=True)
    config = f"output_dir: {tmp_path / 'site' / output}\n"
    found = discover_collections(load_config(write_config(tmp_path, config), environ={}))
    assert found.collections == ("docs", "posts")
    excluded = dict(found.excluded)
    assert sorted(excluded) == sorted(written)
    assert all("it is where builds write" in excluded[name] for name in written)


def test_a_listed_output_folder_is_refused_before_a_build_made_it(tmp_path) -> None:
    (tmp_path / "site" / "content" / "posts").mkdir(parents=True)
    config = f"output_dir: {tmp_path / 'site' / 'content' / 'out'}\ncollections: [posts, out]\n"
    found = discover_collections(load_config(write_config(tmp_path, config), environ={}))
    assert found.collections == ("posts",)
    assert found.missing == ()  # not "configured but missing": it is the output folder
    assert "it is where builds write" in dict(found.excluded)["out"]


@pytest.mark.parametrize("output", ["out", "docs/build/rag", "docs/.rag", "."])
def test_a_build_into_the_content_folder_leaves_its_outputs_out_of_the_index(tmp_path, capsys, output: str) -> None:
    content = tmp_path / "content"
    for name in ("posts", "docs"):
        (content / name).mkdir(parents=True)
        (content / name / "hello.md").write_text(f"---\ntitle: Hello {name}\n---\n\n# Hello\n\nWords.\n")
    where = ["--content-dir", str(content), "--output-dir", str(content / output)]
    assert main(["build", *where]) == 0
    first = capsys.readouterr().out
    assert "[docs] 1 documents" in first and "[posts] 1 documents" in first and "Skipped" not in first
    # Its own outputs, written by the first build, are no change: nothing to build.
    assert main(["build", *where]) == 0
    second = capsys.readouterr().out
    assert "nothing to build" in second
    if output in ("out", "."):
        assert "is not a collection: it is where builds write" in second
    assert main(["check", *where]) == 0
    capsys.readouterr()
    assert main(["search", "Hello", "--json", *where]) == 0
    found = {hit["collection"] for hit in json.loads(capsys.readouterr().out)["hits"]}
    assert found == {"docs", "posts"}  # the documents, and nothing of the outputs


def test_a_path_through_a_symlink_loop_is_a_configuration_error(tmp_path, capsys) -> None:
    content = tmp_path / "site" / "content"
    content.mkdir(parents=True)
    (content / "loop").symlink_to("loop")
    with pytest.raises(ConfigError, match="rag.yaml: .* cannot be resolved .*points back at itself"):
        load_config(write_config(tmp_path, "output_dir: content/loop/out\n"), environ={})
    assert main(["build", "--content-dir", str(content), "--output-dir", str(content / "loop" / "out")]) == 2
    assert "--output-dir: " in capsys.readouterr().err


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
        (
            "private_tier: {embedder: ollama}\nembedder: {ollama: {host: 'http://10.1.2.3:11434'}}\n",
            "not on this machine",
        ),
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
        load_config(
            write_config(tmp_path, "private_tier: {embedder: ollama}\n"), environ={"OLLAMA_HOST": "10.9.9.9:11434"}
        )


# --- Validation: every key checked, errors a person can act on --------------------------------


def config_error(tmp_path: Path, text: str, **kwargs) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        load_config(write_config(tmp_path, text), environ=kwargs.pop("environ", {}), **kwargs)
    return caught.value


def test_a_misspelt_top_level_key_is_refused_with_its_line_and_the_closest_key(tmp_path):
    error = config_error(tmp_path, "content_dir: content\n\nembeder: hashing\n")
    assert str(error) == "site/rag.yaml, line 3: unknown key 'embeder' (did you mean 'embedder'?)"


def test_a_misspelt_nested_key_names_its_path_and_suggests_the_key(tmp_path):
    text = "embedder:\n  name: ollama\n  ollama:\n    modle: nomic-embed-text\n"
    error = config_error(tmp_path, text)
    assert str(error) == "site/rag.yaml, line 4: unknown key 'embedder.ollama.modle' (did you mean 'model'?)"


def test_a_value_of_the_wrong_type_names_the_key_the_value_and_what_is_needed(tmp_path):
    message = str(config_error(tmp_path, "chunking:\n  target_words: abc\n"))
    assert message.startswith("site/rag.yaml, line 2: chunking.target_words must be an integer")
    assert "(got 'abc')" in message


def test_every_problem_is_listed_at_once_in_file_order(tmp_path):
    text = "embeder: x\nchunking:\n  target_words: abc\nvector_decimals: 0\n"
    error = config_error(tmp_path, text)
    assert [p.split(":")[0] for p in error.problems] == [
        "site/rag.yaml, line 1",
        "site/rag.yaml, line 3",
        "site/rag.yaml, line 4",
    ]
    assert str(error).startswith("3 problems in the configuration:\n")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("embedder: {batch_size: 0}\n", r"embedder\.batch_size must be greater than 0 \(got 0\)"),
        ("embedder: {hashing: {dimension: -3}}\n", r"embedder\.hashing\.dimension must be greater than 0"),
        ("embedder: {openai: {dimension: 0}}\n", r"embedder\.openai\.dimension must be greater than 0"),
        (
            "chunking: {target_words: 100, overlap_words: 100}\n",
            r"chunking\.overlap_words must be less than target_words \(100\)",
        ),
        ("chunking: {overlap_words: -1}\n", r"chunking\.overlap_words must be greater than or equal to 0"),
        ("chunking: {target_words: 60}\n", r"chunking\.min_words must not exceed target_words \(60\)"),
        ("vector_decimals: 40\n", r"vector_decimals must be less than or equal to 10 \(got 40\)"),
        ("vaults:\n  - {name: v, path: v, tier: secret}\n", r"line 2: vaults\[0\]\.tier must be 'safe' or 'private'"),
        ("automation: {nightly_cron: ''}\n", r"automation\.nightly_cron must be a cron expression"),
        ("automation: {timezone: Mars/Base}\n", r"automation\.timezone must be an IANA time zone"),
        ("max_file_bytes: 0\n", r"max_file_bytes must be greater than 0"),
        ("follow_symlinks: sometimes\n", r"follow_symlinks must be true or false \(got 'sometimes'\)"),
        ("embedder: olama\n", r"embedder\.name must be 'auto', .* \(got 'olama'\); did you mean 'ollama'\?"),
        ("collections: posts\n", r"collections must be a list"),
        ("embedder:\n  name: auto\nembedder: hashing\n", r"line 3: key 'embedder' appears twice \(also at line 1\)"),
    ],
)
def test_types_and_ranges_are_checked(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message):
        load_config(write_config(tmp_path, text), environ={})


def test_overrides_are_validated_and_named_as_the_source(tmp_path):
    error = config_error(tmp_path, "embedder: hashing\n", environ={"RAG_EMBEDDER": "hashng"})
    assert str(error).startswith("$RAG_EMBEDDER: embedder.name must be")
    assert "did you mean 'hashing'?" in str(error)
    error = config_error(tmp_path, "", embedder="bogus")
    assert str(error).startswith("--embedder: embedder.name must be")


def test_a_secret_in_the_file_is_never_echoed(tmp_path):
    key = "sk-or-v1-0123456789abcdef0123456789abcdef"
    message = str(config_error(tmp_path, f"embedder:\n  openai:\n    api_key_env: {key}\n"))
    assert "embedder.openai.api_key_env must be the NAME of an environment variable" in message
    assert key not in message and "***" in message


def test_blank_sections_mean_their_defaults(tmp_path):
    cfg = load_config(write_config(tmp_path, "chunking:\nembedder:\n  local:\nvaults:\nautomation:\n"), environ={})
    assert cfg.chunking == ChunkingParams() and cfg.embedding == EmbedderSettings() and cfg.vaults == ()


def test_the_dataclass_defaults_agree_with_the_schema(tmp_path):
    """The pydantic models hold the defaults; the dataclasses the pipeline uses must not disagree."""
    assert chunking_params(ChunkingSection()) == ChunkingParams()
    assert EmbedderSettings is EmbedderSection  # one model: the file's section is the pipeline's settings
    empty = load_config(write_config(tmp_path, "identity_map: null\n"), environ={})
    by_hand = RagConfig(content_dir=empty.content_dir, output_dir=empty.output_dir, config_path=empty.config_path)
    assert empty == by_hand
    assert set(get_args(EmbedderName)) == set(PROVIDERS) | set(ALIASES)


def test_the_repository_rag_yaml_is_valid():
    repo_file = Path(__file__).resolve().parents[1] / "rag.yaml"
    cfg = load_config(repo_file, environ={})
    assert {v.name for v in cfg.vaults} == {"homelab-notes", "personal"}


# --- The configuration reaches Dagster whole -------------------------------------------------


# The trip of every field into a Dagster run and back: test_config_in_runs.py.


def test_an_edited_rag_yaml_is_noticed_by_the_resource(tmp_path):
    path = write_config(tmp_path, "embedder: hashing\n")
    settings = RagSettings.from_config(load_config(path, environ={}))
    assert settings.stale_reason() is None
    path.write_text("embedder: hashing\ncollections: [a]\n")
    assert "changed since the definitions were loaded" in settings.stale_reason()


def test_listed_collections_reach_the_index_matches_content_check(tmp_path, write_tree):

    from rag_assets.defs.runner import run_build

    content = write_tree({"a/one.md": "# One\n\nAbout apples.\n", "b/two.md": "# Two\n\nAbout bananas.\n"})
    text = f"content_dir: {content}\noutput_dir: {tmp_path / 'out'}\ncollections: [a]\nembedder: hashing\nidentity_map: null\n"
    cfg = load_config(write_config(tmp_path, text), environ={})
    with instance_for_test() as instance:
        outcome = run_build(cfg, instance)
    assert outcome.success, outcome.error
    assert [c.collection for c in outcome.collections] == ["a"]
    assert not [w for w in outcome.warnings if w.startswith("index_matches_content")], outcome.warnings


# --- The CLI ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """What one `rag` command did: its exit code and what it printed."""

    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def run_rag(capsys: pytest.CaptureFixture[str]) -> Callable[..., Run]:
    """``run_rag(*args, cwd=..., env=...)``: `rag ARGS` started in ``cwd``, with no RAG_* variable
    (nor OpenRouter's key) but ``env``'s, as a `rag` process there would run it, in this process
    (rag_assets.serve.cli.main): these tests are about the exit code and the messages, not the
    process, whose start cost about 1 CPU s each. A hang still fails, after the 300 s the
    subprocess's timeout gave; an exception, which a process would print as a traceback, fails too."""

    def run(*args: str, cwd: Path, env: dict[str, str] | None = None) -> Run:
        with pytest.MonkeyPatch.context() as mp:
            for key in [k for k in os.environ if k.startswith("RAG_")] + ["OPENROUTER_API_KEY"]:
                mp.delenv(key, raising=False)
            for key, value in (env or {}).items():
                mp.setenv(key, value)
            mp.chdir(cwd)
            capsys.readouterr()
            with deadline(300):
                code = main(list(args))
            printed = capsys.readouterr()
        return Run(code, printed.out, printed.err)

    return run


def test_rag_build_with_a_misspelt_key_exits_2_and_names_the_key(tmp_path, write_tree, run_rag):
    content = write_tree({"posts/hello.md": "# Hello\n\nWorld.\n"})
    path = write_config(tmp_path, f"content_dir: {content}\nembeder: hashing\n")
    result = run_rag("build", cwd=path.parent)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "rag.yaml, line 2: unknown key 'embeder' (did you mean 'embedder'?)" in result.stderr


def test_rag_config_prints_the_effective_settings_with_secrets_masked(tmp_path, run_rag):
    text = (
        "embedder:\n  name: hashing\n  openai: {api_key_env: MY_KEY}\n"
        "  ollama: {host: 'http://me:hunter2@127.0.0.1:11434'}\n"
    )
    path = write_config(tmp_path, text)
    result = run_rag(
        "config",
        "--content-dir",
        str(tmp_path),
        cwd=path.parent,
        env={"MY_KEY": "sk-live-123", "RAG_OUTPUT_DIR": "out"},
    )
    assert result.returncode == 0, result.stderr
    assert "sk-live-123" not in result.stdout and "hunter2" not in result.stdout
    assert "content_dir set by --content-dir" in result.stdout and "output_dir set by $RAG_OUTPUT_DIR" in result.stdout
    shown = yaml.safe_load(result.stdout)
    assert shown["embedder"]["openai"]["api_key_env"] == "MY_KEY (set)"
    assert shown["embedder"]["ollama"]["host"] == "http://me:***@127.0.0.1:11434"
    assert shown["content_dir"] == str(tmp_path.resolve()) and shown["output_dir"] == str(
        (path.parent / "out").resolve()
    )
    assert shown["embedder"]["name"] == "hashing" and shown["chunking"]["target_words"] == 400
    assert "(not set)" in run_rag("config", cwd=path.parent).stdout


def test_rag_config_exits_2_listing_the_problems(tmp_path, run_rag):
    path = write_config(tmp_path, "embedder:\n  ollama:\n    modle: x\nchunking: {target_words: abc}\n")
    result = run_rag("config", cwd=path.parent)
    assert result.returncode == 2
    assert "line 3: unknown key 'embedder.ollama.modle' (did you mean 'model'?)" in result.stderr
    assert "chunking.target_words must be an integer" in result.stderr


def test_mask_secrets_spares_ordinary_values():
    shown = mask_secrets({"model": "sentence-transformers/all-MiniLM-L6-v2", "token": "abc", "path": "/a/b" * 20})
    assert shown == {"model": "sentence-transformers/all-MiniLM-L6-v2", "token": "***", "path": "/a/b" * 20}
    assert mask_secrets({"x": "ghp_abcdefghijklmnop"}) == {"x": "***"}


def test_yaml_aliases_in_the_configuration_are_refused_before_they_expand(tmp_path):
    """Nine nested aliases in rag.yaml grew past 10 GB while the file was validated."""
    levels = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    levels += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    path = write_config(tmp_path, "\n".join(levels) + "\ncontent_dir: content\n")
    with pytest.raises(ConfigError, match=r"rag\.yaml, line 2: YAML alias \*a0 is not allowed"):
        load_config(path, environ={})


def test_urls_printed_anywhere_hide_passwords_and_secret_query_values():
    from rag_assets.config.masking import mask_url
    from rag_assets.embed.selection import service_status

    assert (
        mask_url("http://admin:pw@127.0.0.1:11434/?token=t0k&x=1") == "http://admin:***@127.0.0.1:11434/?token=***&x=1"
    )
    assert mask_secrets({"base_url": "https://h/v1?api_key=QUERYSECRET"}) == {"base_url": "https://h/v1?api_key=***"}
    settings = EmbedderSettings(name="hashing")
    status = service_status(settings, environ={"OLLAMA_HOST": "http://admin:OLLAMAPW@127.0.0.1:9/?token=QT"})
    shown = "\n".join(status.lines())
    assert "OLLAMAPW" not in shown and "token=QT" not in shown


# --- Hostile configuration files: exit 2 with the file, the line and the problem ---------------


def _deep_nesting() -> str:
    return "weights: " + "[" * 100_000 + "]" * 100_000 + "\n"


def _comments(size: int) -> bytes:
    line = b"# " + b"x" * 77 + b"\n"
    return line * (size // len(line))


@pytest.mark.parametrize(
    "name, body, expected",
    [
        (
            "binary",
            b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe",
            "rag.yaml, line 1: not UTF-8 text (byte 0x89 at offset 0)",
        ),
        ("deep_nesting", _deep_nesting(), "rag.yaml, line 1: settings nest more than 20 levels deep"),
        ("huge_integer", "max_file_bytes: " + "9" * 5000 + "\n", "rag.yaml, line 1: a number of 5,000 characters"),
        ("huge_float", "embedder:\n  timeout: " + "9" * 400 + ".5\n", "rag.yaml, line 2: a number of 402 characters"),
        (
            "infinite_timeout",
            "embedder:\n  timeout: .inf\n",
            "rag.yaml, line 2: embedder.timeout must be a finite number",
        ),
        ("nan_weight", "weights: {docs: .nan}\n", "rag.yaml, line 1: weights.docs must be a finite number"),
        (
            "fifty_megabytes",
            b"content_dir: content\n" + b"x" * 50_000_000,
            "rag.yaml is larger than 1,048,576 bytes (1 MiB)",
        ),
        ("fifty_megabytes_of_comments", _comments(50_000_000), "rag.yaml is larger than 1,048,576 bytes (1 MiB)"),
        (
            "root_vault",
            "identity_map: null\nvaults: [{name: root, path: /, tier: private}]\n",
            "rag.yaml, line 2: vault 'root': / holds far more than notes",
        ),
        (
            "system_vault",
            "identity_map: null\nvaults:\n  - {name: etc, path: /etc, tier: private}\n",
            "rag.yaml, line 3: vault 'etc': /etc is in /etc, a system folder",
        ),
        (
            "shadow_identity_map",
            "identity_map: /etc/shadow\nvaults:\n  - {name: notes, path: notes, tier: safe}\n",
            "rag.yaml, line 1: identity_map: /etc/shadow is in /etc, a system folder",
        ),
        (
            "system_content_dir",
            "content_dir: /usr/share\n",
            "rag.yaml, line 1: content_dir: /usr/share is in /usr, a system folder",
        ),
        ("root_output_dir", "output_dir: /\n", "rag.yaml, line 1: output_dir: / holds far more than notes"),
    ],
)
def test_a_hostile_rag_yaml_exits_2_naming_the_file_and_the_problem(tmp_path, name, body, expected, run_rag):
    """Each of these was a traceback (binary, nesting, digits, /etc/shadow at build), ran away
    (50 MB: over 15 minutes and 1.2 GB) or was accepted (a vault of /, timeout: .inf)."""
    path = write_config(tmp_path, "")
    (path.parent / "notes").mkdir()
    path.write_bytes(body if isinstance(body, bytes) else body.encode())
    result = run_rag("config", cwd=path.parent)
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    assert expected in result.stderr, result.stderr[-2000:]


@pytest.mark.parametrize(
    "vaults, expected",
    [
        (
            "  - {name: all, path: notes, tier: private}\n  - {name: work, path: notes/work, tier: safe}\n",
            "rag.yaml, line 5: vault 'all': {site}/notes holds the folder of vault 'work'",
        ),
        ("  - {name: site, path: ., tier: private}\n", "vault 'site': {site} holds the content folder {site}/content"),
        (
            "  - {name: out, path: notes, tier: private}\n",
            "vault 'out': {site}/notes holds the output folder {site}/notes/out",
        ),
        ("  - {name: file, path: rag.yaml, tier: private}\n", "vault 'file': {site}/rag.yaml is not a folder"),
    ],
)
def test_a_vault_holding_another_tier_or_the_outputs_is_refused(tmp_path, vaults, expected):
    site = tmp_path / "site"
    (site / "notes/work").mkdir(parents=True)
    output = "notes/out" if "'out'" in expected else "out"
    path = write_config(tmp_path, f"content_dir: content\noutput_dir: {output}\nidentity_map: null\nvaults:\n{vaults}")
    error = config_error(tmp_path, path.read_text())
    assert expected.format(site=site.resolve()) in str(error)


@pytest.mark.parametrize(
    "make, expected",
    [
        (lambda p: p.mkdir(), "is not a regular file; the identity map is a JSON file"),
        (lambda p: p.write_text("root:*:19000:0:99999:7:::\n"), "is not valid JSON (line 1, column 1"),
        (lambda p: p.write_bytes(b"\xff\xfe{}"), "is not UTF-8 text"),
    ],
)
def test_an_identity_map_that_is_no_json_file_is_refused_before_the_build(tmp_path, make, expected):
    (tmp_path / "site/notes").mkdir(parents=True)
    make(tmp_path / "site/map.json")
    error = config_error(tmp_path, "identity_map: map.json\nvaults:\n  - {name: notes, path: notes, tier: safe}\n")
    assert "rag.yaml, line 1: identity_map: " in str(error) and expected in str(error)


def test_a_folder_inside_tmp_or_a_system_looking_name_elsewhere_is_fine(tmp_path):
    """Only the system folders themselves and what is under them are refused."""
    (tmp_path / "site/etc/notes").mkdir(parents=True)
    path = write_config(tmp_path, "identity_map: null\nvaults:\n  - {name: n, path: etc/notes, tier: private}\n")
    cfg = load_config(path, environ={})
    assert cfg.vaults[0].path == (tmp_path / "site/etc/notes").resolve()


def test_an_identity_map_with_wrong_rules_is_a_configuration_error_not_a_traceback(tmp_path, write_tree, run_rag):
    content = write_tree({"posts/hello.md": "# Hello\n\nWorld.\n", "v/note.md": "# Note\n"})
    identity_map = tmp_path / "im.json"
    identity_map.write_text('{"hosts": ["pve01"], "rules": []}')
    path = write_config(
        tmp_path,
        f"content_dir: {content}\noutput_dir: out\nidentity_map: '{identity_map}'\n"
        f"vaults:\n  - {{name: v, path: '{content / 'v'}', tier: safe}}\nembedder: hashing\n",
    )
    result = run_rag("build", cwd=path.parent)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert "unknown top-level key(s) 'hosts'" in result.stderr and "identity_map in rag.yaml" in result.stderr
