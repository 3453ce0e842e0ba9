"""Packaging beyond what pyproject.toml can say: the project's top-level `templates/`, `static/` and `demo/`
folders travel in the wheel as `allot_templates`, `allot_static` and `allot_demo` (data-only packages beside
`config`), which config/settings.py finds when the source folders are not there (an installed wheel).
Every app with an `__init__.py` is found, so a new app ships without an edit here."""

from setuptools import find_packages, setup

ASSETS = {"allot_templates": "templates", "allot_static": "static", "allot_demo": "demo"}

setup(
    packages=[*find_packages(exclude=["tests", "tests.*", "packaging", "packaging.*"]), *ASSETS],
    package_dir=ASSETS,
    package_data={name: ["**/*"] for name in ASSETS},
    include_package_data=False,
)
