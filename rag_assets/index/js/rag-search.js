// rag-search.js: the public index's hybrid search (BM25 + cosine, fused), in the browser.
//
// Published by every `rag build` in public/ beside embeddings-index.json, its sidecar
// embeddings-meta.json and embeddings-bm25.json (FTS5's own postings and the store's search
// settings). An ES module, no dependencies, no build step:
//
//   import { RagSearch } from "./rag-search.js";
//   const rag = await RagSearch.open("./");          // folder (URL) holding the published files
//   // an index built with a remote model: await RagSearch.open("./", { embedUrl: "https://api.example/embed" })
//   const { hits } = await rag.search("how do I set up vlans", { k: 10 });
//
// Ranking is the server's (rag_assets/search/retrieval.py) for the store's search profile:
// the same BM25 numbers (FTS5's formula over FTS5's postings; only the query is stemmed
// here, by a port of FTS5's porter stemmer), the same cosine, the same fusion (zscore,
// convex or rrf with the profile's weights over the union of both 200-deep candidate lists),
// the same calibrated relevance (rag_assets/search/relevance.py: the store's models, published
// in embeddings-bm25.json's `search.relevance`, collection weights on its odds), by which hits
// are ranked and under `minScore` (0.5) dropped, ties broken by the fused score and the store's
// row order. What the server does and this does not: CJK n-gram matching, and FTS5 phrases for
// a word it splits in several tokens ("k3s_cert": here its tokens count as separate words).
//
// Vectors: in the index's chunks (plain arrays, or base64 float16/int16/int8), or, with
// vector_encoding int16-bin, in embeddings-vectors.bin beside it (rag_assets/index/vector_file.py):
// one fetch into int16 steps and per-row scales, scanned as they are (rag-vectors.js, which
// this module imports: publish both). The file is checked against the sidecar (size, SHA-256
// where the page may hash, the generation in its header); a file that does not match is
// fetched again, and if it still does not, the search ranks by BM25 alone and says why in
// `vectorProblem` (never with wrong vectors).
//
// Query vectors: for an index built with the hashing embedder, a port of
// rag_assets/embed/hashing.py (BLAKE2b feature hashing) gives Python's vector; for another
// model, `embedUrl` names an endpoint (`rag serve`'s POST /embed) and, when it cannot be
// reached, the search falls back to BM25 alone.

import { StepMatrix, parseVectorFile, sha256Hex } from "./rag-vectors.js";

const HASHING_MODEL = "rag-assets/feature-hash-v1";

// ------------------------------------------------------------------ base64 and vectors

function base64Bytes(text) {
  const binary = atob(text);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

function typed(text, Type) {
  const bytes = base64Bytes(text);
  return new Type(bytes.buffer, 0, bytes.byteLength / Type.BYTES_PER_ELEMENT);
}

function halfToFloat(h) {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >> 10) & 0x1f;
  const frac = h & 0x3ff;
  if (exp === 0) return sign * frac * 2 ** -24;
  if (exp === 31) return frac ? NaN : sign * Infinity;
  return sign * (1 + frac / 1024) * 2 ** (exp - 15);
}

/** One chunk's vector into `out` (a Float32Array view), whatever the index's encoding. */
function decodeVector(chunk, encoding, out) {
  const value = chunk.embedding;
  if (encoding === "float16") {
    const halves = typed(value, Uint16Array);
    for (let i = 0; i < out.length; i++) out[i] = halfToFloat(halves[i]);
  } else if (encoding === "int8" || encoding === "int16") {
    const steps = typed(value, encoding === "int8" ? Int8Array : Int16Array);
    const scale = Math.fround(chunk.embeddingScale);
    for (let i = 0; i < out.length; i++) out[i] = steps[i] * scale;
  } else {
    for (let i = 0; i < out.length; i++) out[i] = value[i];
  }
}

// ------------------------------------------------------------------ BLAKE2b (8-byte digest)

// 64-bit words as (low, high) pairs of 32-bit halves in Uint32Arrays: BigInt arithmetic
// cost 4-5 ms a query, this well under 1 ms.
const IV32 = new Uint32Array([
  0xf3bcc908, 0x6a09e667, 0x84caa73b, 0xbb67ae85, 0xfe94f82b, 0x3c6ef372, 0x5f1d36f1, 0xa54ff53a,
  0xade682d1, 0x510e527f, 0x2b3e6c1f, 0x9b05688c, 0xfb41bd6b, 0x1f83d9ab, 0x137e2179, 0x5be0cd19,
]);
const SIGMA = [
  [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15], [14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3],
  [11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4], [7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8],
  [9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13], [2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9],
  [12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11], [13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10],
  [6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5], [10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0],
];
const V = new Uint32Array(32);
const M = new Uint32Array(32);

// v[a] += v[b] (word indexes times two: the low half's position)
function add64(a, b) {
  const lo = V[a] + V[b];
  V[a + 1] = V[a + 1] + V[b + 1] + (lo >= 0x100000000 ? 1 : 0);
  V[a] = lo;
}

// v[a] += m[x]
function add64m(a, x) {
  const lo = V[a] + M[x];
  V[a + 1] = V[a + 1] + M[x + 1] + (lo >= 0x100000000 ? 1 : 0);
  V[a] = lo;
}

function g(a, b, c, d, x, y) {
  add64(a, b); add64m(a, x);
  let lo = V[d] ^ V[a], hi = V[d + 1] ^ V[a + 1];
  V[d] = hi; V[d + 1] = lo; // rotate right 32
  add64(c, d);
  lo = V[b] ^ V[c]; hi = V[b + 1] ^ V[c + 1];
  V[b] = (lo >>> 24) ^ (hi << 8); V[b + 1] = (hi >>> 24) ^ (lo << 8); // 24
  add64(a, b); add64m(a, y);
  lo = V[d] ^ V[a]; hi = V[d + 1] ^ V[a + 1];
  V[d] = (lo >>> 16) ^ (hi << 16); V[d + 1] = (hi >>> 16) ^ (lo << 16); // 16
  add64(c, d);
  lo = V[b] ^ V[c]; hi = V[b + 1] ^ V[c + 1];
  V[b] = (hi >>> 31) ^ (lo << 1); V[b + 1] = (lo >>> 31) ^ (hi << 1); // 63
}

