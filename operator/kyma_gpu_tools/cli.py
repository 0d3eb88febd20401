"""`kyma-gpu`: run the operator, or plan offline.

kyma-gpu plan -f gpu.yaml --nodes nodes.yaml   print the plan for a Gpu and a node list;
         [--sources chart-sources.yaml]        exit 0: ok or warning, 1: error, 2: bad input
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
import json
import sys
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import yaml
from pydantic import ValidationError

from kyma_gpu import __version__
from kyma_gpu import main as manager
from kyma_gpu.api.chart_sources import CONFIG_MAP_NAME
from kyma_gpu.api.models import SINGLETON_NAME, Gpu, GpuSpec
from kyma_gpu.facts import NodeError, cluster_facts, node_facts
from kyma_gpu.plan import (
    AllowedSources,
    Owner,
    Plan,
    Severity,
    Verdict,
    allowed_sources_of,
    make_plan,
)
from kyma_gpu.plan.mirror import replace_registry
from kyma_gpu.rules.catalog import Catalog
from kyma_gpu.rules.engine import RuleError
from kyma_gpu.yamlio import dump
from kyma_gpu_tools.busola import problems as busola_problems
from kyma_gpu_tools.chart_facts import chart_facts
from kyma_gpu_tools.crd import SINGLETON_MESSAGE, crd_yaml
from kyma_gpu_tools.dashboard import EXTENSION_VERSION, part_files, parts
from kyma_gpu_tools.flux_policy import flux_policy_yaml
from kyma_gpu_tools.image_policy import images_policy_yaml
from kyma_gpu_tools.inventory import Image, plan_images, release_images
from kyma_gpu_tools.manager_policy import manager_policy_yaml
from kyma_gpu_tools.reference import reference_markdown
from kyma_gpu_tools.registry import Presence, presence
from kyma_gpu_tools.rules_schema import header, stale, write
from kyma_gpu_tools.spec_errors import unknown_fields_message

EXIT_ERROR_VERDICT = 1
"""`kyma-gpu plan`: the plan's verdict is error (nothing would be written). 0: ok or warning."""
EXIT_BAD_INPUT = 2
BAD_INPUT = "2: bad input (a one-line error, no traceback)"
JSON_HINT = (
    "Files may be YAML (one document or several, a List) or JSON: `kubectl get nodes -o json` "
    "reads fastest."
)


class UsageError(Exception):
    """Bad input: printed as one line, exit code 2."""


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's loader where PyYAML has it (its scanner and parser are C: several times faster on a
big node list, docs/performance.md 'The CLI on a big node list'), else PyYAML's."""


def _text(path: str, stdin: TextIO) -> str:
    if path == "-":
        return stdin.read()
    try:
        raw = Path(path).read_bytes()
    except OSError as err:
        raise UsageError(f"{path}: cannot read: {err.strerror}") from err
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise UsageError(f"{path}: not UTF-8 text (a binary file?)") from err


def _documents(path: str, stdin: TextIO) -> list[Any]:
    """The documents of a YAML or JSON file (JSON needs no YAML parser: the fastest way to hand
    over a big node list, `kubectl get nodes -o json`); empty documents (a trailing ---) are
    dropped."""
    text = _text(path, stdin)
    try:
        if text.lstrip()[:1] in ("{", "["):
            try:
                return [json.loads(text)]
            except ValueError:
                pass  # YAML's flow style, or not JSON after all: the YAML parser says
        return [d for d in yaml.load_all(text, Loader=_LOADER) if d is not None]
    except RecursionError as err:  # both parsers read nested nodes recursively
        raise UsageError(
            f"{path}: nests too deep to read; a Gpu's spec.values holds only the chart "
            "values of values-rules/values-allowlist.yaml, a few levels deep"
        ) from err
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise UsageError(f"{path}: not valid YAML{where}") from err
    except (ValueError, TypeError, OverflowError) as err:  # a scalar YAML cannot construct
        raise UsageError(f"{path}: not valid YAML: {err}") from err


