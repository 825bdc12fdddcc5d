"""tensorplay convert when safetensors (an optional dependency, the [convert]
extra) is not installed: the command and the function name the extra to install.

safetensors is a test dependency, so its absence is simulated in a fresh
interpreter: ``sys.modules['safetensors'] = None`` makes every import of it fail
as a missing package does (ModuleNotFoundError)."""
from __future__ import annotations

import subprocess
import sys
import textwrap

from conftest import TORCH_FIXTURES

HINT = "pip install 'tensorplay-serialization[convert]'"
SOURCE = str(TORCH_FIXTURES / "seed_batchnorm_state_dict.pt")


def _without_safetensors(code: str) -> subprocess.CompletedProcess[str]:
    prelude = "import sys\nsys.modules['safetensors'] = None\n"
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], capture_output=True, text=True)


def test_command_names_the_extra(tmp_path):
    out = tmp_path / "out.safetensors"
    done = _without_safetensors(f"""
        from tensorplay.cli import main
        sys.exit(main(["convert", {SOURCE!r}, {str(out)!r}]))
    """)
    assert done.returncode == 2, done.stderr
    assert HINT in done.stderr
    assert "safetensors package" in done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout == ""
    assert not out.exists()


def test_function_names_the_extra(tmp_path):
    out = tmp_path / "out.safetensors"
    done = _without_safetensors(f"""
        from tensorplay._convert import convert
        try:
            convert({SOURCE!r}, {str(out)!r})
        except ModuleNotFoundError as e:
            print(e.name)
            print(e)
        else:
            print("converted")
    """)
    assert done.returncode == 0, done.stderr
    name, message = done.stdout.splitlines()
    assert name == "safetensors"
    assert HINT in message
    assert not out.exists()
