"""The discrete-event simulator over the scheduler's pure core (DESIGN §4 `sim/`).

As a library, with no files and no database (the budget what-if calls it to
play the next days from the live queue)::

    from scheduler.sim import InitialRun, InitialState, simulate
    result = simulate(cluster, units, jobs, decide=schedule, initial=InitialState(running=..., history=...),
                      until=7 * 86400)
    result.summary  # the measures of DESIGN §5, as in summary.json

`cluster` is an `inputs.Cluster` (core topology + policy; `inputs.cluster_from_spec`
turns a parsed cluster file into one), `units` core `Unit`s (`inputs.units_from_spec`),
`jobs` `workload.SimJob`s. `cli` is the command line (`manage.py simulate`
calls it; FORMATS.md); `output.write_all` writes the four files. No module
here imports Django: the files are checked by `topology.spec` and
`budgets.spec`, the parsers the loaders use (an import-linter contract).

Modules: `engine` (event loop, virtual clock, ticks), `runs` (the executor
model: a job's runs started, preempted and ended, checkpoints, lost work),
`workload` (the CSV), `faults` (the fault file), `inputs` (specs to core
objects, the initial state), `measures` (DESIGN §5 over time), `output`
(the result, its summary and the files) and `report` (report.html),
`checks` (consistency of the files), `policies` (`--policy` names),
`generators` (seeded synthetic workloads), `traces` (Philly and openb replays),
`cli` (the command line), `parallel` (several simulations side by side, in
child processes: the what-if's weeks).
"""

from .engine import Simulation, simulate
from .inputs import Cluster, InitialRun, InitialState, UsageInterval, cluster_from_spec, units_from_spec
from .output import Result
from .workload import SimJob

__all__ = ["Cluster", "InitialRun", "InitialState", "Result", "SimJob", "Simulation", "UsageInterval",
           "cluster_from_spec", "simulate", "units_from_spec"]
