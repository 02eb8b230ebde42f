"""Build hook. All project metadata lives in pyproject.toml; this file only ships the discovery start-up files.

``lm_eval_longctx_discovery.pth`` (Python <= 3.14, and 3.15-3.17 without a matching ``.start``) and
``lm_eval_longctx_discovery.start`` (PEP 829, Python 3.15+; its presence makes those Pythons skip the
``.pth`` file's ``import`` line, so the hook runs once) must sit at the root of site-packages, because only
start-up files there are processed. That root is outside any package, so ``package-data``
cannot place it, and a small custom ``build_py`` is needed:

* wheel (``pip install .``): the files are written into ``build_lib``. bdist_wheel copies all of
  ``build_lib`` into the wheel root (purelib), so the file lands in site-packages, is listed in
  RECORD and is removed again by ``pip uninstall``.
* editable wheel (``pip install -e .``, PEP 660): setuptools' ``editable_wheel`` runs
  ``build_py`` with ``editable_mode = True``. Its default (lenient) strategy ignores what
  ``build_py`` wrote to ``build_lib``. It does configure ``install.install_lib`` as the
  directory whose contents become the editable wheel (that is how it ships data files and
  scripts), so in that mode the file is written there.

``lm_eval_longctx/harness/discovery.py`` explains what the imported module does.
"""

import os

from setuptools import setup
from setuptools.command.build_py import build_py

PTH_NAME = "lm_eval_longctx_discovery.pth"
# site.py executes a .pth line that starts with "import". The try/except keeps a stale .pth
# silent: that is one left behind by an editable checkout that has since been deleted.
# _startup_from_pth() installs the lazy finder and then drops the package from sys.modules, so
# later imports still follow sys.path (see the module docstring). LM_EVAL_LONGCTX_DISABLE_HOOK=1 is
# honoured inside the module. The sys.modules test skips a second run of the line: some
# interpreters (pyenv-built ones, for example) process site-packages twice at start-up.
PTH_CONTENT = (
    'import sys; "_lm_eval_longctx_discovery_hook" in sys.modules or exec('
    '"try: import lm_eval_longctx.harness.discovery as m\\nexcept ImportError: pass\\nelse: m._startup_from_pth()")\n'
)
# PEP 829: one `pkg.mod:callable` entry point per line, called with no arguments at start-up (3.15+).
START_NAME = "lm_eval_longctx_discovery.start"
START_CONTENT = (
    "# lm_eval_longctx: let lm-eval find this package's tasks (lm_eval_longctx/harness/discovery.py)\n"
    "lm_eval_longctx.harness.discovery:_startup_from_pth\n"
)
STARTUP_FILES = {PTH_NAME: PTH_CONTENT, START_NAME: START_CONTENT}


class build_py_with_pth(build_py):
    """``build_py`` that also writes the discovery ``.pth`` and ``.start`` files into the site-packages root."""

    def _pth_dir(self) -> str:
        if getattr(self, "editable_mode", False):
            return self.get_finalized_command("install").install_lib
        return self.build_lib

    def run(self):
        super().run()
        for name, content in STARTUP_FILES.items():
            target = os.path.join(self._pth_dir(), name)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            # Plain ASCII: valid as utf-8-sig (PEP 829) and in any locale encoding.
            with open(target, "w", encoding="ascii") as fh:
                fh.write(content)

    def get_outputs(self, include_bytecode=True):
        outputs = list(super().get_outputs(include_bytecode))
        if not getattr(self, "editable_mode", False):
            outputs.extend(os.path.join(self.build_lib, name) for name in STARTUP_FILES)
        return outputs


setup(cmdclass={"build_py": build_py_with_pth})
