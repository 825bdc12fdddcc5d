"""The ``tensorplay`` command line: ``scan``, ``inspect`` and ``convert``."""
from __future__ import annotations

import argparse
import os
import sys
import time

from . import scanner

EXIT_CLEAN, EXIT_UNSAFE, EXIT_UNREADABLE = 0, 1, 2


class _Progress:
    """A one-line progress bar on stderr, only when it is a terminal."""

    def __init__(self, enabled: bool):
        self.enabled = enabled

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        width = 30
        filled = width * done // max(total, 1)
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} files")
        if done == total:
            sys.stderr.write("\n")
        sys.stderr.flush()


def _print_table(reports: list[scanner.ScanReport], passed_over: list[tuple[str, str]] = ()) -> None:
    for r in reports:
        skipped = f"  ({r.skipped_because})" if r.skipped_because else ""
        print(f"{r.verdict.upper():<11} {r.format:<16} {r.path}{skipped}")
        if r.reached_from is not None:
            item = f" ({r.reached_from.item})" if r.reached_from.item else ""
            print(f"{'':<11} reached from {r.reached_from.source}{item}: {r.reached_from.reader}")
        for f in r.findings:
            kind = "dangerous" if f.dangerous else "not allowlisted"
            where = f"{f.location} @ {f.offset}" if f.location else f"@ {f.offset}"
            print(f"{'':<11} {f.name}  [{kind}]  {where}")
        for p in r.problems:
            print(f"{'':<11} {p}")
        if r.allowlisted is not None:
            _print_imports(r)
    counts = {v: sum(r.verdict == v for r in reports) for v in ("clean", "unsafe", "unreadable", "skipped")}
    summary = ", ".join(f"{n} {v}" for v, n in counts.items())
    print(f"\n{len(reports)} files: {summary}")
    if passed_over:
        reasons: dict[str, int] = {}
        for _, why in passed_over:
            reasons[why] = reasons.get(why, 0) + 1
        print("passed over in folders: " + "; ".join(f"{n} x {why}" for why, n in reasons.items()))


def _print_imports(r: scanner.ScanReport) -> None:
    """Every global the file's pickles import, each once, as a hub's file view lists them."""
    seen: dict[str, tuple[str, int]] = {}
    for f, allowlisted in r.imports:
        status = "allowlisted" if allowlisted else "dangerous" if f.dangerous else "not allowlisted"
        _, n = seen.get(f.name, (status, 0))
        seen[f.name] = (status, n + 1)
    print(f"{'':<11} imports ({len(seen)}):")
    for name, (status, n) in seen.items():
        times = f" x{n}" if n > 1 else ""
        print(f"{'':<13} {name}  [{status}]{times}")


def exit_code(reports: list[scanner.ScanReport], policy: scanner.Policy | None = None) -> int:
    """1 if a global fails the policy (it outranks unreadable), 2 if an unreadable
    file does or there was nothing to scan, else 0."""
    policy = policy or scanner.Policy()
    if any(policy.fails(f) for r in reports for f in (*r.findings, *(p for p in r.problems if p.runs_code))):
        return EXIT_UNSAFE
    if not reports or (policy.fails(None) and any(r.verdict == "unreadable" for r in reports)):
        return EXIT_UNREADABLE
    return EXIT_CLEAN


def _byte_size(text: str) -> int:
    """``1024``, ``10K``, ``512M`` or ``2G`` (powers of 1024), for ``--max-file-size``."""
    try:
        return scanner.byte_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _policy(args: argparse.Namespace) -> scanner.Policy:
    """The settings file's policy (``--config``, else the nearest pyproject.toml's
    ``[tool.tensorplay.scan]``), with what the command line says over it:
    ``--allow`` adds to its allowlist; the other flags replace its values."""
    from ._allow import check_names

    settings = (scanner.Settings() if args.no_config else
                scanner.Settings.read(args.config) if args.config else
                scanner.Settings.find() or scanner.Settings())
    allow = [*settings.allow, *args.allow]
    check_names(allow, patterns=False)
    selection = scanner.Selection(args.include or settings.include, args.exclude or settings.exclude,
                                  settings.max_file_size if args.max_file_size is None else args.max_file_size)
    return scanner.Policy(args.fail_on or settings.fail_on or "unreadable", allow, selection, args.pickles_only,
                          settings.path)


