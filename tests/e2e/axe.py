"""axe-core in headless Chromium: WCAG 2.1 A and AA rules (and axe's best practices) over the open page.

The vendored `vendor/axe.min.js` (see vendor/README.md) is evaluated into the page through the browser's
debugging protocol, which the page's Content-Security-Policy does not govern, so the page is checked
exactly as served: its CSP stays on and nothing is injected as a <script> element.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

AXE_JS = Path(__file__).resolve().parent / "vendor" / "axe.min.js"
# WCAG 2.0 and 2.1, levels A and AA (axe's tags for those success criteria), and axe's best practices
# (landmarks, heading order, a main landmark, ...), which the pages keep too.
WCAG_21_AA = ("wcag2a", "wcag2aa", "wcag21a", "wcag21aa")
RULE_TAGS = (*WCAG_21_AA, "best-practice")
BLOCKING = frozenset({"serious", "critical"})

_RUN = """async (tags) => {
  const result = await window.axe.run(document, {
    runOnly: { type: "tag", values: tags },
    resultTypes: ["violations", "incomplete"],
  });
  const shape = (v) => ({
    id: v.id,
    impact: v.impact,
    help: v.help,
    nodes: v.nodes.map((n) => ({ target: n.target.join(" "), summary: n.failureSummary || "" })),
  });
  return { violations: result.violations.map(shape), incomplete: result.incomplete.map(shape) };
}"""


@dataclass(frozen=True)
class Violation:
    """One rule broken on a page, with the elements that break it."""

    rule: str
    impact: str
    help: str
    nodes: list[dict[str, str]]

    @property
    def blocking(self) -> bool:
        return self.impact in BLOCKING

    def describe(self, limit: int = 5) -> str:
        where = "; ".join(n["target"] for n in self.nodes[:limit])
        more = f" (+{len(self.nodes) - limit} more)" if len(self.nodes) > limit else ""
        first = self.nodes[0]["summary"].replace("\n", " ") if self.nodes else ""
        return f"[{self.impact}] {self.rule}: {self.help} — {len(self.nodes)} node(s): {where}{more}. {first}"


@dataclass(frozen=True)
class AxeResult:
    """What axe found on one page: rules broken, and checks it could not decide (for a person to review,
    e.g. the contrast of text over an image)."""

    violations: list[Violation]
    incomplete: list[Violation]

    @property
    def blocking(self) -> list[Violation]:
        return [v for v in self.violations if v.blocking]


def _violations(raw: list[dict[str, Any]]) -> list[Violation]:
    return [Violation(v["id"], v["impact"] or "unknown", v["help"], v["nodes"]) for v in raw]


def check_page(page: Any) -> AxeResult:
    """Run the rules (WCAG 2.0/2.1 A and AA, and axe's best practices) on the open page."""
    if not page.evaluate("() => typeof window.axe !== 'undefined'"):
        page.evaluate(AXE_JS.read_text(encoding="utf-8"))
    raw = page.evaluate(_RUN, list(RULE_TAGS))
    return AxeResult(_violations(raw["violations"]), _violations(raw["incomplete"]))


def report(name: str, result: AxeResult, *, verbose: bool = False) -> str:
    """A printable summary for one page: every violation, and the checks left for a person (with the
    elements concerned when `verbose`)."""
    review = ""
    if result.incomplete:
        rules = ", ".join(f"{v.rule} ×{len(v.nodes)}" for v in result.incomplete)
        review = f"; for a person to review: {rules}"
    head = f"{len(result.violations)} violation(s)" if result.violations else "no violation"
    lines = [f"axe {name}: {head}{review}"]
    lines += ["  " + v.describe() for v in result.violations]
    if verbose:
        lines += ["  to review: " + v.describe(limit=3) for v in result.incomplete]
    return "\n".join(lines)
