"""Real readers run on hostile files, each in a subprocess of its own: the oracle
for tests that say "this file carries a working payload". The subprocess works in a
fresh folder (its cwd, HOME and TMPDIR), with its address space, CPU time and file
sizes capped, and a wall-clock bound; the payloads the tests plant create
``tensorplay_pwned_marker`` in the cwd, and nothing else."""
from __future__ import annotations

import os
import pathlib
import resource
import subprocess
import sys
import tempfile

MARKER = "tensorplay_pwned_marker"
TIMEOUT = 120.0


def _limits() -> None:
    os.setsid()
    resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))
    resource.setrlimit(resource.RLIMIT_CPU, (120, 120))
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 30, 1 << 30))


def runs_payload(code: str, **variables: object) -> bool:
    """Run ``code`` (Python; ``variables`` are bound as names, by their ``repr``)
    in a sandboxed subprocess; whether it created the marker. What the reader
    raises is not the question: many readers run the payload, then fail."""
    with tempfile.TemporaryDirectory(prefix="tensorplay-oracle-") as folder:
        env = {**os.environ, "HOME": folder, "TMPDIR": folder, "PYTHONWARNINGS": "ignore"}
        prelude = "".join(f"{name} = {value!r}\n" for name, value in variables.items())
        subprocess.run([sys.executable, "-c", prelude + code], cwd=folder, env=env, preexec_fn=_limits,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=TIMEOUT, check=False)
        return (pathlib.Path(folder) / MARKER).exists()


# What a payload runs: one shell command whose only effect is the marker, in the cwd.
COMMAND = f"touch {MARKER}"


def protocol_0_payload() -> bytes:
    """``os.system(COMMAND)`` as protocol 0 writes it: plain text, no PROTO."""
    return b"cposix\nsystem\n(S'" + COMMAND.encode() + b"'\ntR."


def torch_zip_payload() -> bytes:
    """A checkpoint as ``torch.save`` lays it out whose ``data.pkl`` (deflated, so
    no byte of it is in plain sight) calls ``os.system(COMMAND)``:
    ``torch.load(weights_only=False)`` runs it."""
    import io
    import zipfile

    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("archive/data.pkl", b"\x80\x02" + protocol_0_payload(), compress_type=zipfile.ZIP_DEFLATED)
        z.writestr("archive/byteorder", b"little")
        z.writestr("archive/version", b"3\n")
    return out.getvalue()