function compress(h, block, counter, last) {
  for (let i = 0; i < 32; i++) {
    M[i] = block[i * 4] ^ (block[i * 4 + 1] << 8) ^ (block[i * 4 + 2] << 16) ^ (block[i * 4 + 3] << 24);
  }
  V.set(h, 0);
  V.set(IV32, 16);
  V[24] ^= counter; // the byte counter's low word (inputs here are far below 4 GB)
  if (last) { V[28] = ~V[28]; V[29] = ~V[29]; }
  for (let r = 0; r < 12; r++) {
    const s = SIGMA[r % 10];
    g(0, 8, 16, 24, s[0] * 2, s[1] * 2); g(2, 10, 18, 26, s[2] * 2, s[3] * 2);
    g(4, 12, 20, 28, s[4] * 2, s[5] * 2); g(6, 14, 22, 30, s[6] * 2, s[7] * 2);
    g(0, 10, 20, 30, s[8] * 2, s[9] * 2); g(2, 12, 22, 24, s[10] * 2, s[11] * 2);
    g(4, 14, 16, 26, s[12] * 2, s[13] * 2); g(6, 8, 18, 28, s[14] * 2, s[15] * 2);
  }
  for (let i = 0; i < 16; i++) h[i] ^= V[i] ^ V[i + 16];
}

/** BLAKE2b with an 8-byte digest, as hashlib.blake2b(data, digest_size=8), read big-endian
 * (Python's int.from_bytes(digest, "big")): [bucket of `dimension`, sign +1/-1]. */
export function blake2bBucket(bytes, dimension) {
  const h = IV32.slice();
  h[0] ^= 0x01010000 ^ 8; // digest length 8, no key, fanout 1, depth 1
  let offset = 0;
  const block = new Uint8Array(128);
  while (bytes.length - offset > 128) {
    compress(h, bytes.subarray(offset, offset + 128), offset + 128, false);
    offset += 128;
  }
  block.set(bytes.subarray(offset));
  compress(h, block, bytes.length, true);
  // The digest is h[0]'s 8 bytes little-endian; read big-endian, its first byte is the top.
  const swap = (x) => (((x & 0xff) << 24) | ((x & 0xff00) << 8) | ((x >>> 8) & 0xff00) | (x >>> 24)) >>> 0;
  const high = swap(h[0]); // digest bytes 0-3: the number's top 32 bits
  const low = swap(h[1]);
  // (high * 2^32 + low) mod dimension, without losing bits (dimension < 2^21)
  const bucket = ((high % dimension) * (0x100000000 % dimension) + (low % dimension)) % dimension;
  return [bucket, high >>> 31 ? 1 : -1];
}

// ------------------------------------------------------------------ the hashing embedder

const WORD = /[\p{L}\p{N}_]+/gu; // Python's \w
const CJK = /[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]/u;
const encoder = new TextEncoder();

function words(text) {
  return text.toLowerCase().match(WORD) || [];
}

function hashingTokens(text) {
  const tokens = [];
  for (const word of words(text)) {
    const chars = [...word];
    if (CJK.test(word) && chars.length > 1) {
      for (let i = 0; i + 1 < chars.length; i++) tokens.push(chars[i] + chars[i + 1]);
    } else {
      tokens.push(word);
    }
  }
  return tokens;
}

// numpy's float32 pairwise sum (what np.linalg.norm adds the squares with), so the norm is Python's.
function pairwiseSum(a, start, n) {
  const f = Math.fround;
  if (n < 8) {
    let res = 0;
    for (let i = 0; i < n; i++) res = f(res + a[start + i]);
    return res;
  }
  if (n <= 128) {
    const r = Array.from({ length: 8 }, (_, j) => a[start + j]);
    let i = 8;
    for (; i < n - (n % 8); i += 8) for (let j = 0; j < 8; j++) r[j] = f(r[j] + a[start + i + j]);
    let res = f(f(f(r[0] + r[1]) + f(r[2] + r[3])) + f(f(r[4] + r[5]) + f(r[6] + r[7])));
    for (; i < n; i++) res = f(res + a[start + i]);
    return res;
  }
  let half = Math.floor(n / 2);
  half -= half % 8;
  return f(pairwiseSum(a, start, half) + pairwiseSum(a, start + half, n - half));
}

/** rag_assets/embed/hashing.py in JavaScript: the same vector for the same text. */
export class HashingEmbedder {
  constructor(dimension = 384, bigramWeight = 0.5) {
    this.dimension = dimension;
    this.bigramWeight = bigramWeight;
    this.buckets = new Map();
  }

  bucket(feature) {
    let found = this.buckets.get(feature);
    if (!found) {
      found = blake2bBucket(encoder.encode(feature), this.dimension);
      if (this.buckets.size < 100000) this.buckets.set(feature, found);
    }
    return found;
  }

  embed(text) {
    const f = Math.fround;
    const out = new Float32Array(this.dimension);
    const tokens = hashingTokens(text);
    const counts = new Map();
    for (const t of tokens) counts.set(t, (counts.get(t) || 0) + 1);
    const pairs = new Map();
    for (let i = 0; i + 1 < tokens.length; i++) {
      const p = `${tokens[i]} ${tokens[i + 1]}`;
      pairs.set(p, (pairs.get(p) || 0) + 1);
    }
    // float32 accumulation in first-occurrence order, as numpy adds into the float32 row
    for (const [feature, count] of counts) {
      const [b, sign] = this.bucket(feature);
      out[b] = f(out[b] + f(sign * (1 + Math.log(count))));
    }
    for (const [feature, count] of pairs) {
      const [b, sign] = this.bucket(feature);
      out[b] = f(out[b] + f(sign * this.bigramWeight * (1 + Math.log(count))));
    }
    const squares = out.map((x) => f(x * x));
    const norm = f(Math.sqrt(pairwiseSum(squares, 0, squares.length)));
    if (norm > 0) for (let i = 0; i < out.length; i++) out[i] = f(out[i] / norm);
    return out;
  }
}

// ------------------------------------------------------------------ FTS5's porter unicode61

const isVowel = (c, yIsVowel) => c === 97 || c === 101 || c === 105 || c === 111 || c === 117 || (yIsVowel && c === 121);

