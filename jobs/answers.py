"""The `answer` job kind's application side (docs/spec.md §3): which items come next for a question, its
report, the job summary and the result lines.

A question item's output holds the Agent answer and its sentences; `sentence` children score them;
`investigation` children (the first MAX_INVESTIGATIONS flagged sentences) rewrite and rescore. The
report is rebuilt from those stored outputs only, so it can be built at any time: after a failed
investigation, after a cancel, or again after a retry.

A report never says more than happened: a question with any step that did not run to the end (a sentence
not scored, an investigation failed or never started, the job cancelled) is `incomplete` and names each
such step in `incomplete_steps`; only a question where every step ran is `done` (docs/spec.md §3.6).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from checks import answers as gate
from checks.options import CUTOFFS_MODEL, cutoffs_model_note
from checks.pricing import DEFAULT_MODEL
from jobs.intake import UnitSpec
from models import Item, Job, utcnow

SENTENCE = "sentence"
INVESTIGATION = "investigation"


# --- what comes next -----------------------------------------------------------------------------------


def sentence_units(question: Item) -> list[UnitSpec]:
    """One `sentence` item per sentence of the answer: the claim and its passages exactly as sent."""
    out = question.output or {}
    units: list[UnitSpec] = []
    for spec in out.get("sentences") or []:
        number = int(spec["number"])
        units.append(
            UnitSpec(
                stage=SENTENCE,
                custom_id=f"{question.custom_id}:s{number}",
                mode=SENTENCE,
                input={
                    "number": number,
                    "text": spec["text"],
                    "claim": spec["claim"],
                    "paragraph": spec["paragraph"],
                    "source_ids": spec["source_ids"],
                    "passages": spec["passages"],
                    "urls": spec["urls"],
                    "titles": spec.get("titles") or {},
                    "missing_ids": spec["missing_ids"],
                },
            )
        )
    return units


def _by_stage(children: Iterable[Item], stage: str) -> list[Item]:
    return sorted((c for c in children if c.stage == stage), key=lambda c: int(c.input["number"]))


def _investigations(children: Iterable[Item]) -> dict[int, Item]:
    return {int(c.input["sentence_number"]): c for c in children if c.stage == INVESTIGATION}


def _scored(sentences: Sequence[Item]) -> list[Item]:
    return [s for s in sentences if s.status == "done" and s.output and s.output.get("label")]


def _label(sentence: Item) -> str | None:
    """The sentence's label, or None when its scoring did not produce one (failed, skipped)."""
    label = (sentence.output or {}).get("label") if sentence.status == "done" else None
    return str(label) if label else None


def plan(job: Job, question: Item, children: Sequence[Item]) -> list[UnitSpec]:
    """The items to create next, given every child is settled; empty means: build the report.

    No investigation starts unless every sentence was scored (`gate.review_may_start`): the run stops at
    a failed step as the reference recipe does, and the report says so.
    """
    if question.status != "done":
        return []
    sentences = _by_stage(children, SENTENCE)
    if not sentences:
        return sentence_units(question)
    if _investigations(children):
        return []
    if not gate.review_may_start([_label(s) for s in sentences]):
        return []
    scored = _scored(sentences)
    chosen, _not_reviewed = gate.select_for_review([str((s.output or {})["label"]) for s in scored])
    answer_text = str(((question.output or {}).get("agent") or {}).get("text") or "")
    units: list[UnitSpec] = []
    for position in chosen:
        sentence = scored[position]
        number = int(sentence.input["number"])
        units.append(
            UnitSpec(
                stage=INVESTIGATION,
                custom_id=f"{question.custom_id}:i{number}",
                mode=INVESTIGATION,
                input={
                    "question": question.input["question"],
                    "answer_text": answer_text,
                    "sentence_number": number,
                    "claim": sentence.input["claim"],
                    "label": (sentence.output or {})["label"],
                },
            )
        )
    return units


# --- the report ----------------------------------------------------------------------------------------


def _urls(spec: Mapping[str, Any]) -> tuple[str, ...]:
    urls = spec.get("urls") or {}
    return tuple(str(urls[n]) for n in (spec.get("passages") or {}) if n in urls)


