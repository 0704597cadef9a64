// Snippets with the query's words marked. The server matches stemmed words (FTS5's porter
// stemmer), so a word here matches any word that starts with its stem: "flashing" marks
// "flash" and "flashed". Cosmetic only: ranking is the server's.
import { h } from "./dom.js";

// English function words, as the server drops them (rag_assets/search/query.py, shortened).
const STOP_WORDS = new Set((
  "a an and are as at be but by for if in into is it no not of on or such that the their then there these " +
  "they this to was will with how what which who whom why when where do does did i me my we our you your " +
  "he him his she her its them am been being have has had would should could can about from here more most " +
  "so some than too up very were just now"
).split(" "));

const WORD = /[\p{L}\p{N}]+/gu;
const CJK = /[\p{Script=Han}\p{Script=Hiragana}\p{Script=Katakana}\p{Script=Hangul}]/u;
const SUFFIXES = ["ing", "ed", "es", "s"];

function stem(word) {
  for (const suffix of SUFFIXES) {
    if (word.length > suffix.length + 3 && word.endsWith(suffix)) return word.slice(0, -suffix.length);
  }
  return word;
}

function escapeRegExp(text) {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

/** The query's words worth marking: lower-cased, stop words out, stemmed, longest first. */
export function queryTerms(query) {
  const words = (query.toLowerCase().match(WORD) || []).filter((w) => !STOP_WORDS.has(w));
  const terms = new Set(words.map((w) => (CJK.test(w) ? w : stem(w))).filter((w) => w.length > 1 || CJK.test(w)));
  return [...terms].sort((a, b) => b.length - a.length);
}

/** A regular expression matching any term at a word start (CJK terms anywhere), or null. */
export function termPattern(terms) {
  if (!terms.length) return null;
  const parts = terms.map((t) => (CJK.test(t) ? escapeRegExp(t) : `(?<![\\p{L}\\p{N}])${escapeRegExp(t)}[\\p{L}\\p{N}]*`));
  return new RegExp(parts.join("|"), "giu");
}

/** About `length` characters of `text` around its first match, cut at spaces, with ellipses. */
export function snippet(text, pattern, length = 260) {
  // Markdown's heading marks and fences say nothing in a one-paragraph snippet.
  const flat = text.replace(/^\s{0,3}(#{1,6}|```+|~~~+)\s*/gm, "").replace(/\s+/g, " ").trim();
  if (flat.length <= length) return flat;
  let start = 0;
  if (pattern) {
    pattern.lastIndex = 0;
    const match = pattern.exec(flat);
    if (match) start = Math.max(0, match.index - Math.floor(length / 4));
  }
  let end = Math.min(flat.length, start + length);
  if (start > 0) {
    const space = flat.indexOf(" ", start);
    if (space >= 0 && space < start + 30) start = space + 1;
  }
  if (end < flat.length) {
    const space = flat.lastIndexOf(" ", end);
    if (space > start + length / 2) end = space;
  }
  return `${start > 0 ? "…" : ""}${flat.slice(start, end)}${end < flat.length ? "…" : ""}`;
}

/** `text` as nodes, each match of `pattern` in a <mark>. */
export function highlighted(text, pattern) {
  if (!pattern) return [text];
  const nodes = [];
  let last = 0;
  pattern.lastIndex = 0;
  for (const match of text.matchAll(pattern)) {
    if (match.index > last) nodes.push(text.slice(last, match.index));
    nodes.push(h("mark", {}, match[0]));
    last = match.index + match[0].length;
  }
  if (last < text.length) nodes.push(text.slice(last));
  return nodes;
}

/** Mark each match of `pattern` in the text under `root` (rendered HTML), in place; code too. */
export function markIn(root, pattern) {
  if (!pattern) return;
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  const texts = [];
  for (let node = walker.nextNode(); node; node = walker.nextNode()) texts.push(node);
  for (const node of texts) {
    pattern.lastIndex = 0;
    if (!pattern.test(node.textContent)) continue;
    node.replaceWith(...highlighted(node.textContent, pattern));
  }
}
