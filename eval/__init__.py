"""Benchmark suites: many problems optimized one after another, all learning into one knowledge base, with
results, reports and ablations (`kernelblaster bench`).

`problems` chooses and orders a suite's problems; `suite` is a suite directory and its configuration;
`runner` drives it over `local_launcher` (this host's GPUs) or `ray_cluster`; `worker` runs one problem;
`suite_kb` is the one writer of the suite's KB; `results` the results database; `metrics`, `plots`,
`report` and `published` make the report; `baseline` times the PyTorch baselines alone; `progress` is the
live display; `cli` the command line.
"""