// Index just past the first vowel-consonant sequence of b[start..end) (0: none).
function gobbleVC(b, start, end, prevCons) {
  let cons = prevCons;
  let i = start;
  for (; i < end; i++) if (!(cons = !isVowel(b[i], cons))) break;
  for (i++; i < end; i++) if ((cons = !isVowel(b[i], cons))) return i + 1;
  return 0;
}
const mGt0 = (b, n) => gobbleVC(b, 0, n, false) !== 0;
const mGt1 = (b, n) => {
  const at = gobbleVC(b, 0, n, false);
  return at !== 0 && gobbleVC(b, at, n, true) !== 0;
};
const mEq1 = (b, n) => {
  const at = gobbleVC(b, 0, n, false);
  return at !== 0 && gobbleVC(b, at, n, true) === 0;
};
const oStar = (b, n) => {
  const last = b[n - 1];
  if (last === 119 || last === 120 || last === 121) return false;
  let mask = 0;
  let cons = false;
  for (let i = 0; i < n; i++) {
    cons = !isVowel(b[i], cons);
    mask = (mask << 1) + (cons ? 1 : 0);
  }
  return (mask & 7) === 5;
};
const hasVowel = (b, n) => {
  for (let i = 0; i < n; i++) if (isVowel(b[i], i > 0)) return true;
  return false;
};
const mGt1ST = (b, n) => (b[n - 1] === 115 || b[n - 1] === 116) && mGt1(b, n);

// Each step: by the next-to-last letter, [suffix, condition on the stem, replacement]; the
// first suffix that matches decides, whether its condition holds or not (FTS5's rules).
const STEP2 = {
  a: [["ational", mGt0, "ate"], ["tional", mGt0, "tion"]],
  c: [["enci", mGt0, "ence"], ["anci", mGt0, "ance"]],
  e: [["izer", mGt0, "ize"]],
  g: [["logi", mGt0, "log"]],
  l: [["bli", mGt0, "ble"], ["alli", mGt0, "al"], ["entli", mGt0, "ent"], ["eli", mGt0, "e"], ["ousli", mGt0, "ous"]],
  o: [["ization", mGt0, "ize"], ["ation", mGt0, "ate"], ["ator", mGt0, "ate"]],
  s: [["alism", mGt0, "al"], ["iveness", mGt0, "ive"], ["fulness", mGt0, "ful"], ["ousness", mGt0, "ous"]],
  t: [["aliti", mGt0, "al"], ["iviti", mGt0, "ive"], ["biliti", mGt0, "ble"]],
};
const STEP3 = {
  a: [["ical", mGt0, "ic"]],
  s: [["ness", mGt0, ""]],
  t: [["icate", mGt0, "ic"], ["iciti", mGt0, "ic"]],
  u: [["ful", mGt0, ""]],
  v: [["ative", mGt0, ""]],
  z: [["alize", mGt0, "al"]],
};
const STEP4 = {
  a: [["al", mGt1, ""]],
  c: [["ance", mGt1, ""], ["ence", mGt1, ""]],
  e: [["er", mGt1, ""]],
  i: [["ic", mGt1, ""]],
  l: [["able", mGt1, ""], ["ible", mGt1, ""]],
  n: [["ant", mGt1, ""], ["ement", mGt1, ""], ["ment", mGt1, ""], ["ent", mGt1, ""]],
  o: [["ion", mGt1ST, ""], ["ou", mGt1, ""]],
  s: [["ism", mGt1, ""]],
  t: [["ate", mGt1, ""], ["iti", mGt1, ""]],
  u: [["ous", mGt1, ""]],
  v: [["ive", mGt1, ""]],
  z: [["ize", mGt1, ""]],
};
const STEP1B = { e: [["eed", mGt0, "ee"], ["ed", hasVowel, "", true]], n: [["ing", hasVowel, "", true]] };
const STEP1B2 = { a: [["at", null, "ate", true]], b: [["bl", null, "ble", true]], i: [["iz", null, "ize", true]] };

const endsWith = (b, n, suffix) => {
  if (n <= suffix.length) return false;
  for (let i = 0; i < suffix.length; i++) if (b[n - suffix.length + i] !== suffix.charCodeAt(i)) return false;
  return true;
};

// Apply a step to b[0..n); returns [new length, whether a rule marked "fires" applied].
function step(b, n, rules) {
  for (const [suffix, cond, out, fires] of rules[String.fromCharCode(b[n - 2])] || []) {
    if (!endsWith(b, n, suffix)) continue;
    const stem = n - suffix.length;
    if (cond && !cond(b, stem)) return [n, false];
    for (let i = 0; i < out.length; i++) b[stem + i] = out.charCodeAt(i);
    return [stem + out.length, !!fires];
  }
  return [n, false];
}

/** FTS5's porter stemmer over one folded token (UTF-8 bytes, as FTS5 sees it). */
export function porterStem(token) {
  const bytes = encoder.encode(token);
  if (bytes.length > 64 || bytes.length < 3) return token;
  const b = Array.from(bytes);
  let n = b.length;
  let fired;
  if (b[n - 1] === 115) { // step 1a
    if (b[n - 2] === 101) n = (n > 4 && b[n - 4] === 115 && b[n - 3] === 115) || (n > 3 && b[n - 3] === 105) ? n - 2 : n - 1;
    else if (b[n - 2] !== 115) n -= 1;
  }
  [n, fired] = step(b, n, STEP1B);
  if (fired) {
    let grew;
    [n, grew] = step(b, n, STEP1B2);
    if (!grew) {
      const c = b[n - 1];
      if (!isVowel(c, false) && c !== 108 && c !== 115 && c !== 122 && c === b[n - 2]) n -= 1;
      else if (mEq1(b, n) && oStar(b, n)) b[n++] = 101;
    }
  }
  if (b[n - 1] === 121 && hasVowel(b, n - 1)) b[n - 1] = 105; // step 1c
  [n] = step(b, n, STEP2);
  [n] = step(b, n, STEP3);
  [n] = step(b, n, STEP4);
  if (b[n - 1] === 101 && (mGt1(b, n - 1) || (mEq1(b, n - 1) && !oStar(b, n - 1)))) n -= 1; // step 5a
  if (n > 1 && b[n - 1] === 108 && b[n - 2] === 108 && mGt1(b, n - 1)) n -= 1; // step 5b
  return new TextDecoder().decode(new Uint8Array(b.slice(0, n)));
}