def _scan(args: argparse.Namespace) -> int:
    from ._allow import AllowError

    try:
        policy = _policy(args)
    except (AllowError, scanner.SettingsError) as e:
        print(f"tensorplay scan: {e}", file=sys.stderr)
        return EXIT_UNREADABLE
    progress = _Progress(sys.stderr.isatty())
    stream = _stream_lines if args.format == "jsonl" and args.output is None else None
    started, clock = _now(), time.perf_counter()
    passed_over: list[tuple[str, str]] = []
    client = None
    if args.redirect_host or args.timeout is not None:
        from . import _http  # not at the top: a local scan imports neither http.client nor ssl

        client = _http.Client(allowed_hosts=args.redirect_host,
                              timeout=30.0 if args.timeout is None else args.timeout)
    reports = scanner.scan_paths(args.paths, jobs=args.jobs, allow=policy.allow, progress=progress,
                                 pickles_only=args.pickles_only, selection=policy.selection,
                                 list_globals=args.list_globals, passed_over=passed_over, full=args.full,
                                 client=client, on_report=stream)
    if not reports:
        sys.stderr.write("tensorplay scan: no files under the given paths; nothing was scanned\n")
    code = exit_code(reports, policy)
    if stream is not None:
        return code
    if args.format in ("text", "jsonl"):
        report = None
    else:
        from . import _reports  # not at the top: a table needs none, and `tensorplay scan` runs per upload

        report = (_reports.sarif(reports, policy, code) if args.format == "sarif" else
                  _reports.json_document(reports, policy, started, time.perf_counter() - clock, code, passed_over))
    if args.output is not None:
        return _write_report(args.output, report, reports, passed_over, args.format == "jsonl") or code
    try:
        if report is None:
            _print_table(reports, passed_over)
        else:
            import json

            json.dump(report, sys.stdout, indent=2)
            print()
        sys.stdout.flush()
    except BrokenPipeError:
        # `tensorplay scan ... | head`: the verdict stands, whoever stopped reading.
        _silence_stdout()
    return code


def _stream_lines(report: scanner.ScanReport) -> None:
    """A file's record as one line of JSON, written as soon as it is scanned."""
    import json

    try:
        sys.stdout.write(json.dumps(report.to_json()) + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()


def _now() -> str:
    """The time in UTC, as ``datetime.isoformat(timespec="seconds")`` writes it,
    without importing ``datetime`` into every scan."""
    return time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())


