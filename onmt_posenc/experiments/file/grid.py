"""The grid of an experiment file (`grid`) expanded into runs: each run's config layered from
the recipe, `settings`, its data setting's and its method's keys, with its seed and K."""
import itertools

from onmt_posenc.experiments.file.spec import K_OPTION, Run, fail, uses_shape


def grid_name(grids, index):
    """How messages name a grid line: `grid`, or `grid[i]` in a list of several."""
    return "grid" if len(grids) == 1 else f"grid[{index}]"


def expand_grids(recipe, settings, methods, data, grids, path, recipe_name="recipe", locate=None):
    """The runs of every product in `grids`, in order; a run named twice is an error. `locate(where,
    key)`: the file and line of a key in a layer (validation.key_place)."""
    runs = {}
    for index, grid in enumerate(grids):
        for run in expand_grid(recipe, settings, methods, data, grid, path, recipe_name, grid_name(grids, index),
                               locate):
            if run.id in runs:
                fail(path, f"grid: the run {run.id} is named twice")
            runs[run.id] = run
    return list(runs.values())


def config_layers(recipe, settings, data, methods, data_name, method, recipe_name):
    """Where a run's config comes from, later layers winning: (the layer's name, its keys)."""
    return [(recipe_name, recipe), ("settings", settings), (f"data.{data_name}.settings", data[data_name].settings),
            (f"methods.{method}", methods[method])]


def expand_grid(recipe, settings, methods, data, grid, path, recipe_name="recipe", where="grid", locate=None):
    """Every run of a grid line ({axis: values}, the axes it gives; their values checked by the
    schema), in a stable order: data, method, K, seed."""
    method_names = grid.get("method", list(methods))
    data_names = grid.get("data", list(data))
    seeds = grid.get("seed", [1])
    shifts = grid.get("K", [None])
    for axis, names, known in (("method", method_names, methods), ("data", data_names, data)):
        for name in names:
            if name not in known:
                fail(path, f"{where}.{axis} names {name!r}, which is not under {axis}s: {sorted(known)}"
                      if axis == "method" else f"{where}.data names {name!r}, not under data: {sorted(known)}")
    runs = []
    for data_name, method in itertools.product(data_names, method_names):
        layers = config_layers(recipe, settings, data, methods, data_name, method, recipe_name)
        config = {key: value for _, keys in layers for key, value in keys.items()}
        sources = {key: layer for layer, keys in layers for key in keys}
        if "K" in grid and K_OPTION in config:
            fail(locate(sources[K_OPTION], K_OPTION) if locate else path,
                 f"{sources[K_OPTION]} sets {K_OPTION}, which {where}.K overrides; set one of them")
        for shift, seed in itertools.product(shifts if uses_shape(config) else [None], seeds):
            run_config = dict(config, seed=seed)
            if shift is not None:
                run_config[K_OPTION] = shift
            runs.append(Run(data_name, method, shift, seed, run_config,
                            {**sources, "seed": f"{where}.seed", **({K_OPTION: f"{where}.K"} if shift is not None else {})}))
    return runs


def unused_runs(recipe, settings, methods, data, grids, runs, path, recipe_name, locate=None):
    """A run of each method and each data setting that no grid line uses, so that
    check_options checks their keys too: with the first run's data setting or method,
    and, for a method whose config does not set K itself (in any layer), the grid's first K
    (or 0: a grid line naming the method would have to give one)."""
    shifts = [k for grid in grids for k in grid.get("K", [])][:1] or [0]
    first = runs[0]

    def sets_k(method):
        return any(K_OPTION in keys for _, keys in config_layers(recipe, settings, data, methods, first.data, method,
                                                                 recipe_name))

    unused = [{"method": [m], "data": [first.data], "seed": [1], **({"K": shifts} if not sets_k(m) else {})}
              for m in methods if m not in {run.method for run in runs}]
    unused += [{"method": [first.method], "data": [d], "seed": [1],
                **({"K": [first.shift]} if first.shift is not None else {})}
               for d in data if d not in {run.data for run in runs}]
    return expand_grids(recipe, settings, methods, data, unused, path, recipe_name, locate)