// unicode61: letters, numbers, private-use characters and combining marks make tokens; each
// character case-folded (simple folding: "µ" is "μ", "ß" stays), Latin diacritics removed
// (remove_diacritics 1, FTS5's default) and a lone combining mark dropped.
function foldChar(ch) {
  let c = ch.toLowerCase();
  if (c === ch) {
    const upper = ch.toUpperCase();
    if ([...upper].length === 1 && [...upper.toLowerCase()].length === 1) c = upper.toLowerCase();
  }
  if ([...c].length !== 1) return c;
  if (/^\p{Mn}$/u.test(c)) return "";
  const parts = c.normalize("NFD");
  return parts.length > 1 && parts.charCodeAt(0) < 128 && /^\p{Mn}+$/u.test(parts.slice(1)) ? parts[0] : c;
}

const fold = (token) => [...token].map(foldChar).join("");

/** The FTS5 terms ("porter unicode61") of one query word. */
export function ftsTerms(word) {
  return (word.match(/[\p{L}\p{N}\p{Co}\p{Mn}]+/gu) || []).map(fold).filter(Boolean).map(porterStem);
}

/** The words rag_assets.search.query.fts_match_query searches: stop words dropped (unless
 * nothing else is left), CJK words left out, a repeat kept only in a long query. */
export function queryWords(text, settings) {
  const stop = settings.stopWordSet;
  const all = words(text).filter((w) => !CJK.test(w));
  const kept = all.filter((w) => !stop.has(w));
  const chosen = kept.length ? kept : all;
  const most = chosen.length >= settings.longQueryWords ? settings.maxRepeats : 1;
  const seen = new Map();
  return chosen.filter((w) => {
    seen.set(w, (seen.get(w) || 0) + 1);
    return seen.get(w) <= most;
  });
}

// ------------------------------------------------------------------ fusion (search/fusion.py)

function standardise(entries) {
  const n = entries.size;
  const out = new Map();
  if (!n) return out;
  let sum = 0;
  for (const s of entries.values()) sum += s;
  const mean = sum / n;
  let sq = 0;
  for (const s of entries.values()) sq += (s - mean) ** 2;
  const std = Math.sqrt(sq / n);
  for (const [row, s] of entries) out.set(row, std > 0 ? (s - mean) / std : 0);
  return out;
}

function minMax(entries) {
  const out = new Map();
  if (!entries.size) return out;
  let low = Infinity;
  let high = -Infinity;
  for (const s of entries.values()) { low = Math.min(low, s); high = Math.max(high, s); }
  const span = high - low;
  for (const [row, s] of entries) out.set(row, span > 0 ? (s - low) / span : 1);
  return out;
}

/** Row -> fused score in [0, 1]; `vector`/`lexical`: row -> [rank, score]; `cosines`: the
 * cosine of lexical candidates missing from the vector list. */
export function fuse(vector, lexical, profile, mode, cosines) {
  const out = new Map();
  if (mode === "vector") { for (const [row, [, s]] of vector) out.set(row, s); return out; }
  if (mode === "bm25") {
    let top = 0;
    for (const [, s] of lexical.values()) top = Math.max(top, s);
    top = top || 1;
    for (const [row, [, s]] of lexical) out.set(row, s / top);
    return out;
  }
  const wv = profile.vectorWeight;
  const wb = profile.bm25Weight;
  const rows = new Set([...vector.keys(), ...lexical.keys()]);
  if (profile.fusion === "rrf") {
    const k = profile.rrfK;
    const best = (wv + wb) / (k + 1);
    for (const row of rows) {
      const a = vector.has(row) ? wv / (k + vector.get(row)[0]) : 0;
      const b = lexical.has(row) ? wb / (k + lexical.get(row)[0]) : 0;
      out.set(row, (a + b) / best);
    }
    return out;
  }
  if (profile.fusion === "zscore") {
    const vs = new Map(cosines);
    for (const [row, [, s]] of vector) vs.set(row, s);
    const bs = new Map();
    for (const row of rows) bs.set(row, lexical.has(row) ? lexical.get(row)[1] : 0);
    const v = standardise(vs);
    const b = standardise(bs);
    const mixed = new Map();
    for (const row of rows) mixed.set(row, (wv * (v.get(row) || 0) + wb * b.get(row)) / (wv + wb));
    return minMax(mixed);
  }
  const v = minMax(new Map([...vector].map(([row, [, s]]) => [row, s])));
  const b = minMax(new Map([...lexical].map(([row, [, s]]) => [row, s])));
  for (const row of rows) out.set(row, (wv * (v.get(row) || 0) + wb * (b.get(row) || 0)) / (wv + wb));
  return out;
}

// ------------------------------------------------------------------ relevance (search/relevance.py)

const CEILING_K1 = 1.2; // FTS5's bm25() k1: a term's contribution approaches idf * (k1 + 1)

/** Each query term's share of the BM25 ceiling (FTS5's idf, floored at 1e-6, times k1 + 1),
 * their sum, and the share of the distinct terms no chunk holds. */
export function ceilingOf(terms, lexicalData, rows) {
  if (!terms.length || rows <= 0) return { shares: terms.map(() => 0), ceiling: 0, unknown: 0 };
  const dfOf = (t) => { const id = lexicalData.termId.get(t); return id === undefined ? 0 : lexicalData.df[id]; };
  const shares = terms.map((t) => Math.max(Math.log((rows - dfOf(t) + 0.5) / (dfOf(t) + 0.5)), 1e-6) * (CEILING_K1 + 1));
  const distinct = [...new Set(terms)];
  const unknown = distinct.filter((t) => dfOf(t) === 0).length / distinct.length;
  return { shares, ceiling: shares.reduce((a, b) => a + b, 0), unknown };
}

/** The logistic model: sigmoid(intercept + sum(coef[f] * x[f])), z clipped to [-40, 40]. */
export function predict(model, x) {
  let z = model.intercept;
  model.features.forEach((name, i) => { z += model.coef[i] * x[name]; });
  return 1 / (1 + Math.exp(-Math.min(Math.max(z, -40), 40)));
}

/** A collection's priority weight multiplies the odds of relevance (search/relevance.py weighted). */
export function weighted(p, weight) {
  if (weight === 1) return p;
  const boosted = weight * p;
  const denominator = boosted + 1 - p;
  return denominator > 0 ? boosted / denominator : 0;
}

// ------------------------------------------------------------------ segments

/** The BM25 data of a segmented index as one embeddings-bm25.json held it: the segments'
 * postings (rag_assets/index/lexical_segments.py) under one term numbering, chunk positions
 * offset by the chunks of the segments before, and FTS5's statistics summed from them: N the
 * chunks, the total tokens the sum of the lengths, a term's n(p) the sum of its segments' df,
 * and the tie order the store's rowid order. */
