"""The Space's requirements and the CPU install's differ only in torch, and the Space's pin is one ZeroGPU has."""

from pathlib import Path

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
