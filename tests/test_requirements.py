"""The Space's requirements and the CPU install's differ only in torch, and the Space's pin is one ZeroGPU has;
`pip install -e .` installs every module and package of the checkout (subpackages too), and declares no dependencies."""

import subprocess
from pathlib import Path

import pytest
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
ZEROGPU_TORCH = (Version("2.8.0"), Version("2.11.0"))  # the releases ZeroGPU lists


def requirements(name: str) -> list[str]:
    lines = [line.split("#")[0].strip() for line in (ROOT / name).read_text().splitlines()]
    return [line for line in lines if line]


def test_the_space_pins_one_torch_that_zerogpu_supports():
    torch_lines = [r for r in requirements("requirements.txt") if r.startswith("torch")]
    assert len(torch_lines) == 1 and ";" not in torch_lines[0], "one plain pin, no markers"
    low, high = ZEROGPU_TORCH
    assert low <= Version(torch_lines[0].removeprefix("torch==")) <= high


def test_the_cpu_install_is_the_space_list_with_the_cpu_torch():
    space, cpu = requirements("requirements.txt"), requirements("requirements-cpu.txt")
    assert [r for r in space if not r.startswith("torch")] == [r for r in cpu if not r.startswith("torch")]
    assert "torch==2.13.0" in cpu


def pyproject() -> dict:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_project_installs_every_top_level_module_and_package():
    setuptools = pyproject()["tool"]["setuptools"]
    run_from_the_checkout = {"tests", "bench", "scripts"}
    assert sorted(setuptools["py-modules"]) == sorted(path.stem for path in ROOT.glob("*.py"))
    tracked = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True)
    packages = {".".join(Path(path).parent.parts) for path in tracked.stdout.split() if "/" in path}
    assert sorted(setuptools["packages"]) == sorted(
        {package for package in packages if package.split(".")[0] not in run_from_the_checkout})
    assert setuptools["package-data"] == {"ui": ["static/*"]}  # the page's files, none in a folder of its own
    assert all(path.is_file() for path in (ROOT / "ui" / "static").iterdir())


def test_the_project_declares_no_dependencies():
    """The requirements files are the install: torch's build depends on the machine (scripts/install.sh)."""
    project = pyproject()["project"]
    assert "dependencies" not in project and "dependencies" not in project.get("dynamic", [])
