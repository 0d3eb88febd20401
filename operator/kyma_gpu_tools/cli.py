"""`kyma-gpu`: run the operator, or plan offline.

kyma-gpu plan -f gpu.yaml --nodes nodes.json   print the plan for a Gpu and a node list: a
         [--sources chart-sources.yaml]        summary, or with -o yaml the whole plan; exit
         [-o yaml]                             0: ok or warning, 1: error, 2: bad input
kyma-gpu crd [--reference|--images-policy|--manager-policy|--flux-policy]
                                              print the generated CRD (reference, policies)
kyma-gpu chart-facts CHART.tgz                 print the facts values-rules/charts/ keeps
kyma-gpu images [--chart-version V] [--installer-release T]   images to mirror
         [-f gpu.yaml --nodes nodes.yaml] [--mirror M] [--check]  (a plan's; check a registry)
kyma-gpu rules-schema [--check]                write values-rules/schema/ and context.md
kyma-gpu dashboard-extension [--check [--busola T]] [--dir D]   write the Gpu's Kyma dashboard
                                              extension (check it, against Busola's schemas)
kyma-gpu run                                   run the manager (kopf), as kyma-gpu-manager does
"""

from __future__ import annotations

import argparse
import sys
import tarfile
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, TextIO

import yaml

from kyma_gpu import __version__
from kyma_gpu import main as manager
from kyma_gpu.api.chart_sources import CONFIG_MAP_NAME
from kyma_gpu.api.models import GpuSpec
from kyma_gpu.facts import cluster_facts
from kyma_gpu.plan import AllowedSources, Owner, Plan, Severity, Verdict, make_plan
from kyma_gpu.plan.mirror import replace_registry
from kyma_gpu.rules.catalog import Catalog
from kyma_gpu.rules.engine import RuleError
from kyma_gpu.yamlio import dump
from kyma_gpu_tools.busola import problems as busola_problems
from kyma_gpu_tools.chart_facts import chart_facts
from kyma_gpu_tools.crd import crd_yaml
from kyma_gpu_tools.dashboard import EXTENSION_VERSION, part_files, parts
from kyma_gpu_tools.flux_policy import flux_policy_yaml
from kyma_gpu_tools.image_policy import images_policy_yaml
from kyma_gpu_tools.inputs import (
    Fleet,
    fold_nodes,
    load_allowed_sources,
    load_gpu,
    load_nodes,
    load_release,
)
from kyma_gpu_tools.inventory import Image, plan_images, release_images
from kyma_gpu_tools.manager_policy import manager_policy_yaml
from kyma_gpu_tools.plan_summary import Given, notes, summary
from kyma_gpu_tools.progress import Progress
from kyma_gpu_tools.reading import Input, UsageError
from kyma_gpu_tools.reference import reference_markdown
from kyma_gpu_tools.registry import Presence, presence
from kyma_gpu_tools.rules_schema import header, stale, write

__all__ = ("UsageError", "load_gpu", "load_nodes", "main", "parser")  # tests and tools use them

EXIT_ERROR_VERDICT = 1
"""`kyma-gpu plan`: the plan's verdict is error (nothing would be written). 0: ok or warning."""
EXIT_BAD_INPUT = 2
BAD_INPUT = "2: bad input, said in one line on stderr (no traceback)"
JSON_HINT = (
    "Files may be YAML (one document or several, a List) or JSON: `kubectl get nodes -o json` "
    "reads fastest."
)
EXIT_CODES = MappingProxyType({
    "plan": "0: the verdict is ok or warning (the plan is written, a blocked worker pool next "
    "to served ones included); 1: the verdict is error (nothing would be written)",
    "crd": "0: printed",
    "chart-facts": "0: printed",
    "images": "0: listed, or with --check every image is there; 1: with --check, an image is "
    "missing or its registry unreachable",
    "rules-schema": "0: written, or with --check up to date; 1: with --check, a file is stale",
    "run": "0: the manager stopped",
})  # fmt: skip
"""Each command's exit codes besides 2 (bad input), as every --help says them."""


@dataclass(frozen=True)
class _Given:
    spec: GpuSpec
    owner: Owner | None
    allowed: AllowedSources
    release: dict[str, Any] | None


