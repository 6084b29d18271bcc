"""The parts of meshplan's reference plan runner (`python -m profiler.run_plan` under torchrun).

- `options`: command-line options and reading a plan document;
- `mesh`: the process group and the ("pp", "dp", "tp") DeviceMesh;
- `split`: the plan's stages as modules, and which stages this pipeline rank runs;
- `parallel`: tensor parallel, recompute and data parallel applied to a stage;
- `schedule`: the plan's schedule as a `torch.distributed.pipelining` schedule;
- `measure`: busy time, saved-activation bytes and memory of a run;
- `report`: the RunReport, written to a file or posted to the service, and gradient dumps.

See docs/runner.md.
"""
