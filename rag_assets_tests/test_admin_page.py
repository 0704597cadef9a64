"""The admin console at /admin in a real browser (Debian's Chromium through Playwright) over a
real server and build: each action works from the page (add a vault, remove it, ingest with
the run reaching success in the Dagster instance, the leak audit showing a planted key), one
action from the keyboard alone, and the page at phone width."""

from __future__ import annotations

import sqlite3
from contextlib import closing

import dagster as dg
import pytest

from rag_assets.index.admin_actions import recent_actions
from rag_assets.serve.http import create_app

from .admin_site import PLANTED_KEY, build_admin_site, copy_site, dagster_home
from .browser import screenshot
from .live_server import ServerThread
from .shared_build import shared_build


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One build shared by the xdist workers; each test works on its own copy (copy_site)."""
    return shared_build(tmp_path_factory, "admin-page-site", build_admin_site)


@pytest.fixture
def cfg(built, tmp_path, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(dagster_home(tmp_path / "dagster")))
    return copy_site(built, tmp_path / "site")


@pytest.fixture
def server(cfg):
    with ServerThread(create_app(cfg, log_searches=False)) as running:
        yield running


def open_console(page, server) -> list[str]:
    errors: list[str] = []  # uncaught exceptions, and anything the page's own policy blocked
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if "Content Security Policy" in msg.text else None)
    page.set_default_timeout(15_000)
    page.goto(server.url + "/admin")
    page.wait_for_selector("body[data-ready=true]")
    return errors


def card(page, tier: str):
    return page.locator(f"#card-{tier}")


def test_the_cards_show_each_tier(server, page):
    errors = open_console(page, server)
    assert [h.inner_text() for h in page.locator(".tier-card h3").all()] == ["Public", "Safe", "Private"]
    public, safe, private = card(page, "public"), card(page, "safe"), card(page, "private")
    assert "rag-assets/feature-hash-v1" in public.inner_text() and "384" in public.inner_text()
    assert public.locator(".badge").first.inner_text() == "Fresh"
    built = safe.locator("time")
    assert (
        built.inner_text() == "just now"
        and built.get_attribute("title")
        and built.get_attribute("datetime").endswith("Z")
    )
    assert [p.inner_text() for p in public.locator(".pill").all()] == ["docs 1 chunk", "posts 1 chunk"]
    assert len(safe.locator(".facts code").inner_text()) == 12  # the short content hash, the full one in its title
    assert len(safe.locator(".facts code").get_attribute("title")) == 64
    assert safe.locator(".vault[data-vault=lab] .vault-files").inner_text() == "2 .md files on disk"
    assert private.get_by_text("Local only").is_visible() and not safe.get_by_text("Local only").count()
    assert "online" in page.locator("#service-embedding").inner_text()
    # Chat links open the page with the tier chosen.
    safe.get_by_role("link", name="Chat with Safe").click()
    page.wait_for_url("**/?tier=safe")
    page.wait_for_function("() => document.querySelector('input[name=tier][value=safe]').checked")
    assert errors == []


def test_adding_a_safe_vault_asks_first_then_removing_it(server, cfg, page):
    errors = open_console(page, server)
    sent: list[dict] = []
    page.on("request", lambda r: sent.append(r.headers) if r.method == "POST" else None)
    page.context.add_cookies([{"name": "rag_csrf", "value": "token-123", "url": server.url}])
    safe = card(page, "safe")
    safe.get_by_label("Vault name").fill("new")
    safe.get_by_label("Folder").fill("vaults/new")
    safe.get_by_role("button", name="Add vault").click()
    warning = safe.get_by_role("alertdialog")
    assert "sanitised" in warning.inner_text() and "identity map" in warning.inner_text()
    assert "name: new" not in cfg.config_path.read_text(encoding="utf-8")  # nothing before the confirmation
    warning.get_by_role("button", name="Add and sanitise").click()
    page.wait_for_selector("#card-safe .vault[data-vault=new]")
    assert safe.locator(".vault[data-vault=new] .vault-files").inner_text() == "3 .md files on disk"
    assert "  - {name: new, path: vaults/new, tier: safe}\n" in cfg.config_path.read_text(encoding="utf-8")
    assert (
        "added to the safe tier; ingest the tier to index it (and the private tier"
        in page.locator("#admin-status").inner_text()
    )
    # Every POST declares JSON and carries the login cookie's CSRF token.
    assert sent and all(h["content-type"] == "application/json" and h["x-csrf-token"] == "token-123" for h in sent)

    safe.get_by_role("button", name="Remove vault new").click()
    safe.get_by_role("alertdialog").get_by_role("button", name="Remove new").click()
    page.wait_for_selector("#card-safe .vault[data-vault=new]", state="detached")
    assert "name: new" not in cfg.config_path.read_text(encoding="utf-8")
    # The Private store holds the Safe vaults too: both tiers must be ingested to purge it.
    page.wait_for_function("() => document.getElementById('admin-status').textContent.includes('removed')")
    assert "ingest the safe and private tiers" in page.locator("#admin-status").inner_text()
    rows = page.locator("#actions tr")
    assert rows.nth(0).inner_text().split("\t")[1:5] == ["loopback", "remove_vault", "safe", "new"]
    assert rows.nth(1).inner_text().split("\t")[1:5] == ["loopback", "add_vault", "safe", "new"]
    assert errors == []


def test_a_refusal_is_shown_and_changes_nothing(server, cfg, page):
    open_console(page, server)
    before = cfg.config_path.read_bytes()
    private = card(page, "private")
    private.get_by_label("Vault name").fill("../up")
    private.get_by_label("Folder").fill("vaults/new")
    private.get_by_role("button", name="Add vault").click()  # Private: no sanitising, no confirmation
    page.wait_for_function("() => document.getElementById('admin-status').classList.contains('error')")
    assert "may not contain" in page.locator("#admin-status").inner_text()
    assert cfg.config_path.read_bytes() == before
    assert private.get_by_label("Vault name").input_value() == "../up"  # kept, to correct
    assert page.locator("#actions tr").first.inner_text().split("\t")[2:6] == [
        "add_vault",
        "private",
        "../up",
        "refused",
    ]


def test_ingest_runs_in_the_instance_and_the_card_follows_it(server, cfg, page):
    open_console(page, server)
    card(page, "private").get_by_role("button", name="Ingest").click()
    page.wait_for_function(
        "() => document.querySelector('#run-private .run-state')?.textContent === 'SUCCESS'", timeout=120_000
    )
    link = page.locator("#run-private a.run-link")
    run_id = link.get_attribute("href").rsplit("/", 1)[1]
    assert link.get_attribute("href") == f"http://127.0.0.1:3000/runs/{run_id}"
    assert "steps done" in page.locator("#run-private").inner_text()
    with dg.DagsterInstance.get() as instance:
        run = instance.get_run_by_id(run_id)
        assert run.job_name == "update_private_vaults" and run.status == dg.DagsterRunStatus.SUCCESS
    assert [(a.action, a.detail) for a in recent_actions(cfg.public_store_path)][0] == ("ingest", run_id)


def test_the_audit_shows_a_planted_key_masked(server, cfg, page):
    with closing(sqlite3.connect(cfg.safe_store_path)) as conn, conn:
        conn.execute(
            "UPDATE chunks SET text = text || ? WHERE rowid = (SELECT MIN(rowid) FROM chunks)", (f" key {PLANTED_KEY}",)
        )
    open_console(page, server)
    card(page, "safe").get_by_role("button", name="Audit for leaks").click()
    page.wait_for_selector("#audit-safe .findings li")
    audit = page.locator("#audit-safe")
    assert "1 finding in" in audit.inner_text() and "aws_access_key_id" in audit.inner_text()
    assert "AK…" in audit.inner_text() and PLANTED_KEY not in page.content()


def test_a_vault_is_removed_with_the_keyboard_alone(server, cfg, page):
    open_console(page, server)
    target = "remove-private-me"
    for _ in range(60):  # Tab through the page to the button, as a keyboard user does
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.id") == target:
            break
    assert page.evaluate("document.activeElement.id") == target
    page.keyboard.press("Enter")
    # The confirmation takes the focus; Escape would cancel, Enter confirms.
    assert page.evaluate("document.activeElement.textContent") == "Remove me"
    page.keyboard.press("Escape")
    assert page.evaluate("document.activeElement.id") == target and "name: me" in cfg.config_path.read_text(
        encoding="utf-8"
    )
    page.keyboard.press("Enter")
    page.keyboard.press("Enter")
    page.wait_for_selector("#card-private .vault[data-vault=me]", state="detached")
    assert "name: me" not in cfg.config_path.read_text(encoding="utf-8")


def test_the_console_fits_a_phone_screen(server, chromium):
    context = chromium.new_context(
        viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True, device_scale_factor=2
    )
    try:
        page = context.new_page()
        open_console(page, server)
        page.locator("#card-safe").get_by_role("button", name="Audit for leaks").tap()
        page.wait_for_selector("#audit-safe .audit-summary")
        width = page.evaluate("[document.documentElement.scrollWidth, document.documentElement.clientWidth]")
        assert width[0] <= width[1] == 390, width
        for tier in ("public", "safe", "private"):
            box = page.locator(f"#card-{tier}").bounding_box()
            assert box["x"] >= 0 and box["x"] + box["width"] <= 390, (tier, box)
        screenshot(page, "admin-phone")
    finally:
        context.close()
