// The chat panel: a question goes to POST /ask, whose server-sent events (sources, token...,
// done | error) fill one AnswerView. Follow-ups share a session, so the server can rewrite
// "and on the second node?" into a standalone search.
import { ApiError, ask } from "./api.js";
import { AnswerView } from "./answer-view.js";
import { h } from "./dom.js";

function newSession() {
  const bytes = crypto.getRandomValues(new Uint8Array(6));
  return `web-${[...bytes].map((b) => b.toString(16).padStart(2, "0")).join("")}`;
}

export class ChatPanel {
  /** `getTier()`: the tier to ask; `onChat(ok, message)`: what answers learn of the chat service. */
  constructor({ getTier, onChat }) {
    this.getTier = getTier;
    this.onChat = onChat;
    this.form = document.getElementById("ask-form");
    this.input = document.getElementById("ask-input");
    this.log = document.getElementById("chat-log");
    this.askButton = document.getElementById("ask-button");
    this.stopButton = document.getElementById("stop-button");
    this.status = document.getElementById("chat-status");
    this.session = newSession();
    this.controller = null;
  }

  attach() {
    this.form.addEventListener("submit", (event) => {
      event.preventDefault();
      this.ask();
    });
    this.input.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        this.form.requestSubmit();
      }
    });
    this.stopButton.addEventListener("click", () => this.controller?.abort());
    document.getElementById("new-chat").addEventListener("click", () => this.reset());
  }

  /** A new conversation: the log cleared, a new session, and the question box focused. */
  reset() {
    this.controller?.abort();
    this.log.replaceChildren();
    this.session = newSession();
    this.input.focus();
  }

  /** Another tier: a new session (its sources came from the old tier), the old answers kept above a line. */
  switchTier(tier) {
    this.controller?.abort();
    this.session = newSession();
    if (this.log.childElementCount) this.log.append(h("p", { class: "divider" }, `New conversation in the ${tier} tier`));
  }

  /** What a screen reader hears besides the answer itself: that one is coming, and that it ended. */
  announce(event, data, view) {
    if (event === "sources" && !data.abstained) this.status.textContent = "Answering…";
    else if (event === "done") {
      const count = view.sources.size;
      this.status.textContent = data.abstained ? "No answer: nothing in these notes answers that."
        : `Answer complete, ${count} source${count === 1 ? "" : "s"}.`;
    } else if (event === "error") this.status.textContent = "The answer failed.";
  }

  setBusy(busy) {
    this.askButton.disabled = busy;
    this.stopButton.hidden = !busy;
  }

  async ask() {
    const question = this.input.value.trim();
    if (!question || this.controller) return;
    const view = new AnswerView(question);
    this.log.append(view.element);
    view.setNote("Searching the notes…");
    this.input.value = "";
    const controller = new AbortController();
    this.controller = controller;
    this.setBusy(true);
    try {
      await ask({ question, tier: this.getTier(), session: this.session }, (event, data) => this.onEvent(view, event, data), controller.signal);
      if (!view.finished) view.fail("the answer stopped before it was complete (the connection closed)");
    } catch (error) {
      if (error.name === "AbortError") {
        view.flush();
        view.setNote("Stopped.");
      } else {
        // A JSON 502/503 carries the sources found: under "retrieval" (POST /ask), or at the top.
        const body = error instanceof ApiError ? error.body : {};
        view.fail(error.message, body?.retrieval?.sources || body?.sources);
        if (!(error instanceof ApiError) || [404, 502, 503].includes(error.status)) this.onChat(false, error.message);
      }
    } finally {
      this.controller = null;
      this.setBusy(false);
    }
    view.element.scrollIntoView({ block: "nearest" });
  }

  onEvent(view, event, data) {
    if (event === "sources") {
      view.showSources(data);
      if (!data.abstained) view.setNote("Answering…");
    } else if (event === "token") {
      if (view.note.textContent === "Answering…") view.setNote("");
      const atBottom = this.log.scrollHeight - this.log.scrollTop - this.log.clientHeight < 40;
      view.addToken(data.text || "");
      if (atBottom) this.log.scrollTop = this.log.scrollHeight;  // follow the answer unless the reader scrolled up
    } else if (event === "done") {
      view.finish(data);
      if (!data.abstained) this.onChat(true, data.model);
    } else if (event === "error") {
      view.fail(data.error || "the chat service failed");
      if (data.status === 502 || data.status === 503) this.onChat(false, data.error);
    }
    this.announce(event, data, view);
  }
}
