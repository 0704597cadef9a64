// The page's entry point: wires the header (status, tier switch), the search panel and the
// chat panel together, and the keyboard shortcut "/" that returns to the search box.
import { ChatPanel } from "./chat.js";
import { SearchPanel } from "./search.js";
import { closeOnBackdropClick } from "./source-dialog.js";
import { StatusHeader } from "./status.js";

const header = new StatusHeader({
  onTierChange: (tier) => {
    search.run();
    chat.switchTier(tier);
  },
});
const search = new SearchPanel({
  getTier: () => header.tier,
  onEmbedding: (ok, message) => header.setEmbedding(ok, message),
});
const chat = new ChatPanel({
  getTier: () => header.tier,
  onChat: (ok, detail) => header.setChat(ok, ok ? "" : detail, ok ? detail : ""),
});

function isTyping(target) {
  return target instanceof HTMLInputElement || target instanceof HTMLTextAreaElement || target?.isContentEditable;
}

document.addEventListener("keydown", (event) => {
  if (event.key === "/" && !isTyping(event.target) && !event.ctrlKey && !event.metaKey && !event.altKey) {
    event.preventDefault();
    search.input.focus();
    search.input.select();
  }
});

// A shared link's query (?q=) is searched once /status has said which tiers are served.
search.input.value = new URLSearchParams(location.search).get("q") || "";
search.attach();
chat.attach();
closeOnBackdropClick();
header.attach().then(() => {
  if (search.input.value.trim()) search.run();
});
document.body.dataset.ready = "true";  // for tests and scripts: the page is wired
