"""Chat models behind one interface: OpenAI-compatible ``/chat/completions`` and Ollama ``/api/chat``."""

from rag_assets.answer.providers.base import ChatAuthError, ChatError, ChatProvider, ChatUnavailable, ChatUsage, Message

__all__ = ["ChatAuthError", "ChatError", "ChatProvider", "ChatUnavailable", "ChatUsage", "Message"]