def _objects(path: str, stdin: TextIO) -> list[Any]:
    """The objects of a file: each document, a List's (or NodeList's, GpuList's) items."""
    found: list[Any] = []
    for doc in _documents(path, stdin):
        kind = doc.get("kind") if isinstance(doc, dict) else None
        items = doc.get("items") if isinstance(doc, dict) else None
        if isinstance(kind, str) and kind.endswith("List") and isinstance(items, list):
            found += items
        else:
            found.append(doc)
    return found


def _one(path: str, stdin: TextIO, what: str) -> Any:
    objects = _objects(path, stdin)
    if len(objects) != 1:
        said = "is empty" if not objects else f"holds {len(objects)} objects"
        raise UsageError(f"{path}: {said}; expected one {what}")
    return objects[0]


def _quote_hint(err: ValidationError) -> str:
    """An unquoted number or boolean where a string belongs: say to quote it."""
    for error in err.errors():
        value = error.get("input")
        if error["type"] == "string_type" and isinstance(value, int | float | bool):
            field = ".".join(str(part) for part in error["loc"])
            return (f"; {field}: YAML read {value!r} as a {type(value).__name__}: quote it "
                    f'("{value}", as you mean it)')  # fmt: skip
    return ""


def _validation_message(source: str, err: ValidationError) -> str:
    """The API server's words for the same error (spec_errors.py); every unknown field, each
    with the closest valid name."""
    return f"{source}: {unknown_fields_message(err, Gpu, root='')}{_quote_hint(err)}"


def load_gpu(path: str | None, stdin: TextIO) -> tuple[GpuSpec, Owner | None]:
    if path is None:
        return GpuSpec(), None
    data = _one(path, stdin, "Gpu manifest (`kubectl get gpu gpu -o yaml` gives one)")
    if not isinstance(data, dict):
        raise UsageError(f"{path}: expected a Gpu manifest (a mapping), got {type(data).__name__}")
    try:
        gpu = Gpu.model_validate(data)
    except ValidationError as err:
        raise UsageError(_validation_message(path, err)) from err
    if gpu.metadata.name != SINGLETON_NAME:
        raise UsageError(f"{path}: metadata.name {gpu.metadata.name!r}: {SINGLETON_MESSAGE}")
    uid = gpu.metadata.uid
    return gpu.spec, Owner(uid=uid, name=gpu.metadata.name) if uid else None


def load_nodes(path: str, stdin: TextIO) -> list[dict[str, Any]]:
    documents = _documents(path, stdin)
    if not documents:
        raise UsageError(
            f"{path}: empty; expected the output of `kubectl get nodes -o yaml` (did it fail?)"
        )
    nodes: list[Any] = []
    for doc in documents:
        items = doc.get("items") if isinstance(doc, dict) else None
        if isinstance(doc, dict) and doc.get("kind") == "Node":
            nodes.append(doc)
        elif isinstance(items, list):
            nodes += items
        else:
            raise UsageError(
                f"{path}: expected the output of `kubectl get nodes -o yaml` (a List with items) "
                "or Nodes"
            )
    return nodes


def load_allowed_sources(path: str | None, stdin: TextIO) -> AllowedSources:
    """The ConfigMap of allowed chart sources (`kubectl get configmap -n kyma-system
    kyma-gpu-chart-sources -o yaml`); none: the default, NVIDIA's repository only."""
    if path is None:
        return AllowedSources()
    data = _one(path, stdin, f"ConfigMap {CONFIG_MAP_NAME}")
    if not isinstance(data, dict) or data.get("kind") != "ConfigMap":
        raise UsageError(f"{path}: expected the ConfigMap {CONFIG_MAP_NAME} (kind ConfigMap)")
    return allowed_sources_of(data)


