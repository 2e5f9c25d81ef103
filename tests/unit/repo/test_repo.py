"""The README is a front door: its test command is the one CI runs, its example runs, its links resolve, and
the documentation builds as a site."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO


def test_ci_runs_the_readme_test_command():
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    command = ci[ci.index("# README test command (kept identical; tests/unit/repo/test_repo.py checks it):") + 1]
    assert command in (REPO / "README.md").read_text()


def test_ci_runs_the_integration_tier_the_readme_names():
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    integration = [line for line in ci if "-m \"integration or hypothesis\"" in line]
    named = next(line.strip() for line in (REPO / "README.md").read_text().splitlines()
                 if "-m \"integration or hypothesis\"" in line)
    # CI adds only the list of its slowest tests and which half of the tier each line runs
    assert len(integration) == 2 and all(line.startswith(named) for line in integration)
    assert '-m "not integration"' in (REPO / "pytest.ini").read_text()  # what the README command leaves out


def test_the_readme_is_a_front_door_and_its_python_example_runs(capsys):
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    assert not re.search(r"\b\d[\d,]* (tests|passed)\b", readme)  # no counts that go stale
    example = re.search(r"```python\n(.*?)```", readme, re.S)[1]
    assert len(example.strip().splitlines()) <= 10
    import os

    here = os.getcwd()
    os.chdir(REPO)  # the example reads the worked example as a person in a checkout would
    try:
        exec(compile(example, "README.md", "exec"), {})  # noqa: S102 (the README's own example)
    finally:
        os.chdir(here)
    printed = capsys.readouterr().out.splitlines()
    assert set(printed[0]) <= set("ACGT") and len(printed[0]) == 120
    assert printed[1].startswith(("-", "+")) and "g.1206A>T the model's own scoring setup" in printed[1]


def test_every_link_of_the_readme_and_the_docs_site_resolves(tmp_path):
    """The README's links name files that exist; the docs build as a site in strict mode (a broken link, a page
    left out of the navigation or a missing anchor fails it)."""
    for target in re.findall(r"\]\(([^)#\s]+)", (REPO / "README.md").read_text()):
        if not target.startswith("http"):
            assert (REPO / target).exists(), target
    mkdocs = shutil.which("mkdocs") or str(Path(sys.executable).with_name("mkdocs"))
    done = subprocess.run([mkdocs, "build", "--strict", "--site-dir", str(tmp_path / "site")], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr



def test_the_speed_pages_tables_are_those_the_dated_result_files_make(capsys):
    """No speed table is typed by hand: each is what `benchmarks.tables` makes of the newest result files, and
    one changed by hand (or left behind by a newer run) is named."""
    from benchmarks import tables

    assert tables.main(["--check"]) == 0, capsys.readouterr().out
    page = tables.PAGE.read_text()
    assert set(re.findall(r"<!-- table: ([\w-]+) -->", page)) == set(tables.TABLES)
    edited = page.replace("| 3B | 358", "| 3B | 359")
    assert edited != page and tables.rendered(edited)[1] == ["gpu-shapes"]
