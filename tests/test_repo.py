"""The README's test command is the one CI runs."""

from tests.conftest import REPO


def test_ci_runs_the_readme_test_command():
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    command = ci[ci.index("# README test command (kept identical; tests/test_repo.py checks it):") + 1]
    assert command in (REPO / "README.md").read_text()


def test_ci_runs_the_integration_tier_the_readme_names():
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    integration = next(line for line in ci if "-m \"integration or hypothesis\"" in line)
    assert integration.strip() in (REPO / "README.md").read_text()
    assert '-m "not integration"' in (REPO / "pytest.ini").read_text()  # what the README command leaves out
