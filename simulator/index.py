"""Full-text index over the simulator's bundled corpus (SQLite FTS5, bm25 ranking).

The simulator answers from a small set of dated documents written for it (`simulator/corpus/*.jsonl`),
never from the web. This module loads them, splits them into sentences and puts both documents and
sentences into an in-memory FTS5 index, so retrieval is real full-text search with bm25 ranking rather
than ranking code of our own. It is a stand-in for the Perplexity search backend, not a fact source.

Free text never reaches MATCH as written: `fts_query` turns it into an OR of quoted terms with stopwords
removed, so punctuation, quotes and FTS5 operators in a user's question cannot break or change the query.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path

__all__ = [
    "CORPUS_DIR",
    "STOPWORDS",
    "CorpusIndex",
    "Document",
    "Hit",
    "fts_query",
    "load_corpus",
    "query_terms",
    "split_sentences",
]

CORPUS_DIR = Path(__file__).with_name("corpus")
SNIPPET_JOIN = " ... "  # the Search API separates extracted sections with "..."
MAX_QUERY_TERMS = 64  # a 256-byte grounding query has far fewer; this only bounds hostile input

# Function words and question words: they carry no topic, and in an OR query they would match everything.
STOPWORDS = frozenset(
    str.split(
        """
    a about above after again against all also am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have
    having he her here hers herself him himself his how i if in into is it its itself just let me more most
    my myself no nor of off on once only or other our ours ourselves out over own same she should so some
    such than that the their theirs them themselves then there these they this those through to too under
    until up very was we were what when where which while who whom why will with would you your yours
    yourself yourselves s t d ll m re ve please today current currently
    """
    )
)

_TERM = re.compile(r"\w+(?:[.,']\w+)*")
# A sentence ends at . ! or ? (plus closing quotes) before whitespace and a capital, digit, quote or bracket.
_BOUNDARY = re.compile(r"(?<=[.!?])([\"'”’)]*)\s+(?=[A-Z0-9\"“(])")
# ...unless the period closes a single capital initial ("John J. Hopfield") or "e.g."/"i.e.".
_NO_BREAK_AFTER = re.compile(r"(?:(?:^|[\s(])[A-Z]\.|\be\.g\.|\bi\.e\.)$")


def split_sentences(text: str) -> list[str]:
    """Split prose into sentences, keeping initials ("John J. Hopfield") and "e.g." inside a sentence.

    Also breaks at newlines and at "..." section marks, so a snippet or a multi-line state splits the
    way a reader would see it.
    """
    sentences: list[str] = []
    for block in re.split(r"\n+|\.\.\.|…", text):
        pending = ""
        start = 0
        for match in _BOUNDARY.finditer(block):
            piece = block[start : match.start(1)] + match.group(1)
            start = match.end()
            pending = f"{pending} {piece}" if pending else piece
            if _NO_BREAK_AFTER.search(block[: match.start(1)]):
                continue
            sentences.append(pending.strip())
            pending = ""
        rest = block[start:]
        pending = f"{pending} {rest}" if pending else rest
        if pending.strip():
            sentences.append(pending.strip())
    return [s for s in sentences if s]


def query_terms(text: str) -> list[str]:
    """Distinct content terms of free text, in order: lowercased, stopwords and single letters removed."""
    seen: dict[str, None] = {}
    for raw in _TERM.findall(text.lower()):
        term = raw.strip("'")
        if term in STOPWORDS or (len(term) < 2 and not term.isdigit()) or term in seen:
            continue
        seen[term] = None
    return list(seen)[:MAX_QUERY_TERMS]


def fts_query(text: str) -> str | None:
    """A safe FTS5 MATCH expression for free text: an OR of double-quoted terms, or None if nothing is left.

    Quoting makes every term a phrase, so FTS5 syntax (AND, NEAR, *, ^, column filters) in the input is
    searched as text, never interpreted; a dotted number like 3.12 becomes the phrase "3 12".
    """
    terms = [t.replace('"', "") for t in query_terms(text)]
    terms = [t for t in terms if t]
    return " OR ".join(f'"{t}"' for t in terms) if terms else None


@dataclass(frozen=True)
class Document:
    """One corpus page. `date` is ISO (YYYY-MM-DD), so string order is date order."""

    doc_id: int
    title: str
    url: str
    date: str
    text: str
    sentences: tuple[str, ...]


@dataclass(frozen=True)
class Hit:
    """A search result: the document, its bm25 rank (lower is better) and its best-matching sentences."""

    document: Document
    rank: float
    sentences: tuple[str, ...]  # in document order

    @property
    def snippet(self) -> str:
        return SNIPPET_JOIN.join(self.sentences)


def _check_document(raw: object, where: str) -> tuple[str, str, str, str]:
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: expected a JSON object")
    fields = []
    for key in ("title", "url", "date", "text"):
        value = raw.get(key)
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"{where}: {key!r} must be a non-empty string")
        fields.append(value.strip())
    title, url, day, text = fields
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"{where}: url must be http(s)")
    try:
        date.fromisoformat(day)
    except ValueError:
        raise ValueError(f"{where}: date must be YYYY-MM-DD") from None
    return title, url, day, text


def load_corpus(directory: Path = CORPUS_DIR) -> list[Document]:
    """Every document of every `*.jsonl` file in `directory`, in file-name then line order.

    A malformed line fails loudly with its file and line number: a silently smaller corpus would only
    show up later as odd answers.
    """
    documents: list[Document] = []
    for path in sorted(directory.glob("*.jsonl")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            where = f"{path.name}:{number}"
            try:
                raw = json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(f"{where}: {error.msg}") from None
            title, url, day, text = _check_document(raw, where)
            documents.append(
                Document(len(documents) + 1, title, url, day, text, tuple(split_sentences(text)))
            )
    if not documents:
        raise ValueError(f"no documents in {directory}")
    return documents


class CorpusIndex:
    """An in-memory FTS5 index of documents and their sentences, built once and then only read.

    One connection is shared by all threads behind a lock: queries take well under a millisecond, so
    serialising them costs less than a connection per thread would.
    """

    def __init__(self, documents: Iterable[Document]) -> None:
        self._documents = {doc.doc_id: doc for doc in documents}
        self._lock = threading.Lock()
        self._db = sqlite3.connect(":memory:", check_same_thread=False)
        self._db.executescript(
            """
            CREATE VIRTUAL TABLE docs USING fts5(title, body, day UNINDEXED, tokenize='porter unicode61');
            CREATE VIRTUAL TABLE sents USING fts5(body, doc UNINDEXED, pos UNINDEXED,
                                                  tokenize='porter unicode61');
            """
        )
        with self._db:
            self._db.executemany(
                "INSERT INTO docs(rowid, title, body, day) VALUES (?, ?, ?, ?)",
                [(d.doc_id, d.title, d.text, d.date) for d in self._documents.values()],
            )
            self._db.executemany(
                "INSERT INTO sents(body, doc, pos) VALUES (?, ?, ?)",
                [
                    (sentence, d.doc_id, pos)
                    for d in self._documents.values()
                    for pos, sentence in enumerate(d.sentences)
                ],
            )

    @classmethod
    def from_directory(cls, directory: Path = CORPUS_DIR) -> CorpusIndex:
        return cls(load_corpus(directory))

    @property
    def documents(self) -> Sequence[Document]:
        return list(self._documents.values())

    def search(
        self, query: str, k: int = 5, *, before: date | None = None, max_sentences: int = 4
    ) -> list[Hit]:
        """The `k` best documents for free text by bm25 (title weighted double), each with up to
        `max_sentences` of its best-matching sentences in document order.

        `before` keeps only documents dated strictly earlier: that is how the simulated model's
        knowledge cutoff is applied. An empty or stopword-only query finds nothing.
        """
        expression = fts_query(query)
        if expression is None or k <= 0:
            return []
        sql = "SELECT rowid, bm25(docs, 2.0, 1.0) AS score FROM docs WHERE docs MATCH ?"
        params: list[object] = [expression]
        if before is not None:
            sql += " AND day < ?"
            params.append(before.isoformat())
        sql += " ORDER BY score, rowid LIMIT ?"
        params.append(k)
        with self._lock:
            ranked = self._db.execute(sql, params).fetchall()
            if not ranked:
                return []
            ids = [row[0] for row in ranked]
            marks = ",".join("?" * len(ids))
            sentence_rows = self._db.execute(
                f"SELECT doc, pos FROM sents WHERE sents MATCH ? AND doc IN ({marks}) "  # noqa: S608 - only '?' marks are interpolated
                "ORDER BY bm25(sents), doc, pos",
                [expression, *ids],
            ).fetchall()
        best: dict[int, list[int]] = {doc_id: [] for doc_id in ids}
        for doc_id, pos in sentence_rows:
            chosen = best[int(doc_id)]
            if len(chosen) < max_sentences:
                chosen.append(int(pos))
        hits = []
        for doc_id, score in ranked:
            document = self._documents[doc_id]
            positions = sorted(best[doc_id]) or list(range(min(max_sentences, len(document.sentences))))
            hits.append(Hit(document, float(score), tuple(document.sentences[p] for p in positions)))
        return hits
