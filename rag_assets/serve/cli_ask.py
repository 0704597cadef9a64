"""``rag ask``: a question answered from a tier's sources, streamed, with the numbered sources beneath.

The steps are :mod:`rag_assets.answer.ask`'s: a ``--session`` follow-up is rewritten into a
standalone query, the tier is searched, and when no hit reaches the relevance threshold the
command says so and lists the nearest pages without calling a model. Otherwise the chat
model of ``llm:`` in rag.yaml answers from the numbered sources only, citing them as
``[n]``; the citations are checked. Exit status: 0 answered or abstained, 1 no chat model
available or the model failed (the sources are printed all the same), 2 a usage,
configuration or privacy problem (nothing was sent).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from rag_assets.config import TIERS
from rag_assets.serve.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_USAGE

if TYPE_CHECKING:  # annotations only: `rag --help` builds no config models
    from rag_assets.config import RagConfig

DESCRIPTION = (
    "Answer a question from one tier's notes. The question (a follow-up in a --session is first rewritten into a "
    "standalone search query) is searched like `rag search`; the best sections, numbered, go to the chat model of "
    "`llm:` in rag.yaml, which must answer from them alone and cite them as [n]. The answer streams to the terminal "
    "with the numbered sources beneath (page title, collection/slug, section). When no section reaches the "
    "relevance threshold, no model is asked: it says nothing in the notes answers that and lists the nearest pages. "
    "When no chat model is available it lists the sources found and says why there is no answer. The Private tier "
    "answers only with a model on this machine (Ollama or an OpenAI-compatible server on a loopback address). "
    "Every answer is logged in the tier's store (`rag log`)."
)
EPILOG = (
    "exit status: 0 answered (or nothing relevant), 1 no chat model or the model failed, 2 usage/configuration/"
    "privacy error.  examples: rag ask 'how do I restore from the offsite backup?' --tier safe;  "
    "rag ask 'and how often does it run?' --tier safe --session backups;  rag ask 'what is k3s?' --json"
)


def add_ask_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    """Register ``rag ask`` on the ``rag`` command's subparsers."""
    ask = commands.add_parser(
        "ask",
        parents=[common],
        help="answer a question from a tier's notes, with numbered citations",
        description=DESCRIPTION,
        epilog=EPILOG,
    )
    ask.add_argument("question", nargs="+", help="the question, in plain words (several words need no quotes)")
    ask.add_argument("--tier", choices=TIERS, default="public", help="which store answers (default: public)")
    ask.add_argument("--session", metavar="NAME", help="continue the conversation NAME (kept in the tier's store)")
    ask.add_argument("--collections", metavar="A,B", help="only these collections (or vaults), comma-separated")
    ask.add_argument(
        "--json", action="store_true", help="print one JSON document (answer, citations, model, usage, retrieval)"
    )
    ask.set_defaults(handler=cmd_ask)


def cmd_ask(cfg: RagConfig, args: argparse.Namespace) -> int:
    from rag_assets.answer.ask import AskRequest, collect, generate, prepare
    from rag_assets.answer.selection import chat_for_tier
    from rag_assets.answer.sessions import check_session_name
    from rag_assets.base.egress import PrivacyError
    from rag_assets.embed.errors import ProviderUnavailable
    from rag_assets.index.params import SearchError
    from rag_assets.serve.questions import TierQuestions

    question = " ".join(args.question).strip()
    try:
        if not question:
            raise ValueError("the question is empty")
        question = TierQuestions(cfg)(args.tier, question)  # sanitised on the Safe tier before anything sees it
        session = check_session_name(args.session) if args.session is not None else None
        selection = chat_for_tier(cfg.llm, args.tier, private_hosts=cfg.private_hosts)
    except (ValueError, PrivacyError) as exc:
        print(f"rag ask: {exc}", file=sys.stderr)
        return EXIT_USAGE
    collections = tuple(c.strip() for c in (args.collections or "").split(",") if c.strip())
    request = AskRequest(question=question, tier=args.tier, session=session, collections=collections)
    try:
        try:
            search, close, store_path = _tier_search(cfg, args.tier)
            try:
                prepared = prepare(request, search, selection, store_path, cfg.llm)
            finally:
                close()
        except (SearchError, ProviderUnavailable, PrivacyError) as exc:
            print(f"rag ask: {exc}", file=sys.stderr)
            return EXIT_USAGE
        events = generate(prepared)
        if args.json:
            collected = collect(prepared, events)
            print(json.dumps(collected.body, indent=2, ensure_ascii=False))
            return EXIT_OK if collected.status == 200 else EXIT_FAILED
        return _print_answer(prepared, events)
    finally:
        if selection.provider is not None:
            selection.provider.close()


