"""Answers with citations: a chat model asked to answer from numbered sources that retrieval found.

Plain Python, no Dagster: :mod:`.ask` runs one question (rewrite a follow-up, retrieve, abstain
or prompt, stream, check the citations, log); :mod:`.providers` holds the chat models;
:mod:`.selection` chooses one per tier (the Private tier only a local one); :mod:`.grounding`
writes the prompt and checks the answer's citations; :mod:`.sessions` keeps conversations;
the answer log (every answer, in the log file beside the tier's store) is :mod:`rag_assets.index.answer_log`.
"""