export function mergeLexical(header, parts, generation) {
  const termId = new Map();
  const terms = [];
  const local = parts.map((part) => part.terms.map((term) => {
    let id = termId.get(term);
    if (id === undefined) {
      id = terms.length;
      termId.set(term, id);
      terms.push(term);
    }
    return id;
  }));
  const df = new Array(terms.length).fill(0);
  parts.forEach((part, s) => part.df.forEach((n, i) => { df[local[s][i]] += n; }));
  const start = new Array(terms.length + 1).fill(0);
  for (let t = 0; t < terms.length; t++) start[t + 1] = start[t] + df[t];
  const chunks = parts.reduce((sum, part) => sum + part.chunks, 0);
  const postingChunks = new Uint32Array(start[terms.length]);
  const postingTf = new Float32Array(start[terms.length]);
  const docLength = new Uint32Array(chunks);
  const rowids = new Float64Array(chunks);
  const cursor = start.slice(0, terms.length);
  let offset = 0;
  parts.forEach((part, s) => {
    const positions = typed(part.postingChunks, Uint32Array);
    const tf = typed(part.postingTf, Float32Array);
    let at = 0;
    part.df.forEach((n, i) => {
      const term = local[s][i];
      for (let k = 0; k < n; k++, at++) {
        postingChunks[cursor[term]] = positions[at] + offset;
        postingTf[cursor[term]++] = tf[at];
      }
    });
    docLength.set(typed(part.docLength, Uint32Array), offset);
    rowids.set(typed(part.rowids, Float64Array), offset);
    offset += part.chunks;
  });
  const byRowid = Array.from({ length: chunks }, (_, i) => i).sort((a, b) => rowids[a] - rowids[b]);
  const rowOrder = new Uint32Array(chunks);
  byRowid.forEach((chunk, rank) => { rowOrder[chunk] = rank; });
  let tokens = 0;
  for (const n of docLength) tokens += n;
  return { ...header, generation, rows: chunks, tokens, chunks, terms, df, counts: df, postingChunks, postingTf, docLength, rowOrder };
}

/** The segments' vector files as one (their rows in the index's order), or {problem}. */
export function mergeVectorFiles(parts, index) {
  const failed = parts.find((part) => part.problem);
  if (failed) return { problem: failed.problem };
  const count = parts.reduce((sum, part) => sum + part.count, 0);
  const dimension = index.dimension;
  const scales = new Float32Array(count);
  const steps = new Int16Array(count * dimension);
  let row = 0;
  for (const part of parts) {
    if (part.dimension !== dimension) return { problem: `a segment's vectors have ${part.dimension} dimensions, the index ${dimension}` };
    scales.set(part.scales, row);
    steps.set(part.steps, row * dimension);
    row += part.count;
  }
  return { file: { generation: index.generation, count, dimension, scales, steps } };
}

// ------------------------------------------------------------------ the search

/** The search over one published folder. `open` loads it; `refresh` reloads what changed. */
export class RagSearch {
  constructor(base, options = {}) {
    this.base = base.endsWith("/") ? base : `${base}/`;
    this.embedUrl = options.embedUrl || null;
    // auto: the hashing port for a hashing index, else embedUrl; endpoint: always embedUrl; none: BM25 only
    this.queryEmbedding = options.queryEmbedding || "auto";
    this.fetch = options.fetch || ((url, init) => fetch(url, init));
    this.wasm = options.wasm !== false; // the vector file's dense scan in WebAssembly where it can
    this.meta = null;
  }

  static async open(base = "./", options = {}) {
    const search = new RagSearch(base, options);
    await search.refresh();
    return search;
  }

  async getJson(name, init) {
    const response = await this.fetch(new URL(name, new URL(this.base, location.href)), init);
    if (!response.ok) throw new Error(`${name}: HTTP ${response.status}`);
    return response.json();
  }

  async getBytes(name, init) {
    const response = await this.fetch(new URL(name, new URL(this.base, location.href)), init);
    if (!response.ok) throw new Error(`${name}: HTTP ${response.status}`);
    return response.arrayBuffer();
  }

  /** Read the sidecar; fetch the index, the BM25 file and the vector file again only when it
   * says they changed. Returns true when something was reloaded. A build published between the
   * fetches would pair files of two builds (each names its generation): then it starts over. */
  async refresh(attempts = 3) {
    // no-store, not no-cache: revalidating asks If-Modified-Since, and a server that dates files
    // to the second (python -m http.server, many static hosts) answers 304 for a sidecar that a
    // build rewrote within the same second, so a new build went unseen. The sidecar is small.
    const meta = await this.getJson("embeddings-meta.json", { cache: "no-store" });
    const old = this.meta;
    const lexical = meta.lexical || { file: "embeddings-bm25.json", sha256: "" };
    const indexChanged = !old || old.indexSha256 !== meta.indexSha256;
    const lexicalChanged = !old || !old.lexical || old.lexical.sha256 !== lexical.sha256;
    // A vector file left unusable (not fetched, or not matching) is fetched again: the failure
    // may have been the network's, and its URL carries the digest, so a good copy is cached.
    const vectorsChanged = !!meta.vectors && (indexChanged || !old.vectors || old.vectors.sha256 !== meta.vectors.sha256 || !!this.vectorProblem);
    if (!meta.lexical && !meta.vectors) {
      // A segmented index (format 2.0): the index names its segments, the sidecar nothing else.
      if (!indexChanged && !this.vectorProblem) return false;
      const index = await this.getJson(`embeddings-index.json?v=${meta.indexSha256}`);
      if (index.segments) {
        if (index.generation !== meta.generation) {
          if (attempts > 1) return this.refresh(attempts - 1);
          throw new Error("the published files kept changing while they were read; try again");
        }
        await this.loadSegments(index);
        this.meta = meta;
        return true;
      }
      if (!indexChanged && !lexicalChanged && !vectorsChanged) return false;
    }
    if (!indexChanged && !lexicalChanged && !vectorsChanged) return false;
    // The digest in the URL: a cache may keep a file as long as the sidecar names it.
    const [index, bm25, vectors] = await Promise.all([
      indexChanged ? this.getJson(`embeddings-index.json?v=${meta.indexSha256}`) : null,
      lexicalChanged ? this.getJson(`${lexical.file}?v=${lexical.sha256}`) : null,
      vectorsChanged ? this.readVectors(meta) : null,
    ]);
    const generation = index ? index.generation : this.generation;
    const lexicalGeneration = bm25 ? bm25.generation : this.lexical.generation;
    const torn = vectors && (vectors.problem || vectors.file.generation !== meta.generation);
    if (generation !== meta.generation || lexicalGeneration !== meta.generation || torn) {
      if (attempts > 1) return this.refresh(attempts - 1);
      if (generation !== meta.generation || lexicalGeneration !== meta.generation) {
        throw new Error("the published files kept changing while they were read; try again");
      }
    }
    if (index) this.loadIndex(index);
    if (bm25) this.loadLexical(bm25);
    if (vectors) this.loadVectors(vectors, meta);
    this.meta = meta;
    return true;
  }

