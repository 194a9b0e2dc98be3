"""Every promise of docs/reliability.md is checked, and every probe row checks one of them.

The page names each promise in bold brackets, ``**[name]**``, and ends each section with a "Checked by" line of
tests. A probe table is a module-level list (or dict) named ``*_PROBES`` in tests/integration/test_probes.py and
test_probes_service.py; the first field of each of its rows names the promise the row checks. The tables are read
from the modules' code as written (a list spliced in with ``*NAME`` counts where it is spliced), without importing
them. This fails when:

- a section has no "Checked by" line, or names a test that does not exist (a test function of that name in that file);
- a promise has no probe row. A promise no row can check (a process killed, threads, a load test, a property of
  what a search returns) is listed in :data:`CHECKED_BY_TESTS` with the tests that check it, which must exist; a
  promise listed there has no row (a row, where one can be written, is the check);
- a row names a promise the page does not hold, or a promise is named twice on the page.
"""

import ast
import functools
import os
import re
from typing import Dict, Iterable, Iterator, List, Optional, Tuple

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PAGE = os.path.join(ROOT, "docs", "reliability.md")
#: the modules whose ``*_PROBES`` tables hold the probe rows
PROBE_MODULES = ("tests/integration/test_probes.py", "tests/integration/test_probes_service.py")
#: a promise's name where the page states it
PROMISE = re.compile(r"\*\*\[([a-z0-9]+(?:-[a-z0-9]+)*)\]\*\*")

#: the promises no probe row can check -> the tests that check them (``path::test_name``)
CHECKED_BY_TESTS: Dict[str, List[str]] = {
    "unknown-words-said": [
        "tests/integration/test_serving.py::"
        "test_a_sentence_mostly_of_unknown_words_is_translated_with_a_warning_and_counted_by_the_service"],
    "translator-threads": [
        "tests/integration/test_serving.py::test_many_threads_translate_each_sentence_as_its_own_speaker"],
    "fit-beside-translations": [
        "tests/integration/test_service.py::test_translations_go_on_while_a_speaker_is_fitted_and_it_is_used_once_stored"],
    "files-whole": [
        "tests/integration/test_fault_injection.py::test_a_checkpoint_save_killed_leaves_the_previous_checkpoint",
        "tests/integration/test_fault_injection.py::test_an_adaptation_save_killed_leaves_the_previous_model",
        "tests/integration/test_fault_injection.py::test_a_vector_export_killed_leaves_the_previous_file"],
    "leftovers-removed": [
        "tests/integration/test_fault_injection.py::"
        "test_the_next_write_removes_only_leftovers_of_finished_processes_of_this_machine"],
    "full-disk": [
        "tests/unit/test_atomic_write.py::test_a_full_disk_ends_in_one_message_and_keeps_the_earlier_file",
        "tests/integration/test_probes.py::test_a_full_disk_during_a_save_ends_in_one_message"],
    "continued-training-keeps-speakers": [
        "tests/integration/test_continued_training.py::test_an_onboarded_speaker_keeps_its_sentence_count"],
    "vectors-finite": [
        "tests/unit/test_speaker_vectors.py::test_non_finite_rows_are_refused_naming_the_file_and_speaker"],
    "vectors-far-out-reported": [
        "tests/unit/test_speaker_vectors.py::test_rows_far_outside_the_models_range_are_reported"],
    "mean-speaker-fixed": [
        "tests/unit/test_speaker_bias.py::test_onboarded_speakers_do_not_move_the_mean_speaker_and_a_checkpoint_keeps_it"],
    "known-speakers-unchanged": [
        "tests/integration/test_speaker_words.py::"
        "test_onboarding_or_replacing_a_speaker_leaves_the_other_speakers_rows_and_translations_as_they_were",
        "tests/unit/test_speaker_words.py::"
        "test_onboarding_and_updating_a_speaker_leave_the_known_speakers_rows_as_they_were_built",
        "tests/unit/test_speaker_words.py::test_a_forgotten_speaker_leaves_the_build_too"],
    "memory-no-worse": [
        "tests/integration/test_speaker_words.py::test_a_memory_that_beats_nothing_is_written_with_weight_0_and_says_so",
        "tests/unit/test_words_calibration.py::test_the_network_alone_is_chosen_when_it_is_already_right"],
    "weight-0-is-the-network": [
        "tests/integration/test_probes.py::test_a_memory_of_weight_0_decodes_as_the_network_under_every_search"],
    "sampling-normalized": ["tests/integration/test_probes.py::test_sampling_draws_from_the_fused_step_normalized"],
    "diverse-beam-by-position": [
        "tests/integration/test_probes.py::test_diverse_beam_search_gives_a_sentence_the_same_hypotheses_in_any_batch"],
    "policy-flag-as-searched": [
        "tests/integration/test_service.py::"
        "test_every_flag_says_what_its_search_knew_while_clients_translate_and_speakers_are_onboarded"],
    "page-within-limits": [
        "tests/integration/test_service_page.py::"
        "test_the_page_splits_what_it_sends_to_the_services_limits_and_says_what_it_cannot_send"],
    "skip-broken-speakers": [
        "tests/integration/test_probes_service.py::"
        "test_a_store_that_cannot_be_read_is_refused_with_how_to_recover_and_can_be_served_without_its_broken_speakers",
        "tests/integration/test_probes_service.py::"
        "test_the_command_refuses_a_damaged_store_in_one_line_and_starts_with_skip_broken_speakers"],
    "store-damaged-while-serving": [
        "tests/integration/test_probes_service.py::"
        "test_a_record_damaged_while_the_service_runs_gets_503_and_the_others_are_served"],
    "acknowledged-writes-survive": [
        "tests/integration/test_store.py::test_a_write_a_replica_acknowledged_survives_its_kill_9"],
    "one-writer-per-name": [
        "tests/integration/test_store.py::test_of_processes_writing_one_name_at_once_exactly_one_succeeds",
        "tests/integration/test_store.py::test_replicas_onboarding_one_name_at_once_answer_201_once",
        "tests/integration/test_store.py::test_an_update_made_meanwhile_by_another_process_is_never_overwritten"],
    "replicas-see-writes": [
        "tests/integration/test_store.py::test_replicas_see_each_others_writes_at_their_next_request"],
    "server-away-503": [
        "tests/integration/test_store.py::"
        "test_a_postgresql_server_that_goes_away_gets_503_and_the_service_goes_on_once_it_is_back"],
}

