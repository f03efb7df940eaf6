"""Realistic `citations` rows for the benchmarks, deterministic for a seed: RAG answers of about five
sentences citing four sources each, built from the simulator's corpus (simulator/corpus/*.jsonl) so that the
simulator's judge (simulator/judge.py) gives their sentences varied verdicts, and a way to edit a share of
them as a pipeline change would (one sentence of each edited answer changed).

Each answer cites four documents of the corpus; its sentences are, by a seeded draw: a sentence of a cited
document cited to it (supported), the same with a number changed (contradicted), a sentence of a cited
document cited to another one (misattributed), a sentence of a document it does not cite (not supported), or
a sentence with no marker. About one source in four is long: its document padded with other documents'
paragraphs to 2–10 kB, as retrieved pages are (cut into passages by checks/citation_passages.py). Every
answer names its own record in one source, so no two answers ask the same requests.

    from bench._answers import answers, edit_answers, ndjson
    rows = answers(2000)                  # list of dicts (id, question, answer, sources)
    edited = edit_answers(rows, 0.10)     # 10 % of them with one sentence changed
    body = ndjson(rows)                   # bytes to POST as application/x-ndjson
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CORPUS = Path(__file__).resolve().parents[1] / "simulator" / "corpus"
FILES = ("stable", "recent", "distractors", "answers")
SOURCES_PER_ANSWER = 4
SENTENCES_PER_ANSWER = 5
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9])")
_NUMBER = re.compile(r"\d+")


@dataclass(frozen=True)
class Document:
    title: str
    url: str
    text: str
    sentences: tuple[str, ...]


def _documents() -> list[Document]:
    docs: list[Document] = []
    for name in FILES:
        for line in (CORPUS / f"{name}.jsonl").read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            row = json.loads(line)
            text = str(row.get("text") or "")
            sentences = tuple(s.strip() for s in _SENTENCE_END.split(text) if len(s.strip()) > 20)
            if sentences:
                docs.append(
                    Document(str(row.get("title") or name), str(row.get("url") or ""), text, sentences)
                )
    return docs


def _filler() -> list[str]:
    rows = [
        json.loads(line)
        for line in (CORPUS / "filler.jsonl").read_text(encoding="utf-8").splitlines()
        if line
    ]
    return [str(r["text"]) for r in rows]


def _changed_number(sentence: str, rng: random.Random) -> str | None:
    numbers = list(_NUMBER.finditer(sentence))
    if not numbers:
        return None
    m = rng.choice(numbers)
    value = int(m.group())
    changed = value + rng.choice((1, 2, 3, 7, 11)) if value < 1000 else value + rng.choice((1, 10, 100))
    return sentence[: m.start()] + str(changed) + sentence[m.end() :]


def _long_text(doc: Document, filler: list[str], rng: random.Random) -> str:
    target = rng.randint(2_000, 10_000)
    parts = [doc.text]
    while sum(len(p) + 2 for p in parts) < target:
        parts.insert(rng.randint(0, len(parts)), rng.choice(filler))
    return "\n\n".join(parts)[:10_000]


def _sentence(
    kind: str, cited: list[Document], others: list[Document], rng: random.Random
) -> tuple[str, list[int]]:
    """A sentence of the given kind and the 1-based source numbers it cites."""
    n = rng.randrange(len(cited))
    if kind == "contradicted":
        for _ in range(8):
            changed = _changed_number(rng.choice(cited[n].sentences), rng)
            if changed is not None:
                return changed, [n + 1]
        kind = "supported"
    if kind == "misattributed" and len(cited) > 1:
        wrong = (n + 1 + rng.randrange(len(cited) - 1)) % len(cited)
        return rng.choice(cited[n].sentences), [wrong + 1]
    if kind == "unsupported":
        return rng.choice(rng.choice(others).sentences), [n + 1]
    if kind == "uncited":
        return rng.choice(cited[n].sentences), []
    return rng.choice(cited[n].sentences), [n + 1]


_KINDS = ("supported",) * 5 + ("contradicted",) * 2 + ("misattributed", "unsupported", "uncited")


def answers(n: int, seed: int = 35) -> list[dict[str, Any]]:
    """`n` citations rows, the same for the same `n` and `seed`."""
    docs = _documents()
    filler = _filler()
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    for i in range(n):
        cited = rng.sample(docs, SOURCES_PER_ANSWER)
        others = [d for d in docs if d not in cited]
        sentences: list[str] = []
        seen: set[str] = set()
        while len(sentences) < SENTENCES_PER_ANSWER:
            text, refs = _sentence(rng.choice(_KINDS), cited, others, rng)
            text = text.rstrip(".!? ")
            if text in seen and len(seen) < 40:
                continue
            seen.add(text)
            sentences.append(f"{text} {''.join(f'[{r}]' for r in refs)}".rstrip() + ".")
        sources = []
        for k, doc in enumerate(cited):
            text = _long_text(doc, filler, rng) if rng.random() < 0.25 else doc.text
            if k == SOURCES_PER_ANSWER - 1:
                text += f" Archive record {i:06d} of the evaluation set keeps this page."
            sources.append({"id": str(k + 1), "title": doc.title, "url": doc.url, "text": text})
        rows.append(
            {
                "id": f"ans-{i:06d}",
                "question": f"What does the evaluation set say about {cited[0].title}?",
                "answer": " ".join(sentences),
                "sources": sources,
            }
        )
    return rows


def edit_answers(rows: list[dict[str, Any]], share: float, seed: int = 36) -> list[dict[str, Any]]:
    """The rows with `share` of them (a seeded choice) edited: one sentence of each gets a new last word
    before its markers, the way a pipeline change rewords an answer. The others are returned unchanged."""
    rng = random.Random(seed)
    chosen = set(rng.sample(range(len(rows)), round(len(rows) * share)))
    out: list[dict[str, Any]] = []
    for i, row in enumerate(rows):
        if i not in chosen:
            out.append(row)
            continue
        parts = _SENTENCE_END.split(row["answer"])
        k = rng.randrange(len(parts))
        head, marks = re.match(r"^(.*?)((?:\s*\[\d+\])*\.?)$", parts[k], re.S).groups()  # type: ignore[union-attr]
        parts[k] = f"{head.rstrip('. ')}, as reported{marks if marks.endswith('.') else marks + '.'}"
        out.append({**row, "answer": " ".join(parts)})
    return out


def ndjson(rows: list[dict[str, Any]]) -> bytes:
    return ("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n").encode()
