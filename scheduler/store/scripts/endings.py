"""The bounded work of a job's ending (lua/includes/settle.lua: `finish`, the one way a job
ends, and the settling of its waiters, in pieces: docs/GUIDE.md, Dependencies), and of the
other scripts that go over many jobs: the units their Lua counts (generated.py writes them
into it; units.lua `pace_of`, `record_units`, `placing_units`).

Work is counted in units of about 2 µs of Redis (benchmarks/script_bounds.py): a waiter
looked at costs VISIT_UNITS, a job ended or released ENDED_UNITS and a unit per
RECORD_BYTES_UNIT bytes of its record (read, decoded, encoded and written again: a record
may hold a node_selector of ~66 KB, some 30 times a small record's cost), a job it runs
after looked up (a retry, a restore) DEPENDENCY_UNITS. A script spends at most SETTLE_UNITS
(about 5 ms): a job's waiters all end in its own request up to about 120 small ones, or
2500 that were ended already (a graph whose jobs each wait for many).
"""

VISIT_UNITS = 1
ENDED_UNITS = 19
DEPENDENCY_UNITS = 2
RECORD_BYTES_UNIT = 128
SETTLE_UNITS = 2500
NODE_UNITS = 2  # a node placement reads for a selector (placing_units)
