"""The lazy task-discovery hook (``harness/discovery.py``) and the .pth line that setup.py ships.

Every check of the hook itself runs in a fresh interpreter (subprocess), so patches and sys.modules never leak
between tests. Only one test builds lm-eval's real TaskIndex, which scans every built-in YAML and takes seconds.
The others replace TaskIndex.build with a recorder of the folders it was asked to scan.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from lm_eval_longctx.tasks import base

ALL_TASKS = sorted(base.suite_tasks())  # every task class of the suite, by its suite name


# ---------------------------------------------------------------- the hook, in a fresh interpreter


ROOT = Path(__file__).resolve().parents[2]
DISABLE = "LM_EVAL_LONGCTX_DISABLE_HOOK"
HEAVY = ("lm_eval", "torch", "transformers", "datasets", "numpy", "accelerate")


def _setup_constant(name: str) -> str:
    """A string constant of setup.py, read without running setup.py."""
    for node in ast.parse((ROOT / "setup.py").read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{name} not found in setup.py")


def _run(code: str, cwd: Path, **env_extra: str) -> dict:
    """Run `code` in a fresh interpreter with the checkout first on sys.path; parse its last stdout line as JSON."""
    env = {k: v for k, v in os.environ.items() if k != DISABLE}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    env.update(env_extra)
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _site_dir_with_pth(tmp_path: Path) -> Path:
    """A directory holding exactly the .pth that the wheel ships, for site.addsitedir (the start-up code path)."""
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    (site_dir / _setup_constant("PTH_NAME")).write_text(_setup_constant("PTH_CONTENT"), encoding="ascii")
    return site_dir


def _expected_real_dir() -> Path:
    """Where task_configs_dir() must point: the installed package folder, or the checkout's task_configs/."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("lm_eval_longctx.task_configs")
    except ModuleNotFoundError:
        spec = None
    if spec is not None and spec.submodule_search_locations:
        return Path(list(spec.submodule_search_locations)[0]).resolve()
    return (ROOT / "task_configs").resolve()


_MODULES_REPORT = """
after = set(sys.modules)
import json
print(json.dumps({
    "new": sorted(after - before),
    "heavy": sorted(m for m in after if m.split(".")[0] in HEAVY_MODULES),
    "finders": [type(f).__name__ for f in sys.meta_path if getattr(f, "_lm_eval_longctx_hook", False)],
    "package_file": package_file,
}))
""".replace("HEAVY_MODULES", repr(HEAVY))


@pytest.mark.integration
def test_import_is_cheap_and_installs_one_finder(tmp_path):
    code = "import sys\nbefore = set(sys.modules)\nimport lm_eval_longctx.harness.discovery\npackage_file = None\n"
    out = _run(code + _MODULES_REPORT, cwd=tmp_path)
    assert out["heavy"] == []
    # Start-up cost guard: the package __init__ must stay empty of imports.
    assert set(out["new"]) <= {"lm_eval_longctx", "lm_eval_longctx.harness", "lm_eval_longctx.harness.discovery"}, out[
        "new"
    ]
    assert out["finders"] == ["_ManagerImportHook"]


@pytest.mark.integration
def test_pth_line_installs_the_hook_and_leaves_the_package_to_sys_path(tmp_path):
    """The shipped .pth through site.addsitedir (what start-up runs). It must not pin lm_eval_longctx in
    sys.modules: a checkout put on sys.path later (pytest, a script dir) must still win over the install."""
    other = tmp_path / "other_checkout" / "lm_eval_longctx"
    other.mkdir(parents=True)
    (other / "__init__.py").write_text("")
    site_dir = _site_dir_with_pth(tmp_path)
    code = textwrap.dedent(
        f"""
        import sys, site
        before = set(sys.modules)
        site.addsitedir({str(site_dir)!r})
        pinned = "lm_eval_longctx" in sys.modules
        class Spy:  # a second pass over the same .pth (some interpreters do that) must not re-import
            calls = []
            def find_spec(self, name, path=None, target=None):
                self.calls.append(name)
        sys.meta_path.insert(0, Spy())
        site.addsitedir({str(site_dir)!r})
        del sys.meta_path[0]
        sys.path.insert(0, {str(other.parent)!r})
        import lm_eval_longctx
        package_file = [pinned, Spy.calls, lm_eval_longctx.__file__]
        del sys.modules["lm_eval_longctx"]
        """
    )
    out = _run(code + _MODULES_REPORT, cwd=tmp_path)
    assert out["heavy"] == []
    assert out["finders"] == ["_ManagerImportHook"]
    assert out["package_file"] == [False, [], str(other / "__init__.py")]
    # Nothing but the hook's private alias stays behind (or nothing, if an installed .pth ran already).
    assert set(out["new"]) <= {"_lm_eval_longctx_discovery_hook"}, out["new"]


