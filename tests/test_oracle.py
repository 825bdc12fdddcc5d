"""The oracle harness (tests/oracle/): the real readers judge the scanner.

(a) Every generator's hostile seed cases make at least one real reader create the
    marker, and its benign ones make none: a broken generator or sandbox fails here.
(b) Every seed case, and a short fixed-seed run over all generators (mutation
    included; ``ORACLE_CI_CASES`` cases, default 30), shows no violation beyond
    ``KNOWN_VIOLATIONS``: what the scanner gets wrong today, each with its reason.
    Remove an entry when the fix lands (``test_known_violations_still_occur``
    fails for an entry nothing matches any more).
(c) The sandbox itself: a hang is killed at the timeout, runaway CPU at its
    limit, runaway memory at the address-space cap, a crash is reported as one,
    and a reader that kills the fork server costs one restart.
"""
from __future__ import annotations

import fnmatch
import json
import os
import random
import tempfile

import pytest

pytest.importorskip("joblib")
pytest.importorskip("pandas")
pytest.importorskip("py7zr")
pytest.importorskip("tensordict")
pytest.importorskip("torch")

from oracle import check, generators, mutate  # noqa: E402
from oracle.cases import Case  # noqa: E402
from oracle.sandbox import Sandbox  # noqa: E402

CI_CASES = int(os.environ.get("ORACLE_CI_CASES", "30"))
CI_SEED = 20261206

# (class, generator, variant pattern): why the scanner disagrees with the readers today.
KNOWN_VIOLATIONS: dict[tuple[str, str, str], str] = {}


def known(cls: str, case: Case) -> str | None:
    variant = case.variant.removesuffix("+mut")
    for (k_cls, k_gen, pattern), reason in KNOWN_VIOLATIONS.items():
        if k_cls == cls and k_gen == case.generator and fnmatch.fnmatchcase(variant, pattern):
            return reason
    return None


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(timeout=20.0) as box:
        yield box


@pytest.fixture(scope="module")
def workdir():
    with tempfile.TemporaryDirectory(prefix="oracle-ci-") as d:
        yield d


GENERATORS = generators.load()
_SEEN: list[tuple[str, Case]] = []  # every violation met in this module, for the last test


@pytest.fixture(scope="module")
def seed_verdicts(sandbox, workdir):
    return {name: [check.check(sandbox, case, workdir) for case in module.seeds()]
            for name, module in GENERATORS.items()}


@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_seed_cases_fire_as_labelled(seed_verdicts, name):
    verdicts = seed_verdicts[name]
    assert any(v.case.hostile for v in verdicts) and any(v.case.hostile is False for v in verdicts)
    wrong = [(v.case.variant, v.case.hostile, v.fired) for v in verdicts
             if v.case.hostile is not None and bool(v.fired) != v.case.hostile]
    assert not wrong, f"seed cases whose readers disagree with their label (variant, hostile, fired): {wrong}"


def _unexplained(verdicts) -> list[str]:
    out = []
    for v in verdicts:
        for violation in v.violations:
            _SEEN.append((violation.cls, v.case))
            if known(violation.cls, v.case) is None:
                out.append(f"{violation.cls} [{v.case.generator}: {v.case.variant}] {violation.detail}")
    return out


def test_seed_cases_show_only_known_violations(seed_verdicts):
    unexplained = _unexplained(v for verdicts in seed_verdicts.values() for v in verdicts)
    assert not unexplained, "\n".join(unexplained)


def test_fixed_seed_run_shows_only_known_violations(sandbox, workdir):
    rng = random.Random(CI_SEED)
    names = sorted(GENERATORS)
    corpus = [c.data for g in GENERATORS.values() for c in g.seeds() if not c.folder][:100]
    verdicts = []
    for i in range(CI_CASES):
        case = GENERATORS[names[i % len(names)]].generate(rng)
        if rng.random() < 0.3:
            case = mutate.mutate(case, rng, corpus)
        verdicts.append(check.check(sandbox, case, workdir))
    unexplained = _unexplained(verdicts)
    assert not unexplained, "\n".join(unexplained)