#: a row: (where, the promise it names, or None)
Row = Tuple[str, Optional[str]]


def _sections(text: str) -> List[Tuple[str, str]]:
    """Each ``## `` section of the page: its title and its text."""
    parts = re.split(r"^## (.+)$", text, flags=re.MULTILINE)
    return list(zip(parts[1::2], parts[2::2]))


@functools.lru_cache(maxsize=None)
def _tests_of(path: str) -> set:
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    return {node.name for node in tree.body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_")}


def _missing_test(node_id: str) -> bool:
    path, _, name = node_id.partition("::")
    return not os.path.isfile(os.path.join(ROOT, path)) or name not in _tests_of(path)


def _section_problems(text: str) -> List[str]:
    problems = []
    for title, body in _sections(text):
        checked = [line for line in body.splitlines() if line.startswith("Checked by: ")]
        named = re.findall(r"`([^`]+)::([A-Za-z_0-9]+)`", checked[0]) if len(checked) == 1 else []
        if not named:
            problems.append(f"section {title!r}: no 'Checked by: `tests/...py::test_name`, ...' line")
        for path, name in named:
            if _missing_test(f"{path}::{name}"):
                problems.append(f"section {title!r}: {path} has no test {name}")
    return problems


def _rows_in(node: ast.AST, lists: Dict[str, ast.AST]) -> Iterator[Tuple[Optional[str], ast.AST]]:
    """The rows of a table's value (a list of rows, a dict of lists of rows or of rows), each with its key in a dict;
    ``*NAME`` in a list splices in the rows of the module-level list ``NAME`` (``lists``)."""
    if isinstance(node, ast.Dict):
        for key, value in zip(node.keys, node.values):
            label = key.value if isinstance(key, ast.Constant) else None
            rows = _rows_in(value, lists) if isinstance(value, ast.List) else [(None, value)]
            yield from ((label, row) for _, row in rows)
    elif isinstance(node, ast.List):
        for element in node.elts:
            if isinstance(element, ast.Starred) and isinstance(element.value, ast.Name):
                yield from _rows_in(lists[element.value.id], lists)
            else:
                yield None, element


def _promise_of(row: ast.AST) -> Optional[str]:
    """The first field of a row (a tuple, or ``pytest.param(...)``'s first value), if it is a string."""
    fields = row.args if isinstance(row, ast.Call) else getattr(row, "elts", [])
    first = fields[0] if fields else None
    return first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else None


def probe_rows() -> List[Row]:
    """Every row of the probe tables (module-level ``*_PROBES`` of :data:`PROBE_MODULES`): where it is, its promise."""
    rows: List[Row] = []
    for path in PROBE_MODULES:
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            tree = ast.parse(f.read())
        assigned = {target.id: node.value for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign))
                    for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
                    if isinstance(target, ast.Name) and node.value is not None}
        for name, value in assigned.items():
            if name.endswith("_PROBES"):
                for key, row in _rows_in(value, assigned):
                    label = f"{path}:{row.lineno} {name}" + (f"[{key!r}]" if key is not None else "")
                    rows.append((label, _promise_of(row)))
    return rows


