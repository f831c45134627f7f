"""The guide's code is the code that runs: the pages repeat the README's and the examples'."""

from __future__ import annotations

import re

from tests.support.launch import REPO_ROOT


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, re.S)


def test_porting_page_has_the_readme_training_loop() -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    ctl = re.search(r"`ctl.py`:\n\n```python\n(.*?)```", readme, re.S)
    assert ctl is not None, "README lost its ctl.py example"
    assert ctl[1] in _python_blocks((REPO_ROOT / "docs" / "porting.md").read_text())
    # The steps of TF's canonical loop (issue 13), each made with the package's own API: the
    # loss averaged over the global batch by nn.compute_average_loss, not by hand.
    for step in ("strategy.scope()", "experimental_distribute_dataset", "strategy.run(",
                 "nn.compute_average_loss(per_example_loss, global_batch_size=GLOBAL_BATCH)",
                 "apply_gradients", "strategy.reduce(", "CheckpointManager"):  # fmt: skip
        assert step in ctl[1], step


def test_testing_page_shows_the_example_file() -> None:
    example = (REPO_ROOT / "docs" / "examples" / "test_training_step.py").read_text()
    assert example in _python_blocks((REPO_ROOT / "docs" / "testing.md").read_text())


def test_every_api_page_documents_a_module() -> None:
    pages = sorted((REPO_ROOT / "docs" / "api").glob("*.md"))
    assert len(pages) >= 10
    nav = (REPO_ROOT / "mkdocs.yml").read_text()
    for page in pages:
        module = re.search(r"^::: (mwms_mpi[\w.]*)$", page.read_text(), re.M)
        assert module is not None, page
        assert f"api/{page.name}" in nav, page
        __import__(module[1])
