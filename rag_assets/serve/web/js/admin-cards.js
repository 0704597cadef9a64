// One card per tier: the store's figures, its collections or vaults as pills, and for the
// vault tiers the vault sources with their actions (add, remove, ingest, audit). Every
// interactive element has a stable id, so a re-render can give focus back to it.
import { h } from "./dom.js";
import { ago, bytes, plural, runProgress, shortHash } from "./admin-format.js";

function fact(label, ...value) {
  return h("div", {}, h("dt", {}, label), h("dd", {}, ...value));
}

function builtAt(card) {
  if (!card.builtAt) return "never";
  const when = new Date(card.builtAt);
  const absolute = Number.isNaN(when.getTime()) ? card.builtAt : when.toLocaleString();
  return h("time", { datetime: card.builtAt, title: absolute }, ago(card.ageSeconds) || absolute);
}

function pills(card) {
  const what = card.tier === "public" ? "Collections" : "Vaults";
  if (!card.pills?.length) return h("p", { class: "meta" }, `No ${what.toLowerCase()} yet.`);
  return h(
    "ul",
    { class: "pills", "aria-label": `${what} of the ${card.label} tier` },
    card.pills.map((p) => h("li", { class: "pill" }, p.name, " ", h("span", { class: "count" }, plural(p.chunks, "chunk")))),
  );
}

function vaultList(card, actions) {
  if (!card.vaults.length) return h("p", { class: "meta" }, "No vault in this tier.");
  return h(
    "ul",
    { class: "vault-list", "aria-label": `Vault sources of the ${card.label} tier` },
    card.vaults.map((v) =>
      h(
        "li",
        { class: "vault", dataset: { vault: v.name } },
        h("span", { class: "vault-name" }, v.name),
        h("span", { class: "vault-path", title: v.path }, v.path),
        h("span", { class: "vault-files" }, `${plural(v.markdownFiles, ".md file")} on disk`),
        h("span", { class: "meta" }, v.built ? `${plural(v.chunks, "chunk")} stored` : "not ingested yet"),
        // The Private tier also holds the Safe vaults (raw): those are removed from the Safe card.
        v.tier === card.tier
          ? h(
            "button",
            { type: "button", class: "secondary", id: `remove-${card.tier}-${v.name}`, "aria-label": `Remove vault ${v.name}`,
              onclick: () => actions.remove(card.tier, v.name) },
            "Remove",
          )
          : h("span", { class: "meta" }, `(a ${v.tier} vault)`),
      ),
    ),
  );
}

function addVaultForm(card, actions) {
  const id = (name) => `add-${name}-${card.tier}`;
  const form = h(
    "form",
    { class: "add-vault", id: id("form"), "aria-label": `Add a vault to the ${card.label} tier` },
    h("div", { class: "field" }, h("label", { for: id("name") }, "Vault name"),
      h("input", { id: id("name"), name: "name", required: true, autocomplete: "off", placeholder: "notes" })),
    h("div", { class: "field" }, h("label", { for: id("path") }, "Folder"),
      h("input", { id: id("path"), name: "path", required: true, autocomplete: "off", placeholder: "vaults/notes",
        "aria-describedby": id("hint") })),
    h("button", { type: "submit", id: id("button") }, "Add vault"),
    h("p", { class: "hint", id: id("hint") }, "Relative to rag.yaml's folder, or absolute under an allowed root."),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    actions.add(card.tier, form.elements.name.value.trim(), form.elements.path.value.trim());
  });
  return form;
}

function runLine(card, run) {
  const line = h("p", { class: "run-status", id: `run-${card.tier}`, role: "status" });
  if (run) renderRun(line, run);
  return line;
}

/** The run's state in its card: a link to it in the Dagster UI, its status and progress. */
export function renderRun(line, run) {
  const state = run.error && run.status !== "SUCCESS" ? `${run.status}: ${run.error}` : run.status;
  line.className = `run-status ${String(run.status).toLowerCase()}`;
  line.replaceChildren(
    "Ingest run ",
    h("a", { href: run.runUrl, target: "_blank", rel: "noopener noreferrer", class: "run-link" }, run.runId.slice(0, 8)),
    ": ",
    h("strong", { class: "run-state" }, state),
    runProgress(run) ? ` (${runProgress(run)})` : "",
  );
}