def promise_problems(text: str, rows: Iterable[Row], checked_by_tests: Dict[str, List[str]]) -> List[str]:
    """What breaks the rules of the module's text, given the page's ``text``, the probe ``rows`` and the promises
    checked by tests alone."""
    named = PROMISE.findall(text)
    promises = set(named)
    problems = [f"the page names the promise {p!r} twice" for p in sorted(promises) if named.count(p) > 1]
    probed: Dict[str, int] = {}
    for where, promise in rows:
        if promise is None:
            problems.append(f"{where}: its first field names no promise of docs/reliability.md")
        elif promise not in promises:
            problems.append(f"{where}: names the promise {promise!r}, which docs/reliability.md does not hold")
        else:
            probed[promise] = probed.get(promise, 0) + 1
    for promise, tests in checked_by_tests.items():
        if promise not in promises:
            problems.append(f"CHECKED_BY_TESTS: {promise!r} is not a promise of docs/reliability.md")
        elif promise in probed:
            problems.append(f"CHECKED_BY_TESTS: {promise!r} has probe rows ({probed[promise]}): leave it to them")
        problems += [f"CHECKED_BY_TESTS: {promise!r}: there is no test {node_id}" for node_id in tests
                     if _missing_test(node_id)]
        if not tests:
            problems.append(f"CHECKED_BY_TESTS: {promise!r} names no test")
    for promise in sorted(promises - set(probed) - set(checked_by_tests)):
        problems.append(f"the promise {promise!r} has no probe row (and is not in CHECKED_BY_TESTS)")
    return problems


def _page() -> str:
    with open(PAGE, encoding="utf-8") as f:
        return f.read()


def test_every_section_of_the_reliability_page_names_tests_that_exist():
    text = _page()
    assert len(_sections(text)) >= 10
    assert _section_problems(text) == []


def test_a_section_without_its_tests_or_naming_a_missing_one_is_found():
    text = _page()
    line = next(line for line in text.splitlines() if line.startswith("Checked by: "))
    path, name = re.findall(r"`([^`]+)::([A-Za-z_0-9]+)`", line)[0]
    assert len(_section_problems(text.replace(line, "", 1))) == 1
    assert _section_problems(text.replace(f"::{name}`", f"::{name}_gone`", 1)) == [
        f"section {_sections(text)[0][0]!r}: {path} has no test {name}_gone"]


def test_every_promise_has_a_probe_row_or_its_tests_and_every_row_names_a_promise_of_the_page():
    text, rows = _page(), probe_rows()
    promises = set(PROMISE.findall(text))
    print(f"{len(promises)} promises, {len(rows)} probe rows, {len(CHECKED_BY_TESTS)} promises checked by tests alone")
    assert len(promises) >= 50 and len(rows) >= 300, (len(promises), len(rows))
    assert all(PROMISE.findall(body) for _, body in _sections(text)), "a section without a promise"
    assert promise_problems(text, rows, CHECKED_BY_TESTS) == []


@pytest.mark.parametrize("break_it,problem", [
    # a promise written without a row
    (lambda text, rows, tests: (text + "\n- **[a-new-promise]** kept.\n", rows, tests),
     "the promise 'a-new-promise' has no probe row (and is not in CHECKED_BY_TESTS)"),
    # a row naming a promise the page does not hold (a typo, or a promise taken off the page)
    (lambda text, rows, tests: (text, rows + [("a row", "files-hole")], tests),
     "a row: names the promise 'files-hole', which docs/reliability.md does not hold"),
    (lambda text, rows, tests: (text.replace("**[not-utf8]**", "", 1), rows, tests),
     "names the promise 'not-utf8', which docs/reliability.md does not hold"),
    (lambda text, rows, tests: (text, rows + [("a row", None)], tests),
     "a row: its first field names no promise of docs/reliability.md"),
    # a promise checked by tests alone whose test is gone, or that has rows after all
    (lambda text, rows, tests: (text, rows, {**tests, "full-disk": ["tests/unit/test_atomic_write.py::test_gone"]}),
     "CHECKED_BY_TESTS: 'full-disk': there is no test tests/unit/test_atomic_write.py::test_gone"),
    (lambda text, rows, tests: (text, rows, {**tests, "not-utf8": ["tests/unit/test_atomic_write.py::test_gone"]}),
     "CHECKED_BY_TESTS: 'not-utf8' has probe rows"),
    (lambda text, rows, tests: (text.replace("**[files-whole]**", "**[files-whole]** **[files-whole]**"), rows, tests),
     "the page names the promise 'files-whole' twice"),
])
def test_a_promise_without_a_row_and_a_row_without_a_promise_are_found(break_it, problem):
    found = promise_problems(*break_it(_page(), probe_rows(), CHECKED_BY_TESTS))
    assert any(problem in p for p in found), found


def test_taking_any_promise_off_the_page_fails_for_its_rows_or_its_tests():
    text, rows = _page(), probe_rows()
    unchecked = [promise for promise in sorted(set(PROMISE.findall(text)))
                 if not promise_problems(text.replace(f"**[{promise}]**", ""), rows, CHECKED_BY_TESTS)]
    assert unchecked == []
