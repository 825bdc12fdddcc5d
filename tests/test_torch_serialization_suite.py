"""The runner of torch's own test_serialization.py (tests/torch_serialization_suite.py):
it finds the tests patching breaks, counts outcomes, and the Testing page shows its one
list of exceptions. torch's file is not kept here, so the runner runs a small test
file of this test's own, which patching breaks in one place."""
from __future__ import annotations

import pathlib
import textwrap

import pytest

pytest.importorskip("torch")

import torch_serialization_suite as suite  # noqa: E402

TESTING_PAGE = pathlib.Path(__file__).resolve().parent.parent / "docs" / "contributing" / "testing.md"

SAMPLE = textwrap.dedent('''
    import io
    import unittest

    import torch


    class TestSample(unittest.TestCase):
        def test_loads_either_way(self):
            f = io.BytesIO()
            torch.save({"x": torch.arange(3)}, f)
            f.seek(0)
            self.assertTrue(torch.equal(torch.load(f)["x"], torch.arange(3)))

        def test_sees_torchs_own_function(self):
            self.assertFalse(getattr(torch.load, "__tensorplay_patch__", False))

        def test_fails_either_way(self):
            self.assertEqual(1, 2)

        @unittest.skip("skipped either way")
        def test_skipped(self):
            pass
''')


def test_the_runner_finds_the_test_patching_breaks(tmp_path):
    path = tmp_path / "test_sample.py"
    path.write_text(SAMPLE)
    unpatched, patched = suite.run(path, patched=False), suite.run(path, patched=True)
    assert unpatched == {
        "TestSample::test_loads_either_way": "passed",
        "TestSample::test_sees_torchs_own_function": "passed",
        "TestSample::test_fails_either_way": "failed",
        "TestSample::test_skipped": "skipped",
    }
    assert patched == {**unpatched, "TestSample::test_sees_torchs_own_function": "failed"}
    assert suite.counts(unpatched) == {"passed": 2, "failed": 1, "skipped": 1}
    assert suite.regressions(unpatched, patched) == ["TestSample::test_sees_torchs_own_function"]
    assert suite.regressions(unpatched, patched, {"TestSample::test_sees_torchs_own_function": "why"}) == []


def test_the_testing_page_shows_every_exception_with_its_reason():
    page = TESTING_PAGE.read_text()
    section = page.split("## torch's own test suite", 1)[1].split("\n## ", 1)[0]
    listed = [line for line in section.splitlines() if line.startswith("- `")]
    assert len(listed) == len(suite.EXCEPTIONS)
    for name, reason in suite.EXCEPTIONS.items():
        assert f"- `{name}`: {reason}" in listed, name