def _inputs(args: argparse.Namespace, stdin: TextIO) -> _Given:
    """-f, --sources and --release, read and checked before the rule data loads: bad input
    fails fast."""
    release_path = getattr(args, "release", None)
    if [args.file, args.nodes, args.sources, release_path].count("-") > 1:
        raise UsageError("only one of -f, --nodes, --sources and --release can read standard input")
    spec, owner = load_gpu(args.file, stdin)
    allowed = load_allowed_sources(args.sources, stdin)
    return _Given(spec, owner, allowed, load_release(release_path, stdin))


def _reading(progress: Progress) -> Callable[[Input, int], None]:
    def tick(source: Input, count: int) -> None:
        def words() -> str:
            of = f" of {source.size / 1e6:,.0f}" if source.size else ""
            return f"reading {source.path}: {count:,} Nodes, {source.consumed / 1e6:,.0f}{of} MB"

        progress.note(words)

    return tick


@dataclass(frozen=True)
class _Planned:
    plan: Plan
    given: Given


def _plan(args: argparse.Namespace, stdin: TextIO, catalog: Catalog,
          progress: Progress) -> _Planned:  # fmt: skip
    """The plan of -f, --nodes and --sources (plan and images share them)."""
    inputs = _inputs(args, stdin)
    fleet = Fleet()
    if args.nodes:
        fleet = fold_nodes(args.nodes, stdin, catalog.machine_types, _reading(progress))
        progress.note(lambda: f"read {len(fleet.facts):,} nodes; planning")
    plan = make_plan(inputs.spec, cluster_facts(fleet.facts), catalog, inputs.owner,
                     inputs.allowed)  # fmt: skip
    given = Given(args.file, args.nodes, args.sources, len(fleet.facts), fleet.observed,
                  inputs.release, getattr(args, "release", None))  # fmt: skip
    return _Planned(plan, given)


def _catalog(args: argparse.Namespace) -> Catalog:
    catalog = Catalog(Path(args.rules) if args.rules else None)
    catalog.check()  # broken rule data: the file and the line, before anything else
    return catalog


