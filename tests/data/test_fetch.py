"""``python -m unitta.data fetch``: CIFAR-C from a local Zenodo-shaped server (resume, checksums, errors)."""

import hashlib
import io
import json
import os
import socket
import tarfile
import time

import numpy as np
import pytest

from tests.free_ports import free_ports
from tests.local_http import Served, run_unprivileged, serve
from unitta.data.__main__ import main
from unitta.data.download import Digest, DownloadError, download
from unitta.data.fetch import fetch_cifar_c

RECORD = "2535967"  # robustbench's Zenodo record for CIFAR-10-C
ROWS = 100  # a tiny CIFAR-10-C: 100 rows per file


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def archive() -> tuple[bytes, dict[str, bytes]]:
    """A CIFAR-10-C.tar with labels.npy and 2 corruptions of ROWS rows (random pixels, seed 0)."""
    rng = np.random.default_rng(0)
    files = {
        "labels.npy": _npy(np.repeat(np.arange(10, dtype=np.uint8), ROWS // 10)),
        "fog.npy": _npy(rng.integers(0, 256, (ROWS, 32, 32, 3), dtype=np.uint8)),
        "snow.npy": _npy(rng.integers(0, 256, (ROWS, 32, 32, 3), dtype=np.uint8)),
    }
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(f"CIFAR-10-C/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue(), files


def _zenodo(tar: bytes, md5: str | None = None) -> Served:
    """A server with Zenodo's record API entry (as robustbench reads it) and the archive."""

    def record(base: str) -> bytes:
        entry = {
            "key": "CIFAR-10-C.tar",
            "size": len(tar),
            "checksum": f"md5:{md5 or hashlib.md5(tar).hexdigest()}",
            "links": {"self": f"{base}/files/CIFAR-10-C.tar/content"},
        }
        return json.dumps({"files": [entry]}).encode()

    return Served(files={f"/api/records/{RECORD}": record, "/files/CIFAR-10-C.tar/content": tar})


@pytest.fixture
def zenodo_env(monkeypatch):
    def point(served: Served) -> None:
        monkeypatch.setenv("UNITTA_ZENODO_API", f"{served.base}/api/records/")

    return point


def test_fetch_installs_the_verified_archive_with_a_manifest(tmp_path, archive, zenodo_env):
    tar, files = archive
    with serve(_zenodo(tar)) as served:
        zenodo_env(served)
        started = time.perf_counter()
        folder = fetch_cifar_c("cifar10-c", tmp_path, progress=False)
        seconds = time.perf_counter() - started
    assert folder == tmp_path / "CIFAR-10-C"
    for name, data in files.items():
        assert (folder / name).read_bytes() == data
    manifest = (folder / "MD5SUMS").read_text().splitlines()
    assert sorted(manifest) == sorted(f"{hashlib.md5(d).hexdigest()}  {n}" for n, d in files.items())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["CIFAR-10-C"]  # no .part, .tar or staging left
    mask = os.umask(0)
    os.umask(mask)
    assert (folder / "MD5SUMS").stat().st_mode & 0o777 == 0o666 & ~mask
    # A second run finds the folder and touches no network.
    with serve(_zenodo(tar)) as served:
        zenodo_env(served)
        assert fetch_cifar_c("cifar10-c", tmp_path, progress=False) == folder
        assert served.log == []
    print(f"fetched {len(tar):,} bytes in {seconds:.2f} s")


def test_a_dropped_connection_is_resumed_with_a_range_request(tmp_path, archive, zenodo_env):
    tar, files = archive
    served = _zenodo(tar)
    served.drop_after["/files/CIFAR-10-C.tar/content"] = 50_000
    with serve(served):
        zenodo_env(served)
        folder = fetch_cifar_c("cifar10-c", tmp_path, progress=False)
    assert (folder / "fog.npy").read_bytes() == files["fog.npy"]
    downloads = [r for p, r in served.log if p.startswith("/files/")]
    assert downloads == [None, "bytes=50000-"]


def test_an_interrupted_run_leaves_a_part_that_the_next_run_resumes(tmp_path, archive):
    tar, _ = archive
    served = Served(files={"/a.tar": tar}, drop_after={"/a.tar": 30_000})
    part = tmp_path / "a.tar.part"
    digest = Digest("md5", hashlib.md5(tar).hexdigest())
    with serve(served):
        with pytest.raises(DownloadError, match="30,000 bytes kept in .*rerun the same command to resume"):
            download(f"{served.base}/a.tar", part, len(tar), digest, progress=False, retries=0)
        assert part.stat().st_size == 30_000
        download(f"{served.base}/a.tar", part, len(tar), digest, progress=False, retries=0)
    assert part.read_bytes() == tar
    assert [r for _, r in served.log] == [None, "bytes=30000-"]


def test_a_server_without_range_support_restarts_from_zero(tmp_path, archive):
    tar, _ = archive
    served = Served(files={"/a.tar": tar}, ranges=False)
    part = tmp_path / "a.tar.part"
    part.write_bytes(b"x" * 1000)  # a stale prefix that cannot be resumed
    with serve(served):
        download(f"{served.base}/a.tar", part, len(tar), Digest("md5", hashlib.md5(tar).hexdigest()), progress=False)
    assert part.read_bytes() == tar


def test_checksum_mismatch_deletes_the_download_and_exits_1(tmp_path, archive, zenodo_env, capsys):
    tar, _ = archive
    with serve(_zenodo(tar, md5="0" * 32)) as served:
        zenodo_env(served)
        assert main(["fetch", "cifar10-c", "--dir", str(tmp_path), "--quiet"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "md5 checksum mismatch" in err and "rerun" in err
    assert list(tmp_path.iterdir()) == []  # nothing that could look complete


def test_unreachable_server_is_one_line_with_the_manual_alternative(tmp_path, monkeypatch, capsys):
    [port] = free_ports(1)  # nobody listens there
    monkeypatch.setenv("UNITTA_ZENODO_API", f"http://127.0.0.1:{port}/api/records/")
    assert main(["fetch", "cifar10-c", "--dir", str(tmp_path), "--quiet"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert f"127.0.0.1:{port}" in err and "zenodo.org/records/2535967/files/CIFAR-10-C.tar" in err
    assert "Traceback" not in err


def test_a_silent_server_times_out(tmp_path):
    with socket.socket() as listener:  # accepts connections (backlog) but never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        started = time.perf_counter()
        with pytest.raises(DownloadError, match="timed out"):
            download(f"http://127.0.0.1:{listener.getsockname()[1]}/x", tmp_path / "x.part", progress=False, timeout=1)
    assert time.perf_counter() - started < 10


def test_read_only_target_is_one_line(tmp_path, archive):
    tar, _ = archive
    target = tmp_path / "ro"
    target.mkdir()
    target.chmod(0o555)
    try:
        with serve(_zenodo(tar)) as served:
            result = run_unprivileged(
                ["-m", "unitta.data", "fetch", "cifar10-c", "--dir", str(target), "--quiet"],
                {"UNITTA_ZENODO_API": f"{served.base}/api/records/"},
            )
        if result is None:
            pytest.skip("running as root without setpriv: permissions cannot be enforced")
        assert result.returncode == 1, result.stderr
        err = result.stderr.strip().splitlines()
        assert len(err) == 1 and f"cannot write to {target}" in err[0], result.stderr
        assert list(target.iterdir()) == []
    finally:
        target.chmod(0o755)


def test_imagenet_c_prints_the_steps(tmp_path, capsys):
    assert main(["fetch", "imagenet-c", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "zenodo.org/records/2235448" in out and f"{tmp_path}/ImageNet-C/<corruption>/<severity 1-5>/<wnid>" in out
