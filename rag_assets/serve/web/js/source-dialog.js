// The cited (or searched) section in a modal dialog: its title, heading path, text and, when
// the source has one, a link to the page. <dialog> gives focus trapping and Escape to close.
import { append, formatRelevance, headingPathText, renderedFragment, safeUrl } from "./dom.js";
import { highlighted, markIn } from "./highlight.js";

const dialog = () => document.getElementById("source-dialog");

/**
 * Show a section. `source`: {n?, title, headingPath, text, html?, collection, slug, relevance?, url?};
 * `pattern` (optional) marks the query's words in the text.
 */
export function openSource(source, pattern = null) {
  const el = dialog();
  const opener = document.activeElement;
  const href = pageLink(source);
  const sitePath = !href && typeof source.url === "string" && source.url.startsWith("/") ? source.url : null;
  const meta = [source.n ? `Source [${source.n}]` : null, source.collection && `${source.collection}/${source.slug || ""}`,
    sitePath, typeof source.relevance === "number" ? `relevance ${formatRelevance(source.relevance)}` : null];
  el.querySelector("#source-meta").textContent = meta.filter(Boolean).join(" · ");
  el.querySelector("#source-title").textContent = source.title || source.slug || "Untitled";
  const path = headingPathText(source.headingPath);
  const pathEl = el.querySelector("#source-path");
  pathEl.textContent = path;
  pathEl.hidden = !path;
  const textEl = el.querySelector("#source-text");
  textEl.replaceChildren();
  if (source.html) {  // rendered and sanitised by the server, from a block boundary
    textEl.classList.add("rendered");
    append(textEl, ...renderedFragment(source.html));
    markIn(textEl, pattern);
  } else {  // a server without the renderer: the Markdown as text
    textEl.classList.remove("rendered");
    append(textEl, ...highlighted(source.text || "(this source carries no text)", pattern));
  }
  const link = el.querySelector("#source-link");
  link.hidden = !href;
  if (href) link.href = href;
  else link.removeAttribute("href");
  link.textContent = href?.startsWith("obsidian:") ? "Open in Obsidian" : "Open the page";
  // The "close" event comes a task after the dialog closed (and the browser put focus back):
  // by then a key may have moved the focus on, which must not be taken back. Only a focus left
  // on nothing (the opener re-rendered away, a browser that restores nothing) goes to the opener.
  el.addEventListener("close", () => {
    const active = document.activeElement;
    if (!active || active === document.body) opener?.focus?.();
  }, { once: true });
  el.showModal();
  textEl.scrollTop = 0;
  el.querySelector(".close").focus();
}

/**
 * The page's address at the cited section (its anchor), when the source has an absolute
 * http(s) url; a vault note's obsidian://open URI as it is (Obsidian opens the note). A site path ("/docs/x/") names a page of the published site, not of this
 * server, so it is shown as text instead.
 */
function pageLink(source) {
  if (typeof source.url === "string" && source.url.startsWith("obsidian://open?")) return obsidianLink(source.url);
  if (typeof source.url !== "string" || !/^https?:\/\//i.test(source.url)) return null;
  const href = safeUrl(source.url);
  if (!href || !source.anchor || href.includes("#")) return href;
  return `${href}#${encodeURIComponent(source.anchor)}`;
}

/**
 * A vault note's address in Obsidian: an obsidian://open URI the server built, whose vault and
 * file are URL-encoded; rebuilt from those two parameters alone, so nothing else rides along.
 */
function obsidianLink(url) {
  const params = new URLSearchParams(url.slice("obsidian://open?".length));
  const vault = params.get("vault"), file = params.get("file");
  if (!vault || !file) return null;
  return `obsidian://open?vault=${encodeURIComponent(vault)}&file=${encodeURIComponent(file)}`;
}

/** Close on a click on the backdrop (outside the dialog's box), as people expect. */
export function closeOnBackdropClick() {
  const el = dialog();
  el.addEventListener("click", (event) => {
    if (event.target !== el) return;
    const box = el.getBoundingClientRect();
    const inside = event.clientX >= box.left && event.clientX <= box.right && event.clientY >= box.top && event.clientY <= box.bottom;
    if (!inside) el.close();
  });
}
