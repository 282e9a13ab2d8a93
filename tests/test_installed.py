"""Installed versions read from metadata directories: the same answers as importlib.metadata, without importing it."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

from pytest_gpucompat.common.installed import find, normalize, version


def _dist(site: Path, name: str, ver: str, kind: str = "dist-info", header: str | None = None) -> None:
    text = header if header is not None else f"Metadata-Version: 2.1\nName: {name}\nVersion: {ver}\n\nVersion: 9.9\n"
    if kind == "egg-file":
        (site / f"{name}-{ver}-py3.11.egg-info").write_text(text)
        return
    folder = site / f"{name}-{ver}.{kind}"
    folder.mkdir(parents=True)
    (folder / ("METADATA" if kind == "dist-info" else "PKG-INFO")).write_text(text)


def test_every_distribution_of_this_environment_as_importlib_metadata_says() -> None:
    names = {d.metadata["Name"] for d in metadata.distributions() if d.metadata["Name"]}
    assert len(names) > 20
    found = find(names)
    for name in names:
        assert found[name].version == metadata.version(name), name
    torch = find(["torch"]).get("torch")
    if torch is not None:  # the location holds the package's files (fingerprint reads torch/version.py there)
        assert (torch.location / "torch" / "version.py").is_file()


def test_names_are_normalized_and_the_first_entry_wins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    _dist(first, "Flash_Attn", "2.7.4")
    _dist(second, "flash_attn", "2.6.0")
    _dist(second, "sgl_kernel", "0.1.9", kind="egg-info")
    _dist(second, "old_pkg", "1.2", kind="egg-file")
    monkeypatch.setattr(sys, "path", [str(tmp_path / "nothing-here"), str(first), str(second)])
    found = find(["flash-attn", "SGL-Kernel", "old.pkg", "absent"])
    assert {k: v.version for k, v in found.items()} == {"flash-attn": "2.7.4", "SGL-Kernel": "0.1.9",
                                                        "old.pkg": "1.2"}
    assert found["flash-attn"].location == first  # not the later one, not the description's "Version: 9.9"
    assert version("absent") is None and normalize("Flashinfer_Python") == "flashinfer-python"


def test_what_the_directories_cannot_settle_is_asked_of_importlib(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    """A zip on sys.path (its distributions come first) and metadata without a version header."""
    archive = tmp_path / "deps.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("zipped-3.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: zipped\nVersion: 3.0\n")
    site = tmp_path / "site"
    _dist(site, "zipped", "1.0")
    _dist(site, "noversion", "0.1", header="Metadata-Version: 2.1\nName: noversion\n\n")
    monkeypatch.setattr(sys, "path", [str(archive), str(site)])
    found = find(["zipped", "noversion"])
    assert found["zipped"].version == "3.0" == metadata.version("zipped")  # the zip comes first on sys.path
    assert "noversion" not in found  # importlib.metadata has no version for it either


def test_gpucompat_env_does_not_import_importlib_metadata() -> None:
    code = ("import sys, io, contextlib\nfrom pytest_gpucompat.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()): main(['env', '--json'])\n"
            "print('importlib.metadata' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


@pytest.mark.parametrize("name", ["TensorRT-LLM", "tensorrt_llm", "oslo.concurrency", "A__b--C..d", "-x-", "_", "",
                                  "Django", "nvidia-ml-py", "İstanbul.Pkg", "KELVIN_K", "a._-b", "zope.interface",
                                  "ßtraße", "ǅ_x", "x" * 300])
def test_package_names_are_normalized_as_packaging_does(name: str) -> None:
    from packaging.utils import canonicalize_name

    from pytest_gpucompat.common.versions import normalize_package

    assert normalize_package(name) == canonicalize_name(name)
