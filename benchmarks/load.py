"""Running wrk: for a duration, or for an exact number of requests (a burst).

wrk stops only at the end of its duration, so a burst stops itself: its Lua script counts the
responses, stops its thread at the budget and prints the time from its first request to that
response (monotonic clock through LuaJIT's ffi); the runner then interrupts wrk (SIGINT), which
prints its latency figures at once. Requests sent after the budget (at most one per
connection, to /health) are not in the timing but may be in wrk's latency figures.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import tempfile
from dataclasses import dataclass

# GET /jobs/job-1 .. job-<stored>, round and round (`% {"stored": N}`).
GET_LUA = """
local i = 0
request = function()
  i = i + 1
  return wrk.format("GET", "/jobs/job-" .. ((i %% %(stored)d) + 1))
end
"""


@dataclass
class Result:
    requests: int
    seconds: float
    p50_ms: float
    p99_ms: float
    errors: int

    @property
    def rps(self) -> float:
        return self.requests / self.seconds


BURST_LUA = """
local ffi = require("ffi")
ffi.cdef[[
typedef struct { long tv_sec; long tv_nsec; } bench_timespec;
int clock_gettime(int clock, bench_timespec *ts);
]]
local ts = ffi.new("bench_timespec")
local function now()
  ffi.C.clock_gettime(1, ts)
  return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) / 1e9
end
local budget, answered, first = %(budget)d, 0, nil
-- wrk calls request() once at start-up without sending it: start one below zero.
local i = -1
request = function()
  local n = i
  i = i + 1
  if n < 0 then return wrk.format("GET", "/health") end
  if n >= budget then return wrk.format("GET", "/health") end
  if not first then first = now() end
  return next_request(n)
end
response = function(status, headers, body)
  answered = answered + 1
  if answered == budget then
    io.write(string.format("BURST %%d %%.6f\\n", answered, now() - first))
    io.flush()
    wrk.thread:stop()
  end
end
"""


def run_wrk(url: str, lua: str, duration: float, connections: int, threads: int = 1) -> Result:
    """wrk for `duration` seconds, its connections over `threads` threads."""
    out = _wrk(url, lua, connections, max(1, round(duration)), burst=False, threads=threads)
    rps = float(_find(r"Requests/sec:\s+([\d.]+)", out))
    return _result(out, requests=round(rps * duration), seconds=duration)


def run_burst(url: str, next_request_lua: str, budget: int, connections: int) -> Result:
    """Exactly `budget` requests; `next_request_lua` defines `next_request(n)` (n from 0)."""
    lua = next_request_lua + BURST_LUA % {"budget": budget}
    out = _wrk(url, lua, connections, 600, burst=True)
    match = re.search(r"BURST (\d+) ([\d.]+)", out)
    if match is None:
        raise RuntimeError(f"the burst did not finish:\n{out}")
    return _result(out, requests=int(match.group(1)), seconds=float(match.group(2)))


def _wrk(url: str, lua: str, connections: int, seconds: int, burst: bool, threads: int = 1) -> str:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(lua)
    cmd = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds}s", "--latency"]
    cmd += ["-s", script.name, url]
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        lines = []
        for text in proc.stdout:
            lines.append(text)
            if burst and text.startswith("BURST"):
                proc.send_signal(signal.SIGINT)
        proc.wait()
    finally:
        os.unlink(script.name)
    return "".join(lines)


def _result(out: str, requests: int, seconds: float) -> Result:
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return Result(
        requests=requests,
        seconds=seconds,
        p50_ms=_ms(_find(r"50%\s+([\d.]+\w+)", out)),
        p99_ms=_ms(_find(r"99%\s+([\d.]+\w+)", out)),
        errors=int(errors.group(1)) if errors else 0,
    )


def _find(pattern: str, out: str) -> str:
    match = re.search(pattern, out)
    if match is None:
        raise RuntimeError(f"wrk output without {pattern!r}:\n{out}")
    return match.group(1)


def _ms(text: str) -> float:
    value, unit = re.match(r"([\d.]+)(\w+)", text).groups()  # type: ignore[union-attr]
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]