def _write_report(path: str, report: dict | None, reports: list[scanner.ScanReport],
                  passed_over: list[tuple[str, str]], jsonl: bool = False) -> int:
    """Write the report to ``path`` through a temporary file renamed over it; 0,
    or the unreadable exit code when it cannot be written."""
    import contextlib
    import io
    import json

    from ._atomic import replacing

    if jsonl:
        data = "".join(json.dumps(r.to_json()) + "\n" for r in reports)
    elif report is None:
        text = io.StringIO()
        with contextlib.redirect_stdout(text):
            _print_table(reports, passed_over)
        data = text.getvalue()
    else:
        data = json.dumps(report, indent=2) + "\n"
    try:
        with replacing(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
            f.write(data)
    except (OSError, RuntimeError) as e:
        print(f"tensorplay scan: cannot write {path}: {e}", file=sys.stderr)
        return EXIT_UNREADABLE
    return 0


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def _inspect(args: argparse.Namespace) -> int:
    import json

    from ._allow import stubbed
    from ._inspect import inspect
    from ._types import TensorInfo
    from .serialization import safe_globals

    status = 0
    allowed = _allowed(args, stub_missing=True)
    if allowed is None:
        return EXIT_UNREADABLE
    missing = stubbed(allowed)
    if missing:
        print(f"tensorplay inspect: cannot import {', '.join(missing)} here: shown as tensorplay.Stub "
              "(never imported or called)", file=sys.stderr)
    for path in args.paths:
        try:
            with safe_globals(allowed):
                result = inspect(path, unknown_globals="stub" if args.stub else "error")
        except Exception as e:  # noqa: BLE001 - reported per file; the exit code says it failed
            print(f"{path}: {type(e).__name__}: {_cli_advice(e)}", file=sys.stderr)
            status = EXIT_UNREADABLE
            continue
        if args.json:
            print(json.dumps({"path": path, **result.to_json()}, indent=2))
            continue
        totals = result.totals()
        print(f"{path} ({result.format}, {totals['tensors']} tensors, {totals['parameters']:,} elements)")
        for name, value in result.entries():
            if isinstance(value, TensorInfo):
                where = f"storage {value.storage} @ {value.offset}" if value.storage is not None else value.layout
                kind = " parameter" if value.parameter else ""
                kind += f" on {value.device}" if value.device not in (None, "cpu", "meta") else ""
                print(f"  {name}  {value.dtype} {list(value.shape)} stride {list(value.stride)}  {where} "
                      f"({_size(value.nbytes)}){kind}")
            else:
                print(f"  {name} = {value!r}")
        per_dtype = ", ".join(f"{d} {_size(n)}" for d, n in totals["bytes_per_dtype"].items())
        print(f"  total: {per_dtype or 'no storages'}")
        if result.stubbed:
            print(f"  stubbed (never imported or called): {', '.join(result.stubbed)}")
    return status


def _allowed(args: argparse.Namespace, stub_missing: bool = False) -> list | None:
    """What ``--allow`` names, imported (with ``stub_missing``, a name that cannot be
    imported as a stub); None (after saying why) when it cannot be."""
    from ._allow import AllowError, resolve

    try:
        return resolve(args.allow, stub_missing)
    except AllowError as e:
        print(f"tensorplay {args.command}: {e}", file=sys.stderr)
        return None


def _cli_advice(error: BaseException) -> BaseException:
    """A refusal for globals, with the command line's ways through, not Python's."""
    from ._refusal import complete

    return complete(error, None, [], {}, api="cli")


def _convert(args: argparse.Namespace) -> int:
    from ._convert import convert, safetensors_numpy
    from .serialization import safe_globals

    try:
        safetensors_numpy()
    except ImportError as e:  # an optional dependency: the message names the extra that installs it
        print(f"tensorplay convert: {e}", file=sys.stderr)
        return EXIT_UNREADABLE
    allowed = _allowed(args)
    if allowed is None:
        return EXIT_UNREADABLE

    progress = _Progress(sys.stderr.isatty())

    def tensor_progress(done: int, total: int) -> None:
        if progress.enabled:
            sys.stderr.write(f"\rconverting {done}/{total} tensors")
            if done == total:
                sys.stderr.write("\n")

    try:
        with safe_globals(allowed):
            summary = convert(args.source, args.target, force=args.force, metadata=args.metadata,
                              progress=tensor_progress, report=lambda line: print(line, file=sys.stderr),
                              unknown_globals="stub" if args.stub else "error")
    except Exception as e:  # noqa: BLE001 - reported; the exit code says it failed
        print(f"{args.source}: {type(e).__name__}: {_cli_advice(e)}", file=sys.stderr)
        from ._core import UnsafeCheckpointError

        return EXIT_UNSAFE if isinstance(e, UnsafeCheckpointError) else EXIT_UNREADABLE
    shards = f" ({summary['shards']} shards and model.safetensors.index.json)" if "shards" in summary else ""
    print(f"wrote {args.target}{shards}: {summary['tensors']} tensors, {summary['shared']} shared names in the "
          f"metadata, {summary['other_values']} other values {'in the metadata' if args.metadata else 'left out'}")
    return 0


class _HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, sized as argparse sizes it ($COLUMNS, else the terminal,
    else 80) without asking shutil: argparse makes a formatter in every
    add_argument, and importing shutil (bz2, lzma) was 1.3 ms of `tensorplay scan`."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24, width: int | None = None):
        if width is None:
            try:
                columns = int(os.environ["COLUMNS"])
            except (KeyError, ValueError):
                columns = 0
            if columns <= 0:
                try:
                    columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
                except (AttributeError, ValueError, OSError):
                    columns = 0
            width = (columns or 80) - 2
        super().__init__(prog, indent_increment, max_help_position, width)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tensorplay", description="Safe tools for PyTorch checkpoints.",
                                     formatter_class=_HelpFormatter)
    from ._core import __version__

    parser.add_argument("--version", action="version", version=f"tensorplay {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    scan = sub.add_parser("scan", help="scan files for globals that could run code", formatter_class=_HelpFormatter,
                          description="Exit codes: 0 nothing failed the policy, 1 something unsafe, 2 something "
                                      "unreadable (or nothing to scan).")
    scan.add_argument("paths", nargs="+",
                      help="files or directories (walked recursively, following links); - reads standard input; "
                           "URLs (http://, https://, hf://, s3:// and other fsspec URLs) are scanned where they "
                           "live, by ranges; a URL ending with / or hf://ORG/REPO[@REVISION] names a folder, "
                           "listed and scanned as a local one")
    scan.add_argument("--format", choices=("text", "json", "jsonl", "sarif"), default="text", metavar="FORMAT",
                      help="text (a table), json (one document: a summary and a record per file; the schema is in "
                           "the documentation's Scanning page), jsonl (a file's record per line, each written as soon "
                           "as it is scanned: for streams of many URLs) or sarif (SARIF 2.1.0, for GitHub code "
                           "scanning)")
    scan.add_argument("--json", action="store_const", const="json", dest="format", help="the same as --format json")
    scan.add_argument("-o", "--output", metavar="FILE",
                      help="write the report to FILE (through a temporary file renamed over it) instead of "
                           "standard output")
    scan.add_argument("--jobs", type=int, default=None, help="files scanned in parallel (default: cores)")
    scan.add_argument("--allow", action="append", default=[], metavar="MODULE.NAME",
                      help="also allow this global (repeatable); denylisted names are refused")
    scan.add_argument("--pickles-only", action="store_true",
                      help="read only the archive directory and the pickles; clean then means no unsafe "
                           "global, not that a load would accept the file")
    scan.add_argument("--fail-on", choices=scanner.FAIL_ON, default=None, metavar="LEVEL",
                      help="the least finding that fails the scan: dangerous (a denylisted global: code, files, "
                           "network), unsafe (any global outside the allowlist), or unreadable (that, or a file "
                           "not read to its end; the default). Every finding is reported whatever fails")
    scan.add_argument("--list-globals", action="store_true",
                      help="list every global each file's pickles import, allowlisted ones included (as a hub's "
                           "file view shows them); in JSON, allowlisted_globals")
    scan.add_argument("--config", metavar="FILE",
                      help="read the settings (allow, fail-on, include, exclude, max-file-size) from FILE: a "
                           "pyproject.toml's [tool.tensorplay.scan], or a TOML file of those keys. Default: the "
                           "nearest pyproject.toml above the current folder; flags win over the file")
    scan.add_argument("--no-config", action="store_true", help="read no settings file")
    scan.add_argument("--include", action="append", default=[], metavar="GLOB",
                      help="in folders, scan only files matching this pattern (repeatable; tried on the path "
                           "inside the folder and on the file name); files named on the command line always")
    scan.add_argument("--exclude", action="append", default=[], metavar="GLOB",
                      help="in folders, skip files matching this pattern (repeatable)")
    scan.add_argument("--max-file-size", type=_byte_size, default=None, metavar="SIZE",
                      help="report larger files unreadable (kind too_large) without reading them: 1024, 10K, "
                           "512M, 2G")
    scan.add_argument("--full", action="store_true",
                      help="for URLs: fetch each whole file (within --max-file-size) for a full scan, instead of "
                           "the pickles-only scan by ranges")
    scan.add_argument("--redirect-host", action="append", default=[], metavar="HOST",
                      help="for URLs: follow redirects to this other host (repeatable; * for any); credentials "
                           "never go with them")
    scan.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                      help="for http(s) and hf:// URLs: give up on a request after this long without an answer "
                           "(default 30; s3:// and other fsspec URLs take their file system's timeouts)")
    scan.set_defaults(run=_scan)
    inspect = sub.add_parser("inspect", help="show a checkpoint's structure without reading its data",
                             formatter_class=_HelpFormatter)
    inspect.add_argument("paths", nargs="+", help="checkpoint files or distributed checkpoint folders")
    inspect.add_argument("--json", action="store_true", help="machine-readable output")
    inspect.add_argument("--allow", action="append", default=[], metavar="MODULE.NAME",
                     help="trust this class or function (imported to build it; repeatable); MODULE.* trusts "
                          "every class MODULE defines; denylisted names are refused")
    inspect.add_argument("--stub", action="store_true",
                         help="stand an inert tensorplay.Stub in for each global outside the allowlist (never "
                              "imported or called) instead of refusing the file, and list them")
    inspect.set_defaults(run=_inspect)
    convert = sub.add_parser("convert", help="convert a checkpoint to safetensors (no torch, no code run)",
                             formatter_class=_HelpFormatter)
    convert.add_argument("source", help="a checkpoint file, a distributed checkpoint's folder, or a sharded "
                                        "checkpoint (its *.index.json, or the folder holding it)")
    convert.add_argument("target", help="OUT.safetensors; for a sharded checkpoint, the folder for its shards")
    convert.add_argument("--force", action="store_true", help="overwrite OUT if it exists")
    convert.add_argument("--metadata", action="store_true", help="store non-tensor values as JSON in the metadata")
    convert.add_argument("--allow", action="append", default=[], metavar="MODULE.NAME",
                     help="trust this class or function (imported to build it; repeatable); MODULE.* trusts "
                          "every class MODULE defines; denylisted names are refused")
    convert.add_argument("--stub", action="store_true",
                         help="take the tensors of a file with globals outside the allowlist: each becomes an "
                              "inert stub (never imported or called) whose tensors are converted and whose other "
                              "values go to the metadata with --metadata")
    convert.set_defaults(run=_convert)
    return parser


def _silence_stdout() -> None:
    """After the reader of stdout went away: the interpreter's final flush would
    raise again, so stdout goes to /dev/null."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


# What a shell reports for a process a closed pipe stopped (128 + SIGPIPE).
EXIT_PIPE_CLOSED = 141


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_PIPE_CLOSED


if __name__ == "__main__":
    sys.exit(main())