@pytest.mark.integration
def test_real_index_contains_our_tasks_and_user_include_path_wins(tmp_path):
    """The one real TaskIndex build: hook loaded through the shipped .pth, stand-in task folder."""
    ours = tmp_path / "ours"
    user = tmp_path / "user"
    ours.mkdir()
    user.mkdir()
    task = "task: {name}\ndataset_path: json\noutput_type: loglikelihood\ndoc_to_text: '{who}'\ndoc_to_target: ''\n"
    (ours / "probe.yaml").write_text(task.format(name="longctx_discovery_probe", who="ours"))
    (ours / "shadow.yaml").write_text(task.format(name="longctx_discovery_shadow", who="ours"))
    (user / "shadow.yaml").write_text(task.format(name="longctx_discovery_shadow", who="user"))
    site_dir = _site_dir_with_pth(tmp_path)
    out = _run(
        f"""
        import json, site, sys
        site.addsitedir({str(site_dir)!r})
        import lm_eval_longctx.harness.discovery as d
        real = d.task_configs_dir()
        d.task_configs_dir = lambda: {str(ours)!r}  # the wrapper looks it up at call time
        lm_eval_before = "lm_eval" in sys.modules
        from lm_eval.tasks import TaskManager
        tm = TaskManager(include_path={str(user)!r})
        idx = tm.task_index
        print(json.dumps({{
            "lm_eval_before": lm_eval_before,
            "real": real,
            "include_path": [str(p) for p in tm.include_path],
            "probe": str(idx["longctx_discovery_probe"].yaml_path) if "longctx_discovery_probe" in idx else None,
            "shadow": str(idx["longctx_discovery_shadow"].yaml_path),
            "builtin": "arc_easy" in idx,
            "finders": sum(bool(getattr(f, "_lm_eval_longctx_hook", False)) for f in sys.meta_path),
            "finders_after_evaluator": __import__("lm_eval.evaluator") and sum(
                bool(getattr(f, "_lm_eval_longctx_hook", False)) for f in sys.meta_path
            ),
        }}))
        """,
        cwd=tmp_path,
    )
    assert out["lm_eval_before"] is False
    assert Path(out["real"]).resolve() == _expected_real_dir()
    assert (Path(out["real"]) / "__init__.py").is_file()
    assert out["include_path"] == [str(ours), str(user)]
    assert out["probe"] == str(ours / "probe.yaml")
    assert out["shadow"] == str(user / "shadow.yaml"), "a user --include_path must override our task"
    assert out["builtin"], "lm-eval's built-in tasks must still be indexed"
    assert out["finders"] == 1, "the finder waits for lm_eval.evaluator too"
    assert out["finders_after_evaluator"] == 0, "the finder removes itself once the manager and evaluator are patched"


_RECORDER = """
import importlib, json, os, sys
import lm_eval_longctx.harness.discovery as d
lm_eval_before = "lm_eval" in sys.modules
import lm_eval.tasks.manager as m

scanned = []
def fake_build(paths, **kwargs):
    scanned.append([str(p) for p in paths])
    return {}
m.TaskIndex.build = staticmethod(fake_build)

def scan(*args, **kwargs):
    scanned.clear()
    m.TaskManager(*args, **kwargs)
    return scanned[0]

def n_finders():
    return sum(bool(getattr(f, "_lm_eval_longctx_hook", False)) for f in sys.meta_path)

def patched():
    init = m.TaskManager.__init__
    return getattr(init, "_lm_eval_longctx_hook", False) and not hasattr(init.__wrapped__, "_lm_eval_longctx_hook")

def evaluator_wrapped():
    import lm_eval.evaluator  # the finder's other module: it leaves once both are loaded
    return getattr(lm_eval.evaluator.simple_evaluate, "_lm_eval_longctx_hook", False)

defaults = str(m.Path(m.__file__).parent)
"""