  /** A segment file (content-named: a cache keeps it as long as an index names it) checked
   * against the size and SHA-256 the index records; throws when it does not match. */
  async segmentBytes(entry) {
    const buffer = await this.getBytes(entry.file);
    if (buffer.byteLength !== entry.sizeBytes) {
      throw new Error(`${entry.file} is ${buffer.byteLength} bytes but the index says ${entry.sizeBytes} (truncated or replaced)`);
    }
    if (globalThis.crypto && crypto.subtle && (await sha256Hex(buffer)) !== entry.sha256) {
      throw new Error(`${entry.file} does not match the SHA-256 the index records (damaged or of another build)`);
    }
    return buffer;
  }

  /** A segment's parsed file, from the cache of the last load when it named the same file. */
  async segmentFile(entry, parse, cache, kept) {
    let parsed = cache.get(entry.file);
    if (parsed === undefined) parsed = parse(await this.segmentBytes(entry));
    kept.set(entry.file, parsed);
    return parsed;
  }

  /** A segmented index: every segment's chunks, BM25 postings and (int16-bin) vectors, fetched
   * in parallel, joined in the index's order into what a single-file index loads as. A segment
   * whose file the last load had is not fetched again (its name changes with its content). */
  async loadSegments(index) {
    const cache = this.segmentCache || new Map();
    const kept = new Map();
    const json = (buffer) => JSON.parse(new TextDecoder().decode(buffer));
    const vectorFile = async (entry) => {
      try {
        return await this.segmentFile(entry, parseVectorFile, cache, kept);
      } catch (error) {
        return { problem: error.message };
      }
    };
    const [chunkParts, lexicalParts, vectorParts] = await Promise.all([
      Promise.all(index.segments.map((s) => this.segmentFile(s.chunks, json, cache, kept))),
      Promise.all(index.segments.map((s) => this.segmentFile(s.lexical, json, cache, kept))),
      index.vectorEncoding === "int16-bin" ? Promise.all(index.segments.map((s) => vectorFile(s.vectors))) : null,
    ]);
    this.segmentCache = kept;
    this.loadIndex({ ...index, chunks: chunkParts.flatMap((part) => part.chunks) });
    this.loadLexical(mergeLexical(index.lexical, lexicalParts, index.generation));
    if (vectorParts) this.loadVectors(mergeVectorFiles(vectorParts, index), { generation: index.generation });
  }

  /** The sidecar's vector file, checked against it: {file} or {problem} (a message). */
  async readVectors(meta) {
    const entry = meta.vectors;
    const name = entry.file.split("/").pop();
    try {
      const buffer = await this.getBytes(`${name}?v=${entry.sha256}`);
      if (buffer.byteLength !== entry.sizeBytes) {
        return { problem: `${name} is ${buffer.byteLength} bytes but the sidecar says ${entry.sizeBytes} (truncated or replaced)` };
      }
      // crypto.subtle exists in secure contexts (https, localhost); elsewhere size and generation must do.
      if (globalThis.crypto && crypto.subtle && (await sha256Hex(buffer)) !== entry.sha256) {
        return { problem: `${name} does not match the SHA-256 the sidecar records (damaged or of another build)` };
      }
      return { file: parseVectorFile(buffer) };
    } catch (error) {
      return { problem: `${name}: ${error.message}` };
    }
  }

  /** Take the vector file's views as the search's vectors, or, when it is unusable (it does not
   * match the sidecar or the index), none: BM25 alone, with the reason in `vectorProblem`. */
  loadVectors(vectors, meta) {
    let problem = vectors.problem || null;
    const file = vectors.file;
    if (!problem && file.generation !== meta.generation) problem = `the vector file belongs to generation ${file.generation}, not ${meta.generation}`;
    if (!problem && (file.count !== this.chunks.length || file.dimension !== this.dimension)) {
      problem = `the vector file holds ${file.count} x ${file.dimension}, the index ${this.chunks.length} x ${this.dimension}`;
    }
    this.vectorProblem = problem;
    if (problem) {
      console.warn(`rag-search.js: ${problem}; searching by BM25 alone`);
      this.matrix = new Int16Array(0);
      this.scales = null;
      this.stepMatrix = null;
      this.hasVector = new Uint8Array(this.chunks.length);
      return;
    }
    this.stepMatrix = new StepMatrix(file, { wasm: this.wasm });
    this.matrix = this.stepMatrix.steps;
    this.scales = this.stepMatrix.scales;
    this.hasVector = new Uint8Array(this.chunks.length).fill(1);
  }

  loadIndex(index) {
    const chunks = index.chunks;
    const dim = index.dimension;
    const encoding = index.vectorEncoding || "float";
    this.model = index.model;
    this.provider = index.provider;
    this.generation = index.generation;
    this.dimension = dim;
    this.encoding = encoding;
    this.chunks = chunks.map((c) => ({ id: c.id, text: c.text, ...c.metadata }));
    this.embedder = index.model === HASHING_MODEL ? new HashingEmbedder(dim) : null;
    // Until loadVectors has the vector file, an int16-bin index has no usable vectors.
    this.vectorProblem = encoding === "int16-bin" ? "the sidecar names no vector file" : null;
    this.scales = null; // per-row scales of the vector file's int16 steps (loadVectors)
    this.stepMatrix = null;
    this.matrix = new Float32Array(encoding === "int16-bin" ? 0 : chunks.length * dim);
    this.hasVector = new Uint8Array(chunks.length);
    if (encoding === "int16-bin") return; // the vectors come from the vector file (loadVectors)
    chunks.forEach((c, i) => {
      if (c.embedding == null) return;
      decodeVector(c, encoding, this.matrix.subarray(i * dim, (i + 1) * dim));
      this.hasVector[i] = 1;
    });
  }

