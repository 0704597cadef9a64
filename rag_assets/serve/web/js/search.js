// The search box and its results: one result per page, its best section's snippet with the
// query's words marked, the heading path, collection and relevance. Searches run as you
// type (debounced); a newer search cancels an older one still in flight.
import { getJSON } from "./api.js";
import { formatRelevance, h, headingPathText } from "./dom.js";
import { highlighted, queryTerms, snippet, termPattern } from "./highlight.js";
import { openSource } from "./source-dialog.js";

const DEBOUNCE_MS = 250;
const RESULTS = 10;

/** The query in the address (?q=), so a reload or a shared link shows the same results. */
function rememberQuery(query) {
  const url = new URL(location.href);
  if (query) url.searchParams.set("q", query);
  else url.searchParams.delete("q");
  history.replaceState(null, "", url);
}

/**
 * Why there are no results, in the page's words: the API's `message` names its parameters and
 * the CLI's flags, which a person on this page cannot use.
 */
function nothingReached(body) {
  if (typeof body.minScore !== "number" || typeof body.bestRelevance !== "number") return "No results.";
  return `Nothing in the ${body.tier} tier reaches the relevance threshold (${formatRelevance(body.minScore)}); `
    + `the closest page scored ${formatRelevance(body.bestRelevance)}. Try other words, or another tier.`;
}

/**
 * Each further section's chip label: its own heading, the page's title for the text before the
 * first heading, and "(continued)" for a second part of a heading already shown.
 */
function sectionLabels(hit, best, others) {
  const heading = (section) => section.headingPath?.filter(Boolean).at(-1) || hit.title || hit.slug;
  const seen = new Set([heading(best)]);
  return others.map((section) => {
    const label = heading(section);
    const shown = seen.has(label) ? `${label} (continued)` : label;
    seen.add(label);
    return [section, shown];
  });
}

export class SearchPanel {
  /** `getTier()`: the tier to search; `onEmbedding(ok, message)`: what searches learn of the embedder. */
  constructor({ getTier, onEmbedding }) {
    this.getTier = getTier;
    this.onEmbedding = onEmbedding;
    this.form = document.getElementById("search-form");
    this.input = document.getElementById("search-input");
    this.status = document.getElementById("search-status");
    this.list = document.getElementById("results");
    this.timer = null;
    this.inFlight = null;
  }

  attach() {
    this.input.addEventListener("input", () => this.schedule());
    this.form.addEventListener("submit", (event) => {
      event.preventDefault();
      this.run();
    });
    this.input.addEventListener("keydown", (event) => {
      if (event.key === "ArrowDown" && this.list.firstElementChild) {
        event.preventDefault();
        this.focusResult(0);
      }
    });
    this.list.addEventListener("keydown", (event) => this.moveFocus(event));
  }

  schedule() {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.run(), DEBOUNCE_MS);
  }

  /** Search for the box's text in the current tier (again: after a tier switch). */
  async run() {
    clearTimeout(this.timer);
    const query = this.input.value.trim();
    this.inFlight?.abort();
    rememberQuery(query);
    if (!query) {
      this.list.replaceChildren();
      this.status.textContent = "";
      return;
    }
    const controller = new AbortController();
    this.inFlight = controller;
    const tier = this.getTier();
    this.list.setAttribute("aria-busy", "true");
    try {
      const body = await this.fetchResults(query, tier, controller.signal);
      if (controller.signal.aborted) return;
      this.render(query, body);
    } catch (error) {
      if (error.name === "AbortError") return;
      this.list.replaceChildren();
      this.status.textContent = `Search failed: ${error.message}`;
    } finally {
      if (this.inFlight === controller) {
        this.inFlight = null;
        this.list.removeAttribute("aria-busy");
      }
    }
  }

  /** /search; when the embedding service is down (503), keyword search (BM25) instead, said so. */
  async fetchResults(query, tier, signal) {
    const params = { q: query, tier, k: RESULTS };
    try {
      const body = await getJSON("search", params, signal);
      this.onEmbedding(true);
      return body;
    } catch (error) {
      if (error.status !== 503) throw error;
      this.onEmbedding(false, error.message);
      const body = await getJSON("search", { ...params, mode: "bm25" }, signal);
      return { ...body, fallback: "The embedding service is unreachable: these are keyword (BM25) results." };
    }
  }

  render(query, body) {
    const pattern = termPattern(queryTerms(query));
    const hits = body.hits || [];
    // A search that lands while the reader is arrowing through the results must not drop their
    // focus to the page: the title at the same place gets it back.
    const focused = this.list.contains(document.activeElement) ? document.activeElement.closest(".result-title button") : null;
    this.list.replaceChildren(...hits.map((hit, i) => this.result(hit, i, pattern)));
    if (focused && hits.length) this.focusResult(Number(focused.dataset.index));
    const count = hits.length ? `${hits.length} result${hits.length === 1 ? "" : "s"} in the ${body.tier} tier` : "";
    const parts = [body.fallback, count || nothingReached(body)];
    if (typeof body.latencyMs === "number") parts.push(`(${Math.round(body.latencyMs)} ms)`);
    this.status.textContent = parts.filter(Boolean).join(" ");
  }

  result(hit, index, pattern) {
    const open = (section) => openSource({ ...hit, ...section }, pattern);
    const [best, ...others] = hit.sections?.length ? hit.sections : [hit];
    const path = headingPathText(best.headingPath, hit.title);
    return h("li", { class: "result" },
      h("h3", { class: "result-title" },
        h("button", { type: "button", class: "link-button", dataset: { index }, onclick: () => open(best) }, hit.title || hit.slug)),
      path && h("p", { class: "heading-path" }, path),
      h("p", { class: "snippet" }, ...highlighted(snippet(best.plain ?? best.text ?? "", pattern), pattern)),
      h("p", { class: "meta" },
        h("span", { class: "collection" }, hit.collection), " · ",
        h("span", { class: "relevance", title: "calibrated relevance: 0.5 is the line between answers and not" },
          "relevance ", h("strong", {}, formatRelevance(hit.relevance)))),
      others.length > 0 && h("p", { class: "more-sections" }, "Also: ",
        ...sectionLabels(hit, best, others).map(([section, label]) => h("button",
          { type: "button", class: "chip", onclick: () => open(section) }, label))),
    );
  }

  focusResult(index) {
    const buttons = this.list.querySelectorAll(".result-title button");
    if (index < 0) this.input.focus();
    else buttons[Math.min(index, buttons.length - 1)]?.focus();
  }

  /** ↓/↑ move between results' titles; ↑ from the first goes back to the box. */
  moveFocus(event) {
    if (event.key !== "ArrowDown" && event.key !== "ArrowUp") return;
    const current = event.target.closest(".result-title button");
    if (!current) return;
    event.preventDefault();
    this.focusResult(Number(current.dataset.index) + (event.key === "ArrowDown" ? 1 : -1));
  }
}
