"""Which finished runs' training speeds the speed claim and the report's ratios compare: the
runs of one machine, named in words."""


def describe_machine(machine):
    """A run's machine in words (runs on one machine have the same words)."""
    if not machine:
        return "an unrecorded machine"
    gpus = f", GPU {', '.join(machine['gpus'])}" if machine.get("gpus") else ""
    return f"{machine['cpu']} ({machine['cores']} cores{gpus}), torch {machine['torch']}"


def timed_runs(records, data):
    return [r for r in records if r["data"] == data and r["status"] == "finished" and r.get("training_speed")]


def speed_machine(experiment, timed):
    """The machine whose runs the speed ratios compare: of the machines the baseline trained
    on, the one that trained most of these runs. A ratio between runs on two machines would
    measure the machines (shards may run on several); None without a timed baseline."""
    machines = [describe_machine(r.get("machine")) for r in timed]
    with_baseline = [m for m, r in zip(machines, timed) if r["method"] == experiment.baseline]
    return max(dict.fromkeys(with_baseline), key=machines.count, default=None)


def speed_compared_runs(experiment, records, data):
    """The finished runs of a data setting whose training speeds the ratios compare: those on
    speed_machine (none without a timed baseline)."""
    timed = timed_runs(records, data)
    machine = speed_machine(experiment, timed)
    return [r for r in timed if describe_machine(r.get("machine")) == machine]
