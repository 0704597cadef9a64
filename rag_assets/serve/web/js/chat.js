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

  setBusy(busy) {
    this.askButton.disabled = busy;
    this.stopButton.hidden = !busy;
    this.log.setAttribute("aria-busy", String(busy));
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
    } catch (error) {
      if (error.name === "AbortError") {
        view.flush();
        view.setNote("Stopped.");
      } else {
        view.fail(error.message, error instanceof ApiError ? error.body?.sources : null);
        if (!(error instanceof ApiError) || error.status === 502 || error.status === 404) this.onChat(false, error.message);
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
      view.addToken(data.text || "");
    } else if (event === "done") {
      view.finish(data);
      if (!data.abstained) this.onChat(true, data.model);
    } else if (event === "error") {
      view.fail(data.error || "the chat service failed");
      this.onChat(false, data.error);
    }
  }
}
