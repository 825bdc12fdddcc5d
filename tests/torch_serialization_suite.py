"""Runs torch's own ``test/test_serialization.py`` twice with pytest, in
subprocesses: with ``torch.load`` as torch has it, and with ``tensorplay.patch_torch()``
applied (the plugin ``torch_suite_patch``, loaded only then). Every test that
passes unpatched must pass patched, except the ones in ``EXCEPTIONS``: the one list
of tests of torch's internals, each with why, which docs/contributing/testing.md shows.

torch's test file is not in the wheel, and it is not kept in this repository (the
copies the project may read are for reading, not committing): take it at the
torch release the environment pins (2.13.0) and run
``python tests/torch_serialization_suite.py PATH/test_serialization.py``."""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter

TESTS = pathlib.Path(__file__).resolve().parent

# "Class::test" -> why it may pass unpatched and fail patched (Markdown: the Testing page
# shows each as "- `name`: reason").
EXCEPTIONS: dict[str, str] = {
    "TestSerialization::test_weights_only_error_unsafe_global_False": (
        "pins a limit of torch's pure-Python weights-only unpickler: it has no FRAME "
        "opcode, so a protocol-5 pickle fails there with `Unsupported operand 149` and "
        "`file an issue ...`; tensorplay reads protocols 4 and 5 and refuses the file "
        "for what it is, the global `TwoTensor` outside the allowlist."
    ),
}

OUTCOMES = ("passed", "failed", "skipped")


def run(test_file: str | os.PathLike, patched: bool, timeout: float = 3600) -> dict[str, str]:
    """Each test's outcome ("passed", "failed" or "skipped"), by "Class::test"."""
    test_file = pathlib.Path(test_file).resolve()
    with tempfile.TemporaryDirectory() as tmp:
        report = pathlib.Path(tmp) / "report.xml"
        command = [sys.executable, "-m", "pytest", str(test_file), "-q", "-p", "no:cacheprovider",
                   "--noconftest", "-c", os.devnull, "--rootdir", str(test_file.parent),
                   "-o", "junit_family=xunit2", f"--junitxml={report}"]
        if patched:
            command += ["-p", "torch_suite_patch"]
        # The plugin from here; tensorplay as this process imports it (the installed
        # package in CI, where python/ holds no built core).
        paths = [str(TESTS), os.environ.get("PYTHONPATH", "")]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
        subprocess.run(command, cwd=tmp, env=env, timeout=timeout,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        if not report.exists():
            raise RuntimeError(f"pytest wrote no report for {test_file} (patched={patched})")
        return outcomes(ET.parse(report).getroot())


def outcomes(root: ET.Element) -> dict[str, str]:
    found = {}
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
        if case.find("skipped") is not None:
            found[name] = "skipped"
        elif case.find("failure") is not None or case.find("error") is not None:
            found[name] = "failed"
        else:
            found[name] = "passed"
    return found


def counts(found: dict[str, str]) -> dict[str, int]:
    c = Counter(found.values())
    return {outcome: c[outcome] for outcome in OUTCOMES}


def regressions(unpatched: dict[str, str], patched: dict[str, str],
                exceptions: dict[str, str] = EXCEPTIONS) -> list[str]:
    """The tests that pass unpatched and do not pass patched, outside ``exceptions``."""
    return sorted(name for name, outcome in unpatched.items()
                  if outcome == "passed" and patched.get(name) != "passed" and name not in exceptions)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__)
        return 2
    results = {}
    for patched in (False, True):
        start = time.monotonic()
        results[patched] = run(argv[0], patched)
        c = counts(results[patched])
        print(f"{'patched' if patched else 'unpatched'}: {c['passed']} passed, {c['failed']} failed, "
              f"{c['skipped']} skipped in {time.monotonic() - start:.0f} s")
    excepted = [n for n in EXCEPTIONS if results[False].get(n) == "passed" and results[True].get(n) != "passed"]
    for name in excepted:
        print(f"exception: {name}: {EXCEPTIONS[name]}")
    bad = regressions(results[False], results[True])
    for name in bad:
        print(f"REGRESSION: {name} passes unpatched, {results[True].get(name, 'missing')} patched")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
