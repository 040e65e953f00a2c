"""Nearest-state retrieval over a Chroma index of state signatures, kept in step with the KB's JSON.

The index is derived data: one record per live state, holding its precomputed signature (cosine space,
set explicitly; no embedding function, so nothing is ever embedded or downloaded) and its arches. It is
brought up to date when its stored content hash differs from the KB's, and rebuilt from scratch when it
is missing or cannot be read. A state never seen on the query's arch ranks as if it were a little farther.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kernelblaster.kb.safe_files import exclusive_lock
from kernelblaster.kb.schema import KBDocument, PerformanceState
from kernelblaster.kb.signature_fields import SIGNATURE_FIELDS, check_signature
from kernelblaster.tools.errors import UserFacingError

if TYPE_CHECKING:
    from chromadb.api import ClientAPI
    from chromadb.api.models.Collection import Collection
    from chromadb.api.types import PyEmbeddings

COLLECTION_NAME = "state_signatures"
# Cosine distance added to a state never seen on the query's arch: a KB learned on one GPU still helps
# on another, but the same state learned on this GPU comes first.
CROSS_ARCH_PENALTY = 0.1
_HASH_KEY = "content_hash"


class IndexUnreadable(Exception):
    """The index's database cannot be read; it is derived data, so the caller rebuilds it."""


class IndexPathTaken(UserFacingError):
    """Something other than a folder is where the index belongs; it may be the user's, so it is left alone."""


def check_index_directory(directory: Path) -> None:
    """Raise `IndexPathTaken`, naming `directory`, if a file (or anything but a folder) is in the index's place."""
    if os.path.lexists(directory) and not directory.is_dir():
        kind = "a file" if directory.is_file() else "not a folder"
        raise IndexPathTaken(f"the KB's signature index {directory} is {kind}; move it out of the way (the index "
                             "is a folder rebuilt there from the KB) and run the command again")


@dataclass(frozen=True)
class StateMatch:
    """A known state near a query signature: its cosine distance, and whether it was seen on this arch."""

    state: PerformanceState
    distance: float
    same_arch: bool

    @property
    def ranking_distance(self) -> float:
        return self.distance + (0.0 if self.same_arch else CROSS_ARCH_PENALTY)


def indexed_states(document: KBDocument) -> list[PerformanceState]:
    return [state for state in document.states.values() if state.deprecated is None]


def content_hash(document: KBDocument) -> str:
    """A hash of everything the index holds, to tell a current index from a stale one."""
    digest = hashlib.sha256(json.dumps(SIGNATURE_FIELDS).encode())
    for state in sorted(indexed_states(document), key=lambda s: s.id):
        digest.update(f"{state.id}|{_fingerprint(state)}\n".encode())
    return digest.hexdigest()


def _fingerprint(state: PerformanceState) -> str:
    text = json.dumps([state.signature, state.arches])
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


