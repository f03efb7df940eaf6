"""`--junit-xml PATH`: a finished job as a JUnit XML report, for CI test reporters (GitHub Actions, GitLab,
Jenkins all read this shape: `<testsuites><testsuite><testcase>` with `<failure>`, `<error>` and `<skipped>`).

One testcase per row: an answer (`citations`), a claim (`check`) or a question (`ask`). A row whose check
found something fails, its failure listing the flagged sentences (or the claim's verdicts) with their
labels and upstream request ids, so a red test in CI leads straight to the evidence; a row that could not
be checked is an error; a skipped row is skipped. The XML is built with the standard library's
ElementTree, which escapes markup; characters XML 1.0 cannot hold at all (control characters an answer
may carry) are dropped first.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from checks.citation_contracts import CitationsResult
from checks.citation_verdicts import FLAGGED
from checks.contracts import Contract
from checks.kinds.answer import AnswerResult
from checks.kinds.claims import ClaimResult

__all__ = ["Case", "cases_of", "junit_document", "write_junit"]

# XML 1.0's Char production: anything else cannot appear in a document, escaped or not.
_NOT_XML: Final = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _clean(text: object) -> str:
    return _NOT_XML.sub("", str(text))


@dataclass(frozen=True)
class Case:
    """One testcase: `outcome` is passed, failure, error or skipped; `details` its lines."""

    name: str
    outcome: str = "passed"
    message: str = ""
    details: list[str] = field(default_factory=list)


def _ids(ids: Iterable[object]) -> str:
    found = [str(i) for i in ids if i]
    return f" (request ids: {', '.join(found)})" if found else ""


def _citation_case(line: CitationsResult) -> Case:
    report = line.report
    if line.status == "skipped":
        return Case(line.custom_id, "skipped", "not checked: the job ended before this answer")
    if line.status != "done" or report is None or line.outcome == "failed":
        return Case(line.custom_id, "error", (report.error if report else None) or f"answer {line.status}")
    flagged = [
        s for s in report.sentences if s.label in FLAGGED or s.misattributed or s.missing or s.label is None
    ]
    details = []
    for s in flagged:
        extra = ""
        if s.misattributed:
            extra += " misattributed: " + "".join(f"[{k}]" for k in s.misattributed)
        if s.missing:
            extra += " no such source: " + "".join(f"[{k}]" for k in s.missing)
        details.append(
            f"sentence {s.number} [{s.label or s.status}] {s.text}{extra} — {s.rule or s.error or ''}"
            f"{_ids(s.request_ids or [s.request_id])}"
        )
    if line.outcome == "incomplete":
        steps = "; ".join(str(step.get("message") or step.get("step")) for step in line.incomplete_steps)
        return Case(line.custom_id, "error", f"incomplete: {steps}", details)
    if flagged:
        return Case(
            line.custom_id, "failure", f"{len(flagged)} of {len(report.sentences)} sentences flagged", details
        )
    return Case(line.custom_id, details=[f"{len(report.sentences)} sentences, none flagged"])


def _claim_case(line: ClaimResult) -> Case:
    details: list[str] = []
    failed: list[str] = []
    flagged: list[str] = []
    for mode, r in line.results.items():
        p = "" if r.p is None else f" p={r.p:.3f}"
        details.append(f"{mode}: {r.verdict or r.status}{p}{_ids(r.request_ids or [r.request_id])}")
        if r.status in ("failed",) or (r.status == "done" and r.verdict is None):
            failed.append(f"{mode}: {r.error or r.status}")
        elif r.status == "done" and r.verdict != "supported":
            flagged.append(f"{mode} {r.verdict}")
    if failed:
        return Case(line.custom_id, "error", "; ".join(failed), details)
    if line.results and all(r.status == "skipped" for r in line.results.values()):
        return Case(line.custom_id, "skipped", "not checked: the job ended before this claim")
    if flagged:
        return Case(line.custom_id, "failure", "not supported: " + ", ".join(flagged), details)
    return Case(line.custom_id, details=details)


def _answer_case(line: AnswerResult) -> Case:
    report: Mapping[str, Any] = line.report.model_dump() if line.report is not None else {}
    if line.status == "skipped":
        return Case(line.custom_id, "skipped", "not checked: the job ended before this question")
    if line.status != "done" or report.get("status") == "failed":
        return Case(line.custom_id, "error", str(report.get("error") or f"question {line.status}"))
    evidence = [e for e in report.get("evidence") or [] if isinstance(e, Mapping)]
    final = report.get("final") if isinstance(report.get("final"), Mapping) else {}
    sentences = [s for s in (final or {}).get("sentences") or [] if isinstance(s, Mapping)]
    details = []
    for n, s in enumerate(sentences, 1):
        if s.get("label") in FLAGGED or s.get("label") is None:
            ids = [e.get("request_id") for e in evidence if e.get("number") == s.get("origin")]
            details.append(f"sentence {n} [{s.get('label') or 'not scored'}] {s.get('text')}{_ids(ids)}")
    if report.get("status") == "incomplete":
        return Case(line.custom_id, "error", "incomplete: not every step ran", details)
    if details:
        return Case(
            line.custom_id, "failure", f"{len(details)} of {len(sentences)} sentences flagged", details
        )
    return Case(line.custom_id, details=[f"{len(sentences)} sentences, none flagged"])


def cases_of(kind: str, lines: Iterable[Contract]) -> list[Case]:
    """Each results line of the job (the kind's contract) as its testcase."""
    cases: list[Case] = []
    for line in lines:
        if isinstance(line, CitationsResult):
            cases.append(_citation_case(line))
        elif isinstance(line, ClaimResult):
            cases.append(_claim_case(line))
        elif isinstance(line, AnswerResult):
            cases.append(_answer_case(line))
        else:
            raise TypeError(f"no JUnit testcase for a {kind} result line ({type(line).__name__})")
    return cases


def junit_document(
    kind: str, job: Mapping[str, Any], cases: Sequence[Case], *, gate_lines: Sequence[str] = ()
) -> ET.ElementTree[ET.Element]:
    """The JUnit document: one suite for the job, its cases, the gate's misses as one failing case more."""
    all_cases = list(cases)
    if gate_lines:
        all_cases.append(
            Case("gate", "failure", f"{len(gate_lines)} figures missed their gate", list(gate_lines))
        )
    counts = {o: sum(1 for c in all_cases if c.outcome == o) for o in ("failure", "error", "skipped")}
    totals = {
        "tests": str(len(all_cases)),
        "failures": str(counts["failure"]),
        "errors": str(counts["error"]),
        "skipped": str(counts["skipped"]),
    }
    root = ET.Element("testsuites", {"name": "factgate", **totals})
    stamps = job.get("timestamps")
    created = stamps.get("created_at") if isinstance(stamps, Mapping) else None
    attributes = {"name": _clean(f"factgate {kind} job {job.get('id')}"), **totals}
    if created:
        attributes["timestamp"] = _clean(created)[:19]  # JUnit's xs:dateTime without a zone
    suite = ET.SubElement(root, "testsuite", attributes)
    props = ET.SubElement(suite, "properties")
    for key in ("id", "kind", "status"):
        ET.SubElement(props, "property", {"name": f"job.{key}", "value": _clean(job.get(key) or "")})
    for warning in job.get("warnings") or []:
        ET.SubElement(props, "property", {"name": "job.warning", "value": _clean(warning)})
    classname = f"factgate.{kind}"
    for case in all_cases:
        element = ET.SubElement(
            suite, "testcase", {"classname": classname, "name": _clean(case.name), "time": "0"}
        )
        body = _clean("\n".join(case.details))
        if case.outcome in ("failure", "error"):
            child = ET.SubElement(
                element, case.outcome, {"message": _clean(case.message), "type": case.outcome}
            )
            child.text = body
        elif case.outcome == "skipped":
            ET.SubElement(element, "skipped", {"message": _clean(case.message)})
        elif body:
            ET.SubElement(element, "system-out").text = body
    ET.indent(root)
    return ET.ElementTree(root)


def write_junit(
    path: Path,
    kind: str,
    job: Mapping[str, Any],
    lines: Iterable[Contract],
    *,
    gate_lines: Sequence[str] = (),
) -> None:
    """Write the job's JUnit XML to `path` (UTF-8, with the XML declaration)."""
    document = junit_document(kind, job, cases_of(kind, lines), gate_lines=gate_lines)
    path.parent.mkdir(parents=True, exist_ok=True)
    document.write(path, encoding="utf-8", xml_declaration=True)