def _scored_record(spec: Mapping[str, Any], output: Mapping[str, Any], paragraph: int) -> gate.Scored:
    return gate.Scored(
        claim=str(spec["claim"]),
        paragraph=paragraph,
        label=output["label"],
        urls=_urls(spec),
        input_tokens=int(output.get("input_tokens") or 0),
    )


def _passages(spec: Mapping[str, Any], output: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    o = output or {}
    supports = o.get("supports") or {}
    contradicts = o.get("contradicts") or {}
    urls = spec.get("urls") or {}
    titles = spec.get("titles") or {}
    return [
        {
            "id": n,
            "text": text,
            "url": urls.get(n, ""),
            "title": titles.get(n, ""),
            "supports": supports.get(n),
            "contradicts": contradicts.get(n),
        }
        for n, text in (spec.get("passages") or {}).items()
    ]


def _evidence_row(
    spec: Mapping[str, Any],
    output: Mapping[str, Any] | None,
    *,
    status: str,
    error: str | None,
    custom_id: str,
    number: int,
    rewrite_number: int | None,
) -> dict[str, Any]:
    o = output or {}
    done = status == "done" and bool(o.get("label"))
    return {
        "role": "original" if rewrite_number is None else "rewrite",
        "number": number,
        "rewrite_number": rewrite_number,
        "custom_id": custom_id,
        "text": spec.get("text"),
        "claim": spec.get("claim"),
        "paragraph": spec.get("paragraph"),
        "status": status,
        "label": o.get("label") if done else None,
        "rule": o.get("rule") if done else None,
        "checkable": o.get("checkable") if done else None,
        "passages": _passages(spec, o if done else None),
        "missing_ids": list(spec.get("missing_ids") or []),
        "request_id": o.get("request_id"),
        "request_ids": list(o.get("request_ids") or []),
        "input_tokens": o.get("input_tokens"),
        "error": error if status != "done" else o.get("error"),
    }


def _seconds(started_at: object, now: datetime) -> float:
    if not isinstance(started_at, str):
        return 0.0
    try:
        return max(0.0, (now - datetime.fromisoformat(started_at)).total_seconds())
    except ValueError:
        return 0.0


def empty_summary() -> dict[str, Any]:
    return {
        "sentences": 0,
        "investigated": 0,
        "replaced": 0,
        "not_confirmed": 0,
        "not_reviewed": 0,
        "decisions_requests": 0,
        "decisions_input_tokens": 0,
        "agent_calls": 0,
        "seconds": 0.0,
        "before": {},
        "after": {},
        "failed_sentences": 0,
        "failed_investigations": 0,
        "incomplete_steps": {},
    }


def _step_counts(steps: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for step in steps:
        counts[str(step["step"])] = counts.get(str(step["step"]), 0) + 1
    return counts


# --- steps that did not run to the end ------------------------------------------------------------------


def _step(
    step: str,
    status: str,
    message: str,
    *,
    error: str | None = None,
    request_ids: Sequence[str] = (),
    **where: Any,
) -> dict[str, Any]:
    """One entry of `incomplete_steps` (docs/spec.md §6.3): which step, where, what became of it, and a
    sentence for people (pages, CSV, CLI show `message` as it is)."""
    return {
        "step": step,
        **where,
        "status": status,
        "error": error,
        "request_ids": [i for i in request_ids if i],
        "message": message,
    }


def _why(status: str, error: str | None) -> str:
    return f"{status}: {error}" if error else status


def cancelled_step() -> dict[str, Any]:
    """The entry of a question whose job was cancelled before every planned step ran."""
    return _step("cancelled", "cancelled", "the job was cancelled before every step of this question ran")


def _incomplete_steps(
    sentences: Sequence[Item],
    investigations: Mapping[int, Item],
    chosen_numbers: Sequence[int],
    flagged_numbers: Sequence[int],
    *,
    cancelled: bool,
) -> list[dict[str, Any]]:
    """Every step of this question that did not run to the end, in the order the flow runs them."""
    steps: list[dict[str, Any]] = []
    for s in sentences:
        if _label(s) is not None:
            continue
        number = int(s.input["number"])
        o = s.output or {}
        error = s.error or o.get("error") or ("no label" if s.status == "done" else None)
        status = "failed" if s.status == "done" else s.status
        steps.append(
            _step(
                "score",
                status,
                f"sentence {number} was not scored ({_why(status, error)})",
                error=error,
                request_ids=o.get("request_ids") or [],
                sentence=number,
            )
        )
    if steps and not investigations:  # the review never started (gate.review_may_start)
        flagged = ", ".join(str(n) for n in flagged_numbers) or "none so far"
        steps.append(
            _step(
                "review",
                "not_started",
                "no investigation was started, because not every sentence was scored "
                f"(flagged sentences: {flagged})",
                sentences=list(flagged_numbers),
            )
        )
    else:
        for number in chosen_numbers:
            inv = investigations.get(number)
            if inv is None:
                steps.append(
                    _step(
                        "investigate",
                        "not_started",
                        f"sentence {number} was flagged but its investigation never started",
                        sentence=number,
                    )
                )
            elif inv.status != "done":
                o = inv.output or {}
                error = inv.error or o.get("error")
                steps.append(
                    _step(
                        "investigate",
                        inv.status,
                        f"the investigation of sentence {number} did not finish ({_why(inv.status, error)})",
                        error=error,
                        request_ids=o.get("request_ids") or [],
                        sentence=number,
                    )
                )
    if cancelled:
        steps.append(cancelled_step())
    return steps


def _model_fields(job: Job) -> dict[str, Any]:
    # DEFAULT_MODEL mirrors what the workers send for a job stored without a model (intake always stores one).
    model = str(job.options.get("model") or DEFAULT_MODEL)
    return {"model": model, "cutoffs_model": CUTOFFS_MODEL, "model_note": cutoffs_model_note(model)}


def build_report(job: Job, question: Item, children: Sequence[Item], *, incomplete: bool) -> dict[str, Any]:
    """The question's report (shape: docs/spec.md §6), from stored items only.

    `incomplete` is what jobs/stages.py passes when the job was cancelled before every planned step of this
    question ran (planned items never created, or pending ones skipped by the cancel); it adds a
    `cancelled` entry to `incomplete_steps`. Every other missing step is read from the children.
    """
    now = utcnow()
    out = question.output or {}
    agent = out.get("agent")
    base: dict[str, Any] = {
        "kind": "answer",
        "question": question.input.get("question"),
        "built_at": now.isoformat(),
        **_model_fields(job),
        "agent": _agent_view(agent),
        "errors": [],
        "incomplete_steps": [],
    }
    if question.status != "done":
        summary = empty_summary()
        summary["agent_calls"] = 1 if question.status == "failed" else 0
        return {
            **base,
            "status": "skipped" if question.status == "skipped" else "failed",
            "error": question.error or out.get("error") or question.status,
            "final": None,
            "evidence": [],
            "summary": summary,
            "request_ids": {"agent": list(out.get("request_ids") or []), "decisions": []},
        }

    sentences = _by_stage(children, SENTENCE)
    investigations = _investigations(children)
    errors: list[str] = []

    # Originals that were scored, and where each sits among them (checks/ works on scored ones only).
    scored = _scored(sentences)
    position_of = {int(s.input["number"]): i for i, s in enumerate(scored)}
    originals = [_scored_record(s.input, s.output or {}, int(s.input["paragraph"])) for s in scored]
    chosen, past_limit = gate.select_for_review([o.label for o in originals])
    if not investigations and not gate.review_may_start([_label(s) for s in sentences]):
        # The review never started, so no flagged sentence is "not reviewed" for being past the limit:
        # none was reviewed, and `incomplete_steps` says why.
        chosen, past_limit = [], []
    reviews: dict[int, gate.Review] = {p: gate.Review.not_reviewed() for p in past_limit}
    rewrites: dict[int, list[dict[str, Any]]] = {}  # sentence number -> rewrite sentence outputs
    partial_requests = partial_tokens = 0
    for position in chosen:
        number = int(scored[position].input["number"])
        inv = investigations.get(number)
        if inv is None:
            continue
        inv_out = inv.output or {}
        rewrite = [s for s in inv_out.get("sentences") or [] if isinstance(s, dict)]
        rewrites[number] = rewrite
        if inv.status == "done":
            paragraph = originals[position].paragraph
            reviews[position] = gate.Review.of(
                [_scored_record(s, s, paragraph) for s in rewrite if s.get("status") == "done"]
            )
        else:
            done = [s for s in rewrite if s.get("status") == "done"]
            partial_requests += len(done)
            partial_tokens += sum(int(s.get("input_tokens") or 0) for s in done)
            errors.append(f"investigation of sentence {number} {inv.status}: {inv.error or ''}".rstrip(": "))

    for s in sentences:
        if s.status != "done":
            errors.append(f"sentence {s.input['number']} {s.status}: {s.error or ''}".rstrip(": "))

    summary_obj = gate.summarize(originals, reviews, _seconds(out.get("started_at"), now))
    summary = {**empty_summary(), **summary_obj.as_dict()}
    summary["sentences"] = len(sentences)
    summary["not_confirmed"] = sum(1 for r in reviews.values() if r.outcome == gate.NOT_CONFIRMED)
    summary["not_reviewed"] = sum(1 for r in reviews.values() if r.outcome == gate.NOT_REVIEWED)
    summary["decisions_requests"] += partial_requests
    summary["decisions_input_tokens"] += partial_tokens
    summary["agent_calls"] = 1 + sum(1 for i in investigations.values() if i.status in ("done", "failed"))
    summary["failed_sentences"] = sum(1 for s in sentences if s.status != "done")
    summary["failed_investigations"] = sum(1 for i in investigations.values() if i.status != "done")

    steps = _incomplete_steps(
        sentences,
        investigations,
        [int(scored[p].input["number"]) for p in chosen],
        [int(s.input["number"]) for s in scored if (s.output or {}).get("label") in gate.FLAGGED_LABELS],
        cancelled=incomplete,
    )
    summary["incomplete_steps"] = _step_counts(steps)

    final = _final(
        originals,
        reviews,
        sentences=sentences,
        position_of=position_of,
        investigations=investigations,
        titles=_titles(out, investigations),
    )
    evidence = _evidence(
        question,
        sentences,
        position_of=position_of,
        reviews=reviews,
        investigations=investigations,
        rewrites=rewrites,
    )
    decisions_ids = [i for row in evidence for i in row["request_ids"]]
    agent_ids = list(out.get("request_ids") or [])
    for inv in investigations.values():
        agent_ids += list(((inv.output or {}).get("agent") or {}).get("request_ids") or [])
    return {
        **base,
        "status": "incomplete" if steps else "done",
        "error": None,
        "errors": errors,
        "incomplete_steps": steps,
        "final": final,
        "evidence": evidence,
        "summary": summary,
        "request_ids": {"agent": agent_ids, "decisions": decisions_ids},
    }


def _agent_view(agent: object) -> dict[str, Any] | None:
    if not isinstance(agent, dict):
        return None
    return {
        "text": agent.get("text"),
        "request_id": agent.get("request_id"),
        "request_ids": list(agent.get("request_ids") or []),
        "input_tokens": agent.get("input_tokens"),
        "results": list(agent.get("results") or []),
    }


def _titles(out: Mapping[str, Any], investigations: Mapping[int, Item]) -> dict[str, str]:
    """URL -> title over every search the question made (the first title seen wins)."""
    titles: dict[str, str] = {}
    agents = [out.get("agent")] + [(i.output or {}).get("agent") for i in investigations.values()]
    for agent in agents:
        for result in (agent or {}).get("results") or []:
            titles.setdefault(str(result.get("url") or ""), str(result.get("title") or ""))
    return titles


def _final(
    originals: Sequence[gate.Scored],
    reviews: Mapping[int, gate.Review],
    *,
    sentences: Sequence[Item],
    position_of: Mapping[int, int],
    investigations: Mapping[int, Item],
    titles: Mapping[str, str],
) -> dict[str, Any]:
    """The final answer, with sentences whose scoring failed kept in place (label null, "not scored").

    checks/ decides what stays and what replaces it; this only puts unscored sentences back where they
    were and numbers citations by URL in order of first appearance, as `final_answer` does.
    """
    answer = gate.final_answer(originals, reviews)
    by_origin: dict[int, list[gate.FinalSentence]] = {}
    for fs in answer.sentences:
        by_origin.setdefault(fs.origin, []).append(fs)
    numbers: dict[str, int] = {}

    def cite(urls: Iterable[str]) -> list[int]:
        return [numbers.setdefault(url, len(numbers) + 1) for url in dict.fromkeys(urls) if url]

    final: list[dict[str, Any]] = []
    for s in sentences:
        number = int(s.input["number"])
        inv = investigations.get(number)
        inv_error = None
        if inv is not None and inv.status != "done":
            inv_error = inv.error or inv.status
        position = position_of.get(number)
        if position is None:  # scoring failed or was skipped: keep the sentence, unlabelled
            final.append(
                {
                    "text": s.input["claim"],
                    "paragraph": s.input["paragraph"],
                    "label": None,
                    "citations": cite(_urls(s.input)),
                    "origin": number,
                    "replaced": False,
                    "outcome": None,
                    "investigation_error": None,
                }
            )
            continue
        for fs in by_origin.get(position, []):
            urls = [answer.sources[k - 1] for k in fs.citations]
            final.append(
                {
                    "text": fs.claim,
                    "paragraph": fs.paragraph,
                    "label": fs.label,
                    "citations": cite(urls),
                    "origin": number,
                    "replaced": fs.replaced,
                    "outcome": gate.REPLACED if fs.replaced else fs.outcome,
                    "investigation_error": inv_error,
                }
            )
    paragraphs: dict[int, list[int]] = {}
    for index, entry in enumerate(final):
        paragraphs.setdefault(int(entry["paragraph"]), []).append(index)
    return {
        "sentences": final,
        "paragraphs": list(paragraphs.values()),
        "sources": [{"number": n, "url": url, "title": titles.get(url, "")} for url, n in numbers.items()],
    }


def _evidence(
    question: Item,
    sentences: Sequence[Item],
    *,
    position_of: Mapping[int, int],
    reviews: Mapping[int, gate.Review],
    investigations: Mapping[int, Item],
    rewrites: Mapping[int, Sequence[Mapping[str, Any]]],
) -> list[dict[str, Any]]:
    """Every scored sentence: each original, then its rewrite sentences, used or dropped."""
    rows: list[dict[str, Any]] = []
    for s in sentences:
        number = int(s.input["number"])
        row = _evidence_row(
            s.input,
            s.output,
            status=s.status,
            error=s.error,
            custom_id=s.custom_id,
            number=number,
            rewrite_number=None,
        )
        position = position_of.get(number)
        review = reviews.get(position) if position is not None else None
        row["outcome"] = review.outcome if review is not None else None
        inv = investigations.get(number)
        row["investigation"] = None
        if inv is not None:
            agent = (inv.output or {}).get("agent") or {}
            row["investigation"] = {
                "status": inv.status,
                "custom_id": inv.custom_id,
                "text": agent.get("text"),
                "request_id": agent.get("request_id"),
                "request_ids": list(agent.get("request_ids") or (inv.output or {}).get("request_ids") or []),
                "error": inv.error if inv.status != "done" else None,
            }
        rows.append(row)
        replaced = review is not None and review.outcome == gate.REPLACED
        for rewrite in rewrites.get(number, []):
            status = str(rewrite.get("status") or "failed")
            sub = _evidence_row(
                rewrite,
                rewrite,
                status=status,
                error=rewrite.get("error"),
                custom_id=inv.custom_id if inv is not None else f"{question.custom_id}:i{number}",
                number=number,
                rewrite_number=int(rewrite.get("number") or 0),
            )
            sub["used"] = replaced and sub["label"] == "supported"
            rows.append(sub)
    return rows
