"""README's Python example, run as it is shown against a real API and an agent's work, and
`from_env`'s key: the one `scheduler up` keeps for its session, as the CLI finds it."""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
import time
from pathlib import Path

import httpx
import pytest

from scheduler.client import AsyncClient, Client, session
from tests.client.test_client import register
from tests.conftest import Serve
from tests.keys import API_KEY

README = Path(__file__).resolve().parents[2] / "README.md"


def python_example() -> str:
    [example] = re.findall(r"^```python\n(.*?)^```", README.read_text(), re.M | re.S)
    return str(example)


def agent(url: str, stop: threading.Event) -> None:
    """Runs what node n1 is given: prints the command's echo, done (the open agent calls)."""
    with httpx.Client(base_url=url) as http:
        while not stop.is_set():
            for job in http.get("/jobs", params={"node_id": "n1", "status": "pending"}).json():
                said = job["command"].removeprefix("echo ") + "\n"
                http.patch(f"/jobs/{job['job_id']}", json={"status": "running"})
                done = {"status": "done", "exit_code": 0, "stdout": said}
                http.patch(f"/jobs/{job['job_id']}", json=done)
            time.sleep(0.05)


def test_the_readme_example_prints_the_jobs_output(
    serve: Serve, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    url = serve(api_key=API_KEY, node_ttl_secs=600)
    register(url, "n1")
    monkeypatch.setenv("SCHEDULER_URL", url)
    monkeypatch.setenv("TINYAWS_API_KEY", API_KEY)
    stop = threading.Event()
    worker = threading.Thread(target=agent, args=(url, stop), daemon=True)
    worker.start()
    try:
        exec(compile(python_example(), "README.md", "exec"), {})
    finally:
        stop.set()
        worker.join()
    assert capsys.readouterr().out == "hello from Python\n"


def test_from_env_finds_the_key_up_keeps_for_its_session(
    serve: Serve, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    url = serve(api_key=API_KEY, node_ttl_secs=600)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    monkeypatch.setenv("SCHEDULER_URL", url)
    monkeypatch.delenv("TINYAWS_API_KEY", raising=False)
    path = session.key_path(url)
    assert path is not None
    path.parent.mkdir(parents=True, mode=0o700)
    with contextlib.suppress(FileExistsError):
        path.parent.parent.chmod(0o700)
    session.token_file.save(path, API_KEY)
    with Client.from_env() as client:
        assert client.nodes() == {}
    made = AsyncClient.from_env()
    assert made.http.headers["authorization"] == f"Bearer {API_KEY}"
    asyncio.run(made.aclose())
