"""What the prose docs name of the code, checked against the code, so that a rename, a removed
reason or a changed flag fails here instead of misleading a reader.

test_docs.py checks the tables and blocks generated from the code (the RBAC table, the
`kyma-gpu images` output, the condition table, counts). This file checks every doc by kind of
statement, wherever it is written:

- a CamelCase name in backticks (a reason, condition, phase, event, kind or class) is a name
  of the module's code or of another project, listed with its origin in docs_external.yaml;
- `make <target>` names a target of the Makefile;
- a path of this repository (`operator/...`, `tests/...`, links) exists, and a link's anchor
  is a heading of the linked doc;
- `kyma_gpu_*` is a metric the manager exports; `KYMA_GPU_*` a variable something reads;
- `kyma-gpu <command> --flag` is a flag of that command;
- `spec.*` / `status.*` below a field of the Gpu is a field of the Gpu's schema, and the roots
  of other objects' fields are listed in docs_external.yaml;
- a component with a version (source-controller v1.9.3) is the version tools/versions.env
  pins;
- a tagged image is one `kyma-gpu images` lists, the manager's or the module's Flux images, or
  a listed one (in an example mirror: by its name and tag);
- the README holds no measured figures: times and counts that vary from run to run live in
  docs/performance.md, dated, and the README points there.

docs/performance.md is the dated record of measurements and is history: it may name what no
longer exists. docs/crd-reference.md and values-rules/context.md are generated (checked by
`make check`). Run with `make check`, or `pytest tests/unit/test_docs_facts.py`.
"""

from __future__ import annotations

import ast
import re
import subprocess
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from kyma_gpu_tools.cli import parser

REPO = Path(__file__).resolve().parents[2]
EXTERNAL = Path(__file__).with_name("docs_external.yaml")
HISTORY = {"docs/performance.md"}
GENERATED = {"docs/crd-reference.md", "values-rules/context.md"}
CODE_DIRS = ("operator", "tests/harness", "hack", "benchmarks", "tools")


def _prose_docs() -> list[str]:
    found = [p.relative_to(REPO).as_posix() for p in REPO.rglob("*.md")]
    skip = ("/.venv/", "/node_modules/", "/.git/")
    docs = [d for d in found if not any(s in f"/{d}" for s in skip) and not d.startswith("dist/")]
    return sorted(d for d in docs if d not in HISTORY | GENERATED)


DOCS = _prose_docs()


# -- reading the docs -----------------------------------------------------------------------


FENCE = re.compile(r"^(```|~~~)")
INLINE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")


def _lines(doc: str) -> list[str]:
    return (REPO / doc).read_text(encoding="utf-8").splitlines()


def code_spans(doc: str) -> Iterator[tuple[int, str]]:
    """(line number, text) of every inline code span and every line of a fenced block."""
    fenced = False
    for number, line in enumerate(_lines(doc), 1):
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if fenced:
            yield number, line
        else:
            for match in INLINE.finditer(line):
                yield number, match.group(1)


def prose(doc: str) -> Iterator[tuple[int, str]]:
    """(line number, line) outside fenced blocks."""
    fenced = False
    for number, line in enumerate(_lines(doc), 1):
        if FENCE.match(line.strip()):
            fenced = not fenced
        elif not fenced:
            yield number, line


def _fail(problems: list[str], what: str) -> None:
    assert not problems, f"{len(problems)} {what}:\n" + "\n".join(problems)


# -- what the code has ---------------------------------------------------------------------


def _python_files() -> Iterator[Path]:
    for top in CODE_DIRS:
        yield from (REPO / top).rglob("*.py")


def _docstrings(tree: ast.AST) -> set[int]:
    ids: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            ids.add(id(body[0].value))
    return ids


@cache
def code_names() -> frozenset[str]:
    """Classes, functions and string constants (not docstrings or comments) of the code."""
    names: set[str] = set()
    for path in _python_files():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                names.add(node.name)
            elif isinstance(node, ast.Name):
                names.add(node.id)
            elif isinstance(node, ast.Attribute):
                names.add(node.attr)
            elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
                  and id(node) not in docstrings):  # fmt: skip
                names.update(re.findall(r"^[A-Za-z][A-Za-z0-9]*$", node.value))
    return frozenset(names)


@cache
def external() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(EXTERNAL.read_text(encoding="utf-8"))
    return data


