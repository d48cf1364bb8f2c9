"""The persistent kernel's run-time ``mode`` argument: one compiled kernel, four schedules."""

MODE_PHASED = 0
MODE_DAG = 1
MODE_PHASED_FLOOR = 2
MODE_DAG_FLOOR = 3
MODES = {"phased": MODE_PHASED, "dag": MODE_DAG, "phased_floor": MODE_PHASED_FLOOR, "dag_floor": MODE_DAG_FLOOR}
