"""factgate's offline stand-in for the Perplexity APIs (Decisions, Agent, Search).

A simulator, not a fact checker: its answers come from a small bundled corpus (`simulator/corpus/`) through a
full-text index (`index.py`) and one documented, deterministic heuristic (`judge.py`), so tests, the demo and
load drills run without a key and reproduce the reference runs' behaviour on `tests/data/claims.jsonl` and
`tests/data/reference_questions.json` (docs/spec.md §7). `engine.py` is the content facade the HTTP layer
(`app.py`, `wire.py`, `limits.py`, `faults.py`) wraps. Nothing in the product's real-API path imports it.
"""