@cache
def make_targets() -> frozenset[str]:
    text = (REPO / "Makefile").read_text(encoding="utf-8")
    return frozenset(re.findall(r"^([a-z][a-z0-9-]*):", text, re.MULTILINE))


@cache
def versions() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (REPO / "tools" / "versions.env").read_text(encoding="utf-8").splitlines():
        if "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            pins[key] = value.strip('"')
    return pins


@cache
def gpu_fields() -> frozenset[str]:
    crd = yaml.safe_load((REPO / "config/crd/bases/gpu.kyma-project.io_gpus.yaml").read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    found: set[str] = set()

    def walk(node: dict[str, Any], path: str) -> None:
        found.add(path)
        for key, child in (node.get("properties") or {}).items():
            walk(child, f"{path}.{key}" if path else key)
        if isinstance(node.get("items"), dict):
            walk(node["items"], path)

    walk(schema, "")
    return frozenset(found)


# -- names ---------------------------------------------------------------------------------

CAMEL = re.compile(r"[A-Z][a-z0-9]+(?:[A-Z][A-Za-z0-9]*)+|[A-Z]{2,}[a-z][A-Za-z0-9]*")


@pytest.mark.parametrize("doc", DOCS)
def test_every_name_in_backticks_is_the_codes_or_a_listed_projects(doc: str) -> None:
    known = code_names() | set(external()["names"])
    problems = [
        f"{doc}:{number}: `{span}` is neither in the module's code nor in {EXTERNAL.name}"
        for number, span in code_spans(doc)
        if CAMEL.fullmatch(span) and span not in known
    ]
    _fail(problems, "unknown names (renamed or removed in the code?)")


def test_every_listed_external_name_is_used_and_not_ours() -> None:
    used = {span for doc in DOCS for _, span in code_spans(doc)}
    listed = external()["names"]
    unused = sorted(set(listed) - used)
    assert not unused, f"{EXTERNAL.name} lists names no doc uses any more: {unused}"
    assert all(isinstance(v, str) and v for v in listed.values()), "each name needs its origin"


# -- make targets, paths, links ------------------------------------------------------------

MAKE = re.compile(r"(?<![\w-])make ([a-z][a-z0-9-]*)")


@pytest.mark.parametrize("doc", DOCS)
def test_every_make_target_exists(doc: str) -> None:
    problems = [
        f"{doc}:{number}: `make {target}`: no such target in the Makefile"
        for number, text in code_spans(doc)
        for target in MAKE.findall(text)
        if target not in make_targets()
    ]
    _fail(problems, "make targets that do not exist")


ROOTS = ("operator", "flux", "values-rules", "config", "tests", "hack", "tools", "docs",
         "benchmarks", ".ci")  # fmt: skip
PATH = re.compile(rf"(?:^|(?<=[\s(`'\"]))((?:{'|'.join(map(re.escape, ROOTS))})/[\w./-]*)")
PLACEHOLDER = re.compile(r"[<>{}*$]|\.\.\.|…")


def _repo_path(doc: str, text: str) -> Path | None:
    """The path a doc names, or None where it is a pattern or a placeholder."""
    if PLACEHOLDER.search(text):
        return None
    return REPO / text.split(":", 1)[0].rstrip(".,;")


@cache
def built_tools() -> tuple[str, ...]:
    """The binaries `make tools` links into tools/bin (tools/build.sh --list)."""
    listed = subprocess.run(["bash", str(REPO / "tools/build.sh"), "--list"], check=True,
                            capture_output=True, text=True).stdout.split()  # fmt: skip
    return tuple(listed)


def _exists(path: Path) -> bool:
    """On disk, or a binary `make tools` makes (a new clone has no tools/bin yet)."""
    if path.parent == REPO / "tools" / "bin":
        return path.name in built_tools()
    return path.exists()


@pytest.mark.parametrize("doc", DOCS)
def test_every_repository_path_exists(doc: str) -> None:
    problems: list[str] = []
    for number, text in code_spans(doc):
        for named in PATH.findall(text):
            path = _repo_path(doc, named)
            if path is not None and not _exists(path):
                problems.append(f"{doc}:{number}: `{named}` does not exist")
    _fail(problems, "paths that do not exist")


LINK = re.compile(r"\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to dashes."""
    text = re.sub(r"`|\*\*|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@cache
def anchors(doc: Path) -> frozenset[str]:
    seen: dict[str, int] = {}
    found: set[str] = set()
    fenced = False
    for line in doc.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            slug = _slug(line.lstrip("#"))
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            found.add(slug if count == 0 else f"{slug}-{count}")
    found.update(re.findall(r'<a (?:name|id)="([^"]+)"', doc.read_text(encoding="utf-8")))
    return frozenset(found)


def _link_problem(doc: str, target: str) -> str | None:
    if re.match(r"[a-z]+:", target):
        return None  # https:, mailto:
    file, _, anchor = target.partition("#")
    path = (REPO / doc).parent / file if file else REPO / doc
    if not path.exists():
        return f"links to {file}, which does not exist"
    if anchor and path.suffix == ".md" and anchor not in anchors(path.resolve()):
        return f"links to #{anchor}, which is no heading of {path.relative_to(REPO)}"
    return None


@pytest.mark.parametrize("doc", [*DOCS, *sorted(HISTORY)])
def test_every_link_leads_somewhere(doc: str) -> None:
    problems = [
        f"{doc}:{number}: {problem}"
        for number, line in prose(doc)
        for target in LINK.findall(line)
        if (problem := _link_problem(doc, target)) is not None
    ]
    _fail(problems, "broken links")


# -- metrics, variables, CLI flags ---------------------------------------------------------


@cache
def metric_names() -> frozenset[str]:
    text = (REPO / "operator/kyma_gpu/metrics.py").read_text(encoding="utf-8")
    prefix = re.search(r'^PREFIX = "([a-z_]+)"', text, re.MULTILINE)
    assert prefix is not None, "metrics.py has no PREFIX"
    return frozenset(f"{prefix.group(1)}_{s}" for s in re.findall(r'f"\{PREFIX\}_(\w+)"', text))


SUFFIXES = ("_total", "_info", "_count", "_sum", "_bucket", "_created")


def _is_metric(name: str) -> bool:
    base = next((name[: -len(s)] for s in SUFFIXES if name.endswith(s)), name)
    return name in metric_names() or base in metric_names()


@pytest.mark.parametrize("doc", DOCS)
def test_every_metric_is_exported(doc: str) -> None:
    problems = [
        f"{doc}:{number}: {name} is no metric of operator/kyma_gpu/metrics.py"
        for number, line in enumerate(_lines(doc), 1)
        for name in re.findall(r"\bkyma_gpu_[a-z_]+[a-z]", line)
        if name != "kyma_gpu_tools" and not _is_metric(name)  # the release tooling's package
    ]
    _fail(problems, "metrics that the manager does not export")


@cache
def code_text() -> str:
    parts = [p.read_text(encoding="utf-8") for p in _python_files()]
    parts += [(REPO / f).read_text(encoding="utf-8") for f in ("Makefile", "Dockerfile")]
    parts += [p.read_text(encoding="utf-8") for p in (REPO / "hack").glob("*.sh")]
    parts += [p.read_text(encoding="utf-8") for p in (REPO / "tools").glob("*.sh")]
    parts += [p.read_text(encoding="utf-8") for p in (REPO / "config").rglob("*.yaml")]
    return "\n".join(parts)


def _variable_pattern(name: str) -> str:
    """A variable's name as a pattern; `*` in a doc stands for a part of the name."""
    return r"\b" + re.escape(name).replace(r"\*", "[A-Z0-9_]+") + r"\b"


@pytest.mark.parametrize("doc", DOCS)
def test_every_kyma_gpu_variable_is_read_somewhere(doc: str) -> None:
    problems = [
        f"{doc}:{number}: {name} appears nowhere in the code, Makefile or manifests"
        for number, line in enumerate(_lines(doc), 1)
        for name in set(re.findall(r"\bKYMA_GPU_[A-Z0-9_*]*[A-Z0-9*]", line))
        if not re.search(_variable_pattern(name), code_text())
    ]
    _fail(problems, "variables nothing reads")


@cache
def cli_options() -> dict[str, frozenset[str]]:
    top = parser()
    options: dict[str, frozenset[str]] = {}
    for action in top._actions:
        choices = getattr(action, "choices", None)
        if isinstance(choices, dict):
            for name, sub in choices.items():
                flags = {o for a in sub._actions for o in a.option_strings}
                options[name] = frozenset(flags)
    options[""] = frozenset(o for a in top._actions for o in a.option_strings)
    return options


COMMAND = re.compile(r"(?<![\w/-])kyma-gpu(?: ([a-z][a-z-]*))?((?: +[^|;&<>(`]*)?)")


@pytest.mark.parametrize("doc", DOCS)
def test_every_cli_flag_exists(doc: str) -> None:
    problems: list[str] = []
    for number, text in code_spans(doc):
        for command, rest in COMMAND.findall(text):
            if command and command not in cli_options():
                if rest.strip().startswith("-") or "--" in rest:
                    problems.append(f"{doc}:{number}: `kyma-gpu {command}`: no such command")
                continue
            known = cli_options()[command] | cli_options()[""]
            for flag in re.findall(r"(?<![\w-])(--?[a-z][a-z-]*)", rest):
                if flag not in known:
                    problems.append(f"{doc}:{number}: `kyma-gpu {command} {flag}`: no such flag")
    _fail(problems, "CLI flags that do not exist")


# -- Gpu fields ----------------------------------------------------------------------------

FIELD = re.compile(r"(?<![\w.])((?:spec|status)(?:\.[A-Za-z][A-Za-z0-9]*|\[\])+)")


@pytest.mark.parametrize("doc", DOCS)
def test_every_gpu_field_exists(doc: str) -> None:
    fields = gpu_fields()
    foreign = set(external()["fields"])
    problems: list[str] = []
    for number, text in code_spans(doc):
        for named in FIELD.findall(text):
            path = named.replace("[]", "")
            parts = path.split(".")
            root = ".".join(parts[:2])
            if root in fields and "values" not in parts[1:2]:
                if path not in fields:
                    problems.append(f"{doc}:{number}: `{named}` is no field of the Gpu")
            elif root not in fields and root not in foreign and len(parts) > 1:
                problems.append(f"{doc}:{number}: `{named}`: neither the Gpu's field nor a "
                                f"listed field of another object ({EXTERNAL.name})")  # fmt: skip
    _fail(problems, "fields that do not exist")


# -- versions ------------------------------------------------------------------------------

COMPONENTS = {
    "source-controller": "SOURCE_CONTROLLER_VERSION",
    "helm-controller": "HELM_CONTROLLER_VERSION",
    "kube-apiserver": "KUBERNETES_VERSION",
    "kubelet": "KUBERNETES_VERSION",
    "etcd": "ETCD_VERSION",
    "kwok": "KWOK_VERSION",
    "node-feature-discovery": "NFD_VERSION",
    "NFD": "NFD_VERSION",
    "flux CLI": "FLUX_CLI_VERSION",
    "the flux CLI": "FLUX_CLI_VERSION",
    "helm": "HELM_VERSION",
    "kubeconform": "KUBECONFORM_VERSION",
    "modulectl": "MODULECTL_VERSION",
    "ocm CLI": "OCM_CLI_VERSION",
    "Lifecycle Manager": "KLM_VERSION",
}
VERSIONED = re.compile(
    rf"\b({'|'.join(map(re.escape, COMPONENTS))}),? (v?\d+\.\d+\.\d+(?:-[0-9a-f]+)?)\b"
)


@pytest.mark.parametrize("doc", DOCS)
def test_every_pinned_version_is_the_pin(doc: str) -> None:
    pins = versions()
    historic = set(external()["historic_versions"])
    problems = [
        f"{doc}:{number}: {component} {version}, but tools/versions.env pins "
        f"{pins[COMPONENTS[component]]}"
        for number, line in prose(doc)
        for component, version in VERSIONED.findall(line)
        if version.lstrip("v") != pins[COMPONENTS[component]].lstrip("v")
        and f"{component} {version}" not in historic
    ]
    _fail(problems, "versions that are not the pinned ones")


def test_the_chart_versions_the_readme_names_are_the_tested_ones() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    named = set(re.findall(r"\bv26\.\d+\.\d+\b", readme))
    assert named == set(versions()["GPU_OPERATOR_VERSIONS"].split()), named


# -- operations.md's settings: the resource table and leader election ----------------------

DEPLOYMENTS = {
    "`gpu-manager`": "config/manager/deployment.yaml",
    "Flux source-controller (the module's own)": "flux/source-controller/deployment.yaml",
    "Flux helm-controller (the module's own)": "flux/helm-controller/deployment.yaml",
}


def _quantity(text: str) -> tuple[str, str]:
    """'50m CPU, 128Mi' -> ('50m', '128Mi'); '1 CPU' is 1000m."""
    cpu, memory = (part.strip() for part in text.split(","))
    cpu = cpu.removesuffix(" CPU")
    return (f"{int(cpu) * 1000}m" if cpu.isdigit() else cpu), memory


def test_the_resource_table_is_the_deployments() -> None:
    rows = {
        cells[0]: cells[1:]
        for _, line in prose("docs/operations.md")
        if (cells := [c.strip() for c in line.strip().strip("|").split("|")])[0] in DEPLOYMENTS
    }
    assert set(rows) == set(DEPLOYMENTS), rows
    for name, path in DEPLOYMENTS.items():
        (deployment,) = yaml.safe_load_all((REPO / path).read_text(encoding="utf-8"))
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        resources = container["resources"]
        for column, kind in zip(rows[name], ("requests", "limits"), strict=True):
            want = (str(resources[kind]["cpu"]), str(resources[kind]["memory"]))
            assert _quantity(column) == want, f"operations.md, {name} {kind}: {column} != {want}"


def test_the_leader_election_figures_are_the_settings() -> None:
    from kyma_gpu.reconcile.settings import ElectionSettings

    election = ElectionSettings()
    text = " ".join(line for _, line in prose("docs/operations.md"))
    said = {
        f"renews every {election.retry:g} s": "retry",
        f"cannot renew for {election.renew_deadline:g} s": "renew_deadline",
        f"same Lease for {election.lease_duration} s": "lease_duration",
        f"within {election.lease_duration + 2 * election.retry:g} s": "lease_duration + 2 retry",
        f"next try (≤ {election.retry:g} s)": "retry",
    }
    missing = [f"{phrase!r} ({setting})" for phrase, setting in said.items() if phrase not in text]
    assert not missing, f"operations.md no longer says the ElectionSettings: {missing}"


# -- images ----------------------------------------------------------------------------------

IMAGE = re.compile(r"\b((?:[a-z0-9-]+\.)+[a-z]{2,}(?::\d+)?/[a-z0-9._/-]+:[A-Za-z0-9._-]+)")


@cache
def module_images() -> frozenset[str]:
    """What `kyma-gpu images` lists, the manager's release image and the Flux images."""
    import io

    from kyma_gpu_tools.cli import main

    out = io.StringIO()
    assert main(["images"], stdout=out) == 0
    images = set(out.getvalue().split())
    version = re.search(r'^version = "([^"]+)"', (REPO / "pyproject.toml").read_text(), re.M)
    assert version is not None
    images.add(f"europe-docker.pkg.dev/kyma-project/prod/gpu-manager:{version.group(1)}")
    flux = (REPO / "flux" / "kustomization.yaml").read_text(encoding="utf-8")
    for entry in yaml.safe_load(flux)["images"]:
        images.add(f"{entry['newName']}:{entry['newTag']}")
    return frozenset(images)


def _image_known(image: str, known: frozenset[str]) -> bool:
    """Known as such; in an example mirror (*.example) by its last path segment and tag."""
    host = image.split("/", 1)[0]
    if host.endswith(".example") or host.endswith(".example.com"):
        return any(k.rsplit("/", 1)[-1] == image.rsplit("/", 1)[-1] for k in known)
    return image in known


def _images(line: str) -> Iterator[str]:
    """Tagged image references, without placeholders (`:590-<kernel>`) and OCM components."""
    for match in IMAGE.finditer(line):
        rest = line[match.end() : match.end() + 1]
        if rest not in ("<", "…", "/") and "kyma-project.io/module/" not in match.group(1):
            yield match.group(1)


@pytest.mark.parametrize("doc", DOCS)
def test_every_image_is_one_the_module_runs_or_a_listed_one(doc: str) -> None:
    known = module_images() | set(external()["images"])
    problems = [
        f"{doc}:{number}: {image} is no image of `kyma-gpu images`, the manager, Flux, or "
        f"{EXTERNAL.name}"
        for number, line in enumerate(_lines(doc), 1)
        for image in _images(line)
        if not _image_known(image, known)
    ]
    _fail(problems, "images the module does not run")


ORDINALS = {2: "second", 3: "third", 4: "fourth", 5: "fifth"}


def test_the_retry_figures_are_the_settings() -> None:
    """architecture.md and troubleshooting.md give the retry delays and when a failure shows."""
    from kyma_gpu.reconcile.machine import Failure
    from kyma_gpu.reconcile.settings import LoopSettings

    settings = LoopSettings()
    delays = [f"{d:g}" for d in settings.retry_seconds]
    permanent = delays[settings.permanent_from :]
    arch = " ".join(line for _, line in prose("docs/architecture.md"))
    assert f"retried after {', '.join(delays)} s (transient) or {', '.join(permanent)} s" in arch
    loud = f"only from the {ORDINALS[Failure.LOUD_AFTER]}"
    assert loud in arch
    trouble = " ".join(line for _, line in prose("docs/troubleshooting.md"))
    quiet = delays[: settings.permanent_from]
    assert f"after {permanent[0]} s, then every {permanent[-1]} s" in trouble
    assert f"retried sooner, after {', '.join(quiet)} s, and reach the status {loud}" in trouble


def test_make_help_names_the_scale_benchmarks_default_sizes() -> None:
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    (line,) = [x for x in makefile.splitlines() if x.startswith("bench-scale:")]
    said = re.search(r"local cluster: ([\d,]+(?:, [\d,]+)* and [\d,]+) nodes", line)
    assert said is not None, line
    sizes = [int(n.replace(",", "")) for n in re.split(r", | and ", said.group(1))]
    bench = (REPO / "benchmarks" / "bench_scale.py").read_text(encoding="utf-8")
    default = re.search(r'add\("--nodes", default="([\d,]+)"', bench)
    assert default is not None, "bench_scale.py's --nodes default moved"
    assert sizes == [int(n) for n in default.group(1).split(",")], line


# -- the README points to figures instead of holding them -----------------------------------

FIGURE = re.compile(r"\b\d[\d,.]*\s?(?:s|ms|min|minutes|seconds|hours?|MB|MiB|GB|GiB)\b")


def test_the_readme_holds_no_measured_figures() -> None:
    problems = [
        f"README.md:{number}: {match.group(0)!r}"
        for number, line in prose("README.md")
        for match in FIGURE.finditer(line)
    ]
    _fail(problems, "figures in the README (they belong in docs/performance.md, dated)")


def test_the_readme_counts_the_tools_build_sh_builds() -> None:
    listed = built_tools()
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    count = re.search(r"(\d+) Go-built test binaries", readme)
    assert count is not None, "the README no longer says how many Go-built binaries"
    assert int(count.group(1)) == len(listed), (count.group(0), listed)


# -- each check fails on the drift it is for -----------------------------------------------

PLANTED = [
    (test_every_name_in_backticks_is_the_codes_or_a_listed_projects,
     "The plan refuses it with `UnknownChartVersionMismatch`.", "UnknownChartVersionMismatch"),
    (test_every_make_target_exists, "Run `make setup-everything` first.", "setup-everything"),
    (test_every_repository_path_exists, "See `tests/harness/kubelet.py`.", "kubelet.py"),
    (test_every_repository_path_exists, "Run `tools/bin/kubeadm`.", "kubeadm"),
    (test_every_link_leads_somewhere, "See [there](operations.md#no-such-heading).",
     "no-such-heading"),
    (test_every_metric_is_exported, "Alert on kyma_gpu_nodes_broken_total.", "nodes_broken"),
    (test_every_kyma_gpu_variable_is_read_somewhere, "Set KYMA_GPU_NO_SUCH_THING=1.",
     "KYMA_GPU_NO_SUCH_THING"),
    (test_every_cli_flag_exists, "```\nkyma-gpu plan --format json\n```", "--format"),
    (test_every_gpu_field_exists, "Set `spec.health.remedy: Off`.", "spec.health.remedy"),
    (test_every_gpu_field_exists, "Set `spec.colour`.", "spec.colour"),
    (test_every_pinned_version_is_the_pin, "It runs source-controller v1.2.3.", "v1.2.3"),
    (test_every_image_is_one_the_module_runs_or_a_listed_one,
     "Mirror nvcr.io/nvidia/k8s-device-plugin:v0.17.0.", "v0.17.0"),
]  # fmt: skip


@pytest.mark.parametrize(("check", "line", "named"), PLANTED,
                         ids=[f"{c.__name__}-{n}" for c, _, n in PLANTED])  # fmt: skip
def test_each_check_fails_on_planted_drift(
    check: Any, line: str, named: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(f"{__name__}._lines", lambda doc: ["# A doc", "", *line.splitlines()])
    with pytest.raises(AssertionError, match=re.escape(named)):
        check("docs/user-guide.md")
