"""The public API: ``__all__`` of transformer_limits.verify, .numeric, .symbolic and .testing (issues 14, 24).

* every exported name resolves, comes from a module of its own subpackage and has a real docstring;
* importing the subpackages stays light (issue 12): no SymPy, SciPy, Numba or PyTorch until a
  name is used, and resolving every name of ``numeric`` still imports no SymPy;
* unknown names raise ``AttributeError``, ``dir()`` lists ``__all__``, and a function exported under
  the name of its own module (``verify.rate_check``) stays the function after that module is imported;
* the Sphinx API reference (docs/api) builds with warnings as errors and documents every exported
  name, while a page with a broken reference fails the same build.
"""
from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("transformer_limits.verify", "transformer_limits.numeric", "transformer_limits.symbolic",
            "transformer_limits.testing")
# exported functions whose name is also the name of the module defining them
# a function exported under the name of its own module (verify.rate_check was one until the module moved
# to verify.rate.check)
SHADOWED = {"transformer_limits.symbolic": "derivation"}
HEAVY = ("sympy", "scipy", "numba", "torch")


def _documented(obj) -> bool:
    """True when ``obj`` has a docstring of its own (not a dataclass's generated signature)."""
    doc = inspect.getdoc(obj)
    if not doc or not doc.strip():
        return False
    if inspect.isclass(obj):
        if dataclasses.is_dataclass(obj) and doc.startswith(f"{obj.__name__}("):
            return False  # dataclasses write "Name(field: type, ...)" when the class has none
        if not vars(obj).get("__doc__"):
            return False  # only a base class's docstring
    return True


def _run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.parametrize("package", PACKAGES)
def test_every_exported_name_resolves_and_is_documented(package):
    pkg = importlib.import_module(package)
    assert pkg.__all__, "the public API is not empty"
    assert len(set(pkg.__all__)) == len(pkg.__all__), "no name is exported twice"
    undocumented = []
    for name in pkg.__all__:
        assert not name.startswith("_")
        obj = getattr(pkg, name)
        # defined in a module of this subpackage (not re-exported from a third-party library)
        assert obj.__module__.startswith(package + "."), (name, obj.__module__)
        assert getattr(importlib.import_module(obj.__module__), name) is obj
        if not _documented(obj):
            undocumented.append(name)
    assert not undocumented, f"{package}: exported names without a docstring: {undocumented}"


def test_the_docstring_check_rejects_undocumented_objects():
    """The check above is not vacuous: objects with no docstring of their own are rejected."""

    def bare(x):
        return x

    @dataclasses.dataclass
    class Bare:
        x: int

    class Child(ValueError):
        pass

    @dataclasses.dataclass
    class Documented:
        """A documented record."""

        x: int

    assert not _documented(bare)
    assert not _documented(Bare)       # only the generated "Bare(x: int)"
    assert not _documented(Child)      # only ValueError's docstring
    assert _documented(Documented)
    assert _documented(test_the_docstring_check_rejects_undocumented_objects)


def test_importing_the_subpackages_is_light():
    loaded = json.loads(_run(f"""
        import json, sys
        import transformer_limits, transformer_limits.verify, transformer_limits.numeric
        import transformer_limits.symbolic, transformer_limits.testing
        print(json.dumps([m for m in {HEAVY!r} + ("hypothesis",) if m in sys.modules]))
    """))
    assert loaded == []


def test_numeric_needs_no_sympy_at_run_time():
    """Resolving every name of ``numeric`` (and of ``verify``) imports modules, but never SymPy."""
    loaded = json.loads(_run("""
        import json, sys
        import transformer_limits.numeric as numeric, transformer_limits.verify as verify
        for pkg in (numeric, verify):
            for name in pkg.__all__:
                getattr(pkg, name)
        print(json.dumps(sorted(m for m in ("sympy", "torch") if m in sys.modules)))
    """))
    assert loaded == []


@pytest.mark.parametrize("package", PACKAGES)
def test_unknown_names_raise_attribute_error(package):
    pkg = importlib.import_module(package)
    with pytest.raises(AttributeError, match="no_such_name"):
        pkg.no_such_name  # noqa: B018
    assert not hasattr(pkg, "__wrapped__")  # introspection probes must get AttributeError too
    with pytest.raises(ImportError):
        exec(f"from {package} import no_such_name", {})


@pytest.mark.parametrize("package", PACKAGES)
def test_dir_lists_all(package):
    pkg = importlib.import_module(package)
    listed = dir(pkg)
    assert set(pkg.__all__) <= set(listed)
    assert listed == sorted(listed)


