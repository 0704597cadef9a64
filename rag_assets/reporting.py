"""Human-readable summaries for Dagster metadata, logs and the CLI."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rag_assets.records import Chunk, SkippedFile

PREVIEW_CHARS = 280


def chunk_preview_markdown(chunks: Sequence[Chunk], limit: int = 3) -> str:
    """A few chunks with their heading path, as Markdown for the Dagster UI."""
    if not chunks:
        return "_no chunks_"
    parts = []
    for chunk in chunks[:limit]:
        heading = " › ".join(chunk.heading_path) or "(before the first heading)"
        text = " ".join(chunk.text.split())
        if len(text) > PREVIEW_CHARS:
            text = text[:PREVIEW_CHARS].rsplit(" ", 1)[0] + " …"
        parts.append(f"**`{chunk.id}`** — {heading} ({chunk.word_count} words)\n\n> {text}")
    if len(chunks) > limit:
        parts.append(f"_… and {len(chunks) - limit} more chunks_")
    return "\n\n".join(parts)


def bullets_markdown(items: Sequence[str], limit: int = 50) -> str:
    """Items (chunk ids, errors) as a Markdown list for the Dagster UI, at most ``limit`` of them."""
    if not items:
        return "_none_"
    lines = [f"- `{item}`" for item in items[:limit]]
    if len(items) > limit:
        lines.append(f"- … and {len(items) - limit} more")
    return "\n".join(lines)


def skipped_markdown(skipped: Iterable[SkippedFile], limit: int = 50) -> str:
    rows = list(skipped)
    if not rows:
        return "_none_"
    lines = ["| file | reason |", "| --- | --- |"]
    for item in rows[:limit]:
        lines.append(f"| `{item.path}` | {item.reason.replace('|', '/')} |")
    if len(rows) > limit:
        lines.append(f"| … | {len(rows) - limit} more |")
    return "\n".join(lines)


def human_bytes(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"


def relative_age(seconds: float) -> str:
    if seconds < 60:
        return f"{int(seconds)} s ago"
    if seconds < 3600:
        return f"{int(seconds // 60)} min ago"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h ago"
    return f"{seconds / 86400:.1f} days ago"
