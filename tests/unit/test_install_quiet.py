"""``make install`` prints no packaging warning that is ours to fix (issue 26, item 7).

setuptools 77 and later deprecate ``License ::`` classifiers in favour of the SPDX expression
(``license = Apache-2.0`` in setup.cfg), and print a boxed warning three times per install.
The one warning left, "the 'compat' editable mode is transitional", is the price of
``editable_mode=compat`` (mypy and IDEs follow its path entry: tests/e2e/test_editable_install.py),
explained in one line in the README.
"""

from __future__ import annotations

import configparser

from tests.support.launch import REPO_ROOT


def test_no_licence_classifier_beside_the_spdx_licence() -> None:
    config = configparser.ConfigParser()
    config.read(REPO_ROOT / "setup.cfg")
    classifiers = config["metadata"]["classifiers"].split("\n")
    assert config["metadata"]["license"] == "Apache-2.0"
    assert [c for c in classifiers if c.strip().startswith("License ::")] == []


def test_the_readme_explains_the_compat_editable_notice() -> None:
    text = (REPO_ROOT / "README.md").read_text()
    assert "'compat' editable mode is transitional" in text