function auditBlock(card, audit) {
  if (!audit) return h("div", { class: "audit", id: `audit-${card.tier}` });
  const summary = audit.exists
    ? `${plural(audit.total, "finding")} in ${plural(audit.chunksScanned, "chunk")} and ${plural(audit.documentsScanned, "document")}`
    : "no store yet: ingest the tier first";
  return h(
    "div",
    { class: `audit ${audit.total ? "leaks" : "clean"}`, id: `audit-${card.tier}` },
    h("p", { class: "audit-summary" }, `Leak audit: ${summary}`),
    audit.findings?.length
      ? h("ul", { class: "findings", "aria-label": "Audit findings (masked)" },
        audit.findings.map((f) => h("li", {}, h("code", {}, f.kind), " ", f.item, ` [${f.field}]: `, h("span", { class: "preview" }, f.preview))))
      : null,
  );
}

/** The card of one tier; `state` holds its run and audit, `actions` the console's handlers. */
export function tierCard(card, state, actions) {
  const titleId = `card-${card.tier}-title`;
  const freshness = card.exists ? card.freshness : "Not built";
  const vaultTier = card.tier !== "public";
  return h(
    "article",
    { class: "panel tier-card", id: `card-${card.tier}`, "aria-labelledby": titleId },
    h("div", { class: "card-head" },
      h("h3", { id: titleId }, card.label),
      h("span", { class: `badge ${String(freshness).toLowerCase().replace(/\s+/g, "-")}` }, freshness),
      card.localOnly ? h("span", { class: "badge local", title: "Embedded, stored and answered on this machine only" }, "Local only") : null),
    h("dl", { class: "facts" },
      fact("Model", card.model || "–"),
      fact("Dimension", card.dimension ?? "–"),
      fact("Chunks", String(card.chunks ?? 0)),
      fact("Size", bytes(card.bytes)),
      fact("Built", builtAt(card)),
      fact("Content", h("code", { title: card.contentHash || "" }, shortHash(card.contentHash)))),
    pills(card),
    vaultTier ? h("h4", {}, "Vault sources") : null,
    vaultTier ? vaultList(card, actions) : null,
    vaultTier ? addVaultForm(card, actions) : null,
    h("div", { class: "confirm-slot", id: `confirm-${card.tier}` }),
    h("div", { class: "card-actions" },
      vaultTier ? h("button", { type: "button", id: `ingest-${card.tier}`, onclick: () => actions.ingest(card.tier) }, "Ingest") : null,
      card.tier === "safe"
        ? h("button", { type: "button", class: "secondary", id: `audit-button-${card.tier}`, onclick: () => actions.audit(card.tier) }, "Audit for leaks")
        : null,
      h("a", { href: card.chatLink, class: "chat-link", id: `chat-${card.tier}` }, `Chat with ${card.label}`)),
    vaultTier ? runLine(card, state.run) : null,
    card.tier === "safe" ? auditBlock(card, state.audit) : null,
  );
}

/**
 * Ask in the card before a step that cannot be taken back: resolves true (confirmed) or
 * false (cancelled, or Escape). Focus goes to the confirm button, and back where it was.
 */
export function confirmStep(slot, message, confirmLabel) {
  const returnTo = document.activeElement;
  return new Promise((resolve) => {
    const done = (answer) => {
      slot.replaceChildren();
      if (returnTo && document.contains(returnTo)) returnTo.focus();
      resolve(answer);
    };
    const confirm = h("button", { type: "button", class: "danger", onclick: () => done(true) }, confirmLabel);
    const box = h("div", { class: "confirm", role: "alertdialog", "aria-label": confirmLabel, "aria-describedby": `${slot.id}-text` },
      h("p", { id: `${slot.id}-text` }, message),
      h("div", { class: "field-row" }, confirm, h("button", { type: "button", class: "secondary", onclick: () => done(false) }, "Cancel")));
    box.addEventListener("keydown", (event) => {
      if (event.key === "Escape") done(false);
    });
    slot.replaceChildren(box);
    confirm.focus();
  });
}
