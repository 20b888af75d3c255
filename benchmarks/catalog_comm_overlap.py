"""Fill in the communication-overlap settings of the catalogued Megatron-Bridge perf recipes.

The perf recipes in ``memtune/catalog/data/perf_recipes.yaml`` were catalogued without Bridge's
``comm_overlap`` section and the flex dispatcher's backend (their ``not_modeled`` lists named the
keys). This script reads them from Bridge's sources at the catalogue's commit and writes them into
each entry (``config.comm_overlap`` with ``tp_comm_overlap``, ``overlap_moe_expert_parallel_comm``
and ``delay_wgrad_compute``, which Bridge's setup copies onto the model config;
``config.model.moe_flex_dispatcher_backend``), dropping them from ``not_modeled``.

How it reads a recipe function: statement by statement at the top of its body, following
``cfg = other_recipe()`` into the function it names (in the same module or imported from one;
``cfg = wrapper(other_recipe(), ...)`` into the recipe, then the wrapper),
``helper(cfg)`` calls into the helper, ``cfg.comm_overlap = CommOverlapConfig(...)`` (which resets
the three keys to the call's arguments; a key not passed is ``None``, off), and assignments of
``cfg.comm_overlap.KEY`` and ``cfg.model.moe_flex_dispatcher_backend`` to constants. Statements under
``if``/``for``/``with`` are not followed; the script lists the recipes where such a statement
assigns one of the keys, so they can be checked by hand (none at 067f987df03b).

It also writes the userbuffer overlap configuration a recipe names
(``cfg.comm_overlap.tp_comm_overlap_cfg = userbuffers_...``) into the entry as
``config.comm_overlap.tp_comm_overlap_cfg``, and every such named configuration of
``src/megatron/bridge/training/comm_overlap.py`` into ``memtune/catalog/data/tp_overlap_cfgs.yaml``:
per GEMM the fields Transformer Engine's ``initialize_ub`` lays over its defaults (Bridge hands it
the whole dataclass, its defaults included) that memtune prices (``method``, ``num_sm``,
``set_sm_margin``, ``num_splits``); a GEMM set to ``None`` keeps Transformer Engine's default.

    python benchmarks/catalog_comm_overlap.py BRIDGE_GIT_DIR
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

CATALOG = Path(__file__).resolve().parents[1] / "memtune" / "catalog" / "data" / "perf_recipes.yaml"
OVERLAP_CFGS = CATALOG.with_name("tp_overlap_cfgs.yaml")
OVERLAP_SOURCE = "src/megatron/bridge/training/comm_overlap.py"
CFG_KEY = "tp_comm_overlap_cfg"
PRICED_FIELDS = ("method", "num_sm", "set_sm_margin", "num_splits")
COMM_KEYS = ("tp_comm_overlap", "overlap_moe_expert_parallel_comm", "delay_wgrad_compute")
BACKEND = "moe_flex_dispatcher_backend"
ROOTS = ("src/megatron/bridge/perf_recipes/", "src/megatron/bridge/recipes/")


class Sources:
    def __init__(self, git_dir: str, commit: str) -> None:
        self.git_dir, self.commit = git_dir, commit
        self.modules: dict[str, ast.Module] = {}
        self.conditional: set[str] = set()

    def module(self, path: str) -> ast.Module:
        if path not in self.modules:
            text = subprocess.run(
                ["git", "--git-dir", self.git_dir, "show", f"{self.commit}:{path}"],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            self.modules[path] = ast.parse(text)
        return self.modules[path]

    def resolve(self, path: str, name: str) -> tuple[str, ast.FunctionDef] | None:
        """The definition ``name`` refers to in the module at ``path``."""
        tree = self.module(path)
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name == name:
                return path, node
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("megatron.bridge"):
                imported = next((a.name for a in node.names if (a.asname or a.name) == name), None)
                if imported is not None:
                    target = "src/" + node.module.replace(".", "/") + ".py"
                    if subprocess.run(
                        ["git", "--git-dir", self.git_dir, "cat-file", "-e", f"{self.commit}:{target}"],
                        check=False,
                    ).returncode:
                        target = target[: -len(".py")] + "/__init__.py"
                    return self.resolve(target, imported)
        return None

    def values(
        self, path: str, fn: ast.FunctionDef, state: dict[str, Any], cfg: str = "cfg"
    ) -> dict[str, Any]:
        for stmt in fn.body:
            if isinstance(stmt, ast.If | ast.For | ast.With):
                if any(k in ast.unparse(stmt) for k in (*COMM_KEYS, BACKEND, "CommOverlapConfig")):
                    self.conditional.add(fn.name)
                continue
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
                call = stmt.value
                if isinstance(call.func, ast.Name) and call.args and ast.unparse(call.args[0]) == cfg:
                    target = self.resolve(path, call.func.id)
                    if target:
                        helper = target[1]
                        state = self.values(target[0], helper, state, helper.args.args[0].arg)
                continue
            if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1:
                continue
            lhs, rhs = ast.unparse(stmt.targets[0]), stmt.value
            if lhs == cfg and isinstance(rhs, ast.Call) and isinstance(rhs.func, ast.Name):
                wrapped = rhs.args[0] if rhs.args else None
                if isinstance(wrapped, ast.Call) and isinstance(wrapped.func, ast.Name):
                    # cfg = _with_global_batch_size(other_recipe(), n): the recipe, then the wrapper
                    inner = self.resolve(path, wrapped.func.id)
                    state = self.values(inner[0], inner[1], {}) if inner else {}
                    target = self.resolve(path, rhs.func.id)
                    if target:
                        state = self.values(target[0], target[1], state, target[1].args.args[0].arg)
                    continue
                target = self.resolve(path, rhs.func.id)
                if target:
                    state = self.values(target[0], target[1], {})
            elif lhs == f"{cfg}.comm_overlap":
                passed = {kw.arg: kw.value for kw in rhs.keywords} if isinstance(rhs, ast.Call) else {}
                state = {**state, **{k: _constant(passed[k]) if k in passed else None for k in COMM_KEYS}}
                state[CFG_KEY] = _name(passed[CFG_KEY]) if CFG_KEY in passed else None
            elif lhs.startswith(f"{cfg}.comm_overlap.") and lhs.rsplit(".", 1)[1] in COMM_KEYS:
                state = {**state, lhs.rsplit(".", 1)[1]: _constant(rhs)}
            elif lhs == f"{cfg}.comm_overlap.{CFG_KEY}":
                state = {**state, CFG_KEY: _name(rhs)}
            elif lhs == f"{cfg}.model.{BACKEND}":
                state = {**state, BACKEND: _constant(rhs)}
        return state


def _constant(node: ast.expr) -> Any:
    return node.value if isinstance(node, ast.Constant) else None


def _name(node: ast.expr) -> str | None:
    return node.id if isinstance(node, ast.Name) else None


def overlap_cfgs(sources: Sources) -> dict[str, dict[str, dict[str, Any]]]:
    """Every ``userbuffers_* = TransformerLayerTPOverlapCfg(...)`` of Bridge's comm_overlap.py: per
    GEMM, its dataclass's priced fields (the call's keywords over the class's defaults)."""
    tree = sources.module(OVERLAP_SOURCE)
    defaults: dict[str, dict[str, Any]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            fields = {}
            for stmt in node.body:
                if (
                    isinstance(stmt, ast.AnnAssign)
                    and isinstance(stmt.target, ast.Name)
                    and stmt.value is not None
                ):
                    fields[stmt.target.id] = _constant(stmt.value)
            defaults[node.name] = fields
    named: dict[str, dict[str, dict[str, Any]]] = {}
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
            continue
        if ast.unparse(node.value.func) != "TransformerLayerTPOverlapCfg":
            continue
        gemms = {}
        for kw in node.value.keywords:
            if isinstance(kw.value, ast.Call):
                cls = ast.unparse(kw.value.func)
                fields = {**defaults[cls], **{k.arg: _constant(k.value) for k in kw.value.keywords}}
                gemms[kw.arg] = {k: fields[k] for k in PRICED_FIELDS if fields.get(k) is not None}
        named[ast.unparse(node.targets[0])] = gemms
    return named


def write_overlap_cfgs(sources: Sources) -> None:
    header = (
        "# Megatron-Bridge's named userbuffer overlap configurations (TransformerLayerTPOverlapCfg), read\n"
        f"# from NVIDIA-NeMo/Megatron-Bridge {OVERLAP_SOURCE} at {sources.commit} by\n"
        "# benchmarks/catalog_comm_overlap.py: per GEMM the fields memtune prices, the dataclass's defaults\n"
        "# included (Bridge hands Transformer Engine the whole dataclass); a GEMM not listed keeps Transformer\n"
        "# Engine's default. Not priced: cga_size, aggregate, atomic_gemm, fp8_buf.\n"
    )
    body = yaml.safe_dump(
        {"bridge_commit": sources.commit, "configs": overlap_cfgs(sources)},
        sort_keys=False,
        default_flow_style=None,
        width=120,
    )
    OVERLAP_CFGS.write_text(header + body, encoding="utf-8")


def main() -> None:
    git_dir = sys.argv[1]
    text = CATALOG.read_text(encoding="utf-8")
    head = text[: text.index("bridge_commit:")]
    catalog = yaml.safe_load(text)
    sources = Sources(git_dir, catalog["bridge_commit"])
    for name, entry in catalog["perf_recipes"].items():
        found = sources.resolve(entry["source"], name)
        if found is None:
            raise SystemExit(f"{name}: not found in {entry['source']}")
        state = sources.values(found[0], found[1], {})
        config = entry["config"]
        comm = {k: bool(state.get(k)) for k in COMM_KEYS}
        if any(comm.values()):
            config["comm_overlap"] = {**config.get("comm_overlap", {}), **comm}
        if config["model"].get("moe_token_dispatcher_type") == "flex" and state.get(BACKEND):
            config["model"][BACKEND] = state[BACKEND]
        if comm["tp_comm_overlap"] and state.get(CFG_KEY):
            config["comm_overlap"][CFG_KEY] = state[CFG_KEY]
        dropped = {f"comm_overlap.{k}" for k in (*COMM_KEYS, CFG_KEY)} | {f"model.{BACKEND}"}
        left = [k for k in entry.get("not_modeled", []) if k not in dropped]
        if left:
            entry["not_modeled"] = left
        else:
            entry.pop("not_modeled", None)
    body = yaml.safe_dump(catalog, sort_keys=False, default_flow_style=None, width=120, allow_unicode=True)
    CATALOG.write_text(head + body, encoding="utf-8")
    write_overlap_cfgs(sources)
    if sources.conditional:
        print("check by hand (a key assigned under a condition):", ", ".join(sorted(sources.conditional)))


if __name__ == "__main__":
    main()
