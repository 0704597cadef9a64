"""The store's full-text index ``fts_chunks``: one FTS5 row per chunk, in four fields.

Columns, in this order (the order of the weights ``bm25(fts_chunks, ...)`` takes):

- ``text``: the chunk's text;
- ``title``: its document's title, then its aliases (``documents.aliases``, a vault note's
  ``aliases`` property): Obsidian finds a note by an alias as by its title, so BM25 does;
- ``headings``: its heading path (``chunks.heading_path``), the headings joined by spaces;
- ``tags``: its document's tags (``documents.tags``), joined by spaces.

So a match in a title, a heading or a tag can weigh more than one in the body
(:mod:`rag_assets.index.fields` holds the weights). FTS5 keeps one length per row (all
columns together), so a row's BM25 length normalisation covers its four fields.

**External content.** The table indexes the view ``chunk_fields`` (``chunk_rowid`` and the
four fields: ``chunks`` left-joined with ``documents``) and stores no copy of the text.
Triggers keep the index equal to the view: a chunk inserted, deleted or updated is indexed
(or its entry removed) with the title and tags its document has then; a document whose
title or tags change, or that is inserted or deleted while chunks point at it, has its
chunks' entries removed with the values they were indexed with and indexed again. (With
foreign keys on, as :func:`rag_assets.index.store.connect` sets them, only the first
two happen; the others keep the index right for a writer without foreign keys.) A
document's ID never changes (the foreign key of ``chunks`` refuses it).

**Migration.** A store made before the fields (schema version < 3: ``fts_chunks`` over
``chunks.text`` alone) has its FTS table and triggers dropped and rebuilt from the view,
in one transaction (:func:`migrate`): a ``rag build`` or the first search does it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

TABLE = "fts_chunks"
CONTENT = "chunk_fields"
FIELDS = ("text", "title", "headings", "tags")
TOKENIZE = "porter unicode61"


def _joined(json_sql: str) -> str:
    """SQL for the elements of a JSON array (``json_sql``) joined by spaces; NULL when it is
    not a JSON array or is empty. The same expression at indexing and at deletion time, so
    an entry is always removed with the tokens it was indexed with.

    A recursive CTE over ``json_extract``, not ``json_each``: FTS5 prepares the statements
    that read its content with ``SQLITE_PREPARE_NO_VTAB``, so a content view that uses a
    table-valued function (a virtual table) fails FTS5's ``rebuild`` and every read of a
    column value ("SQL logic error")."""
    x = json_sql
    return (
        f"(WITH RECURSIVE i(n) AS (SELECT 0 WHERE json_valid({x}) AND json_type({x}) = 'array'"
        f" UNION ALL SELECT n + 1 FROM i WHERE n + 1 < json_array_length({x}))"
        f" SELECT group_concat(json_extract({x}, '$[' || n || ']'), ' ') FROM i)"
    )


_COLUMNS = ", ".join(FIELDS)
_INDEX_ROWS = f"INSERT INTO {TABLE}(rowid, {_COLUMNS}) SELECT chunk_rowid, {_COLUMNS} FROM {CONTENT}"
_DELETE = f"INSERT INTO {TABLE}({TABLE}, rowid, {_COLUMNS})"


def _title(row: str) -> str:
    """SQL for the ``title`` field of document row ``row`` (``d``, ``old``): its title followed
    by its aliases; exactly the title when it has none (every site page)."""
    aliases = _joined(f"{row}.aliases")
    return f"coalesce({row}.title || ' ' || {aliases}, {row}.title, {aliases})"


def _reindex_document(title: str, tags: str, doc_id: str) -> str:
    """Remove the entries of the chunks of document ``doc_id`` indexed with ``title`` and
    ``tags`` (SQL expressions), then index them again from the view."""
    return (
        f"{_DELETE} SELECT 'delete', c.rowid, c.text, {title}, {_joined('c.heading_path')}, {_joined(tags)}"
        f" FROM chunks c WHERE c.document_id = {doc_id};\n"
        f"    {_INDEX_ROWS} WHERE chunk_rowid IN (SELECT rowid FROM chunks WHERE document_id = {doc_id});"
    )


_DELETE_CHUNK = (
    f"{_DELETE} SELECT 'delete', old.rowid, old.text, {_title('d')}, {_joined('old.heading_path')}, {_joined('d.tags')}"
    " FROM (SELECT 1) LEFT JOIN documents d ON d.id = old.document_id;"
)

# Created after ``chunks`` and ``documents`` (rag_assets.index.store.SCHEMA).
SCHEMA = f"""
CREATE VIEW IF NOT EXISTS {CONTENT} AS
    SELECT c.rowid AS chunk_rowid, c.text AS text, {_title("d")} AS title,
           {_joined("c.heading_path")} AS headings, {_joined("d.tags")} AS tags
    FROM chunks c LEFT JOIN documents d ON d.id = c.document_id;