@pytest.mark.integration
def test_include_path_rules_and_idempotence(tmp_path):
    """Hook installed before lm-eval is imported (the .pth case); TaskIndex.build only records its folders."""
    code = _RECORDER + textwrap.dedent(
        """
        ours = d.task_configs_dir()
        res = {
            "lm_eval_before": lm_eval_before,
            "patched": patched(),
            "finders_before_evaluator": n_finders(),
            "evaluator_wrapped": evaluator_wrapped(),
            "finders": n_finders(),
            "loader": type(m.__spec__.loader).__name__,
            "ours": ours,
            "bare": scan(),
            "user_str": scan(include_path="u1"),
            "user_list": scan(include_path=("u1", "u2")),
            "positional": scan(None, "u1"),
            "alias": os.path.join(ours, "..", os.path.basename(ours)),
            "ours_given": scan(include_path=["u1", os.path.join(ours, "..", os.path.basename(ours))]),
            "no_defaults": scan(include_path="u1", include_defaults=False),
        }
        d.install(); d.install(); importlib.reload(d); d.install()
        res["patched_after_reinstall"] = patched()
        res["finders_after_reinstall"] = n_finders()
        res["bare_after_reinstall"] = scan()
        os.environ[d.DISABLE_ENV] = "1"
        res["disabled_later"] = scan()
        print(json.dumps(res))
        """
    )
    out = _run(code, cwd=tmp_path)
    ours, defaults = out["ours"], out["bare"][0]
    assert out["lm_eval_before"] is False
    assert out["patched"] and out["finders_before_evaluator"] == 1 and out["evaluator_wrapped"]
    assert out["finders"] == 0
    assert out["loader"] != "_PatchingLoader", "the module keeps its real loader"
    assert Path(ours).resolve() == _expected_real_dir(), "the real task folder is what gets added"
    assert out["bare"] == [defaults, ours]
    assert out["user_str"] == [defaults, ours, "u1"]
    assert out["user_list"] == [defaults, ours, "u1", "u2"]
    assert out["positional"] == [defaults, ours, "u1"]
    assert out["alias"] != ours
    assert out["ours_given"] == [defaults, "u1", out["alias"]], "no duplicate; the caller's position wins"
    assert out["no_defaults"] == ["u1"]
    assert out["patched_after_reinstall"] and out["finders_after_reinstall"] == 0
    assert out["bare_after_reinstall"] == [defaults, ours]
    assert out["disabled_later"] == [defaults]


@pytest.mark.integration
def test_env_var_disables_and_late_install_patches_at_once(tmp_path):
    """With the variable set at start-up nothing is installed; lm-eval imported first is patched on install()."""
    code = _RECORDER + textwrap.dedent(
        """
        res = {"lm_eval_before": lm_eval_before, "finders": n_finders(), "patched": patched(), "bare": scan()}
        del os.environ[d.DISABLE_ENV]
        res["install"] = d.install()
        res["patched_after"] = patched()
        res["evaluator_wrapped"] = evaluator_wrapped()
        res["finders_after"] = n_finders()
        res["bare_after"] = scan()
        res["ours"] = d.task_configs_dir()
        print(json.dumps(res))
        """
    )
    out = _run(code, cwd=tmp_path, **{DISABLE: "1"})
    assert out["lm_eval_before"] is False
    assert out["finders"] == 0 and not out["patched"]
    assert len(out["bare"]) == 1, "disabled: only lm-eval's own folder is scanned"
    assert out["install"] is True
    assert out["patched_after"] and out["evaluator_wrapped"] and out["finders_after"] == 0
    assert out["bare_after"] == [out["bare"][0], out["ours"]]