@dataclass(frozen=True)
class _Inputs:
    """What -f, --nodes and --sources hold, read and checked before the rule data loads: bad
    input fails fast."""

    spec: GpuSpec
    owner: Owner | None
    nodes: list[dict[str, Any]]
    allowed_sources: AllowedSources


def _inputs(args: argparse.Namespace, stdin: TextIO) -> _Inputs:
    if [args.file, args.nodes, args.sources].count("-") > 1:
        raise UsageError("only one of -f, --nodes and --sources can read standard input")
    spec, owner = load_gpu(args.file, stdin)
    nodes = load_nodes(args.nodes, stdin) if args.nodes else []
    return _Inputs(spec, owner, nodes, load_allowed_sources(args.sources, stdin))


def _plan(args: argparse.Namespace, given: _Inputs, catalog: Catalog) -> Plan:
    """The plan of -f, --nodes and --sources (plan and images share them)."""
    facts = []
    for index, node in enumerate(given.nodes):
        try:
            facts.append(node_facts(node, catalog.machine_types))
        except NodeError as err:
            raise UsageError(f"{args.nodes}: item {index}: {err}") from err
    return make_plan(given.spec, cluster_facts(facts), catalog, given.owner, given.allowed_sources)


def _catalog(args: argparse.Namespace) -> Catalog:
    catalog = Catalog(Path(args.rules) if args.rules else None)
    catalog.check()  # broken rule data: the file and the line, before anything else
    return catalog


def cmd_plan(args: argparse.Namespace, stdin: TextIO, stdout: TextIO) -> int:
    given = _inputs(args, stdin)
    plan = _plan(args, given, _catalog(args))
    stdout.write(dump(plan.document()))
    return EXIT_ERROR_VERDICT if plan.preflight.verdict is Verdict.ERROR else 0


def cmd_crd(args: argparse.Namespace, stdin: TextIO, stdout: TextIO) -> int:
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
        raise UsageError(f"{path}: not a packaged chart: {err}") from err
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


def cmd_chart_facts(args: argparse.Namespace, stdin: TextIO, stdout: TextIO) -> int:
    version, values, subcharts, app_versions = read_chart(args.chart)
    stdout.write(
        f"{header('charts/' + version + '.yaml', 'chart-facts')}\n"
        f"# Generated by `kyma-gpu chart-facts` from the gpu-operator chart {version}.\n"
        "# Do not edit: regenerate with `make chart-facts`.\n"
    )
    stdout.write(dump(chart_facts(version, values, subcharts, app_versions)))
    return 0


def cmd_images(args: argparse.Namespace, stdin: TextIO, stdout: TextIO) -> int:
    given = _inputs(args, stdin) if args.file or args.nodes else None
    catalog = _catalog(args)
    images = _plan_images(args, given, catalog) if given is not None else None
    if images is None:
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


def _plan_images(args: argparse.Namespace, given: _Inputs, catalog: Catalog) -> list[Image]:
    if args.chart_version or args.installer_release:
        raise UsageError("with -f or --nodes the Gpu names the chart and the installer release")
    plan = _plan(args, given, catalog)
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


def cmd_rules_schema(args: argparse.Namespace, stdin: TextIO, stdout: TextIO) -> int:
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


def cmd_dashboard_extension(args: argparse.Namespace, stdin: TextIO, stdout: TextIO) -> int:
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


def cmd_run(args: argparse.Namespace, stdin: TextIO, stdout: TextIO) -> int:
    """The manager, as kyma-gpu-manager runs it (kyma_gpu/main.py): a developer's alias."""
    problem = manager.flag_error(args)
    if problem is not None:
        raise UsageError(problem)
    manager.start(args)
    return 0