def cmd_plan(args: argparse.Namespace, stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    progress = Progress(stderr, "kyma-gpu plan", enabled=not args.quiet)
    planned = _plan(args, stdin, _catalog(args), progress)
    plan = planned.plan
    if args.output == "yaml":
        stdout.write(dump(plan.document()))
        if not args.quiet:
            for note in notes(plan, planned.given):
                stderr.write(f"kyma-gpu plan: note: {note}\n")
    else:
        stdout.write(summary(plan, planned.given))
    progress.done(
        f"done: {planned.given.node_count:,} nodes read, {len(plan.nodes):,} GPU nodes planned"
    )
    return EXIT_ERROR_VERDICT if plan.preflight.verdict is Verdict.ERROR else 0


def cmd_crd(args: argparse.Namespace, stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    if args.images_policy:
        stdout.write(images_policy_yaml())
        return 0
    if args.manager_policy:
        stdout.write(manager_policy_yaml())
        return 0
    if args.flux_policy:
        stdout.write(flux_policy_yaml())
        return 0
    stdout.write(reference_markdown() if args.reference else crd_yaml())
    return 0


def read_chart(
    path: str,
) -> tuple[str, dict[str, Any], dict[str, dict[str, Any]], dict[str, str]]:
    """(version, values, subchart values, appVersions) from a packaged chart."""
    try:
        with tarfile.open(path, "r:gz") as tar:
            files: dict[str, Any] = {}
            for member in tar.getmembers():
                parts = member.name.split("/")
                if parts[-1] in ("Chart.yaml", "values.yaml") and member.isfile():
                    handle = tar.extractfile(member)
                    if handle is not None:
                        files[member.name] = yaml.safe_load(handle.read())
    except (OSError, tarfile.TarError) as err:
        raise UsageError(
            f"{path}: not a packaged chart ({err}); expected gpu-operator-<version>.tgz as "
            "`helm pull nvidia/gpu-operator --version <version>` downloads it"
        ) from err
    except yaml.YAMLError as err:
        raise UsageError(f"{path}: a Chart.yaml or values.yaml is not valid YAML") from err
    top = [n for n in files if n.count("/") == 1]
    chart_file = next((n for n in top if n.endswith("Chart.yaml")), None)
    values_file = next((n for n in top if n.endswith("values.yaml")), None)
    if chart_file is None or values_file is None:
        raise UsageError(f"{path}: no Chart.yaml and values.yaml at the top of the chart")
    subcharts = {
        n.split("/")[2]: files[n]
        for n in files
        if n.count("/") == 3 and n.split("/")[1] == "charts" and n.endswith("values.yaml")
    }
    meta, values = files[chart_file], files[values_file] or {}
    if not isinstance(meta, dict) or not meta.get("version"):
        raise UsageError(f"{path}: {chart_file} has no version")
    if not isinstance(values, dict):
        raise UsageError(f"{path}: {values_file} is not a mapping")
    app_versions = {
        ("" if n.count("/") == 1 else n.split("/")[2]): str(files[n].get("appVersion") or "")
        for n in files
        if n.endswith("Chart.yaml") and isinstance(files[n], dict)
    }
    return str(meta["version"]), values, subcharts, app_versions


def cmd_chart_facts(args: argparse.Namespace, stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    version, values, subcharts, app_versions = read_chart(args.chart)
    stdout.write(
        f"{header('charts/' + version + '.yaml', 'chart-facts')}\n"
        f"# Generated by `kyma-gpu chart-facts` from the gpu-operator chart {version}.\n"
        "# Do not edit: regenerate with `make chart-facts`.\n"
    )
    stdout.write(dump(chart_facts(version, values, subcharts, app_versions)))
    return 0


def cmd_images(args: argparse.Namespace, stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    if (args.file or args.nodes) and (args.chart_version or args.installer_release):
        raise UsageError("with -f or --nodes the Gpu names the chart and the installer release")
    catalog = _catalog(args)
    if args.file or args.nodes or args.sources:
        images = _plan_images(args, stdin, catalog, Progress(stderr, "kyma-gpu images"))
    else:
        images = _release_images(args, catalog)
    if args.mirror:
        images = [_mirrored(i, args.mirror) for i in images]
    if not args.check:
        for image in images:
            stdout.write(f"{image.reference}\t{image.component}\n" if args.wide
                         else f"{image.reference}\n")  # fmt: skip
        return 0
    return _check(images, args.insecure, stdout)


def _release_images(args: argparse.Namespace, catalog: Catalog) -> list[Image]:
    version = args.chart_version or catalog.defaults.chart_version
    chart = catalog.chart(version)
    if chart is None:
        raise UsageError(f"chart version {version}: no facts in {catalog.root}/charts/")
    release = args.installer_release or catalog.defaults.installer_release
    if release not in catalog.installer_releases():
        known = ", ".join(catalog.installer_releases())
        raise UsageError(f"installer release {release} is not adopted (known: {known})")
    return release_images(catalog, chart, release)


def _plan_images(
    args: argparse.Namespace, stdin: TextIO, catalog: Catalog, progress: Progress
) -> list[Image]:
    plan = _plan(args, stdin, catalog, progress).plan
    if plan.preflight.verdict is Verdict.ERROR:
        reasons = ", ".join(sorted({str(f.reason) for f in plan.preflight.findings
                                    if f.severity is Severity.ERROR}))  # fmt: skip
        raise UsageError(f"the plan's verdict is error ({reasons}): `kyma-gpu plan` says why")
    return plan_images(plan, catalog)


def _mirrored(image: Image, mirror: str) -> Image:
    if image.reference.startswith(mirror.rstrip("/") + "/"):
        return image
    return Image(replace_registry(image.reference, mirror), image.component)


def _check(images: list[Image], insecure: bool, stdout: TextIO) -> int:
    """Ask each image's registry for its manifest; exit 1 when any is missing or unknown."""
    bad = 0
    for image in images:
        found, why = presence(image.reference, insecure)
        bad += found in (Presence.MISSING, Presence.UNREACHABLE)
        stdout.write(f"{found}\t{image.reference}\t{why}\n".replace("\t\n", "\n"))
    stdout.write(f"{len(images)} images, {bad} missing or unreachable\n")
    return 1 if bad else 0


def cmd_rules_schema(
    args: argparse.Namespace, stdin: TextIO, stdout: TextIO, stderr: TextIO
) -> int:
    root = Catalog(Path(args.rules) if args.rules else None).root
    if args.check:
        problems = stale(root)
        for problem in problems:
            stdout.write(f"{root}/{problem}\n")
        if problems:
            stdout.write("regenerate with `make rules-schema`\n")
        return 1 if problems else 0
    for relative in write(root):
        stdout.write(f"wrote {root}/{relative}\n")
    return 0


def cmd_dashboard_extension(
    args: argparse.Namespace, stdin: TextIO, stdout: TextIO, stderr: TextIO
) -> int:
    """The parts of the Gpu's Kyma dashboard extension (kyma_gpu_tools/dashboard.py)."""
    directory = Path(args.dir)
    stale = [name for name, text in part_files().items()
             if not (directory / name).is_file()
             or (directory / name).read_text(encoding="utf-8") != text]  # fmt: skip
    if args.check:
        for name in stale:
            stdout.write(f"{directory / name} is stale\n")
        if stale:
            stdout.write("regenerate with `make manifests`\n")
        found = (
            busola_problems(parts(), Path(args.busola), EXTENSION_VERSION) if args.busola else []
        )
        for problem in found:
            stdout.write(f"Busola's schema ({args.busola}): {problem}\n")
        return 1 if stale or found else 0
    for name, text in part_files().items():
        (directory / name).write_text(text, encoding="utf-8")
        stdout.write(f"wrote {directory / name}\n")
    return 0


def cmd_run(args: argparse.Namespace, stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    """The manager, as kyma-gpu-manager runs it (kyma_gpu/main.py): a developer's alias."""
    problem = manager.flag_error(args)
    if problem is not None:
        raise UsageError(problem)
    manager.start(args)
    return 0


BAD = MappingProxyType({
    "plan": "a file that is not what its flag takes, or a spec the API server refuses",
    "crd": "an unknown flag",
    "chart-facts": "the file is no packaged chart",
    "images": "as for plan, or a chart version or installer release without facts",
    "rules-schema": "broken rule data",
    "run": "a flag",
})  # fmt: skip
"""What exit code 2 means per command."""


def _exits(command: str) -> str:
    return f"Exit codes: {EXIT_CODES[command]}; 2: bad input ({BAD[command]}), one line on stderr."


def _all_exits() -> str:
    lines = [textwrap.fill(f"{command}: {EXIT_CODES[command]}", 78, initial_indent="  ",
                           subsequent_indent="    ") for command in EXIT_CODES]  # fmt: skip
    return "Exit codes (2 is always bad input, one line on stderr):\n" + "\n".join(lines)


Sub = Any  # argparse's _SubParsersAction


def _plan_parser(sub: Sub) -> None:
    p = sub.add_parser(
        "plan",
        help="print the plan for a Gpu and a node list (offline)",
        description="Print what the manager would do with a Gpu on a cluster's nodes: a "
        "summary (worker pools and their driver, findings, GPU health and node marks, what "
        "would be written); -o yaml: the whole plan (chart values with the rule behind each, "
        f"the Flux objects). {_exits('plan')}",
        epilog=f"{JSON_HINT} A long read says how far it got on stderr every few seconds.",
    )
    p.add_argument("-f", "--file", help="Gpu manifest (default: the empty spec); - for stdin")
    p.add_argument("--nodes", help="`kubectl get nodes -o json` (or -o yaml) output; - for "
                   "stdin (default: no nodes)")  # fmt: skip
    p.add_argument("--rules", help="values-rules directory (default: the module's)")
    p.add_argument(
        "--sources",
        help=f"the ConfigMap {CONFIG_MAP_NAME} of allowed chart sources (default: NVIDIA's "
        "repository only, as on a cluster without it); - for stdin",
    )
    p.add_argument(
        "--release",
        help="the running HelmRelease (`kubectl get helmrelease -n kyma-system gpu-operator -o "
        "yaml`): the summary says which values change and whether the driver is replaced",
    )
    p.add_argument(
        "-o", "--output", choices=("summary", "yaml"), default="summary",
        help="summary (default), or yaml: the whole plan, one YAML document",
    )  # fmt: skip
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines or notes")
    p.set_defaults(func=cmd_plan)


def _crd_parser(sub: Sub) -> None:
    c = sub.add_parser("crd", help="print the generated Gpu CRD",
                       description="Print the generated Gpu CRD (or its reference, or a "
                       f"policy). {_exits('crd')}")  # fmt: skip
    c.add_argument("--reference", action="store_true", help="the Markdown reference instead")
    c.add_argument("--images-policy", action="store_true",
                   help="the ValidatingAdmissionPolicy for image registries instead")  # fmt: skip
    c.add_argument("--manager-policy", action="store_true",
                   help="the admission policies of the manager's account")  # fmt: skip
    c.add_argument("--flux-policy", action="store_true",
                   help="the admission policies of the module's Flux objects")  # fmt: skip
    c.set_defaults(func=cmd_crd)
    cf = sub.add_parser("chart-facts", help="print the facts of a packaged chart",
                        description="Print the facts values-rules/charts/ keeps of a packaged "
                        f"chart. {_exits('chart-facts')}")  # fmt: skip
    cf.add_argument("chart", help="path to gpu-operator-<version>.tgz")
    cf.set_defaults(func=cmd_chart_facts)


def _images_parser(sub: Sub) -> None:
    im = sub.add_parser(
        "images",
        help="list the images a mirror must hold, or check a registry for them",
        description="Every image the module's release can run (default), or that one Gpu's "
        "plan runs on a fleet (-f, --nodes, --sources). With --check, ask each image's "
        f"registry for its manifest (no pull). {_exits('images')}",
        epilog=JSON_HINT,
    )
    im.add_argument("--chart-version", help="chart version (default: the pinned one)")
    im.add_argument("--installer-release", help="installer release (default: the pinned one)")
    im.add_argument("--rules", help="values-rules directory (default: the module's)")
    im.add_argument("-f", "--file", help="a Gpu manifest: the images of its plan; - for stdin")
    im.add_argument("--nodes", help="`kubectl get nodes -o json` output, for the plan")
    im.add_argument("--sources", help=f"the ConfigMap {CONFIG_MAP_NAME}, for the plan")
    im.add_argument("--mirror", help="HOST[:PORT][/PATH]: name each image in this registry")
    im.add_argument("--check", action="store_true", help="ask the registries (no pull)")
    im.add_argument("--insecure", action="store_true", help="plain http:// registries")
    im.add_argument("--wide", action="store_true", help="also print what runs each image")
    im.set_defaults(func=cmd_images)


def _other_parsers(sub: Sub) -> None:
    rs = sub.add_parser(
        "rules-schema",
        help="write the JSON Schemas and the rule context docs into values-rules/",
        description="Write the JSON Schemas and the rule context docs into values-rules/. "
        f"{_exits('rules-schema')}",
    )
    rs.add_argument("--check", action="store_true", help="only say what is stale (exit code 1)")
    rs.add_argument("--rules", help="values-rules directory (default: the module's)")
    rs.set_defaults(func=cmd_rules_schema)
    de = sub.add_parser(
        "dashboard-extension",
        help="write the Gpu's Kyma dashboard extension (its ConfigMap's parts) from the CRD",
        description="Write the parts of the Gpu's resource extension for Kyma dashboard "
        f"(Busola) from the CRD. Exit code 0; 1: with --check, a part is stale; {BAD_INPUT}.",
    )
    de.add_argument("--check", action="store_true", help="only say what is stale (exit code 1)")
    de.add_argument("--dir", default="config/ui-extension", help="where the parts go")
    de.add_argument("--busola", metavar="TARBALL",
                    help="with --check: also validate the parts against the schemas in Busola's "
                    "source tarball (../shared/vendor/busola/busola-src.tar.gz)")  # fmt: skip
    de.set_defaults(func=cmd_dashboard_extension)
    r = sub.add_parser("run", help="run the manager (what kyma-gpu-manager runs)",
                       description="Run the manager (kopf) until stopped, as the image's "
                       f"kyma-gpu-manager does. {_exits('run')}")  # fmt: skip
    manager.add_arguments(r)
    r.set_defaults(func=cmd_run)


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="kyma-gpu", description=__doc__.splitlines()[0],
                                  epilog=f"{_all_exits()}\n\n{JSON_HINT}",
                                  formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    top.add_argument("--version", action="version", version=f"kyma-gpu {__version__}")
    sub = top.add_subparsers(dest="command", required=True)
    for add in (_plan_parser, _crd_parser, _images_parser, _other_parsers):
        add(sub)
    return top


def main(
    argv: Sequence[str] | None = None,
    stdin: TextIO = sys.stdin,
    stdout: TextIO = sys.stdout,
    stderr: TextIO = sys.stderr,
) -> int:
    args = parser().parse_args(argv)
    try:
        code: int = args.func(args, stdin, stdout, stderr)
    except (UsageError, RuleError) as err:
        stderr.write(f"kyma-gpu {args.command}: error: {err}\n")
        return EXIT_BAD_INPUT
    return code


if __name__ == "__main__":
    sys.exit(main())
