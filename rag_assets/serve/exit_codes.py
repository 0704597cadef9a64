"""The exit statuses of every ``rag`` command: 0 done, 1 failed (or stale, damaged), 2 usage or configuration error."""

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
