"""Shared test fixtures: the real traces in ../shared/fixtures and unpacked copies of archives."""

from __future__ import annotations

import sys
import tarfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # torch_jobs, for every test folder
REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared" / "fixtures" / "external"


@pytest.fixture(scope="session")
def shared_fixtures() -> Path:
    """../shared/fixtures/external (read-only); skips the test if the folder is absent."""
    if not SHARED.is_dir():
        pytest.skip(f"{SHARED} not found")
    return SHARED


@pytest.fixture(scope="session")
def unpack(shared_fixtures, tmp_path_factory):
    """unpack("param/dlrm_8rank_host_et.tar.gz") -> folder with the archive's files (cached)."""
    cache: dict[str, Path] = {}

    def _unpack(rel: str) -> Path:
        if rel not in cache:
            dest = tmp_path_factory.mktemp(Path(rel).name.split(".")[0])
            with tarfile.open(shared_fixtures / rel) as tf:
                tf.extractall(dest, filter="data")
            cache[rel] = dest
        return cache[rel]

    return _unpack


@pytest.fixture(scope="session")
def generated_job(tmp_path_factory):
    """generated_job(**config) -> the folder of the GPT job `trace-convert generate` writes for
    that TransformerConfig (each config written once per session)."""
    from chakra_tools.frontends import TransformerConfig, generate

    cache: dict[tuple, Path] = {}

    def _generated(**config) -> Path:
        key = tuple(sorted(config.items()))
        if key not in cache:
            out = cache[key] = tmp_path_factory.mktemp("gpt")
            generate(TransformerConfig(**config)).write(out)
        return cache[key]

    return _generated