def parser() -> argparse.ArgumentParser:
    epilog = f"Exit code 2 always means bad input. {JSON_HINT}"
    top = argparse.ArgumentParser(prog="kyma-gpu", description=__doc__.splitlines()[0],
                                  epilog=epilog)  # fmt: skip
    top.add_argument("--version", action="version", version=f"kyma-gpu {__version__}")
    sub = top.add_subparsers(dest="command", required=True)
    p = sub.add_parser(
        "plan",
        help="print the plan for a Gpu and a node list (offline)",
        description="Print the plan. Exit code 0: verdict ok or warning (a blocked worker pool "
        "included); 1: verdict error (nothing would be written); 2: bad input.",
        epilog=JSON_HINT,
    )
    p.add_argument("-f", "--file", help="Gpu manifest (default: the empty spec); - for stdin")
    p.add_argument("--nodes", help="`kubectl get nodes -o yaml` output; - for stdin")
    p.add_argument("--rules", help="values-rules directory (default: the module's)")
    p.add_argument(
        "--sources",
        help=f"the ConfigMap {CONFIG_MAP_NAME} of allowed chart sources (default: NVIDIA's "
        "repository only, as on a cluster without it); - for stdin",
    )
    p.set_defaults(func=cmd_plan)
    c = sub.add_parser("crd", help="print the generated Gpu CRD",
                       description="Print the generated Gpu CRD (or its reference, or a policy). "
                       f"Exit code 0; {BAD_INPUT}.")  # fmt: skip
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
                        f"chart. Exit code 0; {BAD_INPUT} (not a chart).")  # fmt: skip
    cf.add_argument("chart", help="path to gpu-operator-<version>.tgz")
    cf.set_defaults(func=cmd_chart_facts)
    im = sub.add_parser(
        "images",
        help="list the images a mirror must hold, or check a registry for them",
        description="Every image the module's release can run (default), or that one Gpu's "
        "plan runs on a fleet (-f, --nodes, --sources). With --check, ask each image's "
        "registry for its manifest (no pull). Exit code 0: listed, or all present; 1: with "
        f"--check, an image is missing or its registry unreachable; {BAD_INPUT}.",
        epilog=JSON_HINT,
    )
    im.add_argument("--chart-version", help="chart version (default: the pinned one)")
    im.add_argument("--installer-release", help="installer release (default: the pinned one)")
    im.add_argument("--rules", help="values-rules directory (default: the module's)")
    im.add_argument("-f", "--file", help="a Gpu manifest: the images of its plan; - for stdin")
    im.add_argument("--nodes", help="`kubectl get nodes -o yaml` output, for the plan")
    im.add_argument("--sources", help=f"the ConfigMap {CONFIG_MAP_NAME}, for the plan")
    im.add_argument("--mirror", help="HOST[:PORT][/PATH]: name each image in this registry")
    im.add_argument("--check", action="store_true", help="ask the registries (no pull)")
    im.add_argument("--insecure", action="store_true", help="plain http:// registries")
    im.add_argument("--wide", action="store_true", help="also print what runs each image")
    im.set_defaults(func=cmd_images)
    rs = sub.add_parser(
        "rules-schema",
        help="write the JSON Schemas and the rule context docs into values-rules/",
        description="Write the JSON Schemas and the rule context docs into values-rules/. Exit "
        f"code 0; 1: with --check, a file is stale; {BAD_INPUT}.",
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
                       "kyma-gpu-manager does. Exit code 0: stopped; "
                       f"{BAD_INPUT} (a flag).")  # fmt: skip
    manager.add_arguments(r)
    r.set_defaults(func=cmd_run)
    return top


def main(
    argv: Sequence[str] | None = None,
    stdin: TextIO = sys.stdin,
    stdout: TextIO = sys.stdout,
    stderr: TextIO = sys.stderr,
) -> int:
    args = parser().parse_args(argv)
    try:
        code: int = args.func(args, stdin, stdout)
    except (UsageError, RuleError) as err:
        stderr.write(f"kyma-gpu {args.command}: error: {err}\n")
        return EXIT_BAD_INPUT
    return code


if __name__ == "__main__":
    sys.exit(main())
