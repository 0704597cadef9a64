// One answer as it streams in: text appended token by token, each "[n]" turned into a button
// that opens source n. Rendering only appends (nothing already shown is redrawn), so the
// chat log's live region announces the new words once, and a focused citation stays focused.
import { formatRelevance, h, headingPathText } from "./dom.js";
import { openSource } from "./source-dialog.js";

// "[2]", "[1, 3]", "[1; 3]": one or more source numbers in brackets.
const CITATION = /\[(\d{1,3}(?:\s*[,;]\s*\d{1,3})*)\]/g;
// An unfinished "[1, " at the end of the text so far: held back until its "]" arrives.
const OPEN_CITATION = /\[[\d,;\s]{0,16}$/;

export class AnswerView {
  constructor(question) {
    this.finished = false;  // a done or error event came (else the stream was cut)
    this.sources = new Map();
    this.pending = "";
    this.text = "";
    this.answer = h("div", { class: "answer-text" });
    this.note = h("p", { class: "answer-note" });
    this.sourceList = h("ol", { class: "sources" });
    this.sourceBlock = h("div", { class: "sources-block", hidden: true },
      this.sourcesHeading = h("h3", {}, "Sources"), this.sourceList);
    this.element = h("article", { class: "turn", "aria-label": `Answer to: ${question}` },
      h("p", { class: "question" }, h("span", { class: "who" }, "You: "), question),
      this.answer, this.note, this.sourceBlock);
  }

  setNote(text, kind = "") {
    this.note.textContent = text;
    this.note.className = `answer-note ${kind}`.trim();
  }

  /** The `sources` event: numbered sources, or an abstention with the nearest pages. */
  showSources(data) {
    const sources = data.sources || [];
    for (const source of sources) this.sources.set(Number(source.n), source);
    if (data.abstained) {
      this.element.classList.add("abstained");
      this.setNote(data.message || "Nothing in these notes answers that.", "abstained");
      this.sourcesHeading.textContent = "Nearest pages";
    }
    this.sourceList.replaceChildren(...sources.map((s) => h("li", {},
      h("button", { type: "button", class: "source-button", onclick: () => openSource(s) },
        h("span", { class: "n" }, `[${s.n}]`), " ", s.title || s.slug,
        headingPathText(s.headingPath, s.title) && h("span", { class: "heading-path" }, ` — ${headingPathText(s.headingPath, s.title)}`)),
      h("span", { class: "meta" }, ` ${s.collection} · relevance ${formatRelevance(s.relevance)}`))));
    this.sourceBlock.hidden = sources.length === 0;
  }

  /** A `token` event: append its text, citations as buttons once their "]" has arrived. */
  addToken(text) {
    this.pending += text;
    const open = OPEN_CITATION.exec(this.pending);
    const ready = open ? this.pending.slice(0, open.index) : this.pending;
    this.pending = open ? this.pending.slice(open.index) : "";
    this.render(ready);
  }

  /** Everything held back is shown (the stream ended); `answer` stands in when no token came. */
  flush(answer = "") {
    if (!this.text && !this.pending && answer) this.pending = answer;
    this.render(this.pending);
    this.pending = "";
  }

  render(text) {
    if (!text) return;
    this.text += text;
    let last = 0;
    for (const match of text.matchAll(CITATION)) {
      if (match.index > last) this.answer.append(text.slice(last, match.index));
      this.answer.append(this.citation(match[1]));
      last = match.index + match[0].length;
    }
    if (last < text.length) this.answer.append(text.slice(last));
  }

  citation(numbers) {
    const group = h("span", { class: "citation" }, "[");
    numbers.split(/\s*[,;]\s*/).forEach((raw, i) => {
      if (i) group.append(", ");
      const n = Number(raw);
      const source = this.sources.get(n);
      group.append(source
        ? h("button", { type: "button", class: "cite", dataset: { n }, "aria-label": `source ${n}: ${source.title || source.slug}`,
          title: `${source.title || source.slug}${source.headingPath?.length ? ` — ${headingPathText(source.headingPath)}` : ""}`,
          onclick: () => openSource(source) }, String(n))
        : h("span", { class: "cite unknown", title: "no source has this number" }, String(n)));
    });
    group.append("]");
    return group;
  }

  /** The `done` event: citation problems, model and timing under the answer. */
  finish(done) {
    this.finished = true;
    if (done.abstained) {  // its "answer" is the abstention, already said by the note
      this.element.classList.add("abstained");
      if (!this.note.classList.contains("abstained")) this.setNote(done.message || done.answer || "Nothing in these notes answers that.", "abstained");
      return;
    }
    this.flush(done.answer || "");
    const problems = [];
    const unknown = done.citationCheck?.unknown || [];
    if (unknown.length) problems.push(`cites ${unknown.map((n) => `[${n}]`).join(", ")}, which no source has`);
    if (done.citationCheck?.uncited) problems.push("cites no source: check it against the sources below");
    const facts = [done.model && `Answered by ${done.model}`,
      typeof done.latencyMs === "number" && `in ${(done.latencyMs / 1000).toFixed(1)} s`].filter(Boolean).join(" ");
    if (problems.length) this.setNote(`This answer ${problems.join("; ")}. ${facts}`.trim(), "warning");
    else this.setNote(facts);
  }

  fail(message, sources = null) {
    this.finished = true;
    this.flush();
    if (sources?.length && !this.sources.size) this.showSources({ sources });
    this.element.classList.add("failed");
    this.setNote(`No answer: ${message}`, "error");
  }
}
