"""Packaging for lockdown: the `lockdown` console script and its Python dependencies."""
import re
from pathlib import Path

from setuptools import find_packages, setup

VERSION = re.search(r'__version__ = "([^"]+)"',
                    Path(__file__).with_name("lockdown").joinpath("__init__.py").read_text()).group(1)

setup(
    name="lockdown",
    version=VERSION,
    description="Profiling-guided optimization toolkit for PHP web applications",
    long_description=Path(__file__).with_name("README.md").read_text(),
    long_description_content_type="text/markdown",
    python_requires=">=3.11",
    packages=find_packages(include=["lockdown", "lockdown.*"]),
    package_data={"lockdown": ["harness/templates/*", "reports/templates/*"]},
    install_requires=["click>=8.0", "jinja2>=3.0", "pyelftools>=0.29"],
    # pytest 9.2 changed how node ids are stored, and pytest-xdist 3.8's --dist loadgroup
    # silently stops grouping (pytest-dev/pytest-xdist#1386, open): keep pytest below 9.2.
    extras_require={"test": ["pytest>=7,<9.2", "pytest-xdist>=3.0", "selenium>=4.10"]},
    entry_points={"console_scripts": ["lockdown=lockdown.cli:main"]},
)