CREATE VIRTUAL TABLE IF NOT EXISTS {TABLE} USING fts5(
    {_COLUMNS}, content='{CONTENT}', content_rowid='chunk_rowid', tokenize='{TOKENIZE}'
);
CREATE TRIGGER IF NOT EXISTS chunks_ai AFTER INSERT ON chunks BEGIN
    {_INDEX_ROWS} WHERE chunk_rowid = new.rowid;
END;
CREATE TRIGGER IF NOT EXISTS chunks_ad AFTER DELETE ON chunks BEGIN
    {_DELETE_CHUNK}
END;
CREATE TRIGGER IF NOT EXISTS chunks_au AFTER UPDATE ON chunks BEGIN
    {_DELETE_CHUNK}
    {_INDEX_ROWS} WHERE chunk_rowid = new.rowid;
END;
CREATE TRIGGER IF NOT EXISTS documents_au_fts AFTER UPDATE OF title, tags, aliases ON documents
WHEN old.title IS NOT new.title OR old.tags IS NOT new.tags OR old.aliases IS NOT new.aliases BEGIN
    {_reindex_document(_title("old"), "old.tags", "old.id")}
END;
CREATE TRIGGER IF NOT EXISTS documents_ai_fts AFTER INSERT ON documents BEGIN
    {_reindex_document("NULL", "NULL", "new.id")}
END;
CREATE TRIGGER IF NOT EXISTS documents_ad_fts AFTER DELETE ON documents BEGIN
    {_reindex_document(_title("old"), "old.tags", "old.id")}
END;
"""

_TRIGGERS = ("chunks_ai", "chunks_ad", "chunks_au", "documents_au_fts", "documents_ai_fts", "documents_ad_fts")


def has_fields(conn: sqlite3.Connection) -> bool:
    """True when ``fts_chunks`` exists with the four fields (False: absent or older)."""
    columns = [row[1] for row in conn.execute(f"PRAGMA table_info({TABLE})")]
    return columns == list(FIELDS)


def refresh_view(conn: sqlite3.Connection) -> None:
    """Replace the view and triggers of a store made before aliases joined the title field
    (schema version 3 or 4) by today's. Its FTS entries stay right: no document had aliases
    then, and the title field of a document without aliases is its title as before."""
    drops = "".join(f"DROP TRIGGER IF EXISTS {name};\n" for name in _TRIGGERS)
    conn.executescript(f"{drops}DROP VIEW IF EXISTS {CONTENT};\n{SCHEMA}")


def migrate(conn: sqlite3.Connection) -> bool:
    """Give a store made before the fields its fielded ``fts_chunks``, rebuilt from the view
    in one transaction; False (nothing done) when the table already has them or does not
    exist yet (:data:`SCHEMA` creates it)."""
    exists = conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (TABLE,)).fetchone() is not None
    if not exists or has_fields(conn):
        return False
    drops = "".join(f"DROP TRIGGER IF EXISTS {name};\n" for name in _TRIGGERS)
    try:
        conn.executescript(
            f"BEGIN IMMEDIATE;\n{drops}DROP TABLE IF EXISTS {TABLE};\nDROP VIEW IF EXISTS {CONTENT};\n{SCHEMA}\n"
            f"INSERT INTO {TABLE}({TABLE}) VALUES ('rebuild');\nCOMMIT;"
        )
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return True


@contextmanager
def chunks_indexed_at_end(conn: sqlite3.Connection) -> Iterator[None]:
    """Inside a write transaction: the chunks inserted within are indexed by one statement
    when the block ends, not row by row by the ``chunks_ai`` trigger (which costs more than
    the indexing itself: a full build spent half its store time there).

    The block must only insert chunks (a delete could free the highest rowid, and an insert
    reuse it). The trigger is dropped and made again within the caller's transaction, so a
    failure, whose rollback undoes both, never leaves a store without it; and the rows
    indexed are counted against the rows inserted, so that none can be missed.
    """
    if not conn.in_transaction:
        raise RuntimeError("chunks_indexed_at_end needs an open write transaction")
    found = conn.execute("SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = 'chunks_ai'").fetchone()
    if found is None:  # a store without the trigger: nothing to stand in for
        yield
        return
    highest, count = conn.execute("SELECT coalesce(max(rowid), 0), count(*) FROM chunks").fetchone()
    conn.execute("DROP TRIGGER chunks_ai")
    yield
    # New rows take rowids above the highest (SQLite's rule without AUTOINCREMENT).
    indexed = conn.execute(f"{_INDEX_ROWS} WHERE chunk_rowid > ?", (highest,)).rowcount
    inserted = conn.execute("SELECT count(*) FROM chunks").fetchone()[0] - count
    if indexed != inserted:
        raise RuntimeError(f"indexed {indexed} new chunks of {inserted} inserted; the write is rolled back")
    conn.execute(found[0])