  loadLexical(data) {
    const counts = data.counts;
    // base64 in embeddings-bm25.json; typed arrays already when joined from segments (mergeLexical).
    const array = (value, Type) => (typeof value === "string" ? typed(value, Type) : value);
    this.lexical = {
      ...data,
      termId: new Map(data.terms.map((t, i) => [t, i])),
      postingChunks: array(data.postingChunks, Uint32Array),
      postingTf: array(data.postingTf, Float32Array),
      docLength: array(data.docLength, Uint32Array),
      rowOrder: array(data.rowOrder, Uint32Array),
      settings: { ...data.search, stopWordSet: new Set(data.search.stopWords) },
    };
    const start = new Uint32Array(counts.length + 1);
    for (let t = 0; t < counts.length; t++) start[t + 1] = start[t] + counts[t];
    this.lexical.start = start;
  }

  /** Query vector: the hashing port, or the embed endpoint; null when there is none. */
  async queryVector(query) {
    if (this.queryEmbedding === "none") return null;
    if (this.embedder && this.queryEmbedding !== "endpoint") return this.embedder.embed(query);
    if (!this.embedUrl) return null;
    try {
      const response = await this.fetch(this.embedUrl, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ text: query, model: this.model }),
      });
      if (!response.ok) return null;
      const { vector } = await response.json();
      return vector && vector.length === this.dimension ? Float32Array.from(vector) : null;
    } catch {
      return null; // unreachable: BM25 alone
    }
  }

  /** Row -> BM25 score (> 0), FTS5's formula over FTS5's postings. */
  bm25Scores(query) {
    const lx = this.lexical;
    const times = new Map();
    for (const word of queryWords(query, lx.settings)) {
      for (const term of ftsTerms(word)) {
        const id = lx.termId.get(term);
        if (id !== undefined) times.set(id, (times.get(id) || 0) + 1);
      }
    }
    // A dense array and the rows touched: a common word has thousands of postings.
    const sums = new Float64Array(this.chunks.length);
    const touched = [];
    const avgdl = lx.rows ? lx.tokens / lx.rows : 1;
    const { k1, b, docLength, postingChunks, postingTf } = lx;
    for (const [id, n] of times) {
      const df = lx.df[id];
      let idf = Math.log((lx.rows - df + 0.5) / (df + 0.5));
      if (idf <= 0) idf = lx.minIdf;
      for (let p = lx.start[id]; p < lx.start[id + 1]; p++) {
        const row = postingChunks[p];
        const tf = postingTf[p];
        const norm = k1 * (1 - b + (b * docLength[row]) / avgdl);
        if (sums[row] === 0) touched.push(row);
        sums[row] += ((idf * tf * (k1 + 1)) / (tf + norm)) * n;
      }
    }
    return new Map(touched.map((row) => [row, sums[row]]));
  }

  /** The cosine of every row with `q` (unit vectors: the dot product). A sparse query (the
   * hashing embedder's: a few buckets a word) visits only its non-zero components, which at
   * 1536 dimensions is a fraction of the dense scan's 16 M multiply-adds per 10,000 chunks.
   * The vector file's rows are int16 steps times a per-row scale: the sum over the steps is
   * taken as it is and multiplied by the scale once a row (no decoded copy of the matrix). */
  cosines(q) {
    const dim = this.dimension;
    const m = this.matrix;
    const scales = this.scales;
    const rows = this.chunks.length;
    if (!this.scoreBuffer || this.scoreBuffer.length !== rows) this.scoreBuffer = new Float64Array(rows);
    const out = this.scoreBuffer; // reused: one allocation per index, not per query
    const nonZero = [];
    for (let i = 0; i < dim; i++) if (q[i] !== 0) nonZero.push(i);
    if (nonZero.length * 4 < dim) {
      const at = Int32Array.from(nonZero);
      const value = Float64Array.from(nonZero, (i) => q[i]);
      for (let row = 0, o = 0; row < rows; row++, o += dim) {
        let sum = 0;
        for (let j = 0; j < at.length; j++) sum += m[o + at[j]] * value[j];
        out[row] = scales ? sum * scales[row] : sum;
      }
      return out;
    }
    if (this.stepMatrix) return this.stepMatrix.denseCosines(q, out);
    for (let row = 0, o = 0; row < rows; row++, o += dim) {
      let s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      let i = 0;
      for (; i + 3 < dim; i += 4) {
        s0 += m[o + i] * q[i];
        s1 += m[o + i + 1] * q[i + 1];
        s2 += m[o + i + 2] * q[i + 2];
        s3 += m[o + i + 3] * q[i + 3];
      }
      for (; i < dim; i++) s0 += m[o + i] * q[i];
      out[row] = s0 + s1 + s2 + s3;
    }
    return out;
  }

  cosine(row, q) {
    const dim = this.dimension;
    const m = this.matrix;
    let s = 0;
    for (let i = 0, o = row * dim; i < dim; i++) s += m[o + i] * q[i];
    return this.scales ? s * this.scales[row] : s;
  }

  // The `depth` best of row -> score, as row -> [rank, score]; ties by the store's row order.
  ranked(entries, depth) {
    const order = this.lexical.rowOrder;
    const list = [...entries].sort((a, b) => b[1] - a[1] || order[a[0]] - order[b[0]]).slice(0, depth);
    return new Map(list.map(([row, s], i) => [row, [i + 1, s]]));
  }

  // The same for a dense array of scores over the rows `usable` allows: the depth-th best score
  // is found with a min-heap of `depth` scores (one pass, no sort of every row), and only the
  // rows at or above it (ties included) are ranked.
  rankedDense(scores, depth, usable) {
    const heap = new Float64Array(depth);
    let size = 0;
    for (let row = 0; row < scores.length; row++) {
      if (!usable(row)) continue;
      const s = scores[row];
      if (size < depth) {
        let i = size++;
        while (i > 0 && heap[(i - 1) >> 1] > s) { heap[i] = heap[(i - 1) >> 1]; i = (i - 1) >> 1; }
        heap[i] = s;
      } else if (s > heap[0]) {
        let i = 0;
        for (;;) {
          const l = 2 * i + 1;
          if (l >= depth) break;
          const c = l + 1 < depth && heap[l + 1] < heap[l] ? l + 1 : l;
          if (heap[c] >= s) break;
          heap[i] = heap[c];
          i = c;
        }
        heap[i] = s;
      }
    }
    if (!size) return new Map();
    const floor = heap[0];
    const entries = [];
    for (let row = 0; row < scores.length; row++) if (scores[row] >= floor && usable(row)) entries.push([row, scores[row]]);
    return this.ranked(entries, depth);
  }

  /** Row -> calibrated relevance, collection weight included, of `rows`: the features of
   * rag_assets/search/relevance.py with the store's published model for `mode`; `fused`: row ->
   * fused score (the hybrid model ranks one query's candidates by it, as the server's). */
  relevance(query, mode, rows, vector, lexical, cosines, fused) {
    const lx = this.lexical;
    const settings = lx.settings;
    const terms = mode === "vector" ? [] : queryWords(query, settings).flatMap(ftsTerms);
    const { shares, ceiling, unknown } = ceilingOf(terms, lx, this.chunks.length);
    let bestCos = 0;
    for (const [, s] of vector.values()) bestCos = Math.max(bestCos, s);
    let bestBm25 = 0;
    for (const [, s] of lexical.values()) bestBm25 = Math.max(bestBm25, s);
    const bestFrac = ceiling > 0 ? Math.min(bestBm25 / ceiling, 1) : 0;
    const model = settings.relevance.models[mode];
    const weights = settings.collectionWeights;
    const out = new Map();
    for (const row of rows) {
      const cos = vector.has(row) ? vector.get(row)[1] : cosines.has(row) ? cosines.get(row) : 0;
      const bm25 = lexical.has(row) ? lexical.get(row)[1] : 0;
      const frac = ceiling > 0 ? Math.min(Math.max(bm25 / ceiling, 0), 1) : 0;
      let title = 0;
      if (ceiling > 0) {
        const named = this.titleTerms(row);
        title = Math.min(terms.reduce((sum, t, i) => sum + (named.has(t) ? shares[i] : 0), 0) / ceiling, 1);
      }
      const x = { cos, bm25_frac: frac, cos_gap: vector.size ? cos - bestCos : 0, bm25_gap: frac - bestFrac, unknown, title, fused: fused.get(row) || 0 };
      const w = weights[this.chunks[row].collection];
      out.set(row, weighted(predict(model, x), w === undefined ? 1 : w));
    }
    return out;
  }

  /** The stems of a chunk's page title and slug words (cached per page). */
  titleTerms(row) {
    const c = this.chunks[row];
    const key = `${c.collection}/${c.slug}`;
    if (!this.titleCache) this.titleCache = new Map();
    let named = this.titleCache.get(key);
    if (!named) {
      const slug = String(c.slug || "").replace(/[/_-]/g, " ");
      named = new Set(queryWords(`${c.title || ""} ${slug}`, this.lexical.settings).flatMap(ftsTerms));
      this.titleCache.set(key, named);
    }
    return named;
  }

  /** Search; options: k (10), mode (hybrid | bm25 | vector), view (chunks | pages),
   * sections (3), collections (names), candidates (the store's), minScore (the store's,
   * 0.5: hits under it are dropped). Hits are ranked by `relevance`, as the server's. */
  async search(query, options = {}) {
    const started = performance.now();
    const lx = this.lexical;
    const settings = lx.settings;
    const k = options.k || settings.k;
    const depth = Math.max(options.candidates || settings.candidates, k);
    const allowed = options.collections ? new Set(options.collections) : null;
    // Without usable vectors (a vector file that did not match its sidecar) every chunk counts for BM25.
    const vectorless = !!this.vectorProblem;
    const usable = (row) => (vectorless || this.hasVector[row]) && (!allowed || allowed.has(this.chunks[row].collection));
    let mode = options.mode || "hybrid";
    const q = mode === "bm25" || vectorless ? null : await this.queryVector(query);
    if (!q) mode = "bm25"; // no query vector (endpoint unreachable, vectors unusable): BM25 alone
    let vector = new Map();
    if (mode !== "bm25") vector = this.rankedDense(this.cosines(q), depth, usable);
    let lexical = new Map();
    if (mode !== "vector") {
      const scores = this.bm25Scores(query);
      for (const row of scores.keys()) if (!usable(row)) scores.delete(row);
      lexical = this.ranked(scores, depth);
    }
    const cosines = new Map();
    if (mode === "hybrid") for (const row of lexical.keys()) if (!vector.has(row)) cosines.set(row, this.cosine(row, q));
    const fused = fuse(vector, lexical, settings.profile, mode, cosines);
    // One ranking, as the server's: by the weighted relevance each hit shows (ties: the fused
    // score, then the store's row order).
    const relevance = this.relevance(query, mode, [...fused.keys()], vector, lexical, cosines, fused);
    const order = lx.rowOrder;
    const ordered = [...fused.keys()].sort((a, b) => relevance.get(b) - relevance.get(a) || fused.get(b) - fused.get(a) || order[a] - order[b]);
    const hit = (row) => ({
      ...this.chunks[row],
      score: fused.get(row),
      relevance: relevance.get(row),
      vectorScore: vector.has(row) ? vector.get(row)[1] : cosines.has(row) ? cosines.get(row) : null,
      bm25Score: lexical.has(row) ? lexical.get(row)[1] : null,
    });
    const sections = options.sections || settings.sections;
    const minScore = options.minScore ?? settings.minScore;
    // The server's pool: only so many of the best chunks are grouped into pages; those under
    // min_score are dropped, so a query nothing answers gets no hits.
    const rows = ordered.slice(0, Math.max(k * sections * 2, 60)).filter((row) => relevance.get(row) >= minScore);
    let hits;
    if ((options.view || "chunks") === "pages") {
      const groups = new Map();
      for (const row of rows) {
        const c = this.chunks[row];
        const page = `${c.collection}/${c.slug}`;
        if (!groups.has(page)) { if (groups.size >= k) continue; groups.set(page, []); }
        const group = groups.get(page);
        if (group.length < sections) group.push(row);
      }
      hits = [...groups.values()].map((g) => ({ ...hit(g[0]), sections: g.map(hit) }));
    } else {
      hits = rows.slice(0, k).map(hit);
    }
    const bestRelevance = Math.max(0, ...relevance.values());
    const found = { query, mode, hits, minScore, bestRelevance, latencyMs: performance.now() - started };
    if (this.vectorProblem) found.vectorProblem = this.vectorProblem;
    return found;
  }
}