@pytest.mark.integration
def test_wheel_ships_the_pth_at_the_root(tmp_path):
    """`pip wheel` of a copy of the project puts the .pth at the wheel root (= site-packages) and in RECORD."""
    pytest.importorskip("setuptools", minversion="70.1")  # bdist_wheel built in, no `wheel` package needed
    import shutil

    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py"):
        shutil.copy2(ROOT / name, src / name)
    for folder in ("lm_eval_longctx", "task_configs"):
        shutil.copytree(ROOT / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__"))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-q",
            "-w",
            str(tmp_path / "dist"),
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    pth = _setup_constant("PTH_NAME")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        record = zf.read(next(n for n in names if n.endswith(".dist-info/RECORD"))).decode()
        assert zf.read(pth).decode("ascii") == _setup_constant("PTH_CONTENT")
    assert pth in names
    assert any(line.startswith(pth + ",") for line in record.splitlines())
    assert "lm_eval_longctx/harness/discovery.py" in names
    assert "lm_eval_longctx/task_configs/__init__.py" in names
    assert f"{_setup_constant('START_NAME')}" in names
    assert "lm_eval_longctx/demo/assets/model/model.safetensors" in names
    assert "lm_eval_longctx/task_configs/longppl_govreport.yaml" in names
    words = sorted(p.name for p in (ROOT / "lm_eval_longctx" / "data" / "words").glob("*.txt"))
    assert words and all(f"lm_eval_longctx/data/words/{w}" in names for w in words)
    packages = {p.parent.relative_to(ROOT).as_posix() for p in (ROOT / "lm_eval_longctx").rglob("__init__.py")}
    assert {p for p in packages if f"{p}/__init__.py" not in names} == set(), "a layer folder is missing from the wheel"
    # the top-level task_configs/ folder ships as the package lm_eval_longctx.task_configs, every YAML of it
    yamls = sorted(p.name for p in (ROOT / "task_configs").glob("*.yaml"))
    assert yamls and all(f"lm_eval_longctx/task_configs/{y}" in names for y in yamls)
    assert not any(n.startswith("task_configs/") for n in names)


# ---------------------------------------------------------------- PEP 829 (.start) and the entry point of PR #4015

_FAKE_MANAGER = """
class TaskManager:
    def __init__(self, verbosity="INFO", include_path=None, include_defaults=True, metadata=None):
        self.include_path = include_path
"""


def _fake_lm_eval(root: Path, manager_source: str = _FAKE_MANAGER) -> Path:
    """A stand-in ``lm_eval`` whose TaskManager records the include_path it was given (no lm-eval needed)."""
    (root / "lm_eval" / "tasks").mkdir(parents=True)
    (root / "lm_eval" / "__init__.py").write_text("")
    (root / "lm_eval" / "tasks" / "__init__.py").write_text("")
    (root / "lm_eval" / "tasks" / "manager.py").write_text(manager_source)
    return root


_START_CHECK = """
import json, os, site, sys
site_dir = sys.argv[1]
site.addsitedir(site_dir)  # what site.py does at start-up: .pth import lines, and .start files on 3.15+
if sys.version_info < (3, 15):
    # PEP 829's .start processing, done by hand where site.py does not know it: one entry point a line
    import pkgutil
    for line in open(os.path.join(site_dir, {start!r}), encoding="utf-8-sig"):
        if line.strip() and not line.startswith("#"):
            pkgutil.resolve_name(line.strip())()
finders = [type(f).__name__ for f in sys.meta_path if getattr(f, "_lm_eval_longctx_hook", False)]
pinned = sorted(m for m in sys.modules if m.startswith("lm_eval_longctx"))
from lm_eval.tasks.manager import TaskManager

print(json.dumps({{"version": list(sys.version_info[:2]), "finders": finders, "pinned": pinned,
                  "include_path": TaskManager(include_path="/user").include_path}}))
"""


def _startup_dir(tmp_path: Path) -> Path:
    site_dir = _site_dir_with_pth(tmp_path)
    (site_dir / _setup_constant("START_NAME")).write_text(_setup_constant("START_CONTENT"), encoding="ascii")
    return site_dir


def _interpreters():
    """Python 3.10+ interpreters on this machine (PATH, then pyenv's versions folder)."""
    import glob
    import shutil

    found = {}
    for minor in range(10, 16):
        candidates = [shutil.which(f"python3.{minor}")]
        root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
        candidates += sorted(glob.glob(os.path.join(root, "versions", f"3.{minor}.*", "bin", f"python3.{minor}")))
        for exe in filter(None, candidates):
            if subprocess.run([exe, "-c", "pass"], capture_output=True).returncode == 0:
                found[f"3.{minor}"] = exe
                break
    return found


@pytest.mark.integration
@pytest.mark.parametrize("version", ["3.10", "3.11", "3.12", "3.13", "3.14", "3.15"])
def test_pth_and_start_files_install_the_hook_once(tmp_path, version):
    """Both start-up files in one site dir, on each Python found here: one finder, the package not pinned,
    our folder first in TaskManager's include_path (before the user's)."""
    exe = _interpreters().get(version)
    if exe is None:
        pytest.skip(f"no Python {version} on this machine")
    site_dir = _startup_dir(tmp_path)
    fake = _fake_lm_eval(tmp_path / "fake")
    env = {k: v for k, v in os.environ.items() if k != DISABLE}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(fake)])
    # -S: no site-packages of that interpreter (and no installed copy of our hook); the site dir is added by hand
    proc = subprocess.run(
        [exe, "-S", "-c", _START_CHECK.format(start=_setup_constant("START_NAME")), str(site_dir)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["version"] == [int(x) for x in version.split(".")]
    assert out["finders"] == ["_ManagerImportHook"]  # one, though both files ran
    assert out["pinned"] == [], "the start-up hook must not pin the package in sys.modules"
    ours = str((ROOT / "task_configs").resolve())
    assert out["include_path"] == [ours, "/user"]


@pytest.mark.integration
def test_start_file_names_a_callable_that_resolves():
    """PEP 829 syntax: every non-comment line is `pkg.mod:callable` (the colon part is mandatory)."""
    import pkgutil

    lines = [x.strip() for x in _setup_constant("START_CONTENT").splitlines() if x.strip() and not x.startswith("#")]
    assert lines and all(":" in x for x in lines)
    for line in lines:
        assert callable(pkgutil.resolve_name(line))
    assert _setup_constant("START_NAME")[: -len(".start")] == _setup_constant("PTH_NAME")[: -len(".pth")], (
        "the .start file must match the .pth file's name, or Python 3.15+ runs both"
    )


@pytest.mark.integration
def test_hook_steps_aside_when_lm_eval_reads_the_entry_point(tmp_path):
    """An lm-eval with PR #4015 scans the lm_eval.tasks entry point itself: the hook must not add the folder
    a second time."""
    fake = _fake_lm_eval(tmp_path / "fake", _FAKE_MANAGER + "\ndef discover_plugin_task_paths():\n    return []\n")
    code = f"""
        import json, sys
        sys.path.insert(0, {str(fake)!r})
        import lm_eval_longctx.harness.discovery as d
        d.install()
        from lm_eval.tasks.manager import TaskManager
        print(json.dumps({{"include_path": TaskManager(include_path="/user").include_path,
                          "finders": sum(getattr(f, "_lm_eval_longctx_hook", False) for f in sys.meta_path)}}))
        """
    out = _run(code, cwd=tmp_path)
    # the finder still waits for lm_eval.evaluator (which the stand-in lm-eval lacks)
    assert out == {"include_path": "/user", "finders": 1}


@pytest.mark.integration
def test_installed_entry_point_resolves_to_the_yaml_folder(tmp_path):
    """Install the wheel into a folder and resolve `lm_eval.tasks` the way upstream PR #4015 does
    (importlib.metadata, then importlib.util.find_spec of the value): the folder of our task YAMLs."""
    pytest.importorskip("setuptools", minversion="70.1")
    import shutil

    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    for folder in ("lm_eval_longctx", "task_configs"):
        shutil.copytree(ROOT / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__"))
    target = tmp_path / "site"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-q",
            "--target",
            str(target),
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    code = f"""
        import importlib.metadata as md, importlib.util, json, os, sys
        sys.path.insert(0, {str(target)!r})
        eps = [ep for ep in md.entry_points(group="lm_eval.tasks") if ep.dist.name == "lm_eval_longctx"
               and os.path.realpath(str(ep.dist.locate_file(""))) == os.path.realpath({str(target)!r})]
        spec = importlib.util.find_spec(eps[0].value.split(":")[0])
        folder = list(spec.submodule_search_locations)[0]
        print(json.dumps({{"n": len(eps), "name": eps[0].name, "value": eps[0].value, "folder": folder,
                          "yamls": sorted(f for f in os.listdir(folder) if f.endswith(".yaml"))}}))
        """
    env = {"PYTHONPATH": ""}
    out = _run(code, cwd=tmp_path, **env)
    assert out["n"] == 1 and out["value"] == "lm_eval_longctx.task_configs"
    assert Path(out["folder"]).resolve() == (target / "lm_eval_longctx" / "task_configs").resolve()
    assert sorted(p.name for p in (ROOT / "task_configs").glob("*.yaml")) == out["yamls"]


# ------------------------------------------------------------------ the harness is told, not peeking


@pytest.mark.integration
def test_simple_evaluate_is_wrapped_at_import_and_the_finder_leaves_after_both_modules(tmp_path):
    """The start-up hook wraps lm_eval.evaluator.simple_evaluate when that module is loaded (whether the task manager
    came first, as in the CLI, or later, as in the Python API), and leaves sys.meta_path once both are loaded."""
    code = """
        import json, sys
        import lm_eval_longctx.harness.discovery as d
        d.install()
        import lm_eval.tasks.manager  # the CLI's order: the task manager first
        after_manager = [type(f).__name__ for f in sys.meta_path if getattr(f, d._MARK, False)]
        import lm_eval
        from lm_eval import simple_evaluate
        from lm_eval.evaluator import simple_evaluate as direct
        print(json.dumps({
            "after_manager": after_manager,
            "after_both": [type(f).__name__ for f in sys.meta_path if getattr(f, d._MARK, False)],
            "wrapped": [getattr(f, d._MARK, False) for f in (simple_evaluate, direct, lm_eval.simple_evaluate)],
        }))
    """
    out = _run(code, cwd=tmp_path, **{DISABLE: ""})
    assert out == {"after_manager": ["_ManagerImportHook"], "after_both": [], "wrapped": [True, True, True]}
