"""The layer rule (transformer_limits.layers) holds for the package, and the checker catches a planted
upward import in every form an import can take (eager, lazy inside a function, relative, importlib,
sideways between sibling layers, the facade read from below)."""

from __future__ import annotations

from pathlib import Path

import pytest

from transformer_limits.layers import LAYERS, layer_of, layer_violations, module_imports

PACKAGE = Path(__file__).resolve().parents[1] / "transformer_limits"


def test_the_package_keeps_its_layers():
    assert layer_violations(PACKAGE) == []


def test_the_rule_as_documented():
    # base < numeric < symbolic < verify < {testing, commands} < cli; numeric never imports symbolic
    assert LAYERS["base"] < LAYERS["numeric"] < LAYERS["symbolic"] < LAYERS["verify"]
    assert LAYERS["verify"] < LAYERS["testing"] == LAYERS["commands"] < LAYERS["cli"]
    assert layer_of("transformer_limits.errors") == "base"
    assert layer_of("transformer_limits.numeric.attention.layer") == "numeric"
    assert layer_of("transformer_limits.__main__") == "cli"
    assert layer_of("transformer_limits") is None and layer_of("numpy") is None


def test_the_cli_and_commands_no_longer_import_each_other():
    edges = {(layer_of(i.importer), layer_of(i.imported)) for i in module_imports(PACKAGE)}
    assert ("commands", "cli") not in edges
    assert ("cli", "commands") in edges  # the front door imports the subcommands, plainly


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "transformer_limits"
    for name in ("", "numeric", "symbolic", "verify", "testing", "commands"):
        (root / name).mkdir(parents=True, exist_ok=True)
        (root / name / "__init__.py").write_text('__version__ = "0"\n' if not name else "")
    for rel, text in files.items():
        (root / rel).write_text(text)
    return root


PLANTED = {
    "eager upward": {"numeric/a.py": "from transformer_limits.verify import b\n", "verify/b.py": ""},
    "lazy upward": {"numeric/a.py": "def f():\n    from transformer_limits.verify.b import g\n",
                    "verify/b.py": "def g(): pass\n"},
    "relative upward": {"numeric/a.py": "from ..symbolic import b\n", "symbolic/b.py": ""},
    "importlib upward": {"symbolic/a.py": "import importlib\nimportlib.import_module('transformer_limits.verify.b')\n",
                         "verify/b.py": ""},
    "plain import upward": {"errors.py": "import transformer_limits.numeric.a\n", "numeric/a.py": ""},
    "sideways": {"commands/a.py": "from transformer_limits.testing import b\n", "testing/b.py": ""},
    "facade from below": {"numeric/a.py": "from transformer_limits import derive\n"},
    "into the front door": {"commands/a.py": "from transformer_limits.cli import emit\n", "cli.py": ""},
}


@pytest.mark.parametrize("case", PLANTED, ids=list(PLANTED))
def test_a_planted_violation_is_reported(tmp_path, case):
    violations = layer_violations(_tree(tmp_path, PLANTED[case]))
    assert len(violations) == 1, violations
    assert "transformer_limits." in violations[0] and "line" in violations[0]


def test_downward_and_same_layer_imports_are_clean(tmp_path):
    root = _tree(tmp_path, {
        "errors.py": "",
        "numeric/a.py": "from transformer_limits import errors, __version__\nfrom . import b\n",
        "numeric/b.py": "",
        "symbolic/c.py": "from transformer_limits.numeric.a import x\n",
        "verify/d.py": "import transformer_limits\nfrom transformer_limits.symbolic import c\n",
        "cli.py": "from transformer_limits.commands import e\n", "commands/e.py": "from transformer_limits.verify import d\n",
    })
    assert layer_violations(root) == []


def test_package_inits_the_facade_and_the_symbolic_boundary(tmp_path):
    root = _tree(tmp_path, {
        # the facade imports anything, and scanning goes on past it
        "__init__.py": '__version__ = "0"\ndef derive():\n    from transformer_limits.verify import d\n',
        "verify/d.py": "",
        # a relative import in a package __init__ resolves from the package itself
        "numeric/__init__.py": "from . import a\nfrom ..verify import d\n",
        "numeric/a.py": "",
        # the symbolic layer may call the facade (it reaches symbolic only); numeric may import the facade
        # module but not take its functions
        "symbolic/s.py": "from transformer_limits import derive\n",
        "numeric/n.py": "import transformer_limits\n",
        "numeric/m.py": "from transformer_limits import __version__, derive\n",
    })
    violations = layer_violations(root)
    assert len(violations) == 2, violations
    assert any("transformer_limits.numeric (line 2) imports transformer_limits.verify.d" in v for v in violations)
    assert any("transformer_limits.numeric.m" in v and "the facade's __version__, derive" in v for v in violations)
