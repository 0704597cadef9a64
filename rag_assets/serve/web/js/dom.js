// Small DOM helpers. Every piece of server text goes in as a text node, never as HTML:
// notes are user content, and a note holding "<script>" must show as text. The one exception,
// a section the server rendered (rag_assets/search/rendered.py: raw HTML escaped), is still
// rebuilt here from an allow-list of tags and attributes (`renderedFragment`).

/** Create an element: h("p", {class: "x", onclick: fn}, "text", child, ...). */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") el.addEventListener(key.slice(2), value);
    else if (key === "class") el.className = value;
    else if (key === "dataset") Object.assign(el.dataset, value);
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  append(el, ...children);
  return el;
}

/** Append strings (as text) and nodes, skipping null and false. */
export function append(parent, ...children) {
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    parent.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return parent;
}

/** "Docs › Setup › Network" from a heading path; "" when there is none. A first heading that
 * repeats the page's title (a page's usual "# Title") is left out when `title` is given. */
export function headingPathText(path, title = null) {
  if (!Array.isArray(path)) return "";
  const parts = path.filter(Boolean);
  if (title && parts.length && parts[0].trim().toLowerCase() === title.trim().toLowerCase()) parts.shift();
  return parts.join(" › ");
}

/** An http(s) or same-site URL, or null: a source's url comes from content, so no javascript: links. */
export function safeUrl(url) {
  if (typeof url !== "string" || !url) return null;
  try {
    const parsed = new URL(url, document.baseURI);
    return parsed.protocol === "http:" || parsed.protocol === "https:" ? parsed.href : null;
  } catch {
    return null;
  }
}

/** A relevance in [0, 1] as "0.83" (two decimals are all the calibration means). */
export function formatRelevance(value) {
  return typeof value === "number" ? value.toFixed(2) : "–";
}

// What the server's renderer emits (markdown-it, raw HTML off); anything else is kept as its text.
const RENDERED_TAGS = new Set(["P", "H3", "H4", "H5", "H6", "UL", "OL", "LI", "PRE", "CODE", "EM", "STRONG", "DEL", "S",
  "A", "TABLE", "THEAD", "TBODY", "TR", "TH", "TD", "BLOCKQUOTE", "HR", "BR", "SPAN"]);

function copyAllowed(node) {
  if (node.nodeType === Node.TEXT_NODE) return document.createTextNode(node.textContent);
  if (node.nodeType !== Node.ELEMENT_NODE) return null;
  const children = [...node.childNodes].map(copyAllowed).filter(Boolean);
  if (!RENDERED_TAGS.has(node.tagName)) return document.createTextNode(node.textContent);
  const el = document.createElement(node.tagName.toLowerCase());
  // Only absolute http(s) links: a site path would lead to this server, not the site.
  const href = node.tagName === "A" && /^https?:/i.test(node.getAttribute("href") || "") ? safeUrl(node.getAttribute("href")) : null;
  if (href) {
    Object.assign(el, { href, target: "_blank", rel: "noopener noreferrer nofollow" });
  }
  const cls = node.getAttribute("class");
  if (cls && /^[\w -]+$/.test(cls)) el.className = cls;
  el.append(...children);
  return el;
}

/** The server's rendered HTML as nodes: parsed inert (a <template>), copied through an allow-list. */
export function renderedFragment(html) {
  const template = document.createElement("template");
  template.innerHTML = html;
  return [...template.content.childNodes].map(copyAllowed).filter(Boolean);
}