class SignatureIndex:
    """The Chroma collection of one KB's state signatures, in its own directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._collection: Collection | None = None

    def sync(self, document: KBDocument, document_hash: str) -> None:
        """Make the index hold exactly the live states of `document`, whose `content_hash` is given."""
        # Checked first: the rebuild below would neither remove a file there (it is not derived data) nor
        # get past it.
        check_index_directory(self.directory)
        with exclusive_lock(self.directory):
            try:
                self._update(document, document_hash)
            except Exception:  # any failure to read derived data means: rebuild it
                self._rebuild_unlocked(document, document_hash)

    def rebuild(self, document: KBDocument, document_hash: str) -> None:
        """Throw the index away and index the live states of `document` afresh."""
        check_index_directory(self.directory)
        with exclusive_lock(self.directory):
            self._rebuild_unlocked(document, document_hash)

    def count(self) -> int:
        return self._open().count()

    def query(self, signature: Sequence[float], n_results: int) -> list[tuple[str, float]]:
        """The ids and cosine distances of the `n_results` nearest indexed states, nearest first.

        Raises `IndexUnreadable` when the files under the index changed behind this process's back (Chroma
        caches one client per path, which can answer `sync` from memory for a deleted or replaced database).
        """
        try:
            collection = self._open()
            n_results = min(n_results, collection.count())
            if n_results == 0:
                return []
            query: PyEmbeddings = [list(signature)]
            result = collection.query(query_embeddings=query, n_results=n_results, include=["distances"])
        except Exception as error:  # Chroma raises several unrelated types for a damaged database
            raise IndexUnreadable(f"{self.directory}: {error}") from error
        distances = result["distances"]
        assert distances is not None, "asked for by include"
        return list(zip(result["ids"][0], distances[0], strict=True))

    def _update(self, document: KBDocument, document_hash: str) -> None:
        collection = self._open()
        if collection.configuration_json["hnsw"]["space"] != "cosine":
            raise ValueError("index was built with another distance")
        if collection.metadata and collection.metadata.get(_HASH_KEY) == document_hash:
            return
        stored = collection.get(include=["metadatas"])
        metadatas = stored["metadatas"]
        assert metadatas is not None, "asked for by include"
        stored_prints = {
            record_id: meta["fingerprint"] for record_id, meta in zip(stored["ids"], metadatas, strict=True)
        }
        wanted = {state.id: state for state in indexed_states(document)}
        gone = [record_id for record_id in stored_prints if record_id not in wanted]
        if gone:
            collection.delete(ids=gone)
        changed = [s for s in wanted.values() if stored_prints.get(s.id) != _fingerprint(s)]
        self._upsert(changed)
        collection.modify(metadata={_HASH_KEY: document_hash})

    def _rebuild_unlocked(self, document: KBDocument, document_hash: str) -> None:
        self._collection = None
        _forget_cached_clients()
        shutil.rmtree(self.directory, ignore_errors=True)
        self._upsert(indexed_states(document))
        self._open().modify(metadata={_HASH_KEY: document_hash})

    def _upsert(self, states: list[PerformanceState]) -> None:
        collection = self._open()
        batch = _client(self.directory).get_max_batch_size()
        for start in range(0, len(states), batch):
            chunk = states[start : start + batch]
            embeddings: PyEmbeddings = [state.signature for state in chunk]
            collection.upsert(
                ids=[state.id for state in chunk],
                embeddings=embeddings,
                metadatas=[{"arches": ",".join(state.arches), "fingerprint": _fingerprint(state)} for state in chunk],
            )

    def _open(self) -> Collection:
        if self._collection is None:
            self._collection = _client(self.directory).get_or_create_collection(
                COLLECTION_NAME, embedding_function=None, configuration={"hnsw": {"space": "cosine"}}
            )
        return self._collection


def nearest_states(
    document: KBDocument, index: SignatureIndex, signature: Sequence[float], arch: str, k: int
) -> list[StateMatch]:
    """The k states nearest to `signature`, those seen on `arch` ahead of equally near ones that were not."""
    query = check_signature(signature)
    # Fetch beyond k so that a same-arch state just behind a cross-arch one can overtake it.
    candidates = index.query(query, max(4 * k, k + 16))
    matches = [
        StateMatch(state=state, distance=max(distance, 0.0), same_arch=arch in state.arches)
        for state_id, distance in candidates
        if (state := document.states.get(state_id)) is not None
    ]
    matches.sort(key=lambda match: (match.ranking_distance, match.state.id))
    return matches[:k]


def _client(directory: Path) -> ClientAPI:
    # Imported here: chromadb takes about a second to import, and most KB commands never query.
    import chromadb
    from chromadb.config import Settings

    return chromadb.PersistentClient(path=str(directory), settings=Settings(anonymized_telemetry=False))


def _forget_cached_clients() -> None:
    # Chroma caches one system per path; after deleting the directory the cached one points at nothing.
    from chromadb.api.shared_system_client import SharedSystemClient

    SharedSystemClient.clear_system_cache()
