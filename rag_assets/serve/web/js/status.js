// The header: the tier switch and, for the chosen tier, the index model, build time and
// freshness, with the embedding and chat services' state. All from GET /status, refreshed
// every minute; searches and answers correct the services' state as they learn it.
import { csrfToken, getJSON } from "./api.js";
import { h } from "./dom.js";

const REFRESH_MS = 60_000;
const TIER_NAMES = { public: "Public", safe: "Safe", private: "Private" };

function relativeAge(seconds) {
  if (typeof seconds !== "number") return "";
  const steps = [[86400, "day"], [3600, "hour"], [60, "minute"]];
  for (const [size, unit] of steps) {
    const n = Math.floor(seconds / size);
    if (n >= 1) return `${n} ${unit}${n === 1 ? "" : "s"} ago`;
  }
  return "just now";
}

/** A service's line: a dot (ok, down, warn or unknown: never colour alone, the label says it too). */
function serviceState(el, ok, label, detail = "", warning = "") {
  const state = ok === true ? "ok" : ok === false ? "down" : ok === "warn" ? "warn" : "unknown";
  el.replaceChildren(h("span", { class: `dot ${state}`, "aria-hidden": "true" }), label,
    warning && h("span", { class: "status-warning" }, ` ⚠ ${warning}`));
  el.title = detail || "";
}

/** The warning's gist, short enough for the header; the whole sentence is the line's tooltip. */
function warningLabel(used) {
  return used.nextBuild ? `next build: ${used.nextBuild}` : "see details";
}

export class StatusHeader {
  /** `onTierChange(tier)` runs when a person picks another tier. */
  constructor({ onTierChange }) {
    this.onTierChange = onTierChange;
    this.report = null;
    this.switch = document.getElementById("tier-switch");
    this.chatLearned = {};  // per tier: what answers showed of its chat model
    this.embeddingLearned = {};  // per tier: what the last search showed of its query embedder
  }

  get tier() {
    return this.switch.querySelector("input[name=tier]:checked")?.value || "public";
  }

  attach() {
    // The tier in the address is chosen once /status says it is served (Private may not be).
    this.wanted = new URLSearchParams(location.search).get("tier");
    this.switch.addEventListener("change", () => {
      this.remember();
      this.renderTier();
      this.renderEmbedding();
      this.renderChat();
      this.onTierChange(this.tier);
    });
    setInterval(() => this.refresh(), REFRESH_MS);
    return this.refresh();
  }

  select(tier) {
    const radio = this.switch.querySelector(`input[value="${CSS.escape(tier)}"]`);
    if (radio && !radio.disabled) radio.checked = true;
  }

  /** The tier in the address, so a reload or a bookmark keeps it. */
  remember() {
    const url = new URL(location.href);
    if (this.tier === "public") url.searchParams.delete("tier");
    else url.searchParams.set("tier", this.tier);
    history.replaceState(null, "", url);
  }

  async refresh() {
    try {
      this.report = await getJSON("status");
    } catch (error) {
      document.getElementById("status-model").textContent = `status unavailable: ${error.message}`;
      return;
    }
    this.renderSwitch();
    this.renderAccess();
    this.renderTier();
    this.renderServices();
  }

  /** Private is offered only when this server serves it (bound to loopback); unbuilt tiers are disabled. */
  renderSwitch() {
    const tiers = this.report.tiers || {};
    const before = this.tier;
    for (const radio of this.switch.querySelectorAll("input[name=tier]")) {
      const entry = tiers[radio.value] || {};
      const label = radio.closest("label");
      const served = radio.value !== "private" || this.report.server?.privateTierServed === true;
      if (!served) {
        label.remove();
        continue;
      }
      label.hidden = false;
      // A tier this visitor may not read (off loopback, without a token) is locked: sign in to use it.
      const locked = entry.locked === true;
      radio.disabled = entry.exists === false || locked;
      label.title = locked ? `the ${TIER_NAMES[radio.value]} tier needs a token: sign in`
        : radio.disabled ? `the ${TIER_NAMES[radio.value]} tier has no store yet: run rag build` : "";
      label.classList.toggle("unbuilt", radio.disabled && !locked);
      label.classList.toggle("locked", locked);
    }
    if (this.wanted) {
      this.select(this.wanted);
      this.wanted = null;
    }
    if (!this.switch.querySelector("input[name=tier]:checked:not(:disabled)")) this.select("public");
    if (this.tier !== before) this.onTierChange(this.tier);
  }