def test_a_wrong_export_table_is_rejected(monkeypatch):
    """A name mapped to a module that does not define it fails loudly instead of resolving."""
    import transformer_limits.verify as verify

    monkeypatch.setitem(verify._EXPORTS, "bogus_rate", "stats.power_law")
    with pytest.raises(AttributeError, match="bogus_rate"):
        verify.bogus_rate  # noqa: B018
    assert "bogus_rate" not in vars(verify)


def test_shadowed_functions_survive_importing_their_module():
    """``symbolic.derivation`` stays the function when the module is imported first; imports by module
    path keep working; ``verify.rate_check`` is the function, its module ``verify.rate.check``."""
    out = json.loads(_run(f"""
        import importlib, inspect, json
        result = {{}}
        for package, name in {SHADOWED!r}.items():
            module = importlib.import_module(package + "." + name)   # the submodule first
            pkg = importlib.import_module(package)
            obj = getattr(pkg, name)
            result[name] = [callable(obj) and not inspect.ismodule(obj),
                            obj is getattr(module, name),
                            importlib.import_module(package + "." + name) is module]
        from transformer_limits.verify.rate.check import RateCheckResult
        from transformer_limits.verify import rate_check
        result["from-import"] = [rate_check.__name__ == "rate_check", RateCheckResult.__name__]
        print(json.dumps(result))
    """))
    for name in SHADOWED.values():
        assert out[name] == [True, True, True], name
    assert out["from-import"] == [True, "RateCheckResult"]


def test_top_level_helpers_agree_with_symbolic():
    import transformer_limits as tl
    import transformer_limits.symbolic as symbolic

    names = [spec.name for spec in symbolic.list_derivations()]
    assert names == [spec.name for spec in tl.list_derivations()]
    assert "attention-lions-derivative" in names
    with pytest.raises(ValueError, match="no-such-derivation"):
        symbolic.derivation("no-such-derivation")


# ---------------------------------------------------------------------------------------------
# the API reference

def _sphinx(src: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-n", "-q", "-E",
                           "-b", "html", *extra, str(src), str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)


def _inventory(out: Path) -> set[str]:
    from sphinx.util.inventory import InventoryFile

    with open(out / "objects.inv", "rb") as f:
        inv = InventoryFile.load(f, "", lambda base, uri: uri)
    # Sphinx >= 8.2 returns an object with .data; older versions a plain dict
    data = getattr(inv, "data", inv)
    return {name for entries in data.values() for name in entries}


@pytest.fixture(scope="module")
def sphinx_available():
    pytest.importorskip("sphinx", reason="the docs extra is not installed: pip install -e '.[docs]'")


def test_api_reference_builds_and_documents_every_exported_name(sphinx_available, tmp_path):
    out = tmp_path / "html"
    res = _sphinx(ROOT / "docs" / "api", out)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-5000:]
    documented = _inventory(out)
    missing = [f"{package}.{name}" for package in PACKAGES
               for name in importlib.import_module(package).__all__
               if f"{package}.{name}" not in documented]
    assert not missing, f"exported but not in the reference: {missing}"
    assert "transformer_limits.errors.InputError" in documented


def test_api_reference_build_fails_on_a_broken_reference(sphinx_available, tmp_path):
    """The same configuration turns a reference to a missing or internal name into a failed build,
    and resolves a reference by defining module to the public page."""
    good = tmp_path / "good"
    good.mkdir()
    (good / "index.rst").write_text(textwrap.dedent("""\
        Probe
        =====

        .. py:function:: transformer_limits.verify.fit_power_law(params, errors)

           Documented under its public name, as the reference does.

        See :func:`transformer_limits.verify.stats.power_law.fit_power_law`.
    """))
    res = _sphinx(good, tmp_path / "good-out", "-c", str(ROOT / "docs" / "api"))
    assert res.returncode == 0, res.stderr[-3000:]

    for target in ("transformer_limits.verify.no_such_function",
                   "transformer_limits.verify.stats.seed_bootstrap.bootstrap_memory_bytes"):  # internal
        bad = tmp_path / f"bad-{target.rsplit('.', 1)[1]}"
        shutil.copytree(good, bad)
        with open(bad / "index.rst", "a") as f:
            f.write(f"\nAnd :func:`{target}`.\n")
        res = _sphinx(bad, tmp_path / f"{bad.name}-out", "-c", str(ROOT / "docs" / "api"))
        assert res.returncode != 0, f"a reference to {target} must fail the build"
        assert "reference target not found" in res.stderr and target in res.stderr
