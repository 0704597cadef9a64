"""``rag audit``, ``search``, ``context``, ``log``, ``serve`` and ``eval``: the commands that read
the stores."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from rag_assets.config import (
    RagConfig,
)
from rag_assets.serve.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_USAGE

# --- audit -----------------------------------------------------------------------------------


def cmd_audit(cfg: RagConfig, args: argparse.Namespace) -> int:
    from rag_assets.privacy.audit import audit_store
    from rag_assets.privacy.identity import IdentityMap
    from rag_assets.privacy.secrets import SecretDetector

    detector = SecretDetector()
    tiers = ["safe", "public"] if args.tier == "all" else [args.tier]
    identity = (
        IdentityMap.load(cfg.identity_map_path) if cfg.identity_map_path and cfg.identity_map_path.is_file() else None
    )
    # Public text is published by its owner on purpose: only secrets count there, not hostnames.
    reports = [audit_store(cfg.store_path(t), t, detector, identity if t == "safe" else None) for t in tiers]
    if args.json:
        print(json.dumps([dataclasses.asdict(r) | {"ok": r.ok} for r in reports], indent=2))
    else:
        for r in reports:
            _print_audit(r)
    return EXIT_OK if all(r.ok for r in reports) else EXIT_FAILED


def _print_audit(report) -> None:
    from rag_assets.serve.status import TIER_LABELS

    label = TIER_LABELS[report.tier]
    if not report.exists:
        print(f"{label} tier: no store at {report.store_path}; run `rag build` first.")
        return
    others = ", ".join(f"{t} ({n})" for t, n in report.rows_scanned.items() if t not in ("chunks", "documents"))
    print(
        f"{label} tier ({report.store_path}): {report.chunks_scanned} chunks and {report.documents_scanned} "
        f"documents scanned{f', and the rows of {others}' if others else ''}, {len(report.findings)} finding(s)"
    )
    for f in report.findings:
        print(f"  {f.item_id}  [{f.field}]  {f.kind}: {f.preview}")
    if report.findings:
        kinds = ", ".join(f"{k} x{n}" for k, n in report.kinds().items())
        print(f"  by kind: {kinds}")


# --- search, context, log, serve, eval -------------------------------------------------------


def _search_params(cfg: RagConfig, args: argparse.Namespace):
    from rag_assets.index.params import SearchParams, parse_filters

    overrides = {
        "k": args.k,
        "fusion": args.fusion,
        "vector_weight": args.vector_weight,
        "bm25_weight": args.bm25_weight,
        "min_score": args.min_score,
        "mmr_lambda": args.mmr,
        "max_per_document": args.per_doc,
        "link_boost": getattr(args, "link_boost", None),
    }
    chunks = bool(getattr(args, "chunks", False) or args.per_doc)
    params = SearchParams(
        mode=args.mode,
        view="chunks" if chunks else "pages",
        collections=tuple(c.strip() for c in (args.collections or "").split(",") if c.strip()),
        filters=parse_filters(args.filter),
        tags=tuple(args.tag),
        slug_prefix=args.prefix,
        **{k: v for k, v in overrides.items() if v is not None},
    )
    if params.candidates < params.k:
        params = dataclasses.replace(params, candidates=params.k)
    params.validate()
    return params


def _run_search(cfg: RagConfig, args: argparse.Namespace):
    from rag_assets.search.backends import open_index
    from rag_assets.search.rerank.selection import rerank_stage
    from rag_assets.search.rerank.stage import search_reranked
    from rag_assets.search.retrieval import tier_embedder
    from rag_assets.serve.questions import TierQuestions

    params = _search_params(cfg, args)
    query = TierQuestions(cfg)(args.tier, args.query)  # sanitised on the Safe tier before it is embedded or logged
    index = open_index(cfg, args.tier, documents="on_demand")  # one search: read only the documents it ranks
    stage = rerank_stage(cfg, args.tier, args.rerank)  # a refused reranker stops the search before it starts
    embedder = None if params.mode == "bm25" else tier_embedder(cfg, args.tier, index)
    try:
        return search_reranked(index, query, embedder, params, stage)
    finally:
        if stage is not None:
            stage.reranker.close()


def _search_errors():
    from rag_assets.embed.errors import ProviderUnavailable
    from rag_assets.index.params import SearchError
    from rag_assets.privacy.local_only import PrivacyError

    return (SearchError, ProviderUnavailable, PrivacyError)


def _search_failed(cfg: RagConfig, args: argparse.Namespace, exc: Exception) -> int:
    """Say why a search could not run. A public search of a folder of vaults only is told where
    the notes are, not to run a build that would make no public store."""
    from rag_assets.ingest.collections import holds_only_vaults, only_vaults_message

    if args.tier == "public" and not cfg.store_path("public").exists() and holds_only_vaults(cfg):
        print(f"rag: {only_vaults_message(cfg)}", file=sys.stderr)
    else:
        print(f"rag: {exc}", file=sys.stderr)
    return EXIT_USAGE


def cmd_search(cfg: RagConfig, args: argparse.Namespace) -> int:
    try:
        result = _run_search(cfg, args)
    except _search_errors() as exc:
        return _search_failed(cfg, args, exc)
    if args.json:
        print(json.dumps(result.to_json(), indent=2, ensure_ascii=False))
        return EXIT_OK
    if not result.hits:
        print(result.nothing_passed())
    for hit in result.hits:
        rerank = "" if hit.rerank_score is None else f" (rerank {hit.rerank_score:.2f})"
        print(f"{hit.collection}/{hit.slug} ::{_heading(hit)} {hit.relevance:.2f}{rerank}")
        for section in hit.sections[1:]:
            print(f"    ::{_heading(section)} {section.relevance:.2f}")
    found = len(result.hits)
    print(
        f"({found} result{'' if found == 1 else 's'} in {result.latency_ms:.1f} ms, of which {result.embed_ms:.1f} ms "
        f"embedding the query{_rerank_note(result.rerank)}; {args.tier} tier)",
        file=sys.stderr,
    )
    if result.rerank is not None and result.rerank.error:
        print(f"rag: warning: not reranked, results in fused order: {result.rerank.error}", file=sys.stderr)
    return EXIT_OK


def _rerank_note(report) -> str:
    if report is None or not report.reranked:
        return ""
    return f" and {report.ms:.1f} ms reranking {report.candidates} with {report.reranker}"


def _heading(hit) -> str:
    from rag_assets.search.passages import heading_anchor

    return "/".join(heading_anchor(h) for h in hit.heading_path)


def cmd_context(cfg: RagConfig, args: argparse.Namespace) -> int:
    from rag_assets.search.context import pack_context
    from rag_assets.search.passages import cites_notes

    if args.budget <= 0:
        print("rag: --budget must be a positive number of tokens", file=sys.stderr)
        return EXIT_USAGE
    if args.k is None:
        args.k = 20  # more candidates than fit, so the budget decides
    args.chunks = True  # packing merges chunks itself
    try:
        result = _run_search(cfg, args)
    except _search_errors() as exc:
        return _search_failed(cfg, args, exc)
    if result.rerank is not None and result.rerank.error:
        print(f"rag: warning: not reranked, passages in fused order: {result.rerank.error}", file=sys.stderr)
    if not result.hits:
        # Nothing relevant enough: an empty context, not the least bad passages.
        if args.json:
            empty = {"text": "", "citations": [], "tokens": 0, "budget": args.budget, "dropped": []}
            print(
                json.dumps(
                    {**empty, "bestRelevance": round(result.best_relevance, 4), "message": result.nothing_passed()},
                    indent=2,
                )
            )
        else:
            print(result.nothing_passed(), file=sys.stderr)
        return EXIT_OK
    packed = pack_context(result.hits, args.budget, notes=cites_notes(args.tier))
    if args.json:
        print(json.dumps(packed.to_json(), indent=2, ensure_ascii=False))
    elif packed.message:  # not even the best passage fits: say what budget would, not an empty line
        print(f"rag: {packed.message}", file=sys.stderr)
    else:
        print(packed.text)
        print(
            f"({packed.tokens} of {args.budget} tokens by {packed.tokenizer}, {len(packed.citations)} passages)",
            file=sys.stderr,
        )
    return EXIT_OK


def cmd_log(cfg: RagConfig, args: argparse.Namespace) -> int:
    from rag_assets.search.backends import open_index
    from rag_assets.search.search_log import read_log

    path = open_index(cfg, args.tier).path  # with PostgreSQL, the logs are in this machine's mirror
    if not path.is_file():
        print(f"rag: no {args.tier} store at {path}; run `rag build` first", file=sys.stderr)
        return EXIT_USAGE
    from rag_assets.index.answer_log import read_answers
    from rag_assets.index.tier_logs import log_path

    recent, weakest, total = read_log(path, args.n)
    answers, answered = read_answers(path, args.n)
    if args.json:
        print(
            json.dumps(
                {
                    "total": total,
                    "recent": recent,
                    "weakest": weakest,
                    "answers": {"total": answered, "recent": [a.to_json() for a in answers]},
                },
                indent=2,
                ensure_ascii=False,
            )
        )
        return EXIT_OK
    # The searches are in the log file beside the store, not in the store (index/tier_logs.py).
    print(f"{total} searches logged in {log_path(path)}")
    when = max((len(row["at"]) for row in recent + weakest), default=4)
    for title, rows in (
        ("Recent", recent),
        ("Weakest (lowest best relevance: what the content answers worst)", weakest),
    ):
        print(title)
        if rows:  # column headers, so the figures say what they are
            print(f"  {'When':<{when}}  {'Best relevance':>14}  {'Latency':>10}  {'Hits':>4}  Query")
        for row in rows:
            relevance = "--" if row["topRelevance"] is None else f"{row['topRelevance']:.2f}"
            print(
                f"  {row['at']:<{when}}  {relevance:>14}  {row['latencyMs']:7.1f} ms  {row['hits']:>4}  {row['query']}"
            )
    print(f"{answered} answers logged (rag ask, POST /ask)")
    _print_answers(answers)
    return EXIT_OK


def _print_answers(answers) -> None:
    """The answer log's rows under column headers."""
    if not answers:
        return
    when = max(len(a.at) for a in answers)
    model = max(len(a.model or "-") for a in answers)
    print(f"  {'When':<{when}}  {'Latency':>11}  {'Model':<{model}}  Outcome [session]  Question")
    for a in answers:
        outcome = (
            "abstained"
            if a.abstained
            else ("failed: " + a.error[:60] if a.error else "; ".join(a.citation_problems) or "cited")
        )
        session = f" [{a.session}]" if a.session else ""
        print(f"  {a.at:<{when}}  {a.latency_ms:8.1f} ms  {a.model or '-':<{model}}  {outcome}{session}  {a.question}")


