"""The recipe registry: every kind has a part in every layer, and the tables derived from it agree."""

from __future__ import annotations

import pytest

from checks.contracts import Contract
from checks.recipes import ENDPOINTS, RECIPES, Recipe, StageSpec, kind_names, recipe_for
from checks.registry import MissingPartError, Registry
from cli.kinds import KINDS as CLI_KINDS
from jobs.kinds import KINDS as JOB_KINDS
from web.kinds import CSV_RENDERERS, RESULT_ITERATORS
from web.kinds import KINDS as WEB_KINDS
from workers.kinds import KINDS as WORKER_KINDS

LAYERS = {"jobs": JOB_KINDS, "workers": WORKER_KINDS, "web": WEB_KINDS, "cli": CLI_KINDS}


def test_the_built_in_kinds_in_their_order() -> None:
    assert kind_names()[:3] == ("claims", "answer", "quote")
    assert [recipe_for(k).title for k in kind_names()[:3]] == ["Claims", "Answer check", "Quote finder"]


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_every_layer_has_a_part_for_every_recipe(layer: str) -> None:
    registry = LAYERS[layer]
    registry.require(kind_names())  # raises MissingPartError naming the kind and the folder
    assert set(registry.names()) == set(RECIPES.names())


def test_every_stage_of_every_recipe_has_a_handler_and_an_endpoint() -> None:
    for name in kind_names():
        recipe = recipe_for(name)
        handlers = WORKER_KINDS.get(name).handlers
        assert set(handlers) == {s.name for s in recipe.stages}, name
        assert all(s.endpoint in ENDPOINTS for s in recipe.stages)
        assert issubclass(recipe.result_line, Contract) and issubclass(recipe.summary, Contract)
        # staged kinds have a stage machine in jobs/, one-stage kinds have none
        assert (JOB_KINDS.get(name).machine is not None) == recipe.staged, name


def test_the_derived_tables_list_every_kind() -> None:
    assert set(RESULT_ITERATORS) == set(CSV_RENDERERS) == set(kind_names())
    with pytest.raises(KeyError):
        RESULT_ITERATORS["nope"]


def test_a_missing_part_fails_loudly_and_names_it() -> None:
    registry: Registry[int] = Registry("test", "checks.kinds")
    registry.register("claims", 1)
    with pytest.raises(MissingPartError, match=r"no part for job kind\(s\) answer, quote"):
        registry.require(["claims", "answer", "quote"])
    with pytest.raises(MissingPartError, match="'echo'"):
        registry.get("echo")
    with pytest.raises(ValueError, match="registered twice"):
        registry.register("claims", 2)


def test_a_recipe_must_name_known_endpoints_and_distinct_stages() -> None:
    base = recipe_for("claims")
    with pytest.raises(ValueError, match="endpoint"):
        Recipe(**{**base.__dict__, "name": "x", "stages": (StageSpec("a", "telnet"),)})
    with pytest.raises(ValueError, match="twice"):
        Recipe(**{**base.__dict__, "name": "x", "stages": (StageSpec("a"), StageSpec("a"))})
    with pytest.raises(ValueError, match="no stage"):
        Recipe(**{**base.__dict__, "name": "x", "stages": ()})


def test_a_report_stored_by_an_older_version_still_makes_a_results_line() -> None:
    """Missing or null common fields of a stored report read as their defaults: an export never stops."""
    from checks.kinds import answer, quote

    old = {"kind": "answer", "incomplete_steps": None, "summary": None, "final": None}
    line = answer.result_line("q1", "Q?", "done", old)
    assert line.outcome is None and line.incomplete_steps == [] and line.final_answer is None
    assert line.report is not None and line.report.summary == {}
    assert quote.result_line("q1", "Q?", "failed", {"status": "failed"}).outcome == "failed"
    assert quote.result_line("q1", "Q?", "pending", None).report is None


def test_the_new_job_page_and_csv_bodies_read_the_recipes() -> None:
    """No per-kind table outside the recipes: the page's option groups and a CSV body's header come from
    `option_names` and `row_required` / `row_fields`."""
    from checks.csv_rows import csv_columns
    from web.pages_new_job import OPTION_GROUPS, _option_groups

    recipes = [recipe_for(k) for k in ("claims", "answer", "quote", "citations")]
    assert _option_groups(recipes) == {
        "claims-options": "claims",
        "citations-options": "citations",
        "questions-options": "answer quote",
        "common-options": "claims answer quote citations",
    }
    assert set(OPTION_GROUPS["claims-options"].values()) <= recipes[0].option_names
    assert set(OPTION_GROUPS["citations-options"].values()) <= recipes[3].option_names
    assert csv_columns("claims") == (("id", "claim"), ("id", "claim", "label", "kind", "source"))
    assert csv_columns("quote")[0] == ("id", "question")
    for recipe in recipes:
        assert set(recipe.row_required) <= set(recipe.row_fields) and recipe.description, recipe.name
