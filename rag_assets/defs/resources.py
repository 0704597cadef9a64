"""Resources: where content lives and which embedder turns it into vectors."""


from pathlib import Path

import dagster as dg
from pydantic import Field

from rag_assets.chunking import ChunkingParams
from rag_assets.config import RagConfig, discover_collections
from rag_assets.embedders import Embedder, create_embedder


class RagSettings(dg.ConfigurableResource):
    """Paths, chunking and publishing settings, filled from rag.yaml at load time."""

    content_dir: str = Field(description="Folder whose top-level folders are the collections.")
    output_dir: str = Field(description="Folder that receives public/ and data/.")
    target_words: int = Field(default=400, description="Words of new text per chunk.")
    overlap_words: int = Field(default=50, description="Words repeated from the previous chunk.")
    min_words: int = Field(default=100, description="Shorter fragments merge with a neighbour.")
    max_chars: int = Field(default=3000, description="Hard cap for text without spaces (CJK).")
    vector_decimals: int = Field(default=5, description="Decimals kept per vector component in the JSON index.")
    collection_weights: dict[str, float] = Field(default_factory=dict, description="Search priority per collection.")
    collections: list[str] = Field(default_factory=list, description="Collections found when the definitions loaded.")

    @classmethod
    def from_config(cls, cfg: RagConfig) -> "RagSettings":
        p = cfg.chunking
        return cls(
            content_dir=str(cfg.content_dir),
            output_dir=str(cfg.output_dir),
            target_words=p.target_words,
            overlap_words=p.overlap_words,
            min_words=p.min_words,
            max_chars=p.max_chars,
            vector_decimals=cfg.vector_decimals,
            collection_weights=dict(cfg.collection_weights),
            collections=list(discover_collections(cfg).collections),
        )

    def to_config(self) -> RagConfig:
        return RagConfig(
            content_dir=Path(self.content_dir),
            output_dir=Path(self.output_dir),
            collection_weights=dict(self.collection_weights),
            chunking=self.chunking_params(),
            vector_decimals=self.vector_decimals,
        )

    def chunking_params(self) -> ChunkingParams:
        return ChunkingParams(
            target_words=self.target_words,
            overlap_words=self.overlap_words,
            min_words=self.min_words,
            max_chars=self.max_chars,
        )


class EmbedderResource(dg.ConfigurableResource):
    """The embedding provider, chosen by name (``hashing`` is the offline default)."""

    name: str = Field(default="hashing", description="Provider name: hashing.")
    dimension: int = Field(default=384, description="Vector dimension (hashing embedder).")
    batch_size: int = Field(default=50, description="Chunks sent per embedding request.")

    def create(self) -> Embedder:
        return create_embedder(self.name, self.dimension)
