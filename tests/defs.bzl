"""scenario_test: a Python scenario (tests/<name>.py) run as a Bazel test,
as the module tests.<name> (tests/run_py.sh).

Scenarios that train run `exclusive`: alone on the machine, so that their
keep-alive deadlines are not missed because other tests load both cores.
"""

def scenario_test(name, data = [], size = "medium", tags = [], exclusive = True, script = None, **kwargs):
    """`script`: the scenario's file name without .py (default: `name`), so
    that one scenario can be several targets (another `env`)."""
    script = script or name
    native.sh_test(
        name = name,
        srcs = ["run_py.sh"],
        args = ["tests/%s.py" % script],
        data = [script + ".py", "__init__.py", "harness.py"] + data,
        size = size,
        tags = tags + (["exclusive"] if exclusive else []),
        **kwargs
    )
