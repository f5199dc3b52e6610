"""Sphinx configuration of the Python API reference (docs/api).

Build: ``python3 -m sphinx -W --keep-going -n -b html docs/api OUT`` (needs ``pip install -e ".[docs]"``).
The pages document exactly the names in ``__all__`` of transformer_limits.verify, .numeric, .symbolic
and .testing (with its strategies module), from their docstrings.  No network is used: third-party
types (NumPy, PyTorch, hypothesis, the standard library) are left unlinked instead of fetched through
intersphinx.
"""

import os
import sys

# the checkout being documented, wherever (or whether) the package is installed
sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

project = "transformer_limits"
author = "transformer_limits developers"
release = "0.1.0"

extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon"]

root_doc = "index"
exclude_patterns = ["README.md", "_build"]
html_theme = "alabaster"

autodoc_member_order = "bysource"  # the order of __all__: grouped by topic
autodoc_default_options = {"members": True}
autodoc_typehints = "signature"
napoleon_google_docstring = False
napoleon_numpy_docstring = True
# Types in "Parameters"/"Returns" sections are free text here ("int (query/key dimensions)"), so
# they are shown as written, not turned into cross-references.
napoleon_use_param = False
napoleon_use_rtype = False

# Types outside this project have no page here (no intersphinx offline); every reference into the
# project itself must resolve, so only these namespaces are ignored.
nitpick_ignore_regex = [
    (r"py:.*", r"(numpy|np|numpy\.typing|npt|torch|scipy|sympy|sp|mpmath|matplotlib|distributed|dask|hypothesis|st)(\..*)?"),
    (r"py:.*", r"(typing|collections\.abc|os|pathlib|concurrent\.futures|multiprocessing|sqlite3|"
               r"importlib\.metadata|fractions|dataclasses|enum|types|functools|itertools)\..*"),
    # private helpers named in signatures (``SweepStore.write(..., outcome: _Outcome)``) have no page
    (r"py:class", r"transformer_limits(\.\w+)*\._\w+"),
]


def _public_alias(app, env, node, contnode):
    """Resolve ``transformer_limits.<sub>.<module>.<name>[.<attr>]`` to the public page of ``<name>``.

    Docstrings cite objects by their defining module; the reference documents them under the
    subpackage that exports them (``transformer_limits.verify.fit_power_law``).  A reference is
    re-pointed only when ``<name>`` is in that subpackage's ``__all__`` and comes from ``<module>``,
    so a reference to an internal name still fails the build.
    """
    import importlib

    if node.get("refdomain") != "py":
        return None
    parts = node.get("reftarget", "").split(".")
    if len(parts) < 4 or parts[0] != "transformer_limits":
        return None
    try:
        package = importlib.import_module(".".join(parts[:2]))
    except ImportError:
        return None
    exports = getattr(package, "_EXPORTS", {})
    # the module may be nested (``verify.stats.power_law``): try every split module / name
    for k in range(3, len(parts)):
        if exports.get(parts[k]) == ".".join(parts[2:k]):
            target = ".".join(parts[:2] + parts[k:])
            domain = env.get_domain("py")
            return domain.resolve_xref(env, node["refdoc"], app.builder, node["reftype"], target, node, contnode)
    return None


def _plain_factory_defaults(app, what, name, obj, options, signature, return_annotation):
    """Show dataclass ``default_factory`` defaults as ``...``: ``<factory>`` is not Python, and
    Sphinx then splits the signature at every comma (``dict[str`` / ``float]``)."""
    if signature:
        signature = signature.replace("<factory>", "...")
    return signature, return_annotation


def setup(app):
    app.connect("missing-reference", _public_alias)
    app.connect("autodoc-process-signature", _plain_factory_defaults)
