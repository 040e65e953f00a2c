"""`kernelblaster kb ...`: create, inspect, export, import, re-index, compare and restore knowledge bases.

Every command but `init` works on an existing KB (`--kb`, `$KERNELBLASTER_KB`, or the default KB, which
the seed fills on first use): a mistyped path is an error, never a new KB. What a KB holds is printed with
its control characters written out, never obeyed (a KB taught before the answers of models were made
storable, or one from elsewhere, may hold escape sequences).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path

from pydantic import Field

from kernelblaster.kb.paths import KB_PATH_VARIABLE
from kernelblaster.tools.errors import UserFacingError
from kernelblaster.tools.options import Options, PathText, ReadableFile, Subcommands, add_command
from kernelblaster.tools.untrusted_text import for_terminal


class KBOptions(Options):
    kb: PathText | None = None
    as_json: bool = False


class ShowOptions(KBOptions):
    state_id: str | None = None


class ExportOptions(KBOptions):
    output: PathText
    force: bool = False


class ImportOptions(KBOptions):
    file: ReadableFile


class DiffOptions(KBOptions):
    before: ReadableFile
    after: ReadableFile | None = None


class InitOptions(Options):
    path: PathText | None = None
    as_json: bool = False


class RestoreOptions(KBOptions):
    run_id: str | None = None
    iteration: int | None = Field(default=None, ge=1)


def add_commands(subparsers: Subcommands) -> None:
    """Add the `kb` command and its sub-commands."""
    parser = subparsers.add_parser("kb", help="create, inspect and maintain the knowledge base")
    commands = parser.add_subparsers(dest="kb_command", required=True, metavar="KB_COMMAND")

    init = add_command(commands, "init", help="create a KB from the shipped seed (never over an existing file)",
                       options=InitOptions, run=run_init)
    init.add_argument("path", nargs="?", help=f"where (default: ${KB_PATH_VARIABLE}, else the user data directory)")
    _add_json_flag(init)
    _add_kb_flags(add_command(commands, "stats", help="counts and size", options=KBOptions, run=run_stats))
    show = add_command(commands, "show", help="list the states, or one state in full", options=ShowOptions,
                       run=run_show)
    show.add_argument("state_id", nargs="?", help="a state id (default: list all states)")
    _add_kb_flags(show)
    export = add_command(commands, "export", help="write the KB's JSON to a file or stdout", options=ExportOptions,
                         run=run_export)
    export.add_argument("output", help="destination file, or - for standard output")
    export.add_argument("--force", action="store_true", help="replace the destination file if it exists")
    _add_kb_flags(export)
    load = add_command(commands, "import", help="validate a KB file and make it the KB", options=ImportOptions,
                       run=run_import)
    load.add_argument("file", help="KB file to install (an older schema version is migrated)")
    _add_kb_flags(load)
    _add_kb_flags(add_command(commands, "reindex", help="rebuild the state-signature index", options=KBOptions,
                              run=run_reindex))
    diff = add_command(commands, "diff", help="what changed from one KB to another", options=DiffOptions,
                       run=run_diff)
    diff.add_argument("before", help="the older KB file (a snapshot, an export)")
    diff.add_argument("after", nargs="?", help="the newer KB file (default: the KB)")
    _add_kb_flags(diff)
    _add_kb_flags(add_command(commands, "update-catalogue", options=KBOptions, run=run_update_catalogue,
                              help="fill the techniques' fields that newer seeds declare (precision policies, "
                                   "operation kinds, snippets) where the KB lacks them; keeps a backup"))
    restore = add_command(commands, "restore", options=RestoreOptions, run=run_restore,
                          help="make the KB what it was after an iteration of a run (its snapshot)")
    restore.add_argument("run_id", nargs="?", help="the run's id, as its report names it (default: list the "
                         "snapshots kept)")
    restore.add_argument("iteration", nargs="?", help="restore the KB as it was after this iteration, counted "
                         "from 1 as in the run's report (default: the run's last)")
    _add_kb_flags(restore)


def _add_kb_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kb", metavar="PATH",
                        help=f"an existing KB file (default: ${KB_PATH_VARIABLE}, else the user data directory)")
    _add_json_flag(parser)


def _add_json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", dest="as_json", action="store_true", help="print machine-readable JSON")


def run_init(options: InitOptions) -> int:
    from kernelblaster.kb.store import KnowledgeBase

    kb = KnowledgeBase.create(options.path)
    _report(options, {"created": str(kb.path)}, f"created {kb.path} from the seed KB")
    return 0


def run_stats(options: KBOptions) -> int:
    from kernelblaster.kb.store import KnowledgeBase
    from kernelblaster.kb.summary import format_stats, kb_stats

    kb = KnowledgeBase.open(options.kb)
    stats = kb_stats(kb.document, str(kb.path), kb.size_bytes())
    print(stats.model_dump_json() if options.as_json else for_terminal(format_stats(stats)))
    return 0


def run_show(options: ShowOptions) -> int:
    from kernelblaster.kb.errors import KBLookupError
    from kernelblaster.kb.store import KnowledgeBase
    from kernelblaster.kb.summary import format_state, format_state_list

    kb = KnowledgeBase.open(options.kb)
    if options.state_id is None:
        states = [state.model_dump(mode="json") for state in kb.document.states.values()]
        print(json.dumps(states, indent=1) if options.as_json else for_terminal(format_state_list(kb.document)))
        return 0
    state = kb.document.resolve_state(options.state_id)
    if state is None:
        raise KBLookupError(f"no state {options.state_id!r} in {kb.path} (`kernelblaster kb show` lists them)")
    print(state.model_dump_json(indent=1) if options.as_json else for_terminal(format_state(kb.document, state)))
    return 0


def run_export(options: ExportOptions) -> int:
    from kernelblaster.kb.store import KnowledgeBase
    from kernelblaster.tools.files import write_atomically

    kb = KnowledgeBase.open(options.kb)
    data = kb.path.read_bytes()
    if options.output == "-":
        sys.stdout.write(data.decode())
        return 0
    destination = Path(options.output)
    try:
        unwritable = _unwritable_destination(destination, options.force)
        if unwritable is None:
            write_atomically(destination, data)
    except OSError as error:
        unwritable = error.strerror or str(error)
    if unwritable is not None:
        raise UserFacingError(f"cannot write {options.output}: {unwritable}")
    _report(options, {"exported": str(kb.path), "to": options.output}, f"exported {kb.path} to {options.output}")
    return 0


def _unwritable_destination(destination: Path, force: bool) -> str | None:
    """Why an export cannot be written at `destination`, in the user's terms (the OS would say "File exists"
    of a folder on the way that is a file); None if it may be. Only a regular file is ever replaced."""
    from kernelblaster.tools.files import directory_problem

    if destination.is_dir():
        return "it is a directory"
    if destination.exists():
        if not destination.is_file():
            return "it exists and is not a regular file (a device, a pipe or a socket)"
        if not force:
            return "it exists (add --force to replace it)"
    problem = directory_problem(destination.parent)
    return f"its folder {destination.parent} {problem}" if problem is not None else None


def run_import(options: ImportOptions) -> int:
    from kernelblaster.kb.store import KnowledgeBase, read_document

    incoming = read_document(options.file)
    kb = KnowledgeBase.open(options.kb)
    backup = kb.back_up("pre-import")
    kb.replace_document(incoming)
    summary = {"imported": str(options.file), "into": str(kb.path), "previous_kept_as": str(backup)}
    _report(options, summary, f"imported {options.file} into {kb.path} (previous KB kept as {backup})")
    return 0


def run_update_catalogue(options: KBOptions) -> int:
    from kernelblaster.kb.store import KnowledgeBase

    kb = KnowledgeBase.open(options.kb)
    filled, backup = kb.fill_catalogue_from_seed("pre-catalogue")
    if backup is None:
        _report(options, {"updated": {}, "kb": str(kb.path), "previous_kept_as": None},
                f"{kb.path}: its techniques already carry the seed's fields; nothing to update")
        return 0
    _report(options, {"updated": filled, "kb": str(kb.path), "previous_kept_as": str(backup)},
            f"filled the seed's fields of {len(filled)} techniques of {kb.path} (previous KB kept as {backup})")
    return 0


def run_reindex(options: KBOptions) -> int:
    from kernelblaster.kb.store import KnowledgeBase

    kb = KnowledgeBase.open(options.kb)
    count = kb.reindex()
    _report(options, {"indexed": count, "kb": str(kb.path)}, f"indexed {count} states of {kb.path}")
    return 0


def run_diff(options: DiffOptions) -> int:
    from kernelblaster.kb.diff import diff_documents, format_diff
    from kernelblaster.kb.store import KnowledgeBase, read_document

    before = read_document(options.before)
    after = read_document(options.after) if options.after else KnowledgeBase.open(options.kb).document
    diff = diff_documents(before, after)
    print(diff.model_dump_json(indent=1) if options.as_json else for_terminal(format_diff(diff)))
    return 0


def run_restore(options: RestoreOptions) -> int:
    """Snapshots are numbered from 0 on disk; here, as in reports and progress lines, from 1."""
    from kernelblaster.kb.store import KnowledgeBase

    kb = KnowledgeBase.open(options.kb)
    saved = {run: [i + 1 for i in iterations] for run, iterations in kb.snapshots().items()}
    listing = "\n".join(f"{run}: after iteration {', '.join(map(str, its))}" for run, its in saved.items())
    if options.run_id is None:
        print(json.dumps({"snapshots": saved}) if options.as_json else
              listing or f"no snapshots of {kb.path} are kept")
        return 0
    iterations = saved.get(options.run_id, [])
    iteration = options.iteration if options.iteration is not None else max(iterations, default=0)
    if iteration not in iterations:
        missing = f"after iteration {iteration} of" if iterations else "of"
        raise UserFacingError(f"{kb.path}: no snapshot {missing} run {options.run_id} is kept (kept: "
                              f"{listing.replace(chr(10), '; ') or 'none'})")
    # The snapshot is validated before the backup is taken: a refused restore writes nothing.
    backup = kb.restore_snapshot(options.run_id, iteration - 1, backup_label="pre-restore")
    summary = {"restored": str(kb.path), "run_id": options.run_id, "iteration": iteration,
               "previous_kept_as": str(backup)}
    _report(options, summary, f"restored {kb.path} to what it was after iteration {iteration} of run "
                              f"{options.run_id} (previous KB kept as {backup})")
    return 0


def _report(options: KBOptions | InitOptions, summary: Mapping[str, object], text: str) -> None:
    print(json.dumps(summary) if options.as_json else text)
