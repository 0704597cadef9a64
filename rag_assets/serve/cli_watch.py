"""``rag watch``: keep the change journal, so that builds, sensor ticks and ``rag check`` walk
only the collections something happened in (:mod:`rag_assets.ingest.journal_writer`)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import TYPE_CHECKING

from rag_assets.serve.exit_codes import EXIT_FAILED, EXIT_OK

if TYPE_CHECKING:  # annotations only: `rag --help` builds no config models
    from rag_assets.config import RagConfig


def add_watch_command(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    watch = commands.add_parser(
        "watch",
        parents=[common],
        help="follow the content folder's file events so that builds walk only what changed (Linux)",
        description=(
            "Runs until stopped (Ctrl-C, SIGTERM). It watches every folder under the content folder with "
            "inotify and writes the name of each collection something happens in to <output>/data/watch/journal. "
            "While it runs, `rag build`, `rag check`, the change sensor and the check after a publish walk only "
            "the collections named since they last looked, and take the others as they were: at a million "
            "chunks the walk of 711,111 files is most of an edit's change detection. Without it, or when it "
            "lost events (the kernel's queue overflowed), everything is walked, as before. One per output "
            "folder; Obsidian vaults are always walked. Each watched folder takes one of the kernel's "
            "fs.inotify.max_user_watches."
        ),
        epilog="example: rag watch --config rag.yaml &  rag build --config rag.yaml",
    )
    watch.set_defaults(handler=cmd_watch)


def cmd_watch(cfg: RagConfig, args: argparse.Namespace) -> int:
    if not sys.platform.startswith("linux"):
        print("rag watch: follows inotify events, which only Linux has; builds walk the content here.", file=sys.stderr)
        return EXIT_FAILED
    from rag_assets.ingest.change_journal import JournalFiles
    from rag_assets.ingest.journal_writer import JournalWriter, WatchEnded, WatcherRunning, WatchLimitReached

    if not cfg.content_dir.is_dir():
        print(f"rag watch: no content folder at {cfg.content_dir}; create it or fix content_dir.", file=sys.stderr)
        return EXIT_FAILED
    writer = JournalWriter(cfg.content_dir, JournalFiles(cfg.watch_dir))

    def stop(_signum: int, _frame: object) -> None:
        writer.stop()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)

    def ready(w: JournalWriter) -> None:
        print(
            f"Watching {w.content_dir} ({w.folders} folders); journal {w.files.journal}. "
            "Builds walk only the collections it names. Ctrl-C stops.",
            flush=True,
        )

    try:
        writer.run(on_ready=ready)
    except (WatcherRunning, WatchLimitReached, WatchEnded) as exc:
        print(f"rag watch: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except OSError as exc:
        print(f"rag watch: {exc}", file=sys.stderr)
        return EXIT_FAILED
    print(f"Stopped after {writer.events} file events; builds walk the whole content again.", flush=True)
    return EXIT_OK
