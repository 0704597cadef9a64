// The admin console's entry point: loads the overview (cards, services) and the recent
// actions, and runs the actions the cards offer: add or remove a vault, ingest a tier
// (polling its Dagster run until it ends), audit the Safe tier for leaks.
import { getJSON, postJSON } from "./admin-api.js";
import { confirmStep, renderRun, tierCard } from "./admin-cards.js";
import { h } from "./dom.js";

const RUN_POLL_MS = 1000;
const TIERS = ["public", "safe", "private"];
const state = { overview: null, tiers: { public: {}, safe: {}, private: {} } };
const statusLine = document.getElementById("admin-status");

function say(message, kind = "") {
  statusLine.textContent = message;
  statusLine.className = `status-line ${kind}`;
}

function dot(ok) {
  return h("span", { class: `dot ${ok ? "ok" : "down"}`, "aria-hidden": "true" });
}

function renderServices(services) {
  const embedding = services.embedding;
  const el = document.getElementById("service-embedding");
  el.replaceChildren(dot(embedding.reachable), `${embedding.selected}: ${embedding.model} (${embedding.reachable ? "online" : "offline"})`);
  el.title = embedding.reason || "";
  const chat = document.getElementById("service-chat");
  chat.replaceChildren(...TIERS.map((tier) => {
    const c = services.chat[tier] || {};
    return h("span", { class: "chat-tier", title: c.reason || "" }, dot(c.available), `${tier}: ${c.model || "none"} `);
  }));
  const ollama = services.ollama;
  const models = ollama.models.length ? ollama.models.join(", ") : "no models pulled";
  document.getElementById("service-ollama").replaceChildren(
    dot(ollama.online), ollama.online ? `online (${models})` : "offline");
  document.getElementById("service-ollama").title = ollama.online ? ollama.host : `${ollama.host}: ${ollama.error || "not reachable"}`;
}

/** Re-render the cards, keeping focus and what was typed in the add-vault forms. */
function renderCards() {
  const focused = document.activeElement?.id;
  const typed = [...document.querySelectorAll(".add-vault input")].map((input) => [input.id, input.value]);
  const cards = document.getElementById("tier-cards");
  cards.replaceChildren(...TIERS.map((tier) => tierCard(state.overview.tiers[tier], state.tiers[tier], actions)));
  for (const [id, value] of typed) {
    const input = document.getElementById(id);
    if (input) input.value = value;
  }
  if (focused && document.getElementById(focused)) document.getElementById(focused).focus();
}

function renderActions(list) {
  const rows = list.map((a) => h("tr", { class: `outcome-${a.outcome}` },
    h("td", {}, h("time", { datetime: a.at, title: a.at }, new Date(a.at).toLocaleString())),
    h("td", {}, a.who), h("td", {}, a.action), h("td", {}, a.tier || ""), h("td", {}, a.target || ""),
    h("td", {}, a.outcome), h("td", { class: "detail" }, a.detail || "")));
  document.getElementById("actions").replaceChildren(
    ...(rows.length ? rows : [h("tr", {}, h("td", { colspan: "7", class: "meta" }, "No admin action yet."))]));
}

async function refresh() {
  const [overview, actionsList] = await Promise.all([getJSON("admin/api/overview"), getJSON("admin/api/actions")]);
  state.overview = overview;
  renderServices(overview.services);
  renderCards();
  renderActions(actionsList.actions);
}

/** Run an action: say what happens, report its error, refresh the page's figures after it. */
async function act(pending, work) {
  say(pending);
  try {
    const message = await work();
    await refresh();
    if (message) say(message, "ok");
  } catch (error) {
    await refresh().catch(() => {});  // the refusal is in the log now: show it with the message
    say(error.message, "error");
  }
}

async function pollRun(tier, run) {
  const line = () => document.getElementById(`run-${tier}`);
  for (;;) {
    state.tiers[tier].run = run;
    if (line()) renderRun(line(), run);
    if (run.finished) break;
    await new Promise((resolve) => setTimeout(resolve, RUN_POLL_MS));
    try {
      run = { ...run, ...(await getJSON(`admin/api/runs/${encodeURIComponent(run.runId)}`)) };
    } catch (error) {
      run = { ...run, status: "UNKNOWN", error: error.message, finished: true };
    }
  }
  await refresh();
  say(`The ${tier} ingest ended: ${run.status}`, run.status === "SUCCESS" ? "ok" : "error");
}

const actions = {
  async add(tier, name, path) {
    if (!name || !path) {
      say("Give the vault a name and a folder.", "error");
      return;
    }
    if (tier === "safe") {
      const ok = await confirmStep(
        document.getElementById(`confirm-${tier}`),
        `The notes of "${name}" will be sanitised before anything is embedded or stored: secrets are redacted and ` +
          "the values of the identity map are replaced with placeholders. Only the sanitised text reaches the Safe " +
          "tier's embedding provider.",
        "Add and sanitise",
      );
      if (!ok) return say("Not added.");
    }
    await act(`Adding vault ${name}…`, async () => {
      await postJSON("admin/api/vaults/add", { name, path, tier });
      for (const field of ["name", "path"]) document.getElementById(`add-${field}-${tier}`).value = "";
      const also = tier === "safe" ? " (and the private tier, which holds every vault)" : "";
      return `Vault ${name} added to the ${tier} tier; ingest the tier to index it${also}.`;
    });
  },

  async remove(tier, name) {
    const ok = await confirmStep(
      document.getElementById(`confirm-${tier}`),
      `Remove vault "${name}" from rag.yaml? Its notes stay on disk; the next ingest of ` +
        `${tier === "safe" ? "the Safe and Private tiers" : "the tier"} removes its rows.`,
      `Remove ${name}`,
    );
    if (!ok) return say("Not removed.");
    await act(`Removing vault ${name}…`, async () => {
      await postJSON("admin/api/vaults/remove", { name });
      // The Private store holds every vault (a Safe one raw): both hold its rows until ingested.
      const tiers = tier === "safe" ? "safe and private tiers" : "private tier";
      return `Vault ${name} removed from rag.yaml; ingest the ${tiers} to purge its rows.`;
    });
  },

  async ingest(tier) {
    try {
      const started = await postJSON("admin/api/ingest", { tier });
      say(`The ${tier} ingest started (run ${started.runId.slice(0, 8)}).`);
      await pollRun(tier, { ...started, status: "STARTING", finished: false });
    } catch (error) {
      say(error.message, "error");
    }
  },

  async audit(tier) {
    await act(`Auditing the ${tier} tier…`, async () => {
      const result = await postJSON("admin/api/audit", { tier });
      state.tiers[tier].audit = result;
      return `Leak audit of the ${tier} tier: ${result.total} finding${result.total === 1 ? "" : "s"}.`;
    });
  },
};

refresh()
  .then(() => {
    document.body.dataset.ready = "true";  // for tests and scripts: the console is loaded
  })
  .catch((error) => {
    say(error.status === 403 ? "This console needs the scope admin." : error.message, "error");
    document.body.dataset.ready = "error";
  });