def test_known_violations_still_occur(seed_verdicts):
    """An entry nothing matched in this module's runs is stale: the fix landed, or
    the generator changed. Runs last in the module (pytest keeps file order), after
    the runs that fill ``_SEEN`` (which the fixture makes run first)."""
    stale = [key for key in KNOWN_VIOLATIONS
             if not any(known(cls, case) == KNOWN_VIOLATIONS[key] and cls == key[0] and case.generator == key[1]
                        and fnmatch.fnmatchcase(case.variant.removesuffix("+mut"), key[2]) for cls, case in _SEEN)]
    assert not stale, f"KNOWN_VIOLATIONS entries no run matched: {stale}"


def test_export_string_edits_reach_every_string_and_change_one():
    """The export generator's string edits reach the strings torch reads as code or
    names, those inside JSON in a string and the names that are keys included, and
    each changes the one string it chose and nothing else."""
    from oracle import gen_export

    program = gen_export.Pt2("kwargs").program
    found = list(gen_export.slots(program))
    labels = {label for label, _ in found}
    for wanted in (".forward_arg_names[]", ".as_string", ".in_spec<json>[].children_spec[].context<json>[]",
                   ".graph.tensor_values.* (the name)", ".nodes[].target"):
        assert any(label.endswith(wanted) for label in labels), (wanted, sorted(labels))
    text = json.dumps(program)
    for _, path in found:
        assert json.dumps(gen_export.replace(program, path, lambda old: old)) == text  # nothing else moves
        assert json.dumps(gen_export.replace(program, path, lambda old: "tp-edited")).count("tp-edited") == 1
    assert json.dumps(program) == text  # edits copy


# --- (c) the sandbox itself --------------------------------------------------------------

@pytest.fixture(scope="module")
def misbehaving():
    with Sandbox(modules=("oracle.misbehaving",), timeout=3.0, cpu_seconds=1, extra_gib=1.0) as box:
        yield box


@pytest.fixture(scope="module")
def a_file(workdir):
    path = os.path.join(workdir, "any.bin")
    with open(path, "wb") as f:
        f.write(b"bytes")
    return path


def test_sandbox_kills_a_hang_at_the_timeout(misbehaving, a_file):
    outcome = misbehaving.run(a_file, False, ["hang"], timeout=1.0)["hang"]
    assert outcome.status == "timeout" and 1.0 <= outcome.seconds < 3.0


def test_sandbox_stops_runaway_cpu(misbehaving, a_file):
    outcome = misbehaving.run(a_file, False, ["spin"], timeout=10.0)["spin"]
    assert outcome.status == "crashed" and outcome.exc in ("SIGXCPU", "SIGKILL"), outcome


def test_sandbox_stops_runaway_memory(misbehaving, a_file):
    outcome = misbehaving.run(a_file, False, ["allocate"], timeout=20.0)["allocate"]
    assert (outcome.status, outcome.exc) in (("raised", "builtins.MemoryError"), ("crashed", "SIGKILL"),
                                             ("crashed", "SIGSEGV"), ("crashed", "SIGABRT")), outcome


@pytest.mark.parametrize("job, signal", [("segfault", "SIGSEGV"), ("abort", "SIGABRT")])
def test_sandbox_reports_a_crash(misbehaving, a_file, job, signal):
    outcome = misbehaving.run(a_file, False, [job])[job]
    assert outcome.status == "crashed" and outcome.exc == signal, outcome


def test_sandbox_sees_the_marker(misbehaving, a_file):
    outcomes = misbehaving.run(a_file, False, ["touch", "touch_later", "quiet"])
    assert outcomes["touch"].fired and outcomes["touch_later"].fired
    assert not outcomes["quiet"].fired and outcomes["quiet"].status == "ok"


def test_sandbox_survives_a_reader_that_kills_it(misbehaving, a_file):
    restarts = misbehaving.restarts
    outcomes = misbehaving.run(a_file, False, ["kill_server"])
    assert outcomes["kill_server"].status == "crashed" and misbehaving.restarts > restarts
    assert misbehaving.run(a_file, False, ["quiet"])["quiet"].status == "ok"
