"""The benchmarks, each run from the repository's root as `python -m benchmarks.<name>`
(docs/PERFORMANCE.md lists them). What they share: harness.py starts and stops the processes
(a private redis-server, the scheduler's API and agent, another version's code), timing.py
times (rounds taking turns, medians, ratios, Redis's own time of script calls) and report.py
prints the figures and their ratios side by side."""
