"""Deploy archives for the agent: a bounded, status-checked download and a zip extraction
that cannot write outside its directory (the original fetched without a status check and ran
`unzip -o` into a shared directory, CONTRACT 3.6 and 8.19)."""

from __future__ import annotations

import stat
import zipfile
from pathlib import Path, PurePosixPath

import httpx

MAX_ZIP_MEMBERS = 10_000


class DeployError(Exception):
    """A deploy archive could not be fetched or unpacked; str() is the job's stderr."""


async def download(http: httpx.AsyncClient, url: str, dest: Path, max_bytes: int) -> None:
    """Stream `url` to `dest`; refuse a non-2xx answer or more than `max_bytes`."""
    size = 0
    try:
        async with http.stream("GET", url) as response:
            if not 200 <= response.status_code < 300:
                raise DeployError(f"download error: HTTP {response.status_code} from {url}")
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > max_bytes:
                raise DeployError(f"download error: archive larger than {max_bytes} bytes")
            with dest.open("wb") as out:
                async for chunk in response.aiter_bytes():
                    size += len(chunk)
                    if size > max_bytes:
                        raise DeployError(f"download error: archive larger than {max_bytes} bytes")
                    out.write(chunk)
    except httpx.HTTPError as exc:
        raise DeployError(f"download error: {exc}") from None
    except OSError as exc:
        raise DeployError(f"write zip error: {exc}") from None


def _safe_parts(name: str) -> tuple[str, ...]:
    parts = PurePosixPath(name.replace("\\", "/")).parts
    if not parts or name.startswith(("/", "\\")) or ".." in parts or ":" in parts[0]:
        raise DeployError(f"extract failed: unsafe path {name!r} in archive")
    return parts


def extract(archive: Path, dest: Path, max_bytes: int) -> None:
    """Unpack a zip into `dest`, refusing absolute paths, `..`, symlinks, too many members and
    more than `max_bytes` unpacked (a zip bomb)."""
    try:
        with zipfile.ZipFile(archive) as zf:
            members = zf.infolist()
            if len(members) > MAX_ZIP_MEMBERS:
                raise DeployError(f"extract failed: more than {MAX_ZIP_MEMBERS} files")
            for info in members:
                _safe_parts(info.filename)
                if stat.S_ISLNK(info.external_attr >> 16):
                    raise DeployError(f"extract failed: symlink {info.filename!r} in archive")
            budget = max_bytes
            for info in members:
                budget = _extract_member(zf, info, dest, budget)
    except (zipfile.BadZipFile, zipfile.LargeZipFile) as exc:
        raise DeployError(f"extract failed: {exc}") from None
    except OSError as exc:
        raise DeployError(f"extract failed: {exc}") from None


def _extract_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, dest: Path, budget: int) -> int:
    target = dest.joinpath(*_safe_parts(info.filename))
    if info.is_dir():
        target.mkdir(parents=True, exist_ok=True)
        return budget
    target.parent.mkdir(parents=True, exist_ok=True)
    with zf.open(info) as src, target.open("wb") as out:
        while chunk := src.read(65536):
            budget -= len(chunk)
            if budget < 0:
                raise DeployError("extract failed: archive unpacks to too many bytes")
            out.write(chunk)
    mode = (info.external_attr >> 16) & 0o777
    if mode:
        target.chmod(mode | 0o600)
    return budget