def _tier_search(cfg: RagConfig, tier: str):
    """A search function over the tier's store (its query embedder made on first use), and its closer."""
    from rag_assets.search.backends import open_index
    from rag_assets.search.rerank.selection import rerank_stage
    from rag_assets.search.rerank.stage import search_reranked
    from rag_assets.search.retrieval import tier_embedder

    index = open_index(cfg, tier, documents="on_demand")  # a few searches: read only the documents they rank
    if not index.exists():
        from rag_assets.index.params import SearchError

        where = "in PostgreSQL" if cfg.store.postgres else f"at {index.path}"
        raise SearchError(f"the {tier} tier has no store yet (expected {where}); build it with `rag build`")
    index.loaded()  # with PostgreSQL, the local mirror (the answer log lives beside it) is made now
    stage = rerank_stage(cfg, tier, None)
    embedder: list[Any] = []  # the tier's query embedder, made at the first search

    def search(query, params):
        if not embedder:
            embedder.append(tier_embedder(cfg, tier, index))
        return search_reranked(index, query, embedder[0], params, stage)

    def close() -> None:
        index.close()
        if stage is not None:
            stage.reranker.close()

    return search, close, index.path


def _print_answer(prepared, events) -> int:
    out = sys.stdout
    status = EXIT_OK
    for event in events:
        if event.kind == "token":
            out.write(event.data["text"])
            out.flush()
        elif event.kind == "done":
            data = event.data
            if data["abstained"]:
                print(prepared.message)
                print("\nNearest pages:")
            else:
                print("\n\nSources:")
            _print_sources(prepared.sources, {c["n"] for c in data["citations"]})
            _print_footer(prepared, data)
        elif event.kind == "error":
            print("\nSources found:" if prepared.selection.provider is None else "\n\nSources:")
            _print_sources(prepared.sources, set())
            reason = "no answer" if event.data["status"] == 503 else "the answer failed"
            print(f"rag ask: {reason}: {event.data['error']}", file=sys.stderr)
            status = EXIT_FAILED
    return status


def _print_sources(sources, cited: set[int]) -> None:
    for s in sources:
        where = " > ".join(s.heading_path)
        mark = "*" if s.n in cited else " "
        section = f" > {where}" if where else ""
        where_from = s.cite or f"{s.collection}/{s.slug}{section}"  # a vault note: its Obsidian link
        print(f" {mark}[{s.n}] {s.title or s.slug}: {where_from}  ({s.relevance:.2f})")


def _print_footer(prepared, data: dict) -> None:
    tier = prepared.request.tier
    query = "" if prepared.rewrite.query == prepared.request.question else f"; searched for: {prepared.rewrite.query}"
    if data["abstained"]:
        print(f"(no model asked; {tier} tier{query})", file=sys.stderr)
        return
    cited = len(data["citations"])
    print(
        f"(* cited: {cited} of {len(prepared.sources)} sources; {data['model']}; {data['latencyMs']:.0f} ms; {tier} tier{query})",
        file=sys.stderr,
    )
    check = data["citationCheck"]
    if check["unknown"]:
        print(
            f"rag ask: warning: the answer cites {', '.join(f'[{n}]' for n in check['unknown'])}, which name no source",
            file=sys.stderr,
        )
    if check["uncited"]:
        print("rag ask: warning: the answer cites no source; treat it with care", file=sys.stderr)