  /** Who the page is signed in as, with Sign out; or which tiers are locked, with a Sign in link. */
  renderAccess() {
    const el = document.getElementById("access");
    const access = this.report.access || {};
    const shown = (access.locked || []).filter((tier) => tier !== "private" || this.report.server?.privateTierServed);
    if (access.signedIn) {
      const form = h("form", { method: "post", action: "logout", class: "sign-out" },
        h("input", { type: "hidden", name: "csrf_token", value: csrfToken() }),
        h("button", { type: "submit", class: "secondary" }, "Sign out"));
      el.replaceChildren(`Signed in as ${access.user}`, form);
    } else if (shown.length) {
      const names = shown.map((tier) => TIER_NAMES[tier]).join(" and ");
      el.replaceChildren(`${names} locked: `, h("a", { href: "login" }, "Sign in"));
    } else {
      el.replaceChildren();
    }
  }

  renderTier() {
    if (!this.report) return;
    const entry = this.report.tiers?.[this.tier] || {};
    const model = document.getElementById("status-model");
    const built = document.getElementById("status-built");
    const badge = document.getElementById("status-freshness");
    if (entry.exists === false) {
      model.textContent = `${TIER_NAMES[this.tier]} tier not built yet`;
      built.textContent = "never";
      built.removeAttribute("datetime");
      badge.textContent = "";
      badge.className = "badge";
      return;
    }
    model.textContent = entry.model || this.report.model || "unknown";
    const builtAt = entry.builtAt || this.report.builtAt;
    built.textContent = builtAt ? relativeAge(entry.ageSeconds ?? this.report.ageSeconds) || builtAt : "unknown";
    if (builtAt) built.setAttribute("datetime", builtAt);
    built.title = builtAt ? `built ${builtAt}` : "";
    const freshness = entry.damaged ? "Damaged" : entry.freshness || this.report.freshness || "";
    badge.textContent = freshness;
    badge.className = `badge ${freshness.toLowerCase()}`;
  }

  renderServices() {
    this.renderEmbedding();
    this.renderChat();
  }

  /**
   * The embedder that embeds the chosen tier's queries (/status's queryEmbedder: the one that
   * built its index), not the one a next build would pick. Anything that does not add up (the
   * configured embedder changed, the provider cannot be reached) is a warning, said in words.
   */
  renderEmbedding() {
    const el = document.getElementById("status-embedding");
    const entry = this.report?.tiers?.[this.tier] || {};
    const used = entry.queryEmbedder;
    if (!used) return serviceState(el, null, entry.exists === false ? "none (tier not built)" : "checked on the first search");
    const name = `${used.provider ? `${used.provider}: ` : ""}${used.model}`;
    const learned = this.embeddingLearned[this.tier];
    if (learned && !learned.ok) return serviceState(el, false, `${name} (unreachable)`, learned.detail);
    // A search that worked since /status said otherwise (the provider came back) wins.
    if (!used.ready && !learned?.ok) return serviceState(el, false, `${name} (unavailable)`, used.warning || used.reason);
    if (!used.ready) return serviceState(el, true, `${name} (in use)`);
    if (used.warning) return serviceState(el, "warn", `${name} (in use)`, used.warning, warningLabel(used));
    serviceState(el, true, `${name} (in use)`, used.reason);
  }

  /**
   * The chat model of the chosen tier: what /status says would answer (chatService, per tier),
   * until an answer in this tier says better. A server without chatService (an older one)
   * leaves it to the first answer.
   */
  renderChat() {
    const el = document.getElementById("status-chat");
    const learned = this.chatLearned?.[this.tier];
    if (learned) return serviceState(el, learned.ok, learned.label, learned.detail);
    const chat = this.report?.chatService?.[this.tier];
    if (!chat) return serviceState(el, null, "checked on the first question");
    if (chat.available) serviceState(el, true, `${chat.model} (ready)`, chat.reason);
    else serviceState(el, false, "none (search only)", chat.reason);
  }

  /** What a search in the current tier showed of its query embedder: it answered (ok) or not. */
  setEmbedding(ok, detail = "") {
    this.embeddingLearned = { ...this.embeddingLearned, [this.tier]: { ok, detail } };
    this.renderEmbedding();
  }

  /** What an answer in the current tier showed: the model answered (ok) or failed. */
  setChat(ok, detail = "", model = "") {
    const previous = this.chatLearned?.[this.tier]?.model || this.report?.chatService?.[this.tier]?.model || "";
    const name = model || previous;
    this.chatLearned = { ...this.chatLearned, [this.tier]: {
      ok, model: name, detail, label: `${name}${name ? " " : ""}${ok ? "(answered)" : "(failed)"}` } };
    this.renderChat();
  }
}
