"""`kernelblaster kb ...`: inspect, export, import, re-index, compare and restore knowledge bases."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kernelblaster.kb.diff import diff_documents, format_diff
from kernelblaster.kb.errors import KBLookupError
from kernelblaster.kb.paths import KB_PATH_VARIABLE
from kernelblaster.kb.store import KnowledgeBase, read_document
from kernelblaster.kb.summary import format_state, format_state_list, format_stats, kb_stats
from kernelblaster.tools.errors import UserFacingError


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Add the `kb` command and its sub-commands, each with `func(args) -> int`."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--kb", metavar="PATH", help=f"KB file (default: ${KB_PATH_VARIABLE}, else the user data directory)"
    )
    common.add_argument("--json", action="store_true", help="print machine-readable JSON")
    parser = subparsers.add_parser("kb", help="inspect and maintain the knowledge base")
    commands = parser.add_subparsers(dest="kb_command", required=True, metavar="KB_COMMAND")

    commands.add_parser("stats", parents=[common], help="counts and size").set_defaults(func=run_stats)
    show = commands.add_parser("show", parents=[common], help="list the states, or one state in full")
    show.add_argument("state_id", nargs="?", help="a state id (default: list all states)")
    show.set_defaults(func=run_show)
    export = commands.add_parser("export", parents=[common], help="write the KB's JSON to a file or stdout")
    export.add_argument("output", help="destination file, or - for standard output")
    export.set_defaults(func=run_export)
    load = commands.add_parser("import", parents=[common], help="validate a KB file and make it the KB")
    load.add_argument("file", help="KB file to install (an older schema version is migrated)")
    load.set_defaults(func=run_import)
    reindex = commands.add_parser("reindex", parents=[common], help="rebuild the state-signature index")
    reindex.set_defaults(func=run_reindex)
    diff = commands.add_parser("diff", parents=[common], help="what changed from one KB to another")
    diff.add_argument("before", help="the older KB file (a snapshot, an export)")
    diff.add_argument("after", nargs="?", help="the newer KB file (default: the KB)")
    diff.set_defaults(func=run_diff)
    restore = commands.add_parser("restore", parents=[common],
                                  help="make the KB what it was after an iteration of a run (its snapshot)")
    restore.add_argument("run_id", nargs="?", help="the run's id, as its report names it (default: list the "
                         "snapshots kept)")
    restore.add_argument("iteration", nargs="?", type=int, help="restore the KB as it was after this iteration, "
                         "counted from 1 as in the run's report (default: the run's last)")
    restore.set_defaults(func=run_restore)


def run_stats(args: argparse.Namespace) -> int:
    kb = KnowledgeBase.load(args.kb)
    stats = kb_stats(kb.document, str(kb.path), kb.size_bytes())
    print(stats.model_dump_json() if args.json else format_stats(stats))
    return 0


def run_show(args: argparse.Namespace) -> int:
    kb = KnowledgeBase.load(args.kb)
    if args.state_id is None:
        states = [state.model_dump(mode="json") for state in kb.document.states.values()]
        print(json.dumps(states, indent=1) if args.json else format_state_list(kb.document))
        return 0
    state = kb.document.resolve_state(args.state_id)
    if state is None:
        raise KBLookupError(f"no state {args.state_id!r} in {kb.path} (`kernelblaster kb show` lists them)")
    print(state.model_dump_json(indent=1) if args.json else format_state(kb.document, state))
    return 0


def run_export(args: argparse.Namespace) -> int:
    kb = KnowledgeBase.load(args.kb)
    text = kb.path.read_text()
    if args.output == "-":
        sys.stdout.write(text)
    else:
        Path(args.output).write_text(text)
        _report(args, {"exported": str(kb.path), "to": args.output}, f"exported {kb.path} to {args.output}")
    return 0


def run_import(args: argparse.Namespace) -> int:
    incoming = read_document(Path(args.file))
    kb = KnowledgeBase.load(args.kb)
    backup = kb.back_up("pre-import")
    kb.replace_document(incoming)
    summary = {"imported": args.file, "into": str(kb.path), "previous_kept_as": str(backup)}
    _report(args, summary, f"imported {args.file} into {kb.path} (previous KB kept as {backup})")
    return 0


def run_reindex(args: argparse.Namespace) -> int:
    kb = KnowledgeBase.load(args.kb)
    count = kb.reindex()
    _report(args, {"indexed": count, "kb": str(kb.path)}, f"indexed {count} states of {kb.path}")
    return 0


def run_diff(args: argparse.Namespace) -> int:
    before = read_document(Path(args.before))
    after = read_document(Path(args.after)) if args.after else KnowledgeBase.load(args.kb).document
    diff = diff_documents(before, after)
    print(diff.model_dump_json(indent=1) if args.json else format_diff(diff))
    return 0


def run_restore(args: argparse.Namespace) -> int:
    """Snapshots are numbered from 0 on disk; here, as in reports and progress lines, from 1."""
    kb = KnowledgeBase.load(args.kb)
    saved = {run: [i + 1 for i in iterations] for run, iterations in kb.snapshots().items()}
    listing = "\n".join(f"{run}: after iteration {', '.join(map(str, its))}" for run, its in saved.items())
    if args.run_id is None:
        print(json.dumps({"snapshots": saved}) if args.json else listing or f"no snapshots of {kb.path} are kept")
        return 0
    iterations = saved.get(args.run_id, [])
    iteration = args.iteration if args.iteration is not None else max(iterations, default=0)
    if iteration not in iterations:
        missing = f"after iteration {iteration} of" if iterations else "of"
        raise UserFacingError(f"{kb.path}: no snapshot {missing} run {args.run_id} is kept (kept: "
                              f"{listing.replace(chr(10), '; ') or 'none'})")
    backup = kb.back_up("pre-restore")
    kb.restore_snapshot(args.run_id, iteration - 1)
    summary = {"restored": str(kb.path), "run_id": args.run_id, "iteration": iteration,
               "previous_kept_as": str(backup)}
    _report(args, summary, f"restored {kb.path} to what it was after iteration {iteration} of run {args.run_id} "
                           f"(previous KB kept as {backup})")
    return 0


def _report(args: argparse.Namespace, summary: dict[str, object], text: str) -> None:
    print(json.dumps(summary) if args.json else text)