def cmd_serve(cfg: RagConfig, args: argparse.Namespace) -> int:
    from rag_assets.serve.http import serve
    from rag_assets.serve.tokens import TokenError

    try:
        serve(cfg, host=args.host, port=args.port, allow_private_remote=args.allow_private_remote)
    except TokenError as exc:
        print(f"rag serve: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_OK


def cmd_eval(cfg: RagConfig, args: argparse.Namespace) -> int:
    problem = _eval_mode_problem(args)
    if problem:
        print(f"rag eval: {problem}", file=sys.stderr)
        return EXIT_USAGE
    if args.questions:
        return _eval_questions(cfg, args)
    return _eval_dataset(cfg, args)


def _eval_mode_problem(args: argparse.Namespace) -> str | None:
    """Why the flags do not pick exactly one mode of `rag eval`, or None."""
    if args.dataset and args.questions:
        return "--dataset and --questions are two different evaluations; choose one"
    if not args.dataset and not args.questions:
        return "give --dataset DIR (a BEIR benchmark) or --questions FILE (your questions over the built index)"
    if args.questions and (args.split or args.embedder):
        flag = "--split" if args.split else "--embedder"
        return f"{flag} applies to --dataset; --questions searches the built index with the model that built it"
    return None


def _eval_dataset(cfg: RagConfig, args: argparse.Namespace) -> int:
    from pathlib import Path

    from rag_assets.evaluation.report import format_table
    from rag_assets.evaluation.runner import run_evaluation

    split = args.split or "test"
    try:
        report = run_evaluation(
            cfg,
            Path(args.dataset),
            split,
            embedder_name=args.embedder,
            log=lambda m: print(m, file=sys.stderr),
            backend=args.backend,
        )
    except (FileNotFoundError, ValueError, RuntimeError) as exc:
        print(f"rag: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        print(json.dumps(report.metrics, indent=2))
        return EXIT_OK
    info = report.info
    print(
        f"{info.dataset} ({info.split}): {info.queries} queries, {info.documents} documents, {info.provider} {info.model}, "
        f"{info.backend} store"
    )
    print(format_table(report.metrics))
    print(
        f"(indexing {info.index_seconds:.1f}s{' (rebuilt)' if info.rebuilt else ', cached'}, searching {info.search_seconds:.1f}s)"
    )
    return EXIT_OK


def _eval_questions(cfg: RagConfig, args: argparse.Namespace) -> int:
    from rag_assets.evaluation.datasets import EvaluationError
    from rag_assets.evaluation.metrics import QUESTION_METRICS
    from rag_assets.evaluation.question_eval import run_question_evaluation
    from rag_assets.evaluation.report import format_table

    try:
        report = run_question_evaluation(
            cfg, args.questions, log=lambda m: print(m, file=sys.stderr), backend=args.backend
        )
    except EvaluationError as exc:
        print(f"rag: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        print(json.dumps(report.to_json(), indent=2, ensure_ascii=False))
        return EXIT_OK
    info = report.info
    print(
        f"{', '.join(info.files)}: {info.questions} questions, {info.pages} expected pages; index {info.store_path} "
        f"({info.documents} pages, {info.provider} {info.model})"
    )
    print(format_table(report.metrics, columns=QUESTION_METRICS))
    if info.unknown_pages:
        print(
            f"{len(info.unknown_pages)} expected page(s) not in the index, counted as misses (see the warnings above)"
        )
    print(f"({len(info.misses)} question(s) without an expected page in hybrid's top 10; {info.seconds:.1f}s)")
    return EXIT_OK
